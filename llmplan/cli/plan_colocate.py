"""`llmplan plan` with `colocate.models` set: a shared pool or dedicated deployments for
several models, each with its own workload and SLOs (optimizer/colocation_plan.py)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from llmplan.cli.colocate_inputs import colocate_inputs
from llmplan.cli.resolve import check_engine, max_gpus, resolve_gpus, resolve_space
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, ConfigError
from llmplan.optimizer.colocation_plan import PlanModel, plan_colocated


def run_colocate_plan(app, out: Path, console: Console, t0: float) -> int:
    if app.speculative.method not in ("none", "off"):
        raise ConfigError("speculative decoding with co-location is not planned", key="speculative.method",
                          fix="speculative.method=none with colocate")
    if app.fleet.gpus or app.day.profile:
        raise ConfigError("co-location plans one rate per model", key="colocate.models",
                          fix="drop fleet.gpus / day.profile with colocate")
    # optimizer/colocation_plan.py plans aggregated pools on the point prediction: a required
    # probability or a disaggregated-only search would be dropped without a word
    if app.search.confidence is not None:
        raise ConfigError("co-location plans on the point prediction; search.confidence is not applied",
                          key="search.confidence", fix="drop search.confidence with colocate")
    if "agg" not in app.search.modes:
        raise ConfigError("co-location plans aggregated pools only (a shared pool or dedicated ones)",
                          key="search.modes", fix="drop search.modes (or include agg) with colocate")
    check_engine(app.engine)
    inputs = colocate_inputs(app)
    gpus = resolve_gpus(app)
    space = resolve_space(app)
    models = [PlanModel(c.key, c.model, c.workload, c.slos, replace(c.stats, rate_rps=c.workload.rate_rps))
              for c in inputs]
    res = plan_colocated(models, [(g, g.usd_per_hour) for g in gpus], app.engine, space, max_gpus(app, gpus),
                         app.calibration, app.seed)
    d = res.as_dict() | {"models": {c.key: {"rate_rps": c.workload.rate_rps, "slo": [s.label for s in c.slos]}
                                    for c in inputs},
                         "engine": app.engine.name, "seed": app.seed}
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(d, indent=2) + "\n")
    _render(console, d)
    console.print(f"Wrote {out / 'plan.json'}")
    console.print(f"[dim]planned in {time.perf_counter() - t0:.1f} s[/dim]")
    return EXIT_OK if res.choice != "none" else EXIT_INFEASIBLE


def _render(console: Console, d: dict) -> None:
    console.print(f"[bold]llmplan plan[/bold] co-location of {', '.join(d['models'])}: "
                  f"[bold]{d['choice']}[/bold]")
    for kind in ("shared", "dedicated"):
        o = d[kind]
        if not o["feasible"]:
            console.print(f"  {kind}: not feasible ({o['reason']})")
            continue
        pools = "; ".join(f"{p['replicas']}x {p['gpu']} TP{p['tp']} " + (
            "+".join(p["models"]) if "models" in p else p["model"]) for p in o["pools"])
        console.print(f"  {kind}: ${o['usd_per_hour']:.2f}/h, {o['gpus']} GPUs ({pools})")
        for key, v in o["simulated"].items():
            vals = ", ".join(f"{k} {x:.1f} ms" for k, x in v.items() if isinstance(x, float) and k not in
                             ("step_stretch", "utilization"))
            console.print(f"    {key}: {vals}" + (f", steps x{v['step_stretch']:.2f}" if "step_stretch" in v else ""))

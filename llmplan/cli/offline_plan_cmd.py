"""`llmplan plan workload=offline target.tokens_per_s=N`: the cheapest GPUs for N tokens per
second of offline throughput (optimizer/offline_plan.py, docs/OFFLINE.md). Writes plan.json
(``mode: offline_throughput``) and candidates.csv."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, UserError
from llmplan.progress import stage_progress


def wants_offline(app) -> bool:
    return app.workload.arrival == "offline" or app.target.tokens_per_s is not None


def _check_mode(app) -> None:
    if app.workload.arrival != "offline":
        raise UserError(f"a throughput target plans offline work (every request queued at once), but the workload's "
                        f"arrivals are {app.workload.arrival}",
                        key="target.tokens_per_s", fix="add workload=offline, or drop target.tokens_per_s to plan "
                                                       "workload.rate_rps within the SLOs")
    for key, on in (("fleet.gpus", bool(app.fleet.gpus)), ("day.profile", bool(app.day.profile)),
                    # optimizer/offline_plan.py plans tokens/s without latency targets or speculation:
                    # these would be dropped without a word
                    ("search.confidence", app.search.confidence is not None),
                    ("speculative.method", app.speculative.method not in ("none", "off"))):
        if on:
            raise UserError("an offline throughput plan takes no " + key, key=key, fix=f"drop {key}")


def run_offline_plan(app, out: Path, console: Console, t0: float | None = None) -> int:
    from llmplan.cli.resolve import check_engine, check_search, max_gpus, resolve_gpus, resolve_model, resolve_space
    from llmplan.cli.simulate_run import length_stats
    from llmplan.optimizer.offline_plan import OfflineInfeasible, check_target, plan_offline

    t0 = time.perf_counter() if t0 is None else t0
    _check_mode(app)
    check_target(app.target.tokens_per_s, str(app.target.count))
    model = resolve_model(app)
    gpus = resolve_gpus(app)
    check_engine(app.engine)
    check_search(model, list(app.search.tp), list(app.search.ep), list(app.search.precision))
    stats = length_stats(app, model)  # refuses an offline run with zero requests (workload.num_requests)
    space = resolve_space(app)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with stage_progress(None, app.output.progress) as progress:
            plan = plan_offline(model, [(g, g.usd_per_hour) for g in gpus], app.engine, space, app.workload,
                                stats.mean_input_tokens, stats.mean_output_tokens, int(stats.max_request_tokens),
                                app.target.tokens_per_s, str(app.target.count), max_gpus(app, gpus),
                                app.calibration, app.seed, progress)
    except OfflineInfeasible as exc:
        d = {"mode": "offline_throughput", "model": model.key, "feasible": False, "binding_constraint": str(exc),
             "target_tokens_per_s": float(app.target.tokens_per_s), "count": str(app.target.count)}
        (out / "plan.json").write_text(json.dumps(d, indent=2) + "\n")
        console.print(f"[bold red]No deployment:[/bold red] {exc}")
        return EXIT_INFEASIBLE
    import pandas as pd

    pd.DataFrame([c.row() for c in plan.candidates]).to_csv(out / "candidates.csv", index=False)
    d = {"model": model.key, "engine": app.engine.name, "seed": app.seed,
         "workload": {"mean_input_tokens": round(stats.mean_input_tokens, 2),
                      "mean_output_tokens": round(stats.mean_output_tokens, 2),
                      "num_requests_per_replica": app.workload.num_requests},
         **plan.as_dict()}
    (out / "plan.json").write_text(json.dumps(d, indent=2) + "\n")
    render(d, console)
    console.print(f"Wrote plan.json, candidates.csv to {out}")
    console.print(f"[dim]planned in {time.perf_counter() - t0:.1f} s[/dim]")
    return EXIT_OK


def render(d: dict, console: Console) -> None:
    kind = d["count"]
    t = Table(title=f"{d['model']}: cheapest fleet for {d['target_tokens_per_s']:,.0f} {kind} tokens/s offline "
                    f"({d['engine']})", title_justify="left")
    for c in ("replicas", "deployment", "tokens/s each", "from", "$/h"):
        t.add_column(c, justify="left" if c in ("deployment", "from") else "right")
    for x in d["deployments"]:
        lim = x["offline_limits"]
        t.add_row(str(x["replicas"]), f"{x['gpu']} tp{x['tp']} pp{x['pp']} ep{x['ep']} {x['precision']} "
                  f"(batch {lim['max_num_seqs']}, {lim['max_num_batched_tokens']} tok)",
                  f"{x['tokens_per_s_per_replica']:,.0f}", x["source"], f"{x['usd_per_hour']:,.2f}")
    console.print(t)
    per_m = d.get(f"usd_per_million_{kind}_tokens")
    console.print(f"Total: {d['total_gpus']} GPUs, ${d['total_usd_per_hour']:,.2f}/h, {d['tokens_per_s']:,.0f} {kind} "
                  f"tokens/s" + (f", ${per_m:.3f} per million {kind} tokens" if per_m is not None else ""))
    for n in d.get("notes", []):
        console.print(f"note: {n}")

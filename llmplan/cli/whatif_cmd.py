"""`llmplan whatif`: plan the baseline and a changed scenario, and show what moves.

Scenario knobs live in the `whatif` config node: scale GPU figures (a hardware architect's
"what if the GPU had 2x bandwidth"), scale prices, add candidate GPU types, tighten or loosen
every SLO, or scale the traffic. Both plans are SLO-constrained and go through the same
pipeline as `llmplan plan`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import DictConfig
from rich.table import Table

from llmplan.cli import hydra_app
from llmplan.cli.chosen_figures import (deployment_label, joules_per_output_token, mode_label, plan_mode,
                                        split_capacity_rps)
from llmplan.errors import EXIT_OK
from llmplan.cli.plan_cmd import output_dir, plan_from_app
from llmplan.progress import make_console
from llmplan.cli.resolve import to_app
from llmplan.cli.whatif_scenario import describe, scenario
from llmplan.optimizer import report
from llmplan.parallel import map_jobs

__all__ = ["run_whatif", "main", "scenario", "describe"]  # scenario/describe: llmplan.cli.whatif_scenario

SUMMARY = ("Plan a baseline and a what-if scenario and compare them. Scenario knobs:\n"
           "  whatif.gpu_scale='{h100_sxm: {hbm_bw_gbps: 2.0}}'   scale GPU figures (any numeric field, <dtype>_tflops)\n"
           "  whatif.price_scale='{h100_sxm: 0.7}'               scale prices\n"
           "  whatif.add_gpus=[b200,mi300x]                      extra candidate GPU types\n"
           "  whatif.slo_scale=0.5                               every SLO target x0.5 (stricter)\n"
           "  whatif.rate_scale=2                                twice the traffic\n"
           "  whatif.curve.figure=hbm_bw_gbps whatif.curve.scales=[0.5,1,2,4]   a curve: one plan per scale\n"
           "    (figures: hbm_bw_gbps, tflops, scaleup_bw_gbps, hbm_gb, slo, rate; writes whatif_curve.csv/.png)\n"
           "Writes whatif.json (both plans) to the output directory.")


def run_whatif(cfg: DictConfig, out_dir: Path | None = None, console=None) -> int:
    console = console or make_console()
    t0 = time.perf_counter()
    app = to_app(cfg)
    if app.whatif.curve.figure is not None:  # one plan per scale of one figure
        from llmplan.cli.whatif_curve import run_curve

        return run_curve(app, out_dir or output_dir(), console)
    new = scenario(app)
    # the two plans are independent: planned side by side where cores allow (llmplan/parallel.py;
    # each a pure function of its config, so the same dicts as planning them one after the other)
    (d0, key), (d1, _) = map_jobs([lambda: _plan_dict(app, console), lambda: _plan_dict(new, console)])
    out = out_dir or output_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "whatif.json").write_text(json.dumps({"scenario": describe(app.whatif), "baseline": d0, "whatif": d1}, indent=2) + "\n")
    t = Table(title=f"What if: {describe(app.whatif)}  ({key})", title_justify="left")
    for c in ("", "baseline", "what-if", "change"):
        t.add_column(c, justify="left" if not c or c == "" else "right")

    def dep(d):
        # the CHOSEN deployment: a disaggregated split's pools are labelled by role (optimizer/split_summary.py)
        return deployment_label(d["deployments"], sep="/") or "none meets the SLOs"

    def pct(a, b):
        return f"{(b - a) / a:+.1%}" if a and b is not None else "-"

    t.add_row("mode", mode_label(d0), mode_label(d1), "")
    t.add_row("deployment", dep(d0), dep(d1), "")
    t.add_row("$/hour", f"{d0['total_usd_per_hour']:.2f}" if d0["feasible"] else "-",
              f"{d1['total_usd_per_hour']:.2f}" if d1["feasible"] else "-",
              pct(d0["total_usd_per_hour"], d1["total_usd_per_hour"]) if d0["feasible"] and d1["feasible"] else "-")
    t.add_row("GPUs", str(d0["total_gpus"]), str(d1["total_gpus"]), "")
    t.add_row("$/M output tokens", str(d0["usd_per_million_output_tokens"]), str(d1["usd_per_million_output_tokens"]),
              pct(d0["usd_per_million_output_tokens"], d1["usd_per_million_output_tokens"]) if d0["feasible"] and d1["feasible"] else "-")
    tok = [d["workload"]["rate_rps"] * d["workload"]["mean_output_tokens"] if d["feasible"] else None for d in (d0, d1)]
    t.add_row("output tokens/s (planned rate)", *(_fmt(x, "{:.0f}") for x in tok), pct(*tok) if None not in tok else "-")
    jpt = [d["joules_per_output_token"] for d in (d0, d1)]
    t.add_row("J per output token (PUE 1)", *(_fmt(x, "{:.3g}") for x in jpt), pct(*jpt) if None not in jpt else "-")

    def first(d, k, fmt):
        return fmt.format(d["deployments"][0][k]) if d["deployments"] and d["deployments"][0][k] is not None else "-"

    for label, k, fmt in (("capacity req/s per replica", "capacity_rps_per_replica", "{:.2f}"),
                          ("TTFT ms (binding target)", "ttft_ms", "{:.0f}"), ("TPOT ms (binding target)", "tpot_ms", "{:.1f}")):
        a, b = first(d0, k, fmt), first(d1, k, fmt)
        change = pct(float(a), float(b)) if "-" not in (a, b) else "-"
        target = k.replace("_ms", "_target")
        if k.endswith("_ms") and d0["deployments"]:
            ta, tb = d0["deployments"][0][target], (d1["deployments"] or [{}])[0].get(target)
            if tb is not None and ta != tb:
                change = "-"  # different percentiles bind: not comparable
            a = f"{ta.split('_')[1]}: {a}" if ta else a
            b = f"{tb.split('_')[1]}: {b}" if tb else b
        if k == "capacity_rps_per_replica" and "disagg" in (d0["mode"], d1["mode"]):
            # a split has no replica: its capacity is the smaller pool's (workers x per worker), not comparable
            a, b = (_split_capacity(d) if d["mode"] == "disagg" else x for d, x in ((d0, a), (d1, b)))
            same = d0["mode"] == d1["mode"] and "-" not in (a, b)
            change = pct(*(float(x.split()[-1]) for x in (a, b))) if same else "-"
        t.add_row(label, a, b, change)

    def band(d):
        b = d.get("error_band") or {}
        if not d["feasible"] or not b:
            return "-"
        return f"±{b['max_p90_pct']:.0f}% {b['tier']}" + (" (WIDE)" if b["wide"] else "")

    t.add_row("error band (p90 step time)", band(d0), band(d1), "")
    t.add_row("latencies from", *(", ".join(sorted(set(d["deployments"][0]["latency_source"].values())))
                                  if d["deployments"] else "-" for d in (d0, d1)), "")
    t.add_row("candidates meeting SLOs", str(d0["candidates_meeting_slo"]), str(d1["candidates_meeting_slo"]), "")
    console.print(t)
    wide = [name for name, d in (("baseline", d0), ("what-if", d1)) if (d.get("error_band") or {}).get("wide")]
    if wide:
        console.print(f"[bold yellow]Low confidence:[/bold yellow] the {' and '.join(wide)} deployment's error band is "
                      f"wider than ±{report.WIDE_BAND_PCT:.0f}%: compare the two as indicative only")
    for name, d in (("baseline", d0), ("what-if", d1)):
        if d.get("infeasible"):
            console.print(f"{name}: no deployment meets the targets: {d['binding_constraint']}")
    console.print(f"Wrote {out / 'whatif.json'}\n[dim]compared in {time.perf_counter() - t0:.1f} s[/dim]")
    return EXIT_OK


def _plan_dict(app, console) -> tuple[dict, str]:
    """(plan.json's dict of ``app``'s plan with the chosen deployment's mode and J/token (PUE 1),
    the model key). A scenario changes GPUs, prices, SLOs or the rate, never the model or engine."""
    res, model = plan_from_app(app, console)
    d = report.plan_dict(res, {"model": model.key, "engine": app.engine.name})
    d["mode"], d["joules_per_output_token"] = plan_mode(d), joules_per_output_token(res)
    return d, model.key


def _split_capacity(d: dict) -> str:
    """A chosen split's capacity: its smaller pool's workers x SLO capacity per worker (req/s)."""
    cap = split_capacity_rps(d["disaggregated"], 1.0)
    return f"whole split: {cap:.2f}" if cap is not None else "-"


def _fmt(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def main(argv: list[str]) -> int:
    return hydra_app.run("whatif", "whatif", argv, lambda cfg: run_whatif(cfg), SUMMARY)

"""Stage 5: report. plan.json and candidates.csv (a stable contract) and the rich rendering."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from llmplan.optimizer.planner import PlanResult
from llmplan.optimizer.types import Allocation, Evaluation, Selection

REJECT_ORDER = ("memory", "parallelism", "precision", "slo", "availability")


def _num(x: float, nd: int = 2) -> float | None:
    return None if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else round(float(x), nd)


def allocation_dict(a: Allocation) -> dict:
    c, e = a.evaluation.candidate, a.evaluation
    return {
        "gpu": c.gpu.key, "replicas": a.replicas, "gpus_per_replica": c.gpus_per_replica,
        "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep, "precision": c.prec.weights,
        "kv_cache_dtype": c.prec.kv_cache, "max_num_seqs": c.max_num_seqs,
        "usd_per_hour": _num(a.replicas * c.usd_per_replica_hour, 4),
        "usd_per_gpu_hour": _num(c.usd_per_gpu_hour, 4),
        "capacity_rps_per_replica": _num(e.effective_capacity_rps, 4),
        "analytical_capacity_rps_per_replica": _num(e.capacity_rps, 4),
        "simulated_capacity_rps_per_replica": _num(e.sim_capacity_rps, 4) if e.sim_capacity_rps is not None else None,
        "load_rps_per_replica": _num(a.share_rps, 4),
        "ttft_ms": _num(a.ttft_ms), "tpot_ms": _num(a.tpot_ms),
        "kv_capacity_tokens": e.kv_capacity_tokens, "weights_gb_per_gpu": _num(e.weights_gb),
        "calibration_tier": e.tier, "simulated": a.simulated, "error_band": a.bands,
    }


def selection_dict(sel: Selection, res: PlanResult) -> dict:
    wl = res.workload
    out_tok_per_h = wl.rate_rps * wl.mean_output_tokens * 3600.0
    return {
        "feasible": sel.feasible,
        "total_usd_per_hour": _num(sel.total_usd_per_hour, 4),
        "total_gpus": sel.total_gpus,
        "usd_per_million_output_tokens": _num(sel.total_usd_per_hour / out_tok_per_h * 1e6, 4) if out_tok_per_h else None,
        "deployments": [allocation_dict(a) for a in sel.allocations],
    }


def rejection_counts(evals: list[Evaluation]) -> dict[str, int]:
    c = Counter(e.verdict for e in evals if e.verdict != "ok")
    return {k: c.get(k, 0) for k in REJECT_ORDER if c.get(k, 0)} | {k: v for k, v in c.items() if k not in REJECT_ORDER}


def plan_dict(res: PlanResult, context: dict) -> dict:
    sel = res.selection
    d = selection_dict(sel, res)
    d.update({
        "binding_constraint": sel.binding or None,
        "slo": [{"metric": s.metric, "percentile": s.percentile, "limit_ms": s.limit_ms} for s in res.slos],
        "workload": {"rate_rps": res.workload.rate_rps, "mean_input_tokens": _num(res.workload.mean_input_tokens),
                     "mean_output_tokens": _num(res.workload.mean_output_tokens),
                     "max_request_tokens": res.workload.max_request_tokens},
        "candidates_evaluated": len(res.evaluations),
        "candidates_meeting_slo": sum(1 for e in res.evaluations if e.verdict == "ok"),
        "rejected": rejection_counts(res.evaluations),
        "alternatives": [selection_dict(s, res) for s in res.alternatives],
        "verification": res.verification,
        "notes": res.notes,
    })
    d.update(context)
    return d


def candidates_frame(evals: list[Evaluation]) -> pd.DataFrame:
    rows = []
    for e in evals:
        c = e.candidate
        rows.append({
            "candidate": c.name, "gpu": c.gpu.key, "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep,
            "precision": c.prec.weights, "kv_cache_dtype": c.prec.kv_cache, "max_num_seqs": c.max_num_seqs,
            "gpus_per_replica": c.gpus_per_replica, "usd_per_replica_hour": round(c.usd_per_replica_hour, 4),
            "verdict": e.verdict, "reason": e.reason or e.binding,
            "capacity_rps": _num(e.capacity_rps, 4), "sim_capacity_rps": _num(e.sim_capacity_rps, 4) if e.sim_capacity_rps is not None else None,
            "usd_per_hour_per_rps": _num(e.usd_per_request_rps, 4),
            "ttft_ms_at_capacity": _num(e.ttft_ms), "tpot_ms_at_capacity": _num(e.tpot_ms),
            "ttft_ms_light_load": _num(e.light_ttft_ms), "tpot_ms_light_load": _num(e.light_tpot_ms),
            "kv_capacity_tokens": e.kv_capacity_tokens, "weights_gb_per_gpu": _num(e.weights_gb),
            "calibration_tier": e.tier,
        })
    return pd.DataFrame(rows)


def write(res: PlanResult, out_dir: Path, context: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    d = plan_dict(res, context)
    (out_dir / "plan.json").write_text(json.dumps(d, indent=2, sort_keys=False) + "\n")
    candidates_frame(res.evaluations).to_csv(out_dir / "candidates.csv", index=False, float_format="%.6g")
    return d


def _deploy_table(title: str, sel: Selection, res: PlanResult) -> Table:
    tq = next((s for s in res.slos if s.metric == "ttft"), None)
    pq = next((s for s in res.slos if s.metric == "tpot"), None)
    t = Table(title=title, title_justify="left", show_lines=False)
    for col in ("GPU", "replicas", "GPUs", "TP/PP/EP", "precision", "batch", "$/h", "load rps/replica",
                f"TTFT p{tq.percentile:g} ms" if tq else "TTFT ms", f"TPOT p{pq.percentile:g} ms" if pq else "TPOT ms", "tier"):
        t.add_column(col, justify="right" if col not in ("GPU", "precision", "tier") else "left")
    for a in sel.allocations:
        c = a.evaluation.candidate
        sim = a.simulated or {}
        bt, bp = a.bands.get("ttft", {}), a.bands.get("tpot", {})
        ttft = f"{a.ttft_ms:.0f}" + (f" (sim {sim['ttft_ms']:.0f})" if sim.get("ttft_ms") is not None else "") + \
            (f" ±{bt['p90_pct']:.0f}%" if bt else "")
        tpot = f"{a.tpot_ms:.1f}" + (f" (sim {sim['tpot_ms']:.1f})" if sim.get("tpot_ms") is not None else "") + \
            (f" ±{bp['p90_pct']:.0f}%" if bp else "")
        t.add_row(c.gpu.key, str(a.replicas), str(a.replicas * c.gpus_per_replica),
                  f"{c.par.tp}/{c.par.pp}/{c.par.ep}", f"{c.prec.weights} kv:{c.prec.kv_cache}", str(c.max_num_seqs),
                  f"{a.replicas * c.usd_per_replica_hour:.2f}", f"{a.share_rps:.2f}", ttft, tpot, a.evaluation.tier)
    return t


def render(res: PlanResult, d: dict, console: Console, out_dir: Path | None) -> None:
    sel = res.selection
    wl = res.workload
    slo_txt = ", ".join(s.label for s in res.slos)
    console.print(f"[bold]llmplan[/bold] {d.get('model', '')}: {wl.rate_rps:g} req/s, "
                  f"~{wl.mean_input_tokens:.0f} in / {wl.mean_output_tokens:.0f} out tokens; SLO {slo_txt}")
    if sel.feasible:
        console.print(_deploy_table(
            f"Cheapest deployment: ${sel.total_usd_per_hour:.2f}/h, {sel.total_gpus} GPUs, "
            f"${d['usd_per_million_output_tokens']:.3f} per million output tokens", sel, res))
        for i, alt in enumerate(res.alternatives, 1):
            console.print(f"  alternative {i}: ${alt.total_usd_per_hour:.2f}/h, {alt.total_gpus} GPUs: " +
                          " + ".join(f"{a.replicas}x {a.evaluation.candidate.name}" for a in alt.allocations))
    else:
        console.print(f"[bold red]No deployment meets the targets.[/bold red] Binding: {sel.binding}")
        ok = [e for e in res.evaluations if e.verdict in ("ok", "slo")]
        closest = sorted(ok, key=lambda e: (e.verdict != "ok", e.light_ttft_ms + 10 * e.light_tpot_ms))[:5]
        if closest:
            t = Table(title="Closest candidates (light-load latency)", title_justify="left")
            for col in ("candidate", "verdict", "TTFT ms", "TPOT ms", "why"):
                t.add_column(col)
            for e in closest:
                t.add_row(e.candidate.name, e.verdict, f"{e.light_ttft_ms:.0f}", f"{e.light_tpot_ms:.1f}", e.reason or e.binding)
            console.print(t)
    rej = d.get("rejected", {})
    console.print(f"Candidates: {d['candidates_evaluated']} evaluated, {d['candidates_meeting_slo']} meet the SLOs; rejected: " +
                  (", ".join(f"{k} {v}" for k, v in rej.items()) or "none"))
    extrap = sorted({op for a in sel.allocations for b in a.bands.values() for op in b.get("extrapolated", [])})
    if extrap:
        console.print("[yellow]warning:[/yellow] kernel queries outside the calibrated shape range (extrapolated): "
                      + ", ".join(extrap))
    if sel.feasible and any(a.bands for a in sel.allocations):
        console.print("[dim]± = p90 error of the step time from held-out kernel residuals of the calibration tier "
                      "(docs/ACCURACY.md)[/dim]")
    for note in res.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    if out_dir is not None:
        console.print(f"Wrote {out_dir / 'plan.json'} and {out_dir / 'candidates.csv'}")

"""Stage 5: report. plan.json and candidates.csv (a stable contract) and the rich rendering."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llmplan.optimizer.headroom import headroom
from llmplan.optimizer.mode_select import split_chosen
from llmplan.optimizer.planner import PlanResult
from llmplan.optimizer.risk import selection_risk
from llmplan.optimizer.slo_check import binding_target, worst_miss
from llmplan.optimizer.types import Allocation, Evaluation, Selection, SLOTarget
from llmplan.sim.serving_bands import served_bands

REJECT_ORDER = ("memory", "parallelism", "precision", "slo", "availability")


def _num(x: float, nd: int = 2) -> float | None:
    return None if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else round(float(x), nd)


#: hours in an average month (8760 h / 12): monthly cost = $/h x 730, always on
HOURS_PER_MONTH = 730.0

WIDE_BAND_PCT = 30.0  # a chosen deployment whose p90 step-time error band is wider than this is flagged


def headline(a: Allocation, metric: str, slos) -> tuple[float, str, float]:
    """(figure, source, analytical figure) of a metric's binding target: the simulated value
    where the deployment was simulated, else the analytical one (both for the same target)."""
    key = _binding_key(a, metric, slos)
    an = a.analytical.get(key, math.nan) if key else math.nan
    sim = (a.simulated or {}).get("targets", {}).get(key) if key else None
    if sim is not None:
        return float(sim), "simulated", an
    return an, "analytical", an


def error_band(sel: Selection) -> dict:
    """The widest p90 error band of the chosen deployment, and whether it is wider than WIDE_BAND_PCT."""
    widest, tier = 0.0, ""
    for a in sel.allocations:
        for b in a.bands.values():
            if b.get("p90_pct", 0.0) > widest:
                widest, tier = float(b["p90_pct"]), b.get("tier", "")
    return {"max_p90_pct": round(widest, 1), "tier": tier, "wide": widest > WIDE_BAND_PCT,
            "threshold_pct": WIDE_BAND_PCT}


def _binding_key(a: Allocation, metric: str, slos) -> str | None:
    values = (a.simulated or {}).get("targets") or a.analytical
    t = binding_target(values, slos, metric)
    return t.key if t else None


def allocation_dict(a: Allocation, slos=(), probability: dict | None = None) -> dict:
    """One pool of a selection; ``probability`` (SLOTarget.key -> P(met), optimizer.risk) adds
    a ``probability`` to each target."""
    c, e = a.evaluation.candidate, a.evaluation
    probability = probability or {}
    ttft, ttft_src, ttft_an = headline(a, "ttft", slos)
    tpot, tpot_src, tpot_an = headline(a, "tpot", slos)
    sim_targets = (a.simulated or {}).get("targets", {})
    return {
        "gpu": c.gpu.key, "replicas": a.replicas, "gpus_per_replica": c.gpus_per_replica,
        "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep, "dp": c.par.dp, "precision": c.precision_label,
        "weight_only": c.weight_only,
        "kv_cache_dtype": c.prec.kv_cache, "max_num_seqs": c.max_num_seqs,
        "usd_per_hour": _num(a.replicas * c.usd_per_replica_hour, 4),
        "usd_per_gpu_hour": _num(c.usd_per_gpu_hour, 4),
        "capacity_rps_per_replica": _num(e.effective_capacity_rps, 4),
        "analytical_capacity_rps_per_replica": _num(e.capacity_rps, 4),
        "simulated_capacity_rps_per_replica": _num(e.sim_capacity_rps, 4) if e.sim_capacity_rps is not None else None,
        "load_rps_per_replica": _num(a.share_rps, 4),
        "ttft_ms": _num(ttft), "tpot_ms": _num(tpot), "latency_source": {"ttft": ttft_src, "tpot": tpot_src},
        "ttft_target": _binding_key(a, "ttft", slos), "tpot_target": _binding_key(a, "tpot", slos),
        "analytical_ttft_ms": _num(ttft_an), "analytical_tpot_ms": _num(tpot_an),
        "targets": {t.key: {"limit_ms": t.limit_ms, "analytical_ms": _num(a.analytical.get(t.key, math.nan)),
                            "simulated_ms": _num(sim_targets[t.key]) if t.key in sim_targets else None,
                            "probability": _num(probability.get(t.key), 4)}
                    for t in slos},
        "headroom": headroom(a),
        "kv_capacity_tokens": e.kv_capacity_tokens, "weights_gb_per_gpu": _num(e.weights_gb),
        "calibration_tier": e.tier, "simulated": a.simulated, "error_band": a.bands,
        # serving mode of this deployment (issue 10): aggregated replicas = one pool; speculation
        # settings where a speculation search sets them (None: off)
        "mode": "aggregated",
        "pools": [{"role": "aggregated", "gpu": c.gpu.key, "count": a.replicas, "gpus_per_worker": c.gpus_per_replica,
                   "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep}],
        "speculation": getattr(a.evaluation, "speculation", None),
    }


def selection_dict(sel: Selection, res: PlanResult, engine: str | None = None) -> dict:
    """A selection's cost and pools; with ``engine`` (one with served bands) the probability of
    meeting each SLO (``optimizer/risk.py``, docs/RISK.md) per target and for every SLO."""
    wl = res.workload
    rk = selection_risk(sel, res.slos, engine) if engine and sel.feasible else None
    probs = [p["probability"] for p in rk["pools"]] if rk else [None] * len(sel.allocations)
    out_tok_per_h = wl.rate_rps * wl.mean_output_tokens * 3600.0
    return {
        "feasible": sel.feasible,
        "total_usd_per_hour": _num(sel.total_usd_per_hour, 4),
        "total_usd_per_month": _num(sel.total_usd_per_hour * HOURS_PER_MONTH, 2),
        "hours_per_month": HOURS_PER_MONTH,
        "total_gpus": sel.total_gpus,
        "usd_per_million_output_tokens": _num(sel.total_usd_per_hour / out_tok_per_h * 1e6, 4) if out_tok_per_h else None,
        "deployments": [allocation_dict(a, res.slos, p) for a, p in zip(sel.allocations, probs)],
        "error_band": error_band(sel),
        "every_slo_probability": rk["every_slo_probability"] if rk else None,
        "risk": rk,
    }


def rejection_counts(evals: list[Evaluation]) -> dict[str, int]:
    c = Counter(e.verdict for e in evals if e.verdict != "ok")
    return {k: c.get(k, 0) for k in REJECT_ORDER if c.get(k, 0)} | {k: v for k, v in c.items() if k not in REJECT_ORDER}


def slo_entry(s: SLOTarget) -> dict:
    """One target in plan.json: a percentile target as {metric, percentile, limit_ms}; a mean
    target as {metric, percentile: null, stat: "mean", limit_ms}."""
    if s.is_mean:
        return {"metric": s.metric, "percentile": None, "stat": "mean", "limit_ms": s.limit_ms}
    return {"metric": s.metric, "percentile": s.percentile, "limit_ms": s.limit_ms}


def plan_dict(res: PlanResult, context: dict) -> dict:
    sel = res.selection
    engine = context.get("engine")
    d = selection_dict(sel, res, engine)
    d.update({
        "confidence": res.confidence,
        "uniform": res.uniform,
        "fleet": res.fleet,
        "binding_constraint": sel.binding or None,
        "infeasible": res.diagnosis.as_dict() if res.diagnosis else None,
        "slo": [slo_entry(s) for s in res.slos],
        "workload": {"rate_rps": res.workload.rate_rps, "mean_input_tokens": _num(res.workload.mean_input_tokens),
                     "mean_output_tokens": _num(res.workload.mean_output_tokens),
                     "max_request_tokens": res.workload.max_request_tokens},
        "candidates_evaluated": len(res.evaluations),
        "candidates_meeting_slo": sum(1 for e in res.evaluations if e.verdict == "ok"),
        "rejected": rejection_counts(res.evaluations),
        "alternatives": [selection_dict(s, res, engine) for s in res.alternatives],
        "verification": res.verification,
        "notes": res.notes,
        # the cheapest disaggregated (xPyD) option beside the selection (optimizer/disagg_candidates.py)
        "disaggregated": getattr(res, "disaggregated", None),
    })
    dis = getattr(res, "disaggregated", None)
    if isinstance(dis, dict) and engine:  # the split's P(SLO met) whenever it is reported (docs/RISK.md)
        from llmplan.optimizer.risk import split_risk

        d["disaggregated"] = dict(dis, risk=split_risk(dis, res.slos, engine))
    d.update(context)
    if split_chosen(res):
        from llmplan.optimizer import split_summary  # the chosen split at the top level, aggregated under its key

        split_summary.apply(d, res, engine, WIDE_BAND_PCT, HOURS_PER_MONTH)
    return d


def candidates_frame(evals: list[Evaluation]) -> pd.DataFrame:
    rows = []
    for e in evals:
        c = e.candidate
        rows.append({
            "candidate": c.name, "gpu": c.gpu.key, "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep, "dp": c.par.dp,
            "precision": c.precision_label, "weight_only": c.weight_only, "kv_cache_dtype": c.prec.kv_cache,
            "max_num_seqs": c.max_num_seqs, "gpus_per_replica": c.gpus_per_replica, "usd_per_replica_hour": round(c.usd_per_replica_hour, 4),
            "verdict": e.verdict, "reason": e.reason or e.binding,
            "capacity_rps": _num(e.capacity_rps, 4), "sim_capacity_rps": _num(e.sim_capacity_rps, 4) if e.sim_capacity_rps is not None else None,
            "usd_per_hour_per_rps": _num(e.usd_per_request_rps, 4),
            "ttft_ms_at_capacity": _num(e.ttft_ms), "tpot_ms_at_capacity": _num(e.tpot_ms),
            "memory_shortfall_gb": _num(e.memory_shortfall_gb) if e.verdict == "memory" else None,
            "ttft_ms_light_load": _num(e.light_ttft_ms), "tpot_ms_light_load": _num(e.light_tpot_ms),
            "kv_capacity_tokens": e.kv_capacity_tokens, "weights_gb_per_gpu": _num(e.weights_gb),
            "calibration_tier": e.tier,
        })
    return pd.DataFrame(rows)


def write(res: PlanResult, out_dir: Path, context: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    d = plan_dict(res, context)
    if res.feasible and context.get("engine"):
        d["served_band"] = served_bands(context["engine"], (d.get("verification") or {}).get("deployment_simulation"))
    (out_dir / "plan.json").write_text(json.dumps(d, indent=2, sort_keys=False) + "\n")
    candidates_frame(res.evaluations).to_csv(out_dir / "candidates.csv", index=False, float_format="%.6g")
    return d


def _latency_cell(a: Allocation, metric: str, slos, several: bool) -> str:
    """The headline figure of the binding target (simulated where simulated); '*' marks an analytical one."""
    fig, src, _ = headline(a, metric, slos)
    key = _binding_key(a, metric, slos)
    if key is None:
        return "-"
    digits = 0 if metric == "ttft" else 1
    txt = (f"{key.split('_')[1]}: " if several else "") + (f"{fig:.{digits}f}" if math.isfinite(fig) else "unstable")
    return txt + ("" if src == "simulated" else "*")


def _analytical_line(a: Allocation, slos) -> str:
    """The analytical figures and p90 error bands of one deployment row (the table's second line)."""
    parts = []
    for metric in ("ttft", "tpot"):
        _, src, an = headline(a, metric, slos)
        key = _binding_key(a, metric, slos)
        if key is None:
            continue
        digits = 0 if metric == "ttft" else 1
        txt = f"{key.split('_')[0].upper()} {key.split('_')[1]} " + (f"{an:.{digits}f} ms" if math.isfinite(an) else "unstable")
        band = a.bands.get(metric)
        parts.append(txt + (f" ±{band['p90_pct']:.0f}%" if band else ""))
    return f"{a.evaluation.candidate.name}: analytical " + ", ".join(parts)


def risk_lines(d: dict, res: PlanResult) -> list[str]:
    """Console lines: P(each SLO met) per pool and for every SLO, and each pool's headroom."""
    out = []
    conf = res.confidence
    if conf:
        out.append(f"Planned for search.confidence={conf['level']:g}: limits tightened to "
                   + ", ".join(f"{k} {v:.4g} ms" for k, v in conf["planned_limits_ms"].items()))
    for dep in d.get("deployments", []):
        name = f"{dep['gpu']} tp{dep['tp']}/pp{dep['pp']}/ep{dep['ep']}"
        probs = [f"{k} {t['probability']:.2f}" for k, t in dep["targets"].items() if t.get("probability") is not None]
        if probs:
            out.append(f"P(SLO met) {name}: " + ", ".join(probs))
        h = dep.get("headroom") or {}
        if h.get("utilisation") is not None:
            why = h["limited_by"] + (f" ({h['detail']})" if h["limited_by"] == "slo" else "")
            out.append(f"Headroom {name}: {h['load_rps_per_replica']:.3g}/{h['capacity_rps_per_replica']:.3g} req/s "
                       f"per replica, {h['headroom_pct']:.0f}% free; limited by {why}")
    p = d.get("every_slo_probability")
    if p is not None:
        kinds = sorted({e["kind"] for e in ((d.get("risk") or {}).get("error_model") or {}).values() if e})
        basis = " and ".join({"empirical": "held-out residuals", "lognormal": "served band as a lognormal"}[k]
                             for k in kinds)
        out.append(f"P(every SLO met) = {p:.2f} ({d.get('engine')} served error: {basis}; docs/RISK.md)")
    return out


def _deploy_table(title: str, sel: Selection, res: PlanResult) -> Table:
    """Fits 100 columns: no vertical rules, two-line headers, the simulated figure only (analytical
    figures and bands are printed under the table by `_analytical_line`)."""
    heads = {}
    for metric in ("ttft", "tpot"):
        mine = [s for s in res.slos if s.metric == metric]
        heads[metric] = (f"{metric.upper()}\n{mine[0].key.split('_')[1]} ms" if len(mine) == 1
                         else f"{metric.upper()} ms\n(binding)" if mine else f"{metric.upper()}\nms")
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    for col in ("GPU", "reps", "GPUs", "TP/PP/EP", "weights\n/kv", "batch", "$/h", "load\nrps/rep",
                heads["ttft"], heads["tpot"], "tier"):
        t.add_column(col, justify="right" if col not in ("GPU", "weights\n/kv", "tier") else "left", no_wrap=True)
    for a in sel.allocations:
        c = a.evaluation.candidate
        cells = [_latency_cell(a, m, res.slos, sum(s.metric == m for s in res.slos) > 1) for m in ("ttft", "tpot")]
        t.add_row(c.gpu.key, str(a.replicas), str(a.replicas * c.gpus_per_replica),
                  f"{c.par.tp}/{c.par.pp}/{c.par.ep}", f"{c.precision_label}/{c.prec.kv_cache}", str(c.max_num_seqs),
                  f"{a.replicas * c.usd_per_replica_hour:.2f}", f"{a.share_rps:.2f}", *cells, a.evaluation.tier)
    return t


def _closest_table(res: PlanResult) -> Table | None:
    """The candidates that miss by the least: light-load worst target ratio, or memory shortfall."""
    cause = res.diagnosis.cause if res.diagnosis else ""
    if cause not in ("memory", "slo") or "simulated_capacity_rps" in res.diagnosis.closest:
        return None  # availability / replicas / rejected in simulation: the message names the candidate
    if cause == "memory":
        mem = sorted({(e.candidate.gpu.key, e.candidate.par, e.candidate.prec): e for e in res.evaluations
                      if e.verdict == "memory"}.values(), key=lambda e: (e.memory_shortfall_gb, e.candidate.name))[:5]
        t = Table(title="Closest candidates (HBM per GPU short)", title_justify="left")
        for col in ("candidate", "short GB/GPU", "why"):
            t.add_column(col)
        for e in mem:
            t.add_row(e.candidate.name, f"{e.memory_shortfall_gb:.1f}", e.reason)
        return t if mem else None
    scored, shapes = [], set()
    for e in sorted(res.evaluations, key=lambda x: x.candidate.name):
        shape = (e.candidate.gpu.key, e.candidate.par, e.candidate.prec)
        if e.verdict in ("ok", "slo") and e.light and shape not in shapes:
            shapes.add(shape)
            tgt, r = worst_miss(e.light, res.slos)
            scored.append((r, e.candidate.name, e, tgt))
    scored.sort(key=lambda x: (x[0], x[1]))
    if not scored:
        return None
    t = Table(title="Closest candidates (light-load latency, worst target)", title_justify="left")
    for col in ("candidate", "verdict", "worst target", "ms", "limit ms", "miss"):
        t.add_column(col)
    for r, _, e, tgt in scored[:5]:
        v = e.light[tgt.key]
        t.add_row(e.candidate.name, e.verdict, tgt.key, f"{v:.4g}" if math.isfinite(v) else "unstable", f"{tgt.limit_ms:g}",
                  f"{r - 1:+.0%}" if math.isfinite(r) else "-")
    return t


def _agg_title(res: PlanResult) -> str:
    """The aggregated table's title: the answer, or the alternative when a disaggregated split is chosen
    (optimizer/mode_select.py; its table follows)."""
    if getattr(res, "mode_selection", None) and getattr(res, "chosen_mode", "agg") != "agg":
        return "Aggregated alternative (not chosen: see the serving-mode table above)"
    return f"Cheapest {'uniform ' if res.uniform else ''}deployment"


def split_chosen_here(res: PlanResult, d: dict) -> bool:
    """The plan chose the disaggregated split and plan.json's top level describes it."""
    return split_chosen(res) and isinstance(d.get("aggregated"), dict)


def render_chosen_split(res: PlanResult, d: dict, console: Console) -> None:
    """The chosen split's table and lines, then the serving-mode table (optimizer/chosen_console.py)."""
    from llmplan.optimizer import chosen_console as cc

    console.print(cc.chosen_table(d))
    for line in cc.chosen_lines(d):
        console.print(line, markup=False, highlight=False)
    console.print(cc.mode_table(cc.mode_probabilities(res.mode_selection, d)))


def render(res: PlanResult, d: dict, console: Console, out_dir: Path | None) -> None:
    sel = res.selection
    wl = res.workload
    slo_txt = ", ".join(s.label for s in res.slos)
    console.print(f"[bold]llmplan[/bold] {d.get('model', '')}: {wl.rate_rps:g} req/s, "
                  f"~{wl.mean_input_tokens:.0f} in / {wl.mean_output_tokens:.0f} out tokens; SLO {slo_txt}")
    if res.fleet:
        fl = res.fleet
        gpus_txt = ", ".join(f"{v}x {k}" for k, v in fl["gpus"].items())
        settled = fl.get("ilp_rate_rps") is not None and (fl["max_rate_rps"] or 0) < fl["ilp_rate_rps"]
        why = (f"the highest rate the whole-deployment steady-state simulation passes; per-replica capacities at "
               f"{fl['max_load']:g} load sum to {fl['ilp_rate_rps']:.2f}" if settled
               else f"each replica loaded to {fl['max_load']:g} of its capacity")
        console.print(f"[bold]Maximum rate of the fleet ({gpus_txt}): {fl['max_rate_rps'] or 0:.2f} req/s[/bold] within "
                      f"the SLOs ({why})")
        if fl.get("simulation_meets_slos") is False:
            console.print("[bold yellow]The whole-deployment simulation at this rate misses an SLO[/bold yellow] "
                          "(see the warning below): read the rate as an upper bound")
    cl = res.verification.get("closed_loop")
    if cl and cl.get("check"):
        c = cl["check"]
        console.print(f"[bold]Closed loop of {cl['users']} users[/bold] (think time {cl['think_time_ms']:g} ms): "
                      f"{c['throughput_rps']:.3g} req/s simulated, every SLO {'met' if c['met'] else 'NOT met'} ("
                      + ", ".join(f"{k} {v['simulated_ms']:.4g} ms" for k, v in c["targets"].items())
                      + f"); planned in {len(cl['rounds'])} round(s), the table's load is the last planned rate")
    if split_chosen_here(res, d):  # the chosen split first, then the mode table, then the aggregated alternative
        render_chosen_split(res, d, console)
    agg = d.get("aggregated") or d  # the aggregated selection's figures (top level unless a split is chosen)
    if sel.feasible:
        band = agg["error_band"]
        console.print(_deploy_table(
            f"Deployment on the fleet: ${sel.total_usd_per_hour:.2f}/h, {sel.total_gpus} GPUs used"
            if res.fleet else f"{_agg_title(res)}: ${sel.total_usd_per_hour:.2f}/h (${sel.total_usd_per_hour * HOURS_PER_MONTH:,.0f}/month "
            f"at {HOURS_PER_MONTH:g} h), {sel.total_gpus} GPUs, "
            f"${agg['usd_per_million_output_tokens']:.3f} per million output tokens", sel, res))
        if band["wide"]:
            console.print(f"[bold yellow]Low confidence:[/bold yellow] the chosen deployment's step-time error band is "
                          f"±{band['max_p90_pct']:.0f}% ({band['tier']} calibration tier), wider than "
                          f"±{WIDE_BAND_PCT:.0f}%: its cost and latencies are indicative only")
        if not any(a.simulated for a in sel.allocations):
            console.print("[dim]* = analytical estimate (not simulated: search.finalists=0)[/dim]")
        elif not all(a.simulated for a in sel.allocations):
            console.print("[dim]* = analytical estimate (this row was not simulated)[/dim]")
        for a in sel.allocations:
            console.print(f"[dim]  {escape(_analytical_line(a, res.slos))}[/dim]")
        for line in risk_lines(agg | {"engine": d.get("engine")}, res):
            console.print(escape(line))
        if any(a.evaluation.candidate.weight_only for a in sel.allocations):
            console.print("[dim](w4a16) = the 4-bit weights run weight-only on this GPU (dequantised to bf16 in "
                          "the GEMM, bf16 tensor-core throughput): no 4-bit tensor-core path[/dim]")
        for i, alt in enumerate(res.alternatives, 1):
            console.print(f"  alternative {i}: ${alt.total_usd_per_hour:.2f}/h, {alt.total_gpus} GPUs: " +
                          " + ".join(f"{a.replicas}x {a.evaluation.candidate.name}" for a in alt.allocations))
    else:
        none = "No aggregated deployment" if getattr(res, "chosen_mode", None) == "disagg" else "No deployment"
        console.print(f"[bold red]{none} meets the targets.[/bold red] Cause: {sel.binding}")
        t = _closest_table(res)
        if t is not None:
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
    sb = d.get("served_band") or {}
    parts = [f"{m.upper()} mean {v['mean_ms_low']:.1f}-{v['mean_ms_high']:.1f} ms (x{v['factor_low']:.2f}-x{v['factor_high']:.2f})"
             for m, v in sb.items() if v and v.get("mean_ms_low") is not None]
    if parts:
        console.print(f"Served-latency p90 band ({d.get('engine')}, from held-out served runs; docs/ACCURACY.md): "
                      + ", ".join(parts))
    for note in res.notes:  # notes are plain text: escape "[...]" (lists) from rich markup
        if note.startswith("WARNING: "):
            console.print(f"[bold red]warning:[/bold red] {escape(note[len('WARNING: '):])}")
        else:
            console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if out_dir is not None:
        console.print(f"Wrote {out_dir / 'plan.json'} and {out_dir / 'candidates.csv'}")

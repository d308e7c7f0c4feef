"""The console block that leads `plan`'s output when the plan chooses a disaggregated split
(optimizer/mode_select.py): the chosen deployment first (mode, pools, cost, GPUs, $ per million
output tokens, the split's simulated latencies at the SLO percentile, P(every SLO met), each
pool's headroom), then the serving-mode table; the aggregated alternative's table follows
(optimizer/report.py). Reads plan.json's dict only (optimizer/split_summary.py put the split at
its top level). Tables fit 100 columns: no vertical rules, two-line headers.
"""

from __future__ import annotations

from rich import box
from rich.table import Table


def mode_probabilities(rows: list[dict], d: dict) -> list[dict]:
    """The mode rows with each mode's P(every SLO met) (optimizer/risk.py; None where not computed):
    the cheaper mode can be the riskier one, and the table shows it."""
    agg = d.get("aggregated") if isinstance(d.get("aggregated"), dict) else d
    dis = d.get("disaggregated") or {}
    p = {"agg": agg.get("every_slo_probability") if agg.get("feasible") else None,
         "disagg": (dis.get("risk") or {}).get("every_slo_probability")}
    return [dict(r, every_slo_probability=p.get(r["mode"]) if r.get("usd_per_hour") is not None else None)
            for r in rows]


def mode_table(rows: list[dict]) -> Table:
    """The mode-selection table: aggregated against the disaggregated split, which one is chosen."""
    t = Table(title="Serving mode (search.modes): the cheapest mode meeting the SLOs is chosen", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("mode", "pools", "GPUs", "$/h", "SLOs", "P(all)", "chosen"):
        t.add_column(col, justify="right" if col in ("GPUs", "$/h", "P(all)") else "left", overflow="fold")
    for r in rows:
        slo = ("met (" + r["basis"] + ")" if r["meets_slo"] else "missed") if r["usd_per_hour"] is not None else "-"
        why = "" if r["allowed"] else " (not allowed)"
        # one pool per line: a split's pools stay whole at 100 columns
        t.add_row(r["label"], r["pools"].replace(" + ", "\n+ ") if r["usd_per_hour"] is not None else r["why"],
                  "-" if r["gpus"] is None else str(r["gpus"]),
                  "-" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:.2f}", slo,
                  "-" if r.get("every_slo_probability") is None else f"{r['every_slo_probability']:.2f}",
                  ("yes" if r["chosen"] else "no") + why)
    return t


def split_lines(d: dict) -> list[str]:
    """Console lines of a chosen split: P(each SLO met) and each pool's headroom."""
    out, rk = [], d.get("risk") or {}
    xpyd = (d.get("chosen_deployment") or {}).get("xpyd") or _xpyd(d)
    for pool in rk.get("pools") or []:
        probs = [f"{k} {v:.2f}" for k, v in pool["probability"].items() if v is not None]
        if probs:
            out.append(f"P(SLO met) {xpyd} ({pool['basis']}): " + ", ".join(probs))
    for dep in d.get("deployments") or []:
        h = dep.get("headroom") or {}
        if h.get("utilisation") is not None:
            out.append(f"Headroom {dep['role']} pool ({dep['replicas']}x {dep['gpu']} tp{dep['tp']}): "
                       f"{h['load_rps_per_worker']:.3g}/{h['capacity_rps_per_worker']:.3g} req/s per worker, "
                       f"{h['headroom_pct']:.0f}% free; limited by {h['limited_by']} ({h['detail']})")
    if d.get("every_slo_probability") is not None:
        out.append(f"P(every SLO met) {xpyd} = {d['every_slo_probability']:.2f} ({d.get('engine')} aggregated "
                   "served residuals; docs/RISK.md 'Disaggregated splits')")
    return out


def _xpyd(d: dict) -> str:
    deps = d.get("deployments") or [{}]
    return deps[0].get("xpyd") or "split"


def chosen_title(d: dict) -> str:
    """The chosen split's headline: mode, cost per hour and month, GPUs, $ per million output tokens."""
    usd_h, per_m = float(d["total_usd_per_hour"]), d.get("usd_per_million_output_tokens")
    return (f"Chosen deployment: disaggregated {_xpyd(d)}, ${usd_h:.2f}/h (${d['total_usd_per_month']:,.0f}/month "
            f"at {d['hours_per_month']:g} h), {d['total_gpus']} GPUs"
            + (f", ${per_m:.3f} per million output tokens" if per_m is not None else ""))


def chosen_table(d: dict) -> Table:
    """One row per pool of the chosen split (role, GPU, workers, parallelism, precision, cost)."""
    t = Table(title=chosen_title(d), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    for col in ("pool", "GPU", "workers", "GPUs", "TP/PP/EP", "weights\n/kv", "batch", "$/h", "load\nrps/wkr",
                "tier"):
        t.add_column(col, justify="left" if col in ("pool", "GPU", "weights\n/kv", "tier") else "right", no_wrap=True)
    for x in d.get("deployments") or []:
        load = x.get("load_rps_per_replica")
        t.add_row(x["role"], x["gpu"], str(x["replicas"]), str(x["replicas"] * x["gpus_per_replica"]),
                  f"{x['tp']}/{x['pp']}/{x['ep']}", f"{x['precision']}/{x['kv_cache_dtype']}", str(x["max_num_seqs"]),
                  "-" if x.get("usd_per_hour") is None else f"{x['usd_per_hour']:.2f}",
                  "-" if load is None else f"{load:.2f}", x.get("calibration_tier") or "-")
    return t


def latency_line(d: dict) -> str | None:
    """The split's TTFT and TPOT at the binding SLO percentile (a request's TTFT crosses both pools)."""
    dep = (d.get("deployments") or [None])[0]
    if not dep:
        return None
    parts = []
    for metric, digits in (("ttft", 0), ("tpot", 1)):
        key, v = dep.get(f"{metric}_target"), dep.get(f"{metric}_ms")
        if key and v is not None:
            parts.append(f"{metric.upper()} {key.split('_')[1]} {v:.{digits}f} ms")
    if not parts:
        return None
    src = ", ".join(sorted(set((dep.get("latency_source") or {}).values()))) or "analytical"
    return f"{_xpyd(d)} latency ({src}, the whole split): " + ", ".join(parts)


def chosen_lines(d: dict) -> list[str]:
    """The lines under the chosen table: latencies, P(SLO met), headroom per pool, P(every SLO met),
    and the split's own notes (plan.json 'disaggregated'.'notes': how its sizing grew, a pool outside
    the engine terms' fitted range)."""
    lat = latency_line(d)
    notes = [f"note ({_xpyd(d)}): {n}" for n in (d.get("disaggregated") or {}).get("notes") or []]
    return ([lat] if lat else []) + split_lines(d) + notes

"""plan.json's top level when the plan chooses a disaggregated split (``optimizer/mode_select.py``).

The top-level keys that summarize the answer (``feasible``, cost, GPUs, $/M tokens, the
deployments, P(SLO met), the error band, the binding constraint) describe the chosen
deployment; the aggregated selection's own figures move, unchanged, under ``aggregated``
(docs/DISAGG.md "choosing the mode"). Each pool of the split is one entry of ``deployments``
with the keys an aggregated pool has (``replicas`` = workers) plus ``role`` and the whole
split (``mode``, ``pools``, ``speculation``, issue 10); latency figures are the split's: a
request's TTFT crosses both pools, its TPOT is the decode pool's.
"""

from __future__ import annotations

import math
from typing import Any

from llmplan.optimizer.risk import split_figures, split_risk
from llmplan.optimizer.types import SLOTarget

#: the top-level keys the aggregated selection_dict fills, moved under ``aggregated`` when the split is chosen
AGGREGATED_KEYS = ("feasible", "total_usd_per_hour", "total_usd_per_month", "total_gpus",
                   "usd_per_million_output_tokens", "deployments", "error_band", "every_slo_probability", "risk",
                   "binding_constraint", "alternatives")


def _binding(targets: dict, slos: list[SLOTarget], metric: str) -> str | None:
    """The metric's target with the highest value / limit (the one that binds)."""
    mine = [s for s in slos if s.metric == metric and s.key in targets]
    if not mine:
        return None
    return max(mine, key=lambda s: (targets[s.key] / s.limit_ms if math.isfinite(targets[s.key]) else math.inf,
                                    s.key)).key


def split_deployments(dis: dict, slos: list[SLOTarget], rate_rps: float, probability: dict) -> list[dict]:
    """The split's pools as plan.json ``deployments`` entries."""
    values, basis = split_figures(dis, slos)
    keys = {m: _binding(values, slos, m) for m in ("ttft", "tpot")}
    # the split's figure under its basis (report.html's targets table reads simulated, else analytical)
    targets = {s.key: {"limit_ms": s.limit_ms,
                       "analytical_ms": _num(values.get(s.key)) if basis == "analytical" else None,
                       "simulated_ms": _num(values.get(s.key)) if basis == "simulated" else None,
                       "probability": probability.get(s.key)} for s in slos}
    sim = dis.get("simulated") or {}
    # the split's simulation in the aggregated entry's shape (per target, the binding figures)
    simulated = ({"targets": {k: _num(v) for k, v in values.items()}, "requests": sim.get("requests"),
                  "log_sd": sim.get("log_sd"), "ttft_ms": _num(values.get(keys["ttft"])) if keys["ttft"] else None,
                  "tpot_ms": _num(values.get(keys["tpot"])) if keys["tpot"] else None,
                  "overloaded": sim.get("overloaded"), "scope": "the whole split (sim/disaggregated.py)"}
                 if basis == "simulated" else None)
    out = []
    for p in dis["pools"]:
        h = dict(p.get("headroom") or {})
        if h:  # the aggregated headroom's keys too (per replica = per worker here)
            h.update(load_rps_per_replica=h.get("load_rps_per_worker"),
                     capacity_rps_per_replica=h.get("capacity_rps_per_worker"))
        band = p.get("error_band")
        out.append({
            "mode": "disaggregated", "role": p["role"], "xpyd": dis["xpyd"], "gpu": p["gpu"], "replicas": p["workers"],
            "gpus_per_replica": p["gpus_per_worker"], "tp": p["tp"], "pp": p["pp"], "ep": p["ep"], "dp": 1,
            "precision": p["precision"], "weight_only": False, "kv_cache_dtype": p["kv_cache_dtype"],
            "max_num_seqs": p["max_num_seqs"], "usd_per_hour": p["usd_per_hour"],
            "capacity_rps_per_replica": p["capacity_rps_per_worker"], "analytical_capacity_rps_per_replica":
                p["capacity_rps_per_worker"], "simulated_capacity_rps_per_replica": None,
            "load_rps_per_replica": _num(rate_rps / p["workers"], 4) if p["workers"] else None,
            "ttft_ms": _num(values.get(keys["ttft"])) if keys["ttft"] else None,
            "tpot_ms": _num(values.get(keys["tpot"])) if keys["tpot"] else None,
            "latency_source": {"ttft": basis, "tpot": basis}, "latency_scope": "the whole split",
            "ttft_target": keys["ttft"], "tpot_target": keys["tpot"], "targets": targets, "headroom": h,
            "kv_capacity_tokens": p.get("kv_capacity_tokens_per_worker"), "power": p.get("power"),
            "simulated": simulated, "error_band": {band["metric"]: band} if band else {}, "calibration_tier": (band or {}).get("tier", ""),
            "pools": dis["pools"], "speculation": dis.get("speculation"),
        })
    return out


def _num(x: Any, nd: int = 2) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), nd)


def split_error_band(dis: dict, threshold_pct: float) -> dict:
    """The widest p90 step-time band over the split's pools (as ``report.error_band``)."""
    widest, tier = 0.0, ""
    for p in dis["pools"]:
        b = p.get("error_band") or {}
        if b.get("p90_pct", 0.0) > widest:
            widest, tier = float(b["p90_pct"]), b.get("tier", "")
    return {"max_p90_pct": round(widest, 1), "tier": tier, "wide": widest > threshold_pct,
            "threshold_pct": threshold_pct}


def binding_constraint(dis: dict) -> str:
    """The pool with the least headroom and what limits it."""
    pools = [p for p in dis["pools"] if (p.get("headroom") or {}).get("headroom_pct") is not None]
    if not pools:
        return "-"
    p = min(pools, key=lambda p: (p["headroom"]["headroom_pct"], p["role"]))
    return f"{p['role']} pool: {p['headroom']['limited_by']} ({p['headroom']['detail']})"


def apply(d: dict, res: Any, engine: str | None, threshold_pct: float, hours_per_month: float) -> dict:
    """Move the aggregated summary under ``d['aggregated']`` and state the chosen split at the top level."""
    dis, wl = res.disaggregated, res.workload
    d["aggregated"] = {k: d.get(k) for k in AGGREGATED_KEYS}
    # report.plan_dict has just computed the split's risk for plan.json's 'disaggregated' block
    rk = (d.get("disaggregated") or {}).get("risk") or (split_risk(dis, res.slos, engine) if engine else None)
    probability = rk["pools"][0]["probability"] if rk else {}
    out_tok_per_h = wl.rate_rps * wl.mean_output_tokens * 3600.0
    usd_h = float(dis["total_usd_per_hour"])
    d.update({
        "feasible": bool(res.feasible), "total_usd_per_hour": round(usd_h, 4),
        "total_usd_per_month": round(usd_h * hours_per_month, 2), "total_gpus": dis["total_gpus"],
        "usd_per_million_output_tokens": round(usd_h / out_tok_per_h * 1e6, 4) if out_tok_per_h else None,
        "deployments": split_deployments(dis, res.slos, wl.rate_rps, probability),
        "error_band": split_error_band(dis, threshold_pct),
        "every_slo_probability": rk["every_slo_probability"] if rk else None, "risk": rk,
        "binding_constraint": binding_constraint(dis),
        "alternatives": [],
    })
    return d

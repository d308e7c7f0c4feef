"""The figures of a plan's CHOSEN deployment for the summaries that compare plans (`whatif`,
its curves, sweep summaries): aggregated or the disaggregated split (optimizer/mode_select.py),
never the aggregated selection when the split was chosen.

A plan.json dict's top level already describes the chosen deployment (optimizer/split_summary.py);
these helpers label it (``mode``, role-labelled pools) and compute what plan.json's dict does not
hold: J per output token (optimizer/energy.py, PUE 1) and, for a curve point, the chosen
deployment's figures from a PlanResult.
"""

from __future__ import annotations

from typing import Any

from llmplan.optimizer.mode_select import split_chosen  # the PlanResult's answer is the split

#: plan.json ``mode`` -> the label the summaries print
MODE_LABELS = {"agg": "aggregated", "disagg": "disaggregated"}


def plan_mode(d: dict) -> str | None:
    """``agg`` / ``disagg`` of a plan dict (plan.json or report.plan_dict); None: nothing meets the SLOs.
    plan.json carries ``mode``; report.plan_dict's dict says it by its ``aggregated`` key (the split is chosen)."""
    if isinstance(d.get("mode"), str):  # plan.json: agg / disagg (offline_throughput ... kept as written)
        return d["mode"] if d.get("feasible") or d["mode"] not in MODE_LABELS else None
    if isinstance(d.get("aggregated"), dict):
        return "disagg" if d.get("feasible") else None
    return "agg" if d.get("feasible") else None


def mode_label(d: dict) -> str:
    """``aggregated``, ``disaggregated 3P1D`` or ``-`` (nothing meets the SLOs)."""
    mode = plan_mode(d)
    if mode is None:
        return "-"
    xpyd = next((x.get("xpyd") for x in d.get("deployments") or [] if x.get("xpyd")), None)
    return MODE_LABELS.get(mode, mode) + (f" {xpyd}" if mode == "disagg" and xpyd else "")


def deployment_label(deployments: list[dict], sep: str = " ") -> str:
    """The pools of plan.json ``deployments``; a split's pools start with their role (prefill/decode)."""
    return " + ".join((f"{x['role']} " if x.get("mode") == "disaggregated" and x.get("role") else "")
                      + f"{x['replicas']}x {x['gpu']} tp{x['tp']}{sep}pp{x['pp']}{sep}ep{x['ep']} {x['precision']}"
                      for x in deployments)


def joules_per_output_token(res: Any) -> float | None:
    """J per output token of the chosen deployment at the plan's rate (PUE 1; None: power unknown)."""
    from llmplan.optimizer.energy import selection_energy, split_energy

    if split_chosen(res):
        return split_energy(res.disaggregated, res.workload).get("joules_per_output_token")
    if not res.selection.feasible:
        return None
    return selection_energy(res.selection, res.workload).get("joules_per_output_token")


def split_figures(res: Any, engine: str | None) -> dict:
    """The chosen split's plan.json top-level figures (cost, GPUs, $/M tokens, pools, P(every SLO met))."""
    from llmplan.optimizer import report, split_summary

    return split_summary.apply({}, res, engine, report.WIDE_BAND_PCT, report.HOURS_PER_MONTH)


def split_capacity_rps(dis: dict, max_load: float) -> float | None:
    """What the split sustains within the SLOs: each pool's SLO capacity per worker x workers x
    ``max_load`` (as an aggregated replica at ``search.max_load``); the smaller pool's bounds it."""
    caps = [p["workers"] * float(p["capacity_rps_per_worker"]) * max_load for p in dis["pools"]
            if p.get("capacity_rps_per_worker") is not None]
    return min(caps) if caps and len(caps) == len(dis["pools"]) else None

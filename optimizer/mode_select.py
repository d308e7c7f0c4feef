"""Aggregated or disaggregated: the plan's one choice between serving modes (issue 10 section 1).

The planner searches both modes over the same screened replica shapes and the same SLO targets
(tightened by ``search.confidence`` when set, ``optimizer/risk.py``): the aggregated ILP
(``select_ilp.solve``) and the disaggregated one (``select_ilp.solve_disagg``, each worker priced
as its GPUs). Both are checked in simulation when the plan verifies finalists (aggregated: the
finalists' capacity bisections; disaggregated: ``disagg_candidates.verify_option`` at the plan's
rate). This module compares the two answers on that footing: among the modes that
``search.modes`` allows and that meet the SLOs (the disaggregated option's simulation, when run,
must meet every target), the cheapest wins; ties go to fewer GPUs, then to aggregated (fewer
moving parts). It returns the rows of the mode table and the notes that say what was not
searched and why.
"""

from __future__ import annotations

from typing import Any, Optional

from llmplan.errors import UserError

MODES = ("agg", "disagg")
#: engines with a disaggregated prefill/decode mode whose launch flags optimizer/launch/disagg.py
#: writes (vLLM NixlConnector, SGLang PD disaggregation, TensorRT-LLM disaggregated serving)
DISAGG_ENGINES = ("vllm", "sglang", "trtllm")


def check_modes(modes: Any) -> None:
    """``search.modes`` must be a non-empty list of ``agg`` / ``disagg`` (UserError names the key)."""
    values = list(modes) if isinstance(modes, (list, tuple)) else None
    if not values or any(v not in MODES for v in values):
        raise UserError(f"must be a non-empty list of {', '.join(MODES)}, got {modes!r}", key="search.modes",
                        fix="e.g. search.modes=[agg,disagg] (both, the default) or search.modes=[agg]")


def disagg_skip_reason(modes: list[str], uniform: bool, engine_name: str) -> Optional[str]:
    """Why disaggregated candidates are not searched (None: they are)."""
    if "disagg" not in modes:
        return f"search.modes={_fmt_modes(modes)} leaves them out"
    if uniform:
        return "search.uniform=true asks for one GPU type and one shape for the whole deployment"
    if engine_name not in DISAGG_ENGINES:
        return (f"engine {engine_name!r} has no disaggregated serving mode here "
                f"({', '.join(DISAGG_ENGINES)} have)")
    return None


def _fmt_modes(modes: list[str]) -> str:
    return "[" + ",".join(modes) + "]"


def agg_row(sel: Any, allowed: bool) -> dict:
    """The aggregated selection as a mode-table row."""
    pools = " + ".join(f"{a.replicas}x {a.evaluation.candidate.gpu.key} TP{a.evaluation.candidate.par.tp}"
                       f"/PP{a.evaluation.candidate.par.pp}/EP{a.evaluation.candidate.par.ep} "
                       f"{a.evaluation.candidate.precision_label}" for a in sel.allocations)
    verified = bool(sel.allocations) and all(a.evaluation.sim_capacity_rps is not None for a in sel.allocations)
    return {"mode": "agg", "label": "agg", "pools": pools if sel.feasible else "-",
            "usd_per_hour": round(sel.total_usd_per_hour, 4) if sel.feasible else None,
            "gpus": sel.total_gpus if sel.feasible else None, "meets_slo": bool(sel.feasible),
            "basis": ("simulated capacities" if verified else "analytical") if sel.feasible else "-",
            "allowed": allowed, "chosen": False,
            "why": "" if sel.feasible else f"no aggregated deployment meets the SLOs ({sel.binding or 'infeasible'})"}


def disagg_row(dis: Optional[dict], allowed: bool, skipped: Optional[str]) -> dict:
    """The disaggregated option (plan.json ``disaggregated``) as a mode-table row."""
    if dis is None:
        why = f"not searched: {skipped}" if skipped else "no prefill/decode split meets the SLOs within the GPUs"
        return {"mode": "disagg", "label": "xPyD", "pools": "-", "usd_per_hour": None, "gpus": None,
                "meets_slo": False, "basis": "-", "allowed": allowed, "chosen": False, "why": why}
    sim = dis.get("simulated")
    met = True if sim is None else bool(sim.get("slo_met"))
    pools = " + ".join(f"{p['role']} {p['workers']}x {p['gpu']} TP{p['tp']}/PP{p['pp']}/EP{p['ep']} {p['precision']}"
                       for p in dis["pools"])
    return {"mode": "disagg", "label": dis["xpyd"], "pools": pools, "usd_per_hour": dis["total_usd_per_hour"],
            "gpus": dis["total_gpus"], "meets_slo": met, "basis": "simulated" if sim is not None else "analytical",
            "allowed": allowed, "chosen": False,
            "why": "" if met else "its simulation at the plan's rate misses an SLO target"}


def split_chosen(res: Any) -> bool:
    """The plan's answer is its disaggregated split (``chosen_mode`` disagg, plan.json
    ``disaggregated`` present): what every output that follows the chosen mode asks."""
    return getattr(res, "chosen_mode", "agg") == "disagg" and isinstance(getattr(res, "disaggregated", None), dict)


def choose(rows: list[dict]) -> Optional[str]:
    """The cheapest allowed row that meets the SLOs (then fewer GPUs, then aggregated); None: none does."""
    ok = [r for r in rows if r["allowed"] and r["meets_slo"] and r["usd_per_hour"] is not None]
    if not ok:
        return None
    best = min(ok, key=lambda r: (round(r["usd_per_hour"], 6), r["gpus"], MODES.index(r["mode"])))
    best["chosen"] = True
    return best["mode"]


def select_mode(sel: Any, dis: Optional[dict], modes: list[str], skipped: Optional[str]) -> tuple[Optional[str],
                                                                                                   list[dict],
                                                                                                   list[str]]:
    """(chosen mode or None, mode-table rows, notes) for an aggregated selection and a
    disaggregated option (None when not searched or none found)."""
    rows = [agg_row(sel, "agg" in modes), disagg_row(dis, "disagg" in modes and skipped is None, skipped)]
    chosen = choose(rows)
    notes = []
    if skipped:
        notes.append(f"disaggregated candidates not searched: {skipped}")
    if "agg" not in modes:
        notes.append(f"search.modes={_fmt_modes(modes)}: the aggregated deployment is shown for comparison only")
    if chosen == "disagg":
        a = rows[0]
        vs = f" against ${a['usd_per_hour']:.2f}/h aggregated" if a["usd_per_hour"] is not None else ""
        notes.append(f"the chosen deployment is disaggregated: {dis['xpyd']} at ${dis['total_usd_per_hour']:.2f}/h{vs} "
                     f"({rows[1]['basis']}); plan.json's top level (cost, deployments, P(SLO met), headroom, "
                     "energy, kv_budget), 'chosen_deployment', pareto (mode disagg) and deploy/disagg/ describe it; "
                     "the aggregated table, plan.json 'aggregated', deploy/<i>-<pool>/ and the day block describe "
                     "the aggregated alternative")
    elif chosen is None and rows[0]["meets_slo"] and not rows[0]["allowed"]:
        notes.append("no allowed mode meets the SLOs (search.modes excludes the aggregated deployment that does)")
    return chosen, rows, notes

"""The maximum request rate a given fleet sustains within the SLOs, in one search.

The candidates are screened and verified as for `plan` (capacity per replica: the simulated
capacity of the finalists, the corrected analytical one elsewhere); then one integer program

    maximise   sum_c  u * cap_c * n_c  (- a tiny $/h tie-break: the cheaper of equal-rate deployments)
    subject to sum_{c on GPU type g} gpus_c * n_c <= fleet_g     for every GPU type g of the fleet
               n_c integer >= 0

gives the rate and the deployment (u = search.max_load, as in `plan`: a plan at that rate
selects within the same capacities). The caller then simulates the whole deployment at that rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pulp

from llmplan.errors import UserError
from llmplan.optimizer.planner import (PlanResult, Progress, SearchSpace, check_inputs, operating_points, screen,
                                       select_verified)
from llmplan.optimizer.select_ilp import _solver
from llmplan.optimizer.types import Allocation, Evaluation, Selection, SLOTarget, WorkloadStats

_TIE_BREAK = 1e-6  # req/s per $/h: among equal-rate deployments, the cheaper
PER_SHAPE = 4      # candidates kept per (GPU type, GPUs per replica): the best capacity per GPU


def check_fleet(fleet: dict[str, int], gpu_keys: list[str]) -> None:
    if not fleet:
        raise UserError("is empty", key="fleet.gpus", fix="e.g. fleet.gpus='{h100_sxm: 8}'")
    for key, count in sorted(fleet.items()):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise UserError(f"must be an integer >= 1, got {count!r}", key=f"fleet.gpus.{key}", fix="e.g. 8")
        if key not in gpu_keys:
            raise UserError(f"{key} is not a GPU type of this plan", key=f"fleet.gpus.{key}",
                            fix="use a catalog key (see `llmplan catalog gpus`)")


def _pool(evals: list[Evaluation], fleet: dict[str, int]) -> list[Evaluation]:
    groups: dict[tuple[str, int], list[Evaluation]] = {}
    for e in evals:
        c = e.candidate
        if e.verdict == "ok" and e.effective_capacity_rps > 0 and c.gpus_per_replica <= fleet.get(c.gpu.key, 0):
            groups.setdefault((c.gpu.key, c.gpus_per_replica), []).append(e)
    kept: list[Evaluation] = []
    for key in sorted(groups):
        kept += sorted(groups[key], key=lambda e: (-e.effective_capacity_rps, e.candidate.usd_per_replica_hour,
                                                   e.candidate.name))[:PER_SHAPE]
    return kept


def max_rate(evals: list[Evaluation], fleet: dict[str, int], max_load: float = 1.0) -> tuple[Selection, float]:
    """(deployment, rate in req/s) of the highest total rate the fleet serves within the SLOs."""
    pool = _pool(evals, fleet)
    if not pool:
        why = "no candidate that meets the SLOs fits the fleet"
        return Selection(False, [], 0.0, 0, "no candidate", why), 0.0
    prob = pulp.LpProblem("llmplan_fleet", pulp.LpMaximize)
    names = [f"n{i}" for i in range(len(pool))]
    n = {nm: prob.add_variable(nm, lowBound=0, upBound=fleet[e.candidate.gpu.key] // e.candidate.gpus_per_replica,
                               cat="Integer") for nm, e in zip(names, pool)}
    prob += pulp.lpSum((max_load * e.effective_capacity_rps - _TIE_BREAK * e.candidate.usd_per_replica_hour) * n[nm]
                       for nm, e in zip(names, pool))
    for key, count in sorted(fleet.items()):
        members = [(nm, e) for nm, e in zip(names, pool) if e.candidate.gpu.key == key]
        if members:
            prob += pulp.lpSum(e.candidate.gpus_per_replica * n[nm] for nm, e in members) <= count, f"fleet_{key}"
    status = pulp.LpStatus[prob.solve(_solver())]
    if status != "Optimal":
        return Selection(False, [], 0.0, 0, status, f"solver: {status}"), 0.0
    allocs = [Allocation(e, int(round(n[nm].value() or 0))) for nm, e in zip(names, pool)]
    allocs = [a for a in allocs if a.replicas > 0]
    allocs.sort(key=lambda a: (-a.replicas * a.evaluation.effective_capacity_rps, a.evaluation.candidate.name))
    rate = sum(max_load * a.replicas * a.evaluation.effective_capacity_rps for a in allocs)
    cost = sum(a.replicas * a.evaluation.candidate.usd_per_replica_hour for a in allocs)
    gpus = sum(a.replicas * a.evaluation.candidate.gpus_per_replica for a in allocs)
    return Selection(bool(allocs), allocs, cost, gpus, status), rate


def plan_fleet(model, gpus, engine, wl: WorkloadStats, slos: list[SLOTarget], space: SearchSpace,
               fleet: dict[str, int], calibration: str | None, progress: Progress | None = None,
               verifier: Callable[[list[Evaluation]], dict] | None = None) -> PlanResult:
    """Screen + verify as `plan` does, then maximise the served rate within the fleet."""
    check_inputs(space, wl, slos, gpus)
    check_fleet(fleet, [g.key for g, _ in gpus])
    evals, verification = screen(model, gpus, engine, wl, slos, space, calibration, progress, verifier)
    result: list[float] = [0.0]

    def select() -> Selection:
        sel, result[0] = max_rate(evals, fleet, space.max_load)
        return sel

    sel = select_verified(select, evals, verification, verifier)
    rate = result[0]
    used = {k: sum(a.replicas * a.evaluation.candidate.gpus_per_replica for a in sel.allocations
                   if a.evaluation.candidate.gpu.key == k) for k in sorted(fleet)}
    info = {"gpus": dict(sorted(fleet.items())), "gpus_used": used,
            "max_rate_rps": round(rate, 4) if math.isfinite(rate) else None, "max_load": space.max_load,
            "rate_basis": "sum over replicas of max_load x capacity per replica (simulated for verified "
                          "candidates, corrected analytical otherwise)"}
    wl_at = replace(wl, rate_rps=rate) if rate > 0 else wl
    if sel.feasible:
        operating_points(sel, rate, slos)
    else:
        sel.binding = sel.binding or "no candidate that meets the SLOs fits the fleet"
    return PlanResult(sel, evals, [], wl_at, slos, verification, fleet=info)

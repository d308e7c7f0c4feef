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


#: the lowest fraction of the ILP's rate the steady-state settling tries, and its tolerance
SETTLE_FLOOR = 0.5
SETTLE_REL_TOL = 0.06
SETTLE_RUNS = 6


def _capacity_estimate(snap: tuple, rate: float) -> float | None:
    """The whole deployment's throughput estimate of a steady-state run (the run planner's
    ``estimate.utilisation`` = offered rate / estimated capacity), or None."""
    est = (((snap[0] or {}).get("window") or {}).get("estimate") or {})
    u = est.get("utilisation")
    return rate / u if isinstance(u, (int, float)) and math.isfinite(u) and u > 0 else None


#: first lower rate tried: this share of the run planner's capacity estimate (else x0.9 the failing rate)
SETTLE_ESTIMATE_SHARE = 0.95
#: a bisection midpoint above the capacity estimate is replaced by this multiple of it: the probe that
#: brackets the rate most tightly at the estimate. Since the estimate only sizes a run (sim/steady_state.py
#: plan_run lengthens every synthetic run and the queue limit stops an overloaded one early), this probe
#: is a full steady-state run like the others, not a short unextended one
SETTLE_ESTIMATE_PROBE = 1.0001


def settle_rate(res: PlanResult, simulate: Callable[[PlanResult], bool]) -> None:
    """Make the fleet's reported rate one the whole-deployment steady-state simulation passes.

    ``simulate(res)`` simulates the chosen deployment at ``res.workload.rate_rps`` (attaching
    its results to ``res``) and says whether every SLO holds and the queue is stable
    (``verify.simulate_selection``). The ILP's rate sums per-replica capacities measured in
    short bisection runs, which can be optimistic for the whole deployment in steady state.
    When it fails, lower rates are tried until one passes: first :data:`SETTLE_ESTIMATE_SHARE`
    of the capacity the steady-state run planner estimated for the failing run, at most x0.9
    the failing rate, down to :data:`SETTLE_FLOOR` x the
    ILP's rate; then the rate is bisected between the passing and the failing one to
    :data:`SETTLE_REL_TOL` (a midpoint above the capacity estimate is replaced by the estimate,
    x :data:`SETTLE_ESTIMATE_PROBE`, a steady-state run like the others; the estimate is the same for
    every run, computed from the asked requests). At most :data:`SETTLE_RUNS` further simulations. The results
    attached to ``res`` are those of the reported rate; ``res.fleet`` records the ILP's rate,
    every run (rate, met, warm-up doublings) and the reported rate. The runs are recorded as they
    go: ``verify.simulate_selection`` starts a run with the warm-up doublings an earlier run at a
    rate as low or lower needed (sim/steady_state.py ``first_warmup_doublings``).
    """
    import copy

    sel, fl = res.selection, res.fleet
    rate0 = res.workload.rate_rps
    base_notes = list(res.notes)
    runs: list[dict] = []
    est_cap: list[float] = []  # the run planner's capacity estimate of each run
    fl["ilp_rate_rps"] = round(rate0, 4)
    fl["steady_state_runs"] = runs  # filled as the runs go: a run's warm-up doublings seed the next ones

    def run(rate: float) -> tuple[bool, tuple]:
        res.workload = replace(res.workload, rate_rps=rate)
        res.notes = list(base_notes)
        operating_points(sel, rate, res.slos)
        ok = simulate(res)
        snap = copy.deepcopy((res.verification.get("deployment_simulation"), [a.simulated for a in sel.allocations],
                              [(a.share_rps, a.analytical, a.ttft_ms, a.tpot_ms) for a in sel.allocations], res.notes))
        window = (snap[0] or {}).get("window") or {}
        cap = _capacity_estimate(snap, rate)
        if cap:
            est_cap.append(cap)
        runs.append({"rate_rps": round(rate, 4), "met": ok, "warmup_doublings": int(window.get("warmup_doublings") or 0)})
        return ok, snap

    def lower(failed: float, snap: tuple) -> float:
        est = _capacity_estimate(snap, failed)
        guess = SETTLE_ESTIMATE_SHARE * est if est else 0.9 * failed
        return min(guess, 0.9 * failed)

    ok, snap = run(rate0)
    snap0 = snap
    good, best = (rate0, snap) if ok else (0.0, None)
    bad = math.inf if ok else rate0
    while best is None and len(runs) <= SETTLE_RUNS:
        rate = max(lower(bad, snap), SETTLE_FLOOR * rate0)
        ok, snap = run(rate)
        if ok:
            good, best = rate, snap
        else:
            bad = rate
            if rate <= SETTLE_FLOOR * rate0 * (1 + 1e-9):
                break
    probe = SETTLE_ESTIMATE_PROBE * est_cap[-1] if est_cap else math.inf
    while best is not None and math.isfinite(bad) and bad - good > SETTLE_REL_TOL * bad and len(runs) <= SETTLE_RUNS:
        mid = 0.5 * (good + bad)
        if good < probe < mid:
            mid = probe
        ok_mid, snap_mid = run(mid)
        if ok_mid:
            good, best = mid, snap_mid
        else:
            bad = mid
    fl["steady_state_runs"] = runs
    fl["simulation_meets_slos"] = best is not None
    if best is None:  # nothing passed down to the floor: report the ILP's rate, marked failing
        good, best = rate0, snap0
    sim, sims, points, notes = best
    res.workload = replace(res.workload, rate_rps=good)
    res.verification["deployment_simulation"] = sim
    for a, s, (share, an, ttft, tpot) in zip(sel.allocations, sims, points):
        a.simulated, a.share_rps, a.analytical, a.ttft_ms, a.tpot_ms = s, share, an, ttft, tpot
    res.notes = notes
    fl["max_rate_rps"] = round(good, 4)
    if good < rate0:
        fl["rate_basis"] = (f"the highest rate the whole-deployment steady-state simulation passes (bisected below the "
                            f"ILP's {rate0:.4g} req/s from the per-replica capacities, which it found overloaded)")
        res.notes.append(f"fleet: the ILP's {rate0:.4g} req/s (sum of per-replica capacities) fails the whole-deployment "
                         f"steady-state simulation; {good:.4g} req/s passes and is reported")

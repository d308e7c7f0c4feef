"""Stage 4: the integer program. Cheapest replica counts that serve the rate within the SLOs.

    minimise   sum_c  usd_c * n_c  (+ a tiny GPU-count tie-break)
    subject to sum_c  u * cap_c * n_c >= rate        (each replica loaded to at most u = max_load of its SLO capacity)
               sum_{c on GPU type g} gpus_c * n_c <= avail_g   (availability, where limited)
               n_c integer in [0, max_replicas]

Mixing GPU types is allowed (Melange-style); the router sends each replica a share of
traffic proportional to its capacity. Solved with PuLP/CBC, deterministic.

uniform=True (search.uniform) adds one binary y_c per candidate, n_c <= max_replicas * y_c and
sum_c y_c = 1: the whole deployment is integer replicas of ONE candidate (one GPU type, one
parallel shape), for teams that cannot run a mix.
"""

from __future__ import annotations

import pulp

from llmplan.optimizer.types import Allocation, Evaluation, Selection

_TIE_BREAK = 1e-4  # $/h per GPU: prefer fewer GPUs among equal-cost plans
# $/h per req/s of SLO capacity: among plans of equal cost and GPU count, prefer the one with more
# capacity (more headroom) instead of whichever tie the solver meets first. 1e-7 x a few hundred
# req/s stays far below the GPU tie-break and any real price difference.
_CAPACITY_TIE_BREAK = 1e-7


def _solver(gap_rel: float | None = None) -> pulp.LpSolver:
    """CBC bundled with PuLP (COIN_CMD when a system CBC is installed), single-threaded for determinism;
    ``gap_rel``: stop at that relative optimality gap (None: solve to optimality)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, threads=1, gapRel=gap_rel)


def prune(evals: list[Evaluation], per_gpu: int = 16) -> list[Evaluation]:
    """Keep the most cost-efficient candidates per GPU type (the ILP stays small)."""
    by_gpu: dict[str, list[Evaluation]] = {}
    for e in evals:
        if e.verdict == "ok" and e.effective_capacity_rps > 0:
            by_gpu.setdefault(e.candidate.gpu.key, []).append(e)
    kept: list[Evaluation] = []
    for key in sorted(by_gpu):
        group = sorted(by_gpu[key], key=lambda e: (e.usd_per_request_rps, e.candidate.name))
        kept += group[:per_gpu]
    return kept


def solve(evals: list[Evaluation], rate_rps: float, max_gpus: dict[str, int] | None = None,
          max_replicas: int = 256, max_load: float = 1.0, uniform: bool = False) -> Selection:
    max_gpus = max_gpus or {}
    pool = prune(evals)
    if not pool:
        return Selection(False, [], 0.0, 0, "no candidate", "no candidate meets the SLOs")
    prob = pulp.LpProblem("llmplan", pulp.LpMinimize)
    names = [f"n{i}" for i in range(len(pool))]
    n = {name: prob.add_variable(name, lowBound=0, upBound=max_replicas, cat="Integer") for name in names}
    prob += pulp.lpSum(
        (e.candidate.usd_per_replica_hour + _TIE_BREAK * e.candidate.gpus_per_replica
         - _CAPACITY_TIE_BREAK * e.effective_capacity_rps) * n[nm]
        for nm, e in zip(names, pool))
    prob += pulp.lpSum(max_load * e.effective_capacity_rps * n[nm] for nm, e in zip(names, pool)) >= rate_rps, "serve_rate"
    # any traffic needs a replica: a tiny rate (1e-9 req/s) is within the solver's feasibility
    # tolerance of 0 and would otherwise be "served" by no GPU at all
    prob += pulp.lpSum(n.values()) >= 1, "at_least_one_replica"
    if uniform:
        y = {name: prob.add_variable(f"y{name}", cat="Binary") for name in names}
        for name in names:
            prob += n[name] <= max_replicas * y[name], f"one_shape_{name}"
        prob += pulp.lpSum(y.values()) == 1, "uniform"
    for key, limit in sorted(max_gpus.items()):
        members = [(nm, e) for nm, e in zip(names, pool) if e.candidate.gpu.key == key]
        if members:
            prob += pulp.lpSum(e.candidate.gpus_per_replica * n[nm] for nm, e in members) <= int(limit), f"avail_{key}"
    status = prob.solve(_solver())
    status_text = pulp.LpStatus[status]
    if status_text != "Optimal":
        limited = ", ".join(f"{k}<={v}" for k, v in sorted(max_gpus.items()))
        why = f"availability ({limited})" if max_gpus else f"rate needs more than {max_replicas} replicas"
        return Selection(False, [], 0.0, 0, status_text, why)
    allocs = [Allocation(e, int(round(n[nm].value() or 0))) for nm, e in zip(names, pool)]
    allocs = [a for a in allocs if a.replicas > 0]
    allocs.sort(key=lambda a: (-a.replicas * a.evaluation.candidate.usd_per_replica_hour, a.evaluation.candidate.name))
    cost = sum(a.replicas * a.evaluation.candidate.usd_per_replica_hour for a in allocs)
    gpus = sum(a.replicas * a.evaluation.candidate.gpus_per_replica for a in allocs)
    return Selection(True, allocs, cost, gpus, status_text)


def alternatives(evals: list[Evaluation], rate_rps: float, chosen: Selection, max_gpus: dict[str, int] | None,
                 max_replicas: int, limit: int, max_load: float = 1.0, uniform: bool = False) -> list[Selection]:
    """Runner-ups: the cheapest single-GPU-type plan for each type, then other replica shapes."""
    out: list[Selection] = []

    def shape(sel: Selection) -> frozenset:
        """What a reader sees as distinct: GPU type, parallelism, precision, replica count."""
        return frozenset((a.evaluation.candidate.gpu.key, a.evaluation.candidate.par, a.evaluation.candidate.prec.weights,
                          a.replicas) for a in sel.allocations)

    types = sorted({e.candidate.gpu.key for e in evals if e.verdict == "ok" and e.effective_capacity_rps > 0})
    for key in types:
        sel = solve([e for e in evals if e.candidate.gpu.key == key], rate_rps, max_gpus, max_replicas, max_load,
                    uniform)
        if sel.feasible and shape(sel) != shape(chosen):
            out.append(sel)
    # next-best shapes of the chosen GPU types, excluding the chosen shapes
    chosen_shapes = {(a.evaluation.candidate.gpu.key, a.evaluation.candidate.par, a.evaluation.candidate.prec.weights)
                     for a in chosen.allocations}
    rest = [e for e in evals if (e.candidate.gpu.key, e.candidate.par, e.candidate.prec.weights) not in chosen_shapes]
    sel = solve(rest, rate_rps, max_gpus, max_replicas, max_load, uniform)
    if sel.feasible and all(shape(s) != shape(sel) for s in out):
        out.append(sel)
    out.sort(key=lambda s: (s.total_usd_per_hour, s.total_gpus))
    return out[:limit]


def solve_disagg(units: list[tuple[str, str, str, int, float, float]], rate_rps: float,
                 max_gpus: dict[str, int] | None = None, max_workers: int = 256,
                 max_load: float = 1.0, one_shape_per_role: bool = True) -> dict[str, int] | None:
    """Cheapest disaggregated deployment: worker counts per unit.

    ``units``: (name, role ``prefill``|``decode``, GPU type, GPUs per worker, $/h per worker =
    its GPUs x $/GPU-h, capacity req/s per worker within the role's SLO). Both roles must serve
    ``rate_rps`` at ``max_load``; GPU availability counts both pools; a pool may mix shapes.

        minimise   sum_u usd_u n_u (+ GPU-count tie-break)
        subject to sum_{u in role} max_load cap_u n_u >= rate   for role in (prefill, decode)
                   sum_{u on GPU type g} gpus_u n_u <= avail_g
                   n_u integer in [0, max_workers]

    Returns {name: workers} of the units used, or None when infeasible."""
    max_gpus = max_gpus or {}
    if not units:
        return None
    prob = pulp.LpProblem("llmplan_disagg", pulp.LpMinimize)
    n = {u[0]: prob.add_variable(f"w{i}", lowBound=0, upBound=max_workers, cat="Integer") for i, u in enumerate(units)}
    prob += pulp.lpSum((usd + _TIE_BREAK * gpus) * n[name] for name, _, _, gpus, usd, _ in units)
    for role in ("prefill", "decode"):
        members = [u for u in units if u[1] == role]
        if not members:
            return None
        prob += pulp.lpSum(max_load * cap * n[name] for name, _, _, _, _, cap in members) >= rate_rps, f"serve_{role}"
        prob += pulp.lpSum(n[u[0]] for u in members) >= 1, f"one_{role}"
        if one_shape_per_role:
            y = {u[0]: prob.add_variable(f"y{role}{i}", cat="Binary") for i, u in enumerate(members)}
            for k, (name, var) in enumerate(y.items()):
                prob += n[name] <= max_workers * var, f"shape_{role}_{k}"
            prob += pulp.lpSum(y.values()) == 1, f"single_shape_{role}"
    for key, limit in sorted(max_gpus.items()):
        members = [u for u in units if u[2] == key]
        if members:
            prob += pulp.lpSum(gpus * n[name] for name, _, _, gpus, _, _ in members) <= int(limit), f"avail_{key}"
    status = prob.solve(_solver())
    if pulp.LpStatus[status] != "Optimal":
        return None
    out = {name: int(round(n[name].value() or 0)) for name, *_ in units}
    return {k: v for k, v in out.items() if v > 0}

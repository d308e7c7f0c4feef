"""Plan for a closed-loop target: N concurrent users, each sending its next request when the
last one finishes (plus a think time), instead of an arrival rate (docs/PARETO.md).

The planner plans for rates; a closed loop sets its own rate. By Little's law a user cycles
every R + Z (R: request latency, Z: think time), so N users offer X = N / (R + Z). Any
deployment that meets the SLOs has a mean request latency of at most about
R_slo = TTFT limit + (O - 1) x TPOT limit (O: mean output tokens), so N users offer at least
X0 = N / (R_slo + Z). Faster deployments see more: the rate depends on the deployment.

The search (:func:`plan_closed_loop`): plan for X0 (the least any SLO-meeting deployment
sees), then simulate the chosen deployment as a closed loop of N users (the ground truth of
the model: the loop sets its own rate) and check every SLO at its percentile. If it holds, that
deployment is the answer. If not, the simulated throughput X1 > X0 is what N users drive on it:
plan again for max(X1, X0 x 1.25) and repeat, up to :data:`MAX_ROUNDS`. The rates only rise, so
the first deployment that passes is the cheapest of the sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from llmplan.optimizer.slo_check import misses
from llmplan.optimizer.types import SLOTarget

MAX_ROUNDS = 4
MIN_STEP = 1.25  # the next round's rate is at least this x the last one
NUM_REQUESTS = 1500  # requests in the closed-loop check (at least; 20 per user)


def slo_latency_ms(slos: list[SLOTarget], mean_output_tokens: float) -> float | None:
    """TTFT limit + (O - 1) x TPOT limit with the loosest limit of each metric; None without both."""
    t = [s.limit_ms for s in slos if s.metric == "ttft"]
    p = [s.limit_ms for s in slos if s.metric == "tpot"]
    if not t or not p:
        return None
    return max(t) + max(0.0, mean_output_tokens - 1.0) * max(p)


def start_rate(users: int, think_ms: float, slos: list[SLOTarget], mean_output_tokens: float) -> float:
    """X0 = N / (R_slo + Z) in req/s."""
    r = slo_latency_ms(slos, mean_output_tokens)
    if r is None:
        from llmplan.errors import UserError

        raise UserError("a closed-loop target needs a TTFT and a TPOT limit to bound the users' rate",
                        key="slo", fix="set e.g. slo.ttft_p90_ms=1000 slo.tpot_p90_ms=50")
    return users / ((r + think_ms) / 1000.0)


def closed_loop_check(res, model, engine, wl_spec, slos: list[SLOTarget], seed: int) -> dict:
    """Simulate the chosen deployment as a closed loop (``wl_spec``: arrival closed_loop,
    concurrency N): throughput, every target at its percentile, and whether all are met."""
    from llmplan.optimizer.risk import target_log_sd
    from llmplan.optimizer.verify import _percentiles, replica_spec
    from llmplan.sim.serving import simulate_serving

    allocs = res.selection.allocations
    reps = [replica_spec(a.evaluation, engine, model) for a in allocs for _ in range(a.replicas)]
    owner = np.array([i for i, a in enumerate(allocs) for _ in range(a.replicas)])
    n = max(NUM_REQUESTS, 20 * int(wl_spec.concurrency))
    r = simulate_serving(replace(wl_spec, num_requests=n), reps, router="least_outstanding", seed=seed)
    df = r.requests
    done = df[df["measured"] & df["finished"]]
    values = _percentiles(done, slos)
    missed = misses(values, slos)
    pools = []  # each pool's percentiles and their sampling spread (optimizer.risk)
    for i in range(len(allocs)):
        mine = done[owner[done["replica"].to_numpy()] == i]
        pv = _percentiles(mine, slos)
        sd = {t.key: target_log_sd(mine[f"{t.metric}_ms"].dropna().to_numpy(float), t) for t in slos}
        pools.append({"targets": {k: round(v, 2) for k, v in pv.items()}, "requests": int(len(mine)),
                      "log_sd": {k: round(v, 5) for k, v in sd.items() if np.isfinite(v)}, "basis": "closed_loop"})
    thr = r.summary.get("request_throughput_rps")
    return {"users": int(wl_spec.concurrency), "think_time_ms": float(wl_spec.think_time_ms), "requests": int(len(df)),
            "throughput_rps": round(float(thr), 4) if thr is not None and math.isfinite(thr) else None,
            "targets": {t.key: {"limit_ms": t.limit_ms, "simulated_ms": round(values[t.key], 2),
                                "met": t not in missed} for t in slos},
            "e2e_ms_mean": _round(float(np.mean(done["e2e_ms"])) if len(done) else math.nan),
            "met": not missed and len(done) > 0, "pools": pools}


def _round(x: float) -> float | None:
    return round(x, 2) if math.isfinite(x) else None


def plan_closed_loop(app, plan_at_rate: Callable, check: Callable, slos: list[SLOTarget], mean_output_tokens: float):
    """The closed-loop search. ``plan_at_rate(rate)`` returns (PlanResult, model) of a plan for
    an open-loop rate; ``check(res, model)`` the :func:`closed_loop_check` of its deployment.
    Returns (PlanResult, model) with ``verification["closed_loop"]`` (rounds, the check)."""
    users, think = int(app.workload.concurrency), float(app.workload.think_time_ms)
    rate = start_rate(users, think, slos, mean_output_tokens)
    rounds = []
    res = model = None
    for _ in range(MAX_ROUNDS):
        res, model = plan_at_rate(rate)
        if not res.selection.feasible:
            rounds.append({"rate_rps": round(rate, 4), "feasible": False})
            break
        c = check(res, model)
        rounds.append({"rate_rps": round(rate, 4), "feasible": True, "usd_per_hour": round(res.selection.total_usd_per_hour, 4),
                       "closed_loop_throughput_rps": c["throughput_rps"], "met": c["met"]})
        if c["met"]:
            break
        rate = max(c["throughput_rps"] or 0.0, rate * MIN_STEP)
    last = rounds[-1]
    block = {"users": users, "think_time_ms": think, "start_rate_rps": rounds[0]["rate_rps"], "rounds": rounds,
             "met": bool(last.get("met")), "check": c if last.get("feasible") else None,
             "method": "docs/PARETO.md (closed-loop target)"}
    if block["check"]:  # the pools' figures (and P(SLO met)) from the closed loop, not the open-loop rate
        for a, pool in zip(res.selection.allocations, block["check"].pop("pools")):
            a.simulated = pool
    res.verification["closed_loop"] = block
    if last.get("feasible") and not last.get("met"):
        res.notes.append(f"WARNING: closed loop of {users} users: no deployment of {len(rounds)} rounds met every SLO in "
                         "the closed-loop simulation; the last one is shown")
    elif last.get("feasible"):
        res.notes.append(f"closed loop of {users} users: planned for {last['rate_rps']:.4g} req/s; simulated as a closed "
                         f"loop the deployment serves {c['throughput_rps']:.4g} req/s within every SLO")
    return res, model

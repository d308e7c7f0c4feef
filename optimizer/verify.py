"""Stage 3: verify finalists in the discrete-event simulator.

For each finalist, bisection on the arrival rate (bracketed by the analytical capacity)
finds the highest rate at which every SLO holds at its percentile in simulation (goodput
capacity); that replaces the analytical capacity in the ILP. After the ILP, the chosen
deployment is simulated as a whole (all replicas behind the router) at the target rate.

When SLO targets use different percentiles, the bisection checks all targets at the
strictest one (conservative); the final whole-deployment simulation reports each target
at its own percentile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.types import Evaluation, SLOTarget, WorkloadStats
from llmplan.sim.deployment import replica_limits
from llmplan.sim.metrics import SLOThresholds
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import find_max_rate, simulate_serving
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import WorkloadSpec

DISAGREE = 0.20           # flag analytical vs simulated differences above this
BRACKET = (0.7, 1.1)      # bisection bracket around the analytical capacity (expanded when missed)
FINAL_REQUESTS = 1500     # requests in the whole-deployment simulation (at least)


def thresholds(slos: list[SLOTarget]) -> SLOThresholds:
    pct = max(s.percentile for s in slos)
    ttft = min((s.limit_ms for s in slos if s.metric == "ttft"), default=None)
    tpot = min((s.limit_ms for s in slos if s.metric == "tpot"), default=None)
    return SLOThresholds(ttft_ms=ttft, tpot_ms=tpot, percentile=pct)


def replica_spec(ev: Evaluation, engine: EngineProfile, model: ModelSpec) -> ReplicaSpec:
    an = ev.analyzer
    eng, max_len = replica_limits(replace(engine, max_num_seqs=ev.candidate.max_num_seqs), model,
                                  an.wl.max_request_tokens)
    return ReplicaSpec(an.step, eng, ev.kv_capacity_tokens, max_len)


def pick_finalists(evals: list[Evaluation], n: int) -> list[Evaluation]:
    """The n most cost-efficient candidates, the best of each GPU type first (diversity)."""
    ok = sorted((e for e in evals if e.verdict == "ok" and e.capacity_rps > 0),
                key=lambda e: (e.usd_per_request_rps, e.candidate.name))
    best_per_type: dict[str, Evaluation] = {}
    for e in ok:
        best_per_type.setdefault(e.candidate.gpu.key, e)
    picked = sorted(best_per_type.values(), key=lambda e: (e.usd_per_request_rps, e.candidate.name))[:n]
    for e in ok:
        if len(picked) >= n:
            break
        if e not in picked:
            picked.append(e)
    return picked


def make_verifier(model: ModelSpec, engine: EngineProfile, wl_spec: WorkloadSpec, wl: WorkloadStats,
                  slos: list[SLOTarget], num_requests: int, seed: int,
                  progress: Callable[[str, int, int], None] | None = None) -> Callable[[list[Evaluation]], dict]:
    slo = thresholds(slos)
    spec = replace(wl_spec, rate_rps=wl.rate_rps, arrival=wl_spec.arrival if wl_spec.arrival != "closed_loop" else "poisson")

    def verify(finalists: list[Evaluation]) -> dict:
        out = {}
        for i, ev in enumerate(finalists):
            cap = ev.capacity_rps
            rep = replica_spec(ev, engine, model)
            r = find_max_rate(spec, [rep], slo, cap * BRACKET[0], cap * BRACKET[1], seed=seed,
                              num_requests=num_requests, rel_tol=0.05, max_evaluations=6, expand=2)
            ev.sim_capacity_rps = r.rate_rps if r.feasible else 0.0
            diff = (ev.sim_capacity_rps - cap) / cap if cap else float("nan")
            if not r.feasible:
                ev.notes.append(f"simulation: SLOs missed even at {r.rate_rps:.3g} req/s")
            out[ev.candidate.name] = {
                "analytical_capacity_rps": round(cap, 4), "simulated_capacity_rps": round(ev.sim_capacity_rps, 4),
                "difference": round(diff, 4), "disagree": bool(abs(diff) > DISAGREE), "simulations": len(r.evaluations)}
            if progress:
                progress("simulate", i + 1, len(finalists))
        return out

    return verify


def simulate_selection(res, model: ModelSpec, engine: EngineProfile, wl_spec: WorkloadSpec, slos: list[SLOTarget],
                       seed: int, num_requests: int) -> None:
    """Simulate the chosen deployment as a whole at the target rate; attach percentiles."""
    sel = res.selection
    reps: list[ReplicaSpec] = []
    owner: list[int] = []
    for ai, a in enumerate(sel.allocations):
        for _ in range(a.replicas):
            reps.append(replica_spec(a.evaluation, engine, model))
            owner.append(ai)
    n = max(FINAL_REQUESTS, num_requests, 150 * len(reps))
    spec = replace(wl_spec, rate_rps=res.workload.rate_rps, num_requests=n)
    r = simulate_serving(spec, reps, router="least_outstanding", seed=seed, slo=thresholds(slos))
    df = r.requests
    done = df[df["measured"] & df["finished"]]
    tq = next((s.percentile for s in slos if s.metric == "ttft"), 90.0)
    pq = next((s.percentile for s in slos if s.metric == "tpot"), 90.0)
    owner_arr = np.asarray(owner)
    notes = []
    for ai, a in enumerate(sel.allocations):
        mine = done[owner_arr[done["replica"].to_numpy()] == ai]
        if len(mine) == 0:
            continue
        ttft = float(np.percentile(mine["ttft_ms"], tq))
        tpot_vals = mine["tpot_ms"].dropna()
        tpot = float(np.percentile(tpot_vals, pq)) if len(tpot_vals) else float("nan")
        a.simulated = {"ttft_ms": round(ttft, 2), "tpot_ms": round(tpot, 2), "requests": int(len(mine))}
        for label, an, sim in (("TTFT", a.ttft_ms, ttft), ("TPOT", a.tpot_ms, tpot)):
            if not np.isfinite(an):
                notes.append(f"{a.evaluation.candidate.name}: the planned load is beyond the analytical model's stable "
                             f"range; simulated {label} {sim:.1f} ms")
            elif an and sim and abs(an - sim) / sim > DISAGREE:
                notes.append(f"{a.evaluation.candidate.name}: analytical {label} {an:.1f} ms vs simulated {sim:.1f} ms "
                             f"({(an - sim) / sim:+.0%}); the simulated figure is the one to trust")
    per_target = {}
    for s in slos:
        col = f"{s.metric}_ms"
        vals = done[col].dropna()
        v = float(np.percentile(vals, s.percentile)) if len(vals) else float("nan")
        per_target[s.label] = {"simulated_ms": round(v, 2), "met": bool(v <= s.limit_ms)}
    s = r.summary
    res.verification["deployment_simulation"] = {
        "requests": int(len(df)), "rate_rps": res.workload.rate_rps, "overloaded": r.overloaded,
        "unfinished": r.unfinished, "slo_attainment": s.get("slo_attainment"), "goodput_rps": s.get("goodput_rps"),
        "targets": per_target,
        "ttft_ms": {k: s.get(f"ttft_ms_{k}") for k in ("mean", "p50", "p90", "p99")},
        "tpot_ms": {k: s.get(f"tpot_ms_{k}") for k in ("mean", "p50", "p90", "p99")},
    }
    if r.overloaded or not all(t["met"] for t in per_target.values()):
        notes.append("the whole-deployment simulation misses a target at the planned rate: "
                     + ", ".join(f"{k}: {v['simulated_ms']} ms" for k, v in per_target.items() if not v["met"])
                     + ("; overloaded" if r.overloaded else ""))
    res.notes.extend(notes)

"""Stage 3: verify finalists in the discrete-event simulator.

For each finalist, bisection on the arrival rate (bracketed by the analytical capacity)
finds the highest rate at which every SLO holds at its percentile in simulation (goodput
capacity); that replaces the analytical capacity in the ILP. After the ILP, the chosen
deployment is simulated as a whole (all replicas behind the router) at the target rate.

Every SLO target is checked at its own percentile (or on the mean) and limit: the bisection runs
once per distinct percentile and once for the mean targets (``slo_check.threshold_groups``) and
the capacity is the lowest of them;
the whole-deployment simulation reports each target at its own percentile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.risk import target_log_sd
from llmplan.optimizer.slo_check import binding_target, misses, sample_value, threshold_groups
from llmplan.optimizer.types import Evaluation, SLOTarget, WorkloadStats
from llmplan.sim.deployment import replica_limits
from llmplan.sim.engine_terms import fit_range_note, operating_point
from llmplan.sim.metrics import SLOThresholds
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import find_max_rate, simulate_serving
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import WorkloadSpec

DISAGREE = 0.20           # flag analytical vs simulated differences above this
BRACKET = (0.7, 1.1)      # bisection bracket around the analytical capacity (expanded when missed)
# once finalists have been simulated, the next bracket is centred on the analytical capacity x
# their median simulated/analytical ratio, and narrower: 2 bisections instead of 3 reach rel_tol
BRACKET_LEARNED = (0.9, 1.08)
FINAL_REQUESTS = 1500     # requests in the whole-deployment simulation (at least)


def thresholds(slos: list[SLOTarget]) -> SLOThresholds:
    """The threshold set of the highest percentile (for per-request SLO attainment in summaries;
    the pass/fail verdicts use every target, see ``slo_check``)."""
    groups = threshold_groups(slos)
    return ([g for g in groups if not g.mean] or groups)[-1]


def replica_spec(ev: Evaluation, engine: EngineProfile, model: ModelSpec) -> ReplicaSpec:
    an = ev.analyzer
    eng, max_len = replica_limits(replace(engine, max_num_seqs=ev.candidate.max_num_seqs), model,
                                  an.wl.max_request_tokens)
    return ReplicaSpec(an.step, eng, ev.kv_capacity_tokens, max_len)


def pick_finalists(evals: list[Evaluation], n: int) -> list[Evaluation]:
    """The n candidates to simulate, diverse first: the most cost-efficient of each GPU type,
    then (MoE) with and without expert parallelism on each GPU type, then of each parallel shape
    (GPU, tp, pp, ep, precision) not yet picked, then the rest, each round in order of $/h per
    req/s. Without these rounds the finalists are often one shape at several batch caps, and a
    better shape never reaches the simulator."""
    ok = sorted((e for e in evals if e.verdict == "ok" and e.capacity_rps > 0),
                key=lambda e: (e.usd_per_request_rps, e.candidate.name))
    picked: list[Evaluation] = []

    def take_best_per(key) -> None:
        for e in ok:
            if len(picked) < n and key(e.candidate) not in {key(p.candidate) for p in picked}:
                picked.append(e)

    take_best_per(lambda c: ("gpu", c.gpu.key))
    take_best_per(lambda c: ("ep", c.gpu.key, c.par.ep > 1))
    take_best_per(lambda c: ("shape", c.gpu.key, c.par, c.prec.weights))
    take_best_per(lambda c: ("candidate", c.name))
    return picked


def _percentiles(df, slos: list[SLOTarget]) -> dict[str, float]:
    """SLOTarget.key -> the simulated value at that target's percentile, or the mean for a mean
    target (finished requests)."""
    return {t.key: sample_value(df[f"{t.metric}_ms"].to_numpy(float), t) for t in slos}


def make_verifier(model: ModelSpec, engine: EngineProfile, wl_spec: WorkloadSpec, wl: WorkloadStats,
                  slos: list[SLOTarget], num_requests: int, seed: int,
                  progress: Callable[[str, int, int], None] | None = None) -> Callable[[list[Evaluation]], dict]:
    groups = threshold_groups(slos)
    spec = replace(wl_spec, rate_rps=wl.rate_rps, arrival=wl_spec.arrival if wl_spec.arrival != "closed_loop" else "poisson")

    ratios: list[float] = []  # simulated / analytical capacity of the finalists verified so far

    def verify(finalists: list[Evaluation]) -> dict:
        out = {}
        for i, ev in enumerate(finalists):
            cap = ev.capacity_rps
            rep = replica_spec(ev, engine, model)
            sim_cap, runs, missed = float("inf"), 0, None
            if ratios:
                centre, (lo, hi) = cap * float(np.median(ratios)), BRACKET_LEARNED
            else:
                centre, (lo, hi) = cap, BRACKET
            for slo in groups:  # the capacity meeting every target is the lowest per-percentile capacity
                r = find_max_rate(spec, [rep], slo, centre * lo, centre * hi, seed=seed,
                                  num_requests=num_requests, rel_tol=0.05, max_evaluations=6, expand=2)
                runs += len(r.evaluations)
                sim_cap = min(sim_cap, r.rate_rps if r.feasible else 0.0)
                if not r.feasible:
                    missed = ("mean" if slo.mean else f"p{slo.percentile:g}", r.rate_rps)
                    break
            ev.sim_capacity_rps = sim_cap
            if sim_cap > 0 and cap > 0:
                ratios.append(sim_cap / cap)
            diff = (ev.sim_capacity_rps - cap) / cap if cap else float("nan")
            if missed:
                ev.notes.append(f"simulation: the {missed[0]} targets are missed even at {missed[1]:.3g} req/s")
            out[ev.candidate.name] = {
                "analytical_capacity_rps": round(cap, 4), "simulated_capacity_rps": round(ev.sim_capacity_rps, 4),
                "difference": round(diff, 4), "disagree": bool(abs(diff) > DISAGREE), "simulations": runs}
            if progress:
                progress("simulate", i + 1, len(finalists))
        return out

    return verify


def simulate_selection(res, model: ModelSpec, engine: EngineProfile, wl_spec: WorkloadSpec, slos: list[SLOTarget],
                       seed: int, num_requests: int) -> bool:
    """Simulate the chosen deployment as a whole at the target rate; attach percentiles.
    Returns whether every SLO holds (whole deployment and each pool) with a stable queue."""
    sel = res.selection
    reps: list[ReplicaSpec] = []
    owner: list[int] = []
    for ai, a in enumerate(sel.allocations):
        for _ in range(a.replicas):
            reps.append(replica_spec(a.evaluation, engine, model))
            owner.append(ai)
    n = max(FINAL_REQUESTS, num_requests, 150 * len(reps))
    spec = replace(wl_spec, rate_rps=res.workload.rate_rps, num_requests=n)
    # steady_state: warm-up and drain excluded, the run lengthened as the output length and load need;
    # a fleet's runs settle its maximum rate, near capacity by construction: the first attempt starts
    # with the doubled warm-up such runs need, and with those an earlier run at a rate as low or
    # lower needed (steady_state.first_warmup_doublings; fleet.settle_rate records them)
    fleet = getattr(res, "fleet", None) or {}
    learned = [int(x.get("warmup_doublings") or 0) for x in fleet.get("steady_state_runs", [])
               if x["rate_rps"] <= round(res.workload.rate_rps, 4)]
    r = simulate_serving(spec, reps, router="least_outstanding", seed=seed, slo=thresholds(slos), steady_state=True,
                         near_capacity=bool(fleet), min_warmup_doublings=max(learned, default=0))
    df = r.requests
    done = df[df["measured"] & df["finished"]]
    owner_arr = np.asarray(owner)
    notes = []
    for ai, a in enumerate(sel.allocations):
        mine = done[owner_arr[done["replica"].to_numpy()] == ai]
        if len(mine) == 0:
            continue
        sim = _percentiles(mine, slos)
        bt, bp = binding_target(sim, slos, "ttft"), binding_target(sim, slos, "tpot")
        # finite-sample spread of each simulated percentile (log space), for optimizer.risk
        log_sd = {t.key: target_log_sd(mine[f"{t.metric}_ms"].dropna().to_numpy(float), t) for t in slos}
        a.simulated = {"targets": {k: round(v, 2) for k, v in sim.items()}, "requests": int(len(mine)),
                       "log_sd": {k: round(v, 5) for k, v in log_sd.items() if np.isfinite(v)},
                       "ttft_ms": round(sim[bt.key], 2) if bt else None, "tpot_ms": round(sim[bp.key], 2) if bp else None}
        for t in slos:
            an, v = a.analytical.get(t.key, float("nan")), sim[t.key]
            name = t.label.split(" <=")[0]
            if not np.isfinite(an):
                notes.append(f"{a.evaluation.candidate.name}: the planned load is beyond the analytical model's stable "
                             f"range; simulated {name} {v:.1f} ms")
            elif an and v and abs(an - v) / v > DISAGREE:
                notes.append(f"{a.evaluation.candidate.name}: analytical {name} {an:.1f} ms vs simulated {v:.1f} ms "
                             f"({(an - v) / v:+.0%}); the table shows the simulated figure")
        far = fit_range_note(engine.name, operating_point(a.share_rps, mine))
        if far:
            notes.append(f"{a.evaluation.candidate.name}: {far}")
    whole = _percentiles(done, slos)
    whole_misses = misses(whole, slos)
    per_target = {t.label: {"simulated_ms": round(whole[t.key], 2), "met": t not in whole_misses} for t in slos}
    s = r.summary
    res.verification["deployment_simulation"] = {
        "requests": int(len(df)), "rate_rps": res.workload.rate_rps, "overloaded": r.overloaded,
        "unfinished": r.unfinished, "slo_attainment": s.get("slo_attainment"), "goodput_rps": s.get("goodput_rps"),
        "served_rps": s.get("request_throughput_rps"),
        "targets": per_target,
        "ttft_ms": {k: s.get(f"ttft_ms_{k}") for k in ("mean", "p50", "p90", "p99")},
        "tpot_ms": {k: s.get(f"tpot_ms_{k}") for k in ("mean", "p50", "p90", "p99")},
        "window": s.get("window"),
    }
    missed = [f"{k}: {v['simulated_ms']} ms" for k, v in per_target.items() if not v["met"]]
    missed += [f"{a.evaluation.candidate.name} {t.label}: {a.simulated['targets'][t.key]} ms" for a in sel.allocations
               for t in (misses(a.simulated["targets"], slos) if a.simulated else [])]
    if r.overloaded:
        missed.append(f"the queue grows at {res.workload.rate_rps:g} req/s (overloaded)")
    res.verification["deployment_simulation"]["met"] = not missed
    if missed:
        notes.append("WARNING: the whole-deployment simulation misses at the planned rate: " + "; ".join(missed))
    res.notes.extend(notes)
    return not missed

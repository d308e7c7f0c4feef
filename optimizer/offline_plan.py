"""How many GPUs for N tokens per second of offline throughput (issue 12, section 3).

``llmplan plan workload=offline target.tokens_per_s=50000``: the cheapest mix of replicas
whose offline throughput together reaches the target (docs/OFFLINE.md):

1. **Enumerate** GPU type x TP/PP/EP x precision as the planner does (``search.*``); the batch
   cap is not searched: each replica runs with its engine's own offline batch limits
   (:func:`llmplan.sim.offline.offline_engine_profile`: trtllm-bench's heuristic, vLLM's
   ``LLM`` class defaults, SGLang's defaults).
2. **Screen**: the replica's memory plan (weights, the engine's KV budget); its analytical
   throughput with full batches (:func:`llmplan.sim.serving.estimate_capacity_rps` x mean
   output tokens).
3. **Verify** the ``search.finalists`` cheapest per token/s (the best of each GPU type first)
   in the serving simulator offline: ``workload.num_requests`` requests queued at time 0 on
   one replica, throughput over the whole run (makespan, tail included). Their simulated
   throughput replaces the analytical one; the others are scaled by the finalists' median
   simulated/analytical ratio (stated).
4. **ILP** (PuLP/CBC): minimise $/h = sum_c n_c x $/replica-hour_c subject to
   sum_c n_c x tokens/s_c >= target, sum_{c on g} n_c x GPUs_c <= availability_g,
   n_c integer in [0, max_replicas].

Throughput counts output (generated) tokens by default, ``target.count=total`` adds the prompt
tokens. Replicas are independent (data parallel): the fleet's throughput is the sum of theirs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pulp

from llmplan.errors import Infeasible, UserError
from llmplan.optimizer.enumerate import enumerate_candidates
from llmplan.optimizer.select_ilp import _TIE_BREAK, _solver
from llmplan.sim.deployment import Deployment, build, replica_limits
from llmplan.sim.offline import offline_engine_profile
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import estimate_capacity_rps
from llmplan.sim.workload import WorkloadSpec

COUNTS = ("output", "total")


class OfflineInfeasible(Infeasible):
    """No mix of replicas reaches the target within availability."""


@dataclass
class OfflineCandidate:
    name: str
    gpu: str
    tp: int
    pp: int
    ep: int
    precision: str
    gpus_per_replica: int
    usd_per_replica_hour: float
    kv_tokens: int
    limits: dict                        # the engine's offline batch limits and their source
    analytical_tokens_per_s: float      # full batches, per replica
    simulated_tokens_per_s: float | None = None
    tokens_per_s: float = 0.0           # what the ILP uses (simulated, else analytical x the ratio)
    source: str = "analytical"
    replica: ReplicaSpec | None = field(default=None, repr=False)

    @property
    def usd_per_token_s(self) -> float:
        return self.usd_per_replica_hour / self.tokens_per_s if self.tokens_per_s > 0 else math.inf

    def row(self) -> dict:
        return {"candidate": self.name, "gpu": self.gpu, "tp": self.tp, "pp": self.pp, "ep": self.ep,
                "precision": self.precision, "gpus_per_replica": self.gpus_per_replica,
                "usd_per_replica_hour": round(self.usd_per_replica_hour, 4), "kv_tokens": self.kv_tokens,
                "max_num_seqs": self.limits["max_num_seqs"], "max_num_batched_tokens": self.limits["max_num_batched_tokens"],
                "analytical_tokens_per_s": round(self.analytical_tokens_per_s, 2),
                "simulated_tokens_per_s": None if self.simulated_tokens_per_s is None else round(self.simulated_tokens_per_s, 2),
                "tokens_per_s": round(self.tokens_per_s, 2), "source": self.source}


@dataclass
class OfflinePlan:
    target_tokens_per_s: float
    count: str
    chosen: list[tuple[OfflineCandidate, int]]
    candidates: list[OfflineCandidate]
    rejected: list[dict]
    notes: list[str]

    @property
    def tokens_per_s(self) -> float:
        return sum(c.tokens_per_s * n for c, n in self.chosen)

    @property
    def usd_per_hour(self) -> float:
        return sum(c.usd_per_replica_hour * n for c, n in self.chosen)

    @property
    def gpus(self) -> int:
        return sum(c.gpus_per_replica * n for c, n in self.chosen)

    def as_dict(self) -> dict:
        per_m = self.usd_per_hour / (self.tokens_per_s * 3600.0) * 1e6 if self.tokens_per_s > 0 else None
        return {"mode": "offline_throughput", "feasible": True, "target_tokens_per_s": self.target_tokens_per_s,
                "count": self.count, "tokens_per_s": round(self.tokens_per_s, 2),
                "total_usd_per_hour": round(self.usd_per_hour, 4), "total_gpus": self.gpus,
                f"usd_per_million_{self.count}_tokens": None if per_m is None else round(per_m, 4),
                "deployments": [{"candidate": c.name, "replicas": n, "gpu": c.gpu, "tp": c.tp, "pp": c.pp, "ep": c.ep,
                                 "precision": c.precision, "tokens_per_s_per_replica": round(c.tokens_per_s, 2),
                                 "usd_per_hour": round(c.usd_per_replica_hour * n, 4),
                                 "source": c.source, "offline_limits": c.limits} for c, n in self.chosen],
                "notes": list(self.notes), "rejected": self.rejected}


def check_target(tokens_per_s, count: str) -> float:
    if tokens_per_s is None:
        raise UserError("an offline plan needs a throughput target", key="target.tokens_per_s",
                        fix="e.g. target.tokens_per_s=50000 (output tokens per second)")
    try:
        v = float(tokens_per_s)
    except (TypeError, ValueError):
        raise UserError(f"must be a number of tokens per second, got {tokens_per_s!r}", key="target.tokens_per_s",
                        fix="e.g. target.tokens_per_s=50000") from None
    if not (math.isfinite(v) and v > 0):
        raise UserError(f"must be > 0 tokens/s, got {tokens_per_s!r}", key="target.tokens_per_s",
                        fix="e.g. target.tokens_per_s=50000")
    if count not in COUNTS:
        raise UserError(f"unknown token count {count!r}", key="target.count", fix="output or total")
    return v


def _tokens_per_request(count: str, mean_in: float, mean_out: float) -> float:
    return mean_out + (mean_in if count == "total" else 0.0)


def screen(model, gpus, engine, space, mean_in: float, mean_out: float, longest_tokens: int, count: str,
           calibration: str | None, progress: Callable[[str, int, int], None] | None = None
           ) -> tuple[list[OfflineCandidate], list[dict]]:
    """Every shape that fits, with its offline limits and analytical throughput; and the rejected ones."""
    cands, rejected_raw = enumerate_candidates(model, gpus, space.tp, space.pp, space.ep, space.precision, [1],
                                               space.kv_cache_dtype)
    rejected = [{"candidate": c.name.rsplit("-b", 1)[0], "verdict": v, "reason": r} for c, v, r in rejected_raw]
    out: list[OfflineCandidate] = []
    per_req = _tokens_per_request(count, mean_in, mean_out)
    for i, c in enumerate(cands):
        name = c.name.rsplit("-b", 1)[0]
        step, mem = build(Deployment(model, c.gpu, c.par, c.prec, engine), calibration, min_kv_tokens=longest_tokens)
        if not mem.fits:
            rejected.append({"candidate": name, "verdict": "memory", "reason": mem.reason})
        else:
            eng, limits = offline_engine_profile(engine, c.gpu, model, c.par.pp, mem.kv_capacity_tokens, mean_in,
                                                 mean_out, longest_tokens)
            eng, max_len = replica_limits(eng, model, longest_tokens)
            rep = ReplicaSpec(step, eng, mem.kv_capacity_tokens, max_len)
            tps = estimate_capacity_rps([rep], mean_in, mean_out) * per_req
            out.append(OfflineCandidate(name, c.gpu.key, c.par.tp, c.par.pp, c.par.ep, c.prec.weights, c.par.gpus,
                                        c.usd_per_replica_hour, mem.kv_capacity_tokens, limits, tps, tokens_per_s=tps,
                                        replica=rep))
        if progress:
            progress("evaluate", i + 1, len(cands))
    return out, rejected


def pick_finalists(cands: list[OfflineCandidate], n: int) -> list[OfflineCandidate]:
    """The ``n`` to simulate: the cheapest per token/s of each GPU type, then the cheapest others."""
    ranked = sorted(cands, key=lambda c: (c.usd_per_token_s, c.name))
    picked: list[OfflineCandidate] = []
    for c in ranked:
        if len(picked) < n and c.gpu not in {p.gpu for p in picked}:
            picked.append(c)
    for c in ranked:
        if len(picked) < n and c not in picked:
            picked.append(c)
    return picked


def simulated_tokens_per_s(c: OfflineCandidate, wl_spec: WorkloadSpec, count: str, seed: int) -> float:
    """One replica draining ``wl_spec.num_requests`` requests queued at time 0: tokens/s over the makespan."""
    from llmplan.sim.serving import simulate_serving

    spec = replace(wl_spec, arrival="offline", rate_rps=None)
    s = simulate_serving(spec, [c.replica], seed=seed).summary
    key = "output_throughput_tps" if count == "output" else "total_throughput_tps"
    return float(s.get(key) or 0.0)


def verify(cands: list[OfflineCandidate], n: int, wl_spec: WorkloadSpec, count: str, seed: int,
           progress: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Simulate the finalists; scale the others by the median simulated/analytical ratio. Notes."""
    finalists = pick_finalists(cands, n)
    ratios = []
    for i, c in enumerate(finalists):
        c.simulated_tokens_per_s = simulated_tokens_per_s(c, wl_spec, count, seed)
        c.tokens_per_s, c.source = c.simulated_tokens_per_s, "simulated"
        if c.analytical_tokens_per_s > 0 and c.simulated_tokens_per_s > 0:
            ratios.append(c.simulated_tokens_per_s / c.analytical_tokens_per_s)
        if progress:
            progress("simulate", i + 1, len(finalists))
    if not ratios:
        return []
    ratio = float(np.median(ratios))
    for c in cands:
        if c.simulated_tokens_per_s is None:
            c.tokens_per_s, c.source = c.analytical_tokens_per_s * ratio, f"analytical x {ratio:.3f}"
    return [f"{len(finalists)} finalists simulated offline ({wl_spec.num_requests} requests at t=0 per replica); the "
            f"{len(cands) - len(finalists)} others scaled by their median simulated/analytical ratio {ratio:.3f}"]


def solve(cands: list[OfflineCandidate], target: float, max_gpus: dict[str, int], max_replicas: int,
          uniform: bool = False) -> list[tuple[OfflineCandidate, int]]:
    """Cheapest replicas reaching ``target`` tokens/s (raises :class:`OfflineInfeasible`)."""
    pool = [c for c in cands if c.tokens_per_s > 0]
    if not pool:
        raise OfflineInfeasible("no candidate fits in memory with a positive throughput")
    prob = pulp.LpProblem("llmplan_offline", pulp.LpMinimize)
    n = [prob.add_variable(f"n{i}", lowBound=0, upBound=max_replicas, cat="Integer") for i in range(len(pool))]
    # among equal $/h, fewer GPUs (as select_ilp)
    prob += pulp.lpSum((c.usd_per_replica_hour + _TIE_BREAK * c.gpus_per_replica) * v for c, v in zip(pool, n))
    prob += pulp.lpSum(c.tokens_per_s * v for c, v in zip(pool, n)) >= target, "throughput"
    if uniform:
        y = [prob.add_variable(f"y{i}", cat="Binary") for i in range(len(pool))]
        for v, b in zip(n, y):
            prob += v <= max_replicas * b
        prob += pulp.lpSum(y) == 1, "uniform"
    for g, limit in sorted(max_gpus.items()):
        members = [(c, v) for c, v in zip(pool, n) if c.gpu == g]
        if members:
            prob += pulp.lpSum(c.gpus_per_replica * v for c, v in members) <= int(limit), f"avail_{g}"
    if pulp.LpStatus[prob.solve(_solver())] != "Optimal":
        best = sum(max((c.tokens_per_s * min(max_replicas, max_gpus.get(g, 10**9) // c.gpus_per_replica)
                        for c in pool if c.gpu == g), default=0.0) for g in {c.gpu for c in pool})
        limits = ", ".join(f"{g} <= {v} GPUs" for g, v in sorted(max_gpus.items())) or f"max_replicas {max_replicas}"
        raise OfflineInfeasible(f"{target:g} tokens/s is beyond what the GPUs available ({limits}) reach offline: "
                                f"at most about {best:.4g} tokens/s; raise availability or lower the target")
    chosen = [(c, int(round(v.value() or 0))) for c, v in zip(pool, n)]
    return sorted([(c, k) for c, k in chosen if k > 0], key=lambda x: (-x[1] * x[0].usd_per_replica_hour, x[0].name))


def plan_offline(model, gpus, engine, space, wl_spec: WorkloadSpec, mean_in: float, mean_out: float,
                 longest_tokens: int, target_tokens_per_s, count: str, max_gpus: dict[str, int],
                 calibration: str | None, seed: int = 0,
                 progress: Callable[[str, int, int], None] | None = None) -> OfflinePlan:
    """Screen, verify the finalists offline, solve (module docstring)."""
    target = check_target(target_tokens_per_s, count)
    cands, rejected = screen(model, gpus, engine, space, mean_in, mean_out, longest_tokens, count, calibration, progress)
    if not cands:
        reasons = "; ".join(sorted({f"{r['verdict']}: {r['reason']}" for r in rejected})[:3])
        raise OfflineInfeasible(f"no deployment of {model.key} fits on the GPUs searched ({reasons})")
    notes = verify(cands, space.finalists, wl_spec, count, seed, progress) if space.finalists > 0 else [
        "search.finalists=0: analytical throughput only (full batches at the offline limits)"]
    if progress:
        progress("ILP", 0, 1)
    chosen = solve(cands, target, dict(max_gpus), space.max_replicas, space.uniform)
    if progress:
        progress("ILP", 1, 1)
    notes.append(f"throughput counts {'output (generated)' if count == 'output' else 'prompt + generated'} tokens; "
                 "replicas are independent (data parallel), the fleet's throughput is their sum")
    return OfflinePlan(target, count, chosen, sorted(cands, key=lambda c: (c.usd_per_token_s, c.name)), rejected, notes)

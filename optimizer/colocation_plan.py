"""`plan` for several models: one shared pool (co-located, sim/colocation.py) or a dedicated
deployment per model, whichever is cheaper while every model meets its own SLOs.

* **dedicated**: each model planned alone by the regular pipeline (:func:`optimizer.planner.plan`,
  analytical screen + ILP), then its chosen deployment simulated at its own rate; when the
  simulation misses an SLO the deployment gets one more replica of its largest pool (up to
  ``MAX_BUMPS`` times).
* **shared**: ``R`` pools of one GPU type and TP, each hosting every model (memory split and
  time-sliced compute of sim/colocation.py). For each GPU type and TP of the search, ``R``
  grows from 1 while the pool costs less than the dedicated total (sharing can only win
  below it); the first ``R`` whose co-located simulation meets every model's SLOs is that
  shape's option. The cheapest shape wins.

Both options are judged by the discrete-event simulator (``verify_requests`` requests per
model, the first and last 5% excluded): percentiles of TTFT/TPOT against each target, and no
overload. Sharing saves GPUs for small models at low load, where each model alone would
leave most of a GPU idle; at high load the interference stretches both models' steps and
dedicated pools win.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from llmplan.errors import InfeasibleDeployment
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.enumerate import kv_dtype_for
from llmplan.optimizer.planner import SearchSpace, plan
from llmplan.optimizer.slo_check import sample_value
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.optimizer.verify import replica_spec, thresholds
from llmplan.sim.colocation import ColocatedModel, build_pool, simulate_colocated
from llmplan.sim.serving import SimResult, simulate_serving
from llmplan.sim.types import EngineProfile, Parallelism, Precision
from llmplan.sim.workload import WorkloadSpec

#: extra replicas tried when a dedicated deployment misses an SLO in simulation
MAX_BUMPS = 3


@dataclass
class PlanModel:
    """One model to place: its catalog spec, workload (with its rate), SLOs and length stats."""

    key: str
    model: ModelSpec
    workload: WorkloadSpec
    slos: list[SLOTarget]
    stats: WorkloadStats


@dataclass
class Option:
    """One way to serve all models: its cost, GPUs, pools and simulated percentiles."""

    kind: str                                   # shared | dedicated
    feasible: bool
    usd_per_hour: float = math.inf
    gpus: int = 0
    pools: list[dict] = field(default_factory=list)
    simulated: dict[str, dict] = field(default_factory=dict)   # model -> {target: value, met, overloaded}
    reason: str = ""

    def as_dict(self) -> dict:
        return {"kind": self.kind, "feasible": self.feasible,
                "usd_per_hour": round(self.usd_per_hour, 4) if math.isfinite(self.usd_per_hour) else None,
                "gpus": self.gpus, "pools": self.pools, "simulated": self.simulated, "reason": self.reason}


def judge(res: SimResult, slos: list[SLOTarget]) -> dict[str, Any]:
    """Simulated value of each target over the measured requests, and whether all are met."""
    df = res.requests
    done = df[df["measured"] & df["finished"]]
    out: dict[str, Any] = {}
    met = not res.overloaded and len(done) > 0
    for t in slos:
        vals = done[f"{t.metric}_ms"].dropna().to_numpy()
        v = sample_value(vals, t) if len(vals) else None  # the mean for a mean target
        out[t.label] = None if v is None else round(v, 3)
        met = met and v is not None and v <= t.limit_ms
    out["overloaded"] = bool(res.overloaded)
    out["met"] = bool(met)
    return out


def _run_spec(m: PlanModel, num_requests: int) -> WorkloadSpec:
    return replace(m.workload, num_requests=num_requests, steady_state=False)


def dedicated(m: PlanModel, gpus: list, engine: EngineProfile, space: SearchSpace, max_gpus: dict[str, int],
              calibration: Optional[str], seed: int) -> Option:
    """The model's own cheapest deployment, checked (and topped up) in simulation."""
    res = plan(m.model, gpus, engine, m.stats, m.slos, space, max_gpus, calibration)
    sel = res.selection
    if not sel.feasible:
        return Option("dedicated", False, reason=f"{m.key}: {sel.binding or 'no deployment meets its SLOs'}")
    counts = [a.replicas for a in sel.allocations]
    wl = _run_spec(m, space.verify_requests)
    verdict: dict = {}
    for _ in range(MAX_BUMPS + 1):
        reps = [replica_spec(a.evaluation, engine, m.model) for a, n in zip(sel.allocations, counts) for _ in range(n)]
        verdict = judge(simulate_serving(wl, reps, seed=seed, slo=thresholds(m.slos)), m.slos)
        if verdict["met"]:
            break
        big = max(range(len(counts)), key=lambda i: sel.allocations[i].evaluation.candidate.gpus_per_replica)
        counts[big] += 1
    pools = [{"model": m.key, "candidate": a.evaluation.candidate.name, "gpu": a.evaluation.candidate.gpu.key,
              "tp": a.evaluation.candidate.par.tp, "replicas": n} for a, n in zip(sel.allocations, counts)]
    cost = sum(a.evaluation.candidate.usd_per_replica_hour * n for a, n in zip(sel.allocations, counts))
    n_gpus = sum(a.evaluation.candidate.gpus_per_replica * n for a, n in zip(sel.allocations, counts))
    ok = bool(verdict.get("met"))
    return Option("dedicated", ok, cost, n_gpus, pools, {m.key: verdict},
                  "" if ok else f"{m.key}: its deployment misses an SLO in simulation after {MAX_BUMPS} extra replicas")


def combine_dedicated(options: list[Option]) -> Option:
    ok = all(o.feasible for o in options)
    out = Option("dedicated", ok, sum(o.usd_per_hour for o in options), sum(o.gpus for o in options),
                 [p for o in options for p in o.pools], {k: v for o in options for k, v in o.simulated.items()},
                 "; ".join(o.reason for o in options if o.reason))
    if not ok:
        out.usd_per_hour = math.inf
    return out


def shared(models: list[PlanModel], gpus: list, engine: EngineProfile, space: SearchSpace, calibration: Optional[str],
           seed: int, budget_usd_per_hour: float) -> Option:
    """The cheapest co-located pool shape meeting every model's SLOs below the budget."""
    best = Option("shared", False, reason="no shared pool below the dedicated cost meets every SLO")
    runs_wl = [_run_spec(m, space.verify_requests) for m in models]
    shapes = [(gpu, price, w, tp) for gpu, price in gpus for w in space.precision if gpu.supports(w) or w == "bf16"
              for tp in sorted(set(space.tp)) if tp <= gpu.scaleup_domain_size]
    for gpu, price, w, tp in shapes:
        prec = Precision(w, kv_dtype_for(w, space.kv_cache_dtype, gpu))
        par = Parallelism(tp)
        try:
            pool = build_pool([m.model for m in models], gpu, par, prec, engine, calibration,
                              [m.stats.max_request_tokens for m in models], [m.stats.rate_rps for m in models],
                              [m.stats.mean_input_tokens + m.stats.mean_output_tokens for m in models])
        except InfeasibleDeployment:
            continue
        r = 1
        while r * tp * price < min(budget_usd_per_hour, best.usd_per_hour) - 1e-9:
            runs = [ColocatedModel(m.key, pool.replica_specs(i, r), wl, thresholds(m.slos))
                    for i, (m, wl) in enumerate(zip(models, runs_wl))]
            res = simulate_colocated(runs, seed=seed)
            verdicts = {m.key: judge(x, m.slos) | {"step_stretch": round(f, 4), "utilization": round(u, 4)}
                        for m, x, f, u in zip(models, res.results, res.factors, res.utilizations)}
            if all(v["met"] for v in verdicts.values()):
                pools = [{"models": [m.key for m in models], "gpu": gpu.key, "tp": tp, "precision": w, "replicas": r,
                          "memory": [mm.as_dict() for mm in pool.memory]}]
                best = Option("shared", True, r * tp * price, r * tp, pools, verdicts)
                break
            r += 1
    return best


@dataclass
class ColocatePlan:
    choice: str                 # shared | dedicated | none
    shared: Option
    dedicated: Option

    def as_dict(self) -> dict:
        return {"mode": "colocated", "choice": self.choice, "shared": self.shared.as_dict(),
                "dedicated": self.dedicated.as_dict()}


def plan_colocated(models: list[PlanModel], gpus: list, engine: EngineProfile, space: SearchSpace,
                   max_gpus: dict[str, int], calibration: Optional[str], seed: int) -> ColocatePlan:
    """Shared pool vs dedicated deployments; the cheaper one that meets every model's SLOs."""
    ded = combine_dedicated([dedicated(m, gpus, engine, space, max_gpus, calibration, seed) for m in models])
    budget = ded.usd_per_hour if ded.feasible else math.inf
    # without any finite budget, cap the shared search at the largest dedicated-style count
    if not math.isfinite(budget):
        budget = sum(price for _, price in gpus) * space.max_replicas
    sh = shared(models, sorted(gpus, key=lambda g: g[1]), engine, space, calibration, seed, budget)
    if sh.feasible and (not ded.feasible or sh.usd_per_hour < ded.usd_per_hour):
        choice = "shared"
    elif ded.feasible:
        choice = "dedicated"
    else:
        choice = "none"
    return ColocatePlan(choice, sh, ded)

"""Several models co-located on one GPU pool: the memory split and the compute interference.

**Deployment.** A pool is one tensor-parallel group of GPUs; every co-located model runs on
all of its GPUs as its own engine instance (same TP, own weights, own KV cache), as two
vLLM or SGLang servers sharing GPUs with split memory fractions (``gpu_memory_utilization``
/ ``mem_fraction_static``) do. ``replicas`` pools each host every model.

**Memory** (:func:`split_memory`). Each engine keeps its weights and its own reserve
(activations, CUDA graphs, runtime: ``sim.memory.plan_memory`` of the model alone); what is
left of the device memory budget after all of them is the KV memory of all models together.
It is split by ``kv_share`` (given, or in proportion to each model's KV demand: KV bytes per
token x request rate x mean tokens per request). A model whose share cannot hold its
longest request, or a pool whose weights and reserves alone exceed the budget, is refused
(:class:`InfeasibleDeployment`, key ``colocate.models``): the models do not fit together.

**Compute interference** (:func:`interference_factors`). Kernels of different processes
on one GPU do not overlap under the default CUDA time-slicing: the GPU runs one context at a
time (NVIDIA, GPU Operator "Time-Slicing GPUs in Kubernetes",
https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-sharing.html; Multi-Process Service
overview, https://docs.nvidia.com/deploy/mps/index.html). With MPS kernels run
concurrently but decode steps are bound by HBM bandwidth, which they then share, so the
time-sharing picture bounds that case too (MuxServe, Duan et al., ICML 2024,
arXiv:2404.02015, sec. 2: co-located LLMs contend for SMs and memory bandwidth, and
multiplexing helps because each model leaves the GPU idle part of the time). The model: the
steps of model i are stretched by the GPU time the other models take while i runs,

    step_i' = step_i / (1 - sum_{j != i} u_j)

where ``u_j`` is model j's device utilization (its un-stretched busy time over the run
time, per pool). The utilizations come out of the discrete-event simulation itself: each
model is simulated with its factor, its busy time measured, and the factors updated until
they settle (:func:`simulate_colocated`, at most ``MAX_ITERATIONS`` rounds). When the others
use the whole GPU (sum >= ``SATURATED``), model i is starved: the factor is capped there and
the result flagged as overloaded. The model assumes the models' busy periods are
independent; it neither credits MPS overlap of compute- and memory-bound kernels nor
charges context-switch time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.sim.memory import GB, MemoryPlan
from llmplan.sim.metrics import SLOThresholds
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import SimResult, simulate_serving
from llmplan.sim.types import StepShape
from llmplan.sim.workload import WorkloadSpec

#: rounds of the utilization fixed point
MAX_ITERATIONS = 6
#: stop when no utilization moves more than this
TOLERANCE = 0.01
#: the others' utilization at which a model counts as starved (factor capped at 1 / (1 - SATURATED))
SATURATED = 0.95


# --------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class ModelMemory:
    """One co-located model's share of a pool GPU (GB per GPU)."""

    key: str
    weights_gb: float
    reserve_gb: float
    kv_share: float
    kv_gb: float
    kv_bytes_per_token_gpu: float
    kv_capacity_tokens: int

    def as_dict(self) -> dict:
        return {"model": self.key, "weights_gb_per_gpu": round(self.weights_gb, 3),
                "reserve_gb_per_gpu": round(self.reserve_gb, 3), "kv_share": round(self.kv_share, 4),
                "kv_gb_per_gpu": round(self.kv_gb, 3), "kv_capacity_tokens": self.kv_capacity_tokens}


def demand_shares(kv_bytes_per_token: Sequence[float], rates_rps: Sequence[float],
                  mean_tokens: Sequence[float]) -> list[float]:
    """KV shares in proportion to bytes per token x request rate x mean tokens per request."""
    d = [b * max(r, 1e-9) * max(t, 1.0) for b, r, t in zip(kv_bytes_per_token, rates_rps, mean_tokens)]
    total = sum(d)
    return [x / total for x in d]


def check_shares(shares: Sequence[float], n: int) -> list[float]:
    """Validated ``colocate.kv_share``: n positive numbers summing to 1 (within 1e-6)."""
    if len(shares) != n:
        raise UserError(f"colocate.kv_share has {len(shares)} entries for {n} models", key="colocate.kv_share",
                        fix="one share per model, summing to 1, or [] for shares by KV demand")
    for i, s in enumerate(shares):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 < s <= 1.0:
            raise UserError(f"share {s!r} is not in (0, 1]", key=f"colocate.kv_share[{i}]")
    if abs(sum(shares) - 1.0) > 1e-6:
        raise UserError(f"the KV shares sum to {sum(shares):.6g}, not 1", key="colocate.kv_share")
    return [float(s) for s in shares]


def split_memory(keys: Sequence[str], plans: Sequence[MemoryPlan], shares: Sequence[float],
                 min_tokens: Sequence[int], block_size: int = 16) -> list[ModelMemory]:
    """Per-model KV memory of a pool GPU. ``plans``: ``plan_memory`` of each model alone on the
    pool's GPUs (its weights, reserve and the engine budget); ``min_tokens``: the longest
    request of each model's workload. InfeasibleDeployment when the models do not fit together."""
    usable = min(p.usable_gb for p in plans)
    fixed = sum(p.weights_gb + p.reserve_gb for p in plans)
    free = usable - fixed
    parts = ", ".join(f"{k} {p.weights_gb:.1f} + {p.reserve_gb:.1f}" for k, p in zip(keys, plans))
    if free <= 0:
        raise InfeasibleDeployment(f"co-located models do not fit together: weights + reserves ({parts} GB per GPU) "
                                   f"exceed the {usable:.1f} GB budget", key="colocate.models",
                                   fix="use GPUs with more memory, a larger TP, fewer models, or dedicated pools")
    out = []
    for k, p, s, need in zip(keys, plans, shares, min_tokens):
        kv_gb = free * s
        tokens = int(kv_gb * GB // p.kv_bytes_per_token_gpu) // block_size * block_size
        if tokens < need:
            raise InfeasibleDeployment(f"co-located models do not fit together: {k} gets {kv_gb:.2f} GB of KV per GPU "
                                       f"({tokens} tokens), fewer than its longest request ({need} tokens); "
                                       f"weights + reserves {parts} GB of {usable:.1f} GB", key="colocate.models",
                                       fix="raise its colocate.kv_share, use more memory per pool, or dedicated pools")
        out.append(ModelMemory(k, p.weights_gb, p.reserve_gb, s, kv_gb, p.kv_bytes_per_token_gpu, tokens))
    return out


# --------------------------------------------------------------------------- interference
def interference_factors(utilizations: Sequence[float]) -> tuple[list[float], list[bool]]:
    """(stretch factor of each model's steps, starved?) from every model's device utilization."""
    total = sum(utilizations)
    factors, starved = [], []
    for u in utilizations:
        others = total - u
        starved.append(others >= SATURATED)
        factors.append(1.0 / (1.0 - min(others, SATURATED)))
    return factors, starved


class StretchedCost:
    """A step cost model whose steps take ``factor`` times as long (the GPU time-shared)."""

    def __init__(self, base, factor: float):
        if not factor >= 1.0:
            raise ValueError(f"stretch factor must be >= 1, got {factor!r}")
        self.base, self.factor = base, float(factor)
        self.pp = getattr(base, "pp", 1)

    def __getattr__(self, name: str):
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def step_time_ms(self, shape: StepShape) -> float:
        return self.base.step_time_ms(shape) * self.factor

    def stage_time_ms(self, shape: StepShape) -> float:
        return self.base.stage_time_ms(shape) * self.factor


@dataclass
class ColocatedModel:
    """One model of the pool in the simulation: its replicas (one per pool), workload, SLOs."""

    key: str
    replicas: list[ReplicaSpec]
    workload: WorkloadSpec
    slo: Optional[SLOThresholds] = None
    router: str = "least_outstanding"


@dataclass
class ColocatedResult:
    results: list[SimResult]
    utilizations: list[float]   # un-stretched busy time / run time, per pool
    factors: list[float]
    starved: list[bool]
    iterations: int


def _utilization(res: SimResult, factor: float) -> float:
    """Un-stretched busy time per pool over the run (first arrival to last finish)."""
    busy = sum(s.get("busy_ms", 0.0) for s in res.replica_stats) / factor
    df = res.requests
    end = float(np.nanmax(df["finish_ms"].to_numpy())) if df["finish_ms"].notna().any() else math.nan
    if not math.isfinite(end):
        end = float(res.summary.get("sim_time_ms") or 0.0)
    span = end - float(np.nanmin(df["arrival_ms"].to_numpy()))
    return busy / (span * max(1, len(res.replica_stats))) if span > 0 else 0.0


def simulate_colocated(models: Sequence[ColocatedModel], seed: int = 0,
                       max_iterations: int = MAX_ITERATIONS) -> ColocatedResult:
    """Simulate each model on its share of the pools, its steps stretched by the others'
    utilization; iterate the utilizations to a fixed point (module docstring)."""
    if len(models) < 2:
        raise UserError("co-location needs at least two models", key="colocate.models")
    util = [0.0] * len(models)
    results: list[SimResult] = []
    factors, starved = [1.0] * len(models), [False] * len(models)
    used, measured, it = factors, util, 0
    for it in range(1, max_iterations + 1):
        results = []
        for m, f in zip(models, factors):
            reps = [replace(r, cost_model=StretchedCost(r.cost_model, f)) if f > 1.0 else r for r in m.replicas]
            results.append(simulate_serving(m.workload, reps, router=m.router, seed=seed, slo=m.slo,
                                            steady_state=m.workload.steady_state))
        used = factors
        measured = [_utilization(r, f) for r, f in zip(results, factors)]
        # damped update: a model that steps whenever it has work takes ~1/f of the time it is
        # stretched by, so the plain iteration oscillates; the mean of the last two settles
        util = measured if it == 1 else [(a + b) / 2 for a, b in zip(util, measured)]
        nxt, starved = interference_factors(util)
        if it > 1 and max(abs(a - b) / b for a, b in zip(nxt, factors)) <= TOLERANCE:
            break
        factors = nxt
    for r, s in zip(results, starved):
        if s:
            r.overloaded = True
            r.summary["overloaded"] = True
    return ColocatedResult(results, measured, list(used), starved, it)


# --------------------------------------------------------------------------- one pool
@dataclass
class Pool:
    """Co-located models on one TP group: per-model step models, engines and KV split."""

    memory: list[ModelMemory]
    steps: list
    engines: list
    max_model_lens: list[int]

    def replica_specs(self, i: int, replicas: int) -> list[ReplicaSpec]:
        return [ReplicaSpec(self.steps[i], self.engines[i], self.memory[i].kv_capacity_tokens,
                            self.max_model_lens[i])] * replicas


def build_pool(models: Sequence, gpu, par, prec, engine, calibration: Optional[str], longest_tokens: Sequence[int],
               rates_rps: Sequence[float], mean_tokens: Sequence[float],
               kv_share: Sequence[float] = ()) -> Pool:
    """Step models and memory split of ``models`` sharing the GPUs of one ``par`` group.
    InfeasibleDeployment (key colocate.models) when they do not fit together."""
    from llmplan.sim.deployment import Deployment, build, parallelism_problem, replica_limits

    steps, plans, engines, lens = [], [], [], []
    for m, longest in zip(models, longest_tokens):
        problem = parallelism_problem(m, gpu, par, prec)
        if problem:
            raise InfeasibleDeployment(f"{m.key}: {problem}", key="colocate.models",
                                       fix="choose a TP every co-located model supports")
        step, mem = build(Deployment(m, gpu, par, prec, engine, 1), calibration)
        eng, max_len = replica_limits(engine, m, longest)
        steps.append(step)
        plans.append(mem)
        engines.append(eng)
        lens.append(max_len)
    shares = check_shares(kv_share, len(models)) if kv_share else demand_shares(
        [p.kv_bytes_per_token_gpu for p in plans], rates_rps, mean_tokens)
    memory = split_memory([m.key for m in models], plans, shares, longest_tokens, engine.block_size)
    return Pool(memory, steps, engines, lens)

"""Typed records passed between planner stages."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.sim.types import Parallelism, Precision


@dataclass(frozen=True)
class SLOTarget:
    metric: str        # ttft | tpot
    percentile: float  # e.g. 90; for a mean target 50 (the screen's operating-point inputs), never judged
    limit_ms: float
    stat: str = "pct"  # pct: the limit holds at ``percentile``; mean: the mean is within the limit

    @property
    def is_mean(self) -> bool:
        return self.stat == "mean"

    @property
    def label(self) -> str:
        at = "mean" if self.is_mean else f"p{self.percentile:g}"
        return f"{self.metric.upper()} {at} <= {self.limit_ms:g} ms"

    @property
    def key(self) -> str:
        """Stable identifier, e.g. ``ttft_p90`` or ``ttft_mean`` (the config key without ``_ms``)."""
        return f"{self.metric}_mean" if self.is_mean else f"{self.metric}_p{self.percentile:g}"

    @property
    def quantity(self) -> float | str:
        """Key of this target's value in a percentile -> ms map (``"mean"`` for a mean target)."""
        return "mean" if self.is_mean else self.percentile


@dataclass(frozen=True)
class WorkloadStats:
    """What the analytical screen needs to know about the workload."""

    rate_rps: float             # total arrival rate to serve
    mean_input_tokens: float
    mean_output_tokens: float
    max_request_tokens: int     # longest prompt + output (KV capacity must hold one)
    arrival_cv: float = 1.0     # coefficient of variation of inter-arrival times (Poisson = 1)
    input_p50_tokens: float = 0.0  # prompt-length quantiles (0 = use the mean)
    input_p90_tokens: float = 0.0
    input_p99_tokens: float = 0.0

    def input_quantile(self, pct: float) -> float:
        if pct <= 50 or not self.input_p90_tokens:
            return self.input_p50_tokens or self.mean_input_tokens
        return self.input_p90_tokens if pct <= 90 or not self.input_p99_tokens else self.input_p99_tokens


@dataclass(frozen=True)
class Candidate:
    gpu: GPUSpec
    par: Parallelism
    prec: Precision
    max_num_seqs: int
    usd_per_gpu_hour: float

    @property
    def gpus_per_replica(self) -> int:
        return self.par.gpus

    @property
    def usd_per_replica_hour(self) -> float:
        return self.usd_per_gpu_hour * self.par.gpus

    @property
    def name(self) -> str:
        ep = f"-ep{self.par.ep}" if self.par.ep > 1 else ""
        dp = f"-dp{self.par.dp}" if self.par.dp > 1 else ""
        return f"{self.gpu.key}-tp{self.par.tp}{dp}-pp{self.par.pp}{ep}-{self.prec.weights}-b{self.max_num_seqs}"

    @property
    def weight_only(self) -> bool:
        """4-bit weights without 4-bit tensor cores run weight-only: dequantised to bf16 in the
        GEMM (w4a16), as vLLM's Marlin/MXFP4 paths do on Hopper (sim/deployment.py); int4 is
        always weight-only (no int4 tensor-core path is modelled)."""
        w = self.prec.weights
        return w == "int4" or (w == "fp4" and not self.gpu.supports("fp4"))

    @property
    def precision_label(self) -> str:
        """What the GEMMs actually run: ``fp4`` only with fp4 tensor cores, else ``fp4 (w4a16)``."""
        return f"{self.prec.weights} (w4a16)" if self.weight_only else self.prec.weights


@dataclass
class Evaluation:
    """Verdict on one candidate: ok, or why not (memory, parallelism, precision, slo)."""

    candidate: Candidate
    verdict: str                       # ok | memory | parallelism | precision | slo
    reason: str = ""
    capacity_rps: float = 0.0          # highest per-replica rate meeting every SLO (analytical)
    sim_capacity_rps: float | None = None  # same, found by simulation (finalists only)
    adjusted_capacity_rps: float | None = None  # analytical x the sim/analytical ratio of verified finalists
    kv_capacity_tokens: int = 0
    weights_gb: float = 0.0
    binding: str = ""                  # the constraint that limits capacity
    # predicted metrics at the capacity point, at the SLO percentiles
    ttft_ms: float = float("nan")      # of the binding TTFT target (the one closest to its limit)
    tpot_ms: float = float("nan")
    light_ttft_ms: float = float("nan")  # at light load (lower bound)
    light_tpot_ms: float = float("nan")
    at_capacity: dict = field(default_factory=dict)  # SLOTarget.key -> predicted ms at capacity
    light: dict = field(default_factory=dict)        # SLOTarget.key -> predicted ms at light load
    memory_shortfall_gb: float = 0.0   # verdict memory: HBM per GPU missing for weights+reserve+one request's KV
    tier: str = "spec"
    notes: list[str] = field(default_factory=list)
    analyzer: object = field(default=None, repr=False, compare=False)  # ReplicaAnalyzer (not serialised)

    @property
    def effective_capacity_rps(self) -> float:
        if self.sim_capacity_rps is not None:
            return self.sim_capacity_rps
        return self.adjusted_capacity_rps if self.adjusted_capacity_rps is not None else self.capacity_rps

    @property
    def usd_per_request_rps(self) -> float:
        cap = self.effective_capacity_rps
        return self.candidate.usd_per_replica_hour / cap if cap > 0 else float("inf")


@dataclass
class Allocation:
    evaluation: Evaluation
    replicas: int
    share_rps: float = 0.0                 # per-replica load at the target rate
    ttft_ms: float = float("nan")          # analytical at share_rps, binding TTFT target
    tpot_ms: float = float("nan")
    analytical: dict = field(default_factory=dict)  # SLOTarget.key -> analytical ms at share_rps
    simulated: dict = field(default_factory=dict)  # DES at the target load: {targets: {key: ms}, ttft_ms, tpot_ms, requests}
    bands: dict = field(default_factory=dict)      # {ttft|tpot: {p50_pct, p90_pct, tier, extrapolated}}


@dataclass
class Selection:
    feasible: bool
    allocations: list[Allocation]
    total_usd_per_hour: float
    total_gpus: int
    status: str            # solver status text
    binding: str = ""      # when infeasible: what binds

"""Structured-config schema: dataclasses registered with Hydra's ConfigStore.

Values live in ``conf/`` YAML; this file fixes the keys and types, so an unknown key or
a wrong type fails when the config is composed. Units are in field names.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

from llmplan.optimizer.planner import SearchSpace
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import WorkloadSpec


def _mutable_mirror(cls: type, name: str) -> type:
    """A non-frozen copy of a frozen dataclass (Hydra cannot compose into read-only nodes).
    The fields, types and defaults stay defined once, in the frozen original."""
    hints = typing.get_type_hints(cls)
    spec = [(f.name, hints[f.name], field(default=f.default) if f.default is not MISSING
             else field(default_factory=f.default_factory)) for f in fields(cls)]
    return make_dataclass(name, spec)


#: the engine group's schema: sim.types.EngineProfile, mutable for composition
EngineConfig = _mutable_mirror(EngineProfile, "EngineConfig")


@dataclass
class ModelConfig:
    # catalog short name (llama3_1_70b) or Hugging Face id (meta-llama/Llama-3.1-70B)
    name: str = "llama3_1_70b"
    # a local config.json; when set it replaces the catalog entry named above
    config_path: Optional[str] = None


@dataclass
class GPUConfig:
    # catalog keys of the GPU types the planner may use (see `llmplan catalog gpus`)
    candidates: List[str] = field(default_factory=lambda: ["h100_sxm", "h200_sxm", "a100_sxm", "l40s"])
    # per-type availability limit in GPUs (absent = unlimited), e.g. {h100_sxm: 16}
    max_gpus: Dict[str, int] = field(default_factory=dict)
    # per-type price override in $/GPU-hour, e.g. {h100_sxm: 2.49}
    usd_per_hour: Dict[str, float] = field(default_factory=dict)
    # what-if spec overrides per type, e.g. {h100_sxm: {hbm_bw_gbps: 6700}}
    spec_overrides: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # host topology of PCIe-only GPU types (catalog options and default: docs/MEMORY.md),
    # e.g. {l40s: pcie4_switch_p2p}; absent = the catalog default
    topology: Dict[str, str] = field(default_factory=dict)


@dataclass
class SLOConfig:
    # time to first token targets (ms) at the named percentile; null = no target
    ttft_p50_ms: Optional[float] = None
    ttft_p90_ms: Optional[float] = 1000.0
    ttft_p95_ms: Optional[float] = None
    ttft_p99_ms: Optional[float] = None
    # time per output token after the first (ms), vLLM benchmark definition
    tpot_p50_ms: Optional[float] = None
    tpot_p90_ms: Optional[float] = 50.0
    tpot_p95_ms: Optional[float] = None
    tpot_p99_ms: Optional[float] = None
    # mean over requests (ms), alone or beside percentile targets; null = no target
    ttft_mean_ms: Optional[float] = None
    tpot_mean_ms: Optional[float] = None


#: the search group's schema: optimizer.planner.SearchSpace (its defaults are the only ones),
#: mutable for composition. Keys: tp, pp, ep (parallel degrees to try), precision (bf16 | fp8 |
#: fp4), kv_cache_dtype (auto | bf16 | fp8), max_batch (engine max_num_seqs values), max_replicas,
#: max_load (fraction of SLO capacity), finalists (simulated; 0 = analytical only),
#: verify_requests, alternatives.
SearchConfig = _mutable_mirror(SearchSpace, "SearchConfig")


@dataclass
class PoolConfig:
    """One pool of a disaggregated deployment; null = the deployment-level value (or the engine's)."""

    # catalog GPU key of this pool's workers
    gpu: Optional[str] = None
    tp: Optional[int] = None
    pp: Optional[int] = None
    ep: Optional[int] = None
    # weights/GEMM precision: bf16 | fp8 | fp4
    precision: Optional[str] = None
    # engine batch limits of one worker (null: engine.max_num_seqs / engine.max_num_batched_tokens)
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    # number of workers (each one replica of gpu x tp x pp x ep)
    workers: int = 1


@dataclass
class KVTransferConfig:
    """The link that carries the KV cache from the prefill pool to the decode pool (sim/kv_transfer.py)."""

    # auto (NVLink when both pools fit one scale-up domain of one GPU type, else the network)
    # | same_domain | network
    placement: str = "auto"
    # per-transfer latency, microseconds; null = the link's catalog figure
    latency_us: Optional[float] = None
    # send the KV layer by layer while the prefill runs (only the last layer's share is exposed)
    layerwise: bool = False
    # fixed per-request hand-off delay of the disaggregated front end, ms; null = the engine's
    # fitted value (sim/data/disagg_handoff.json, docs/DISAGG.md), 0 = none
    handoff_ms: Optional[float] = None


@dataclass
class DeploymentConfig:
    """One deployment, for `llmplan simulate`."""

    # catalog GPU key; null = the first of gpu.candidates (so `gpu=h100_sxm` works)
    gpu: Optional[str] = None
    # tensor parallelism; null = the smallest TP whose replica fits the model
    tp: Optional[int] = None
    pp: int = 1
    ep: int = 1
    # attention data-parallel ranks per replica (MoE models): tp x dp GPUs per stage, each rank
    # its own batch and KV cache, experts over all of them (ep-way EP x tp*dp/ep expert TP);
    # engine.max_num_seqs is then the whole replica's (docs/SIMULATOR.md, attention DP)
    dp: int = 1
    # weights/GEMM precision: bf16 | fp8 | fp4
    precision: str = "bf16"
    # KV cache dtype: auto | bf16 | fp8
    kv_cache_dtype: str = "auto"
    replicas: int = 1
    # request router across replicas: round_robin | least_outstanding | prefix_aware
    router: str = "least_outstanding"
    # aggregated: `replicas` identical replicas (the keys above); disagg: a prefill pool and a
    # decode pool (`prefill`, `decode`, `kv_transfer`; docs/DISAGG.md). gpu/tp/pp/ep/precision
    # above are then the defaults of both pools.
    mode: str = "aggregated"
    prefill: PoolConfig = field(default_factory=PoolConfig)
    decode: PoolConfig = field(default_factory=PoolConfig)
    kv_transfer: KVTransferConfig = field(default_factory=KVTransferConfig)
    # disagg TTFT convention: decode (first token seen when the decode worker takes the
    # request, as the engines' front ends stream it) | prefill (at the end of the prefill)
    first_token_at: str = "decode"


@dataclass
class ExperimentConfig:
    """Set by a `+experiment=NAME` bundle (conf/experiment/): what the scenario measures."""

    # experiment name (conf/experiment/<name>.yaml); null = no experiment
    name: Optional[str] = None
    # the summary.json value the scenario asks for, dotted, e.g. e2e_ms.mean or output_tokens_per_s
    target_metric: Optional[str] = None
    # the scenario's question, printed with the metric
    description: str = ""


@dataclass
class SpeculativeConfig:
    """Speculative decoding of the served model (sim/spec_decode.py, docs/SPECULATIVE.md)."""

    # none (simulate: off; plan: MTP searched where the model has MTP modules) | off (never) |
    # mtp (the model's own MTP modules) | eagle3 | draft_model
    method: str = "none"
    # draft tokens per step (>= 1 when a method is set)
    k: Optional[int] = None
    # per-position acceptance: one rate in [0, 1] or a list alpha_1..alpha_k; null = the method's default
    acceptance: Optional[Any] = None
    # or P(0..k drafts accepted), summing to 1
    accepted_length_probs: Optional[List[float]] = None
    # or the mean tokens per verify step, bonus included (SGLang's "accept len"), in [1, k + 1]
    accept_length: Optional[float] = None
    # draft_model: a catalog model smaller than the target
    draft_model: Optional[str] = None
    # draft tree branching (SGLang speculative_eagle_topk); 1 = chain
    topk: int = 1
    # verify tokens per sequence, bonus included (SGLang speculative_num_draft_tokens); null = k + 1
    verify_tokens: Optional[int] = None
    # plan: largest k searched (speculation off and k = 1..k_max) where the model has MTP modules
    # or method/draft_model is set
    k_max: int = 4


@dataclass
class ColocateConfig:
    """Several models sharing one GPU pool (sim/colocation.py; docs/SIMULATOR.md, co-location).
    Off while ``models`` is empty; set by a `+colocate=NAME` group (conf/colocate/)."""

    # one entry per model: {name: catalog model, workload: {overrides of the workload group},
    # slo: {overrides of the slo group}, speculative: {...}}
    models: List[Any] = field(default_factory=list)
    # share of the pool's free memory (after all weights) given to each model's KV cache, aligned
    # with models; empty = in proportion to each model's KV bytes per token x its request rate
    kv_share: List[float] = field(default_factory=list)


@dataclass
class EnergyConfig:
    """Energy of the chosen deployment (optimizer/energy.py, docs/ENERGY.md)."""

    # power usage effectiveness of the facility (>= 1): facility power = PUE x GPU power
    pue: float = 1.0
    # electricity price in $/kWh; null = energy is reported without a cost
    usd_per_kwh: Optional[float] = None


@dataclass
class DayAttainmentConfig:
    """SLO attainment through the day, simulated (optimizer/day_attainment.py, docs/AUTOSCALING.md)."""

    # simulate each interval on the replicas in place, autoscaled and static for the peak
    enabled: bool = True
    # scale-up lead: planned (replicas started scale_up_s ahead) | reactive (started at the interval)
    lead: str = "planned"
    # requests per simulated phase (at least)
    requests_per_phase: int = 600
    # profiles with more intervals: every k-th interval is simulated (a stated sample)
    max_intervals: int = 96


@dataclass
class DayConfig:
    """A day of traffic (optimizer/day_plan.py, docs/AUTOSCALING.md); off while profile is null."""

    # CSV with columns t_start_s,rate_rps (or a shipped profile: diurnal_24h); null = no day plan
    profile: Optional[str] = None
    # seconds a new replica takes to start serving (it is paid from then)
    scale_up_s: float = 300.0
    # replicas kept serving in every interval
    min_replicas: int = 1
    # per GPU type tier prices in $/GPU-hour, e.g. {h100_sxm: {reserved_usd_per_gpu_hour: 2.2,
    # spot_usd_per_gpu_hour: 1.9, spot_interruption_rate: 0.05}}; absent = catalog on-demand only
    price_tiers: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # interval length in s: bins a trace (CSV column timestamp_s) or re-bins per-minute rates;
    # null = the CSV's own intervals (a trace: 3600)
    interval_s: Optional[float] = None
    attainment: DayAttainmentConfig = field(default_factory=DayAttainmentConfig)


@dataclass
class ReportConfig:
    """Extra files of `plan` beyond plan.json/candidates.csv (docs/REPORT.md)."""

    # write report.html (self-contained) and the PNG plots (pareto.png, day.png) it embeds
    html: bool = False


@dataclass
class OutputConfig:
    # write PNG plots (latency CDFs, batch size and KV usage over time) from simulate
    plots: bool = False
    # per-request results format: csv | parquet
    requests_format: str = "csv"
    # print progress bars
    progress: bool = True


@dataclass
class CurveConfig:
    """`llmplan whatif` curve: one plan per scale of one figure (llmplan/cli/whatif_curve.py)."""

    # hbm_bw_gbps | tflops | scaleup_bw_gbps | hbm_gb | slo | rate; null = no curve (compare one scenario)
    figure: Optional[str] = None
    # the multipliers of the figure, one plan each
    scales: List[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    # GPU types whose figure is scaled (GPU figures only); empty = every candidate
    gpus: List[str] = field(default_factory=list)


@dataclass
class WhatIfConfig:
    """The scenario `llmplan whatif` compares with the baseline plan."""

    # multiply GPU figures, e.g. {h100_sxm: {hbm_bw_gbps: 2.0, bf16_tflops: 1.5}}
    gpu_scale: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # multiply GPU prices, e.g. {h100_sxm: 0.5}
    price_scale: Dict[str, float] = field(default_factory=dict)
    # extra candidate GPU types in the scenario, e.g. [b200, mi300x]
    add_gpus: List[str] = field(default_factory=list)
    # multiply every SLO target (0.5 = twice as strict)
    slo_scale: float = 1.0
    # multiply the request rate (2.0 = twice the traffic)
    rate_scale: float = 1.0
    # a curve instead of one scenario: whatif.curve.figure=hbm_bw_gbps whatif.curve.scales=[0.5,1,2,4]
    curve: CurveConfig = field(default_factory=CurveConfig)


@dataclass
class FleetConfig:
    """GPUs on hand: `plan` answers the maximum request rate they sustain within the SLOs."""

    # GPUs per catalog type, e.g. {h100_sxm: 8}; empty = plan the cheapest deployment for workload.rate_rps
    gpus: Dict[str, int] = field(default_factory=dict)


@dataclass
class TargetConfig:
    """`plan workload=offline`: the offline throughput to reach (optimizer/offline_plan.py, docs/OFFLINE.md)."""

    # tokens per second the fleet must sustain offline (all requests queued at once); null = off
    tokens_per_s: Optional[float] = None
    # which tokens count: output (generated) | total (prompt + generated)
    count: str = "output"


@dataclass
class AppConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    gpu: GPUConfig = field(default_factory=GPUConfig)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    slo: SLOConfig = field(default_factory=SLOConfig)
    search: SearchConfig = field(default_factory=SearchConfig)  # type: ignore[valid-type]
    engine: EngineConfig = field(default_factory=EngineConfig)  # type: ignore[valid-type]
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    whatif: WhatIfConfig = field(default_factory=WhatIfConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    colocate: ColocateConfig = field(default_factory=ColocateConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    day: DayConfig = field(default_factory=DayConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    # kernel calibration: null = shipped default fit; "spec" = roofline defaults; or a file path
    calibration: Optional[str] = None
    # seed for workload generation and simulation
    seed: int = 0


def register_configs() -> None:
    """Register the schema; conf/plan.yaml and conf/simulate.yaml start from it."""
    ConfigStore.instance().store(name="app_schema", node=AppConfig)

"""Shared value types of the simulator: parallelism, batch shape, step timing, engine profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from llmplan.sim.engine_terms import FIELDS, fitted_frontend_ms, fitted_terms


@dataclass(frozen=True)
class Parallelism:
    """Parallel layout of one replica (docs/SIMULATOR.md, "Attention DP and wide EP").

    ``dp`` attention data-parallel ranks, each of ``tp`` GPUs with its own batch and KV cache
    (attention and dense weights replicated per rank); the MoE layers of a stage run over all
    ``tp x dp`` GPUs of the stage as ``ep`` expert-parallel ranks x ``moe_tp`` expert-TP
    (``ep x moe_tp = tp x dp``). ``dp = 1`` is plain TP (EP inside the TP group)."""

    tp: int = 1   # tensor parallel degree of attention (and dense MLP) inside one DP rank
    pp: int = 1   # pipeline stages
    ep: int = 1   # expert parallel degree for MoE layers (experts sharded over ep GPUs)
    dp: int = 1   # attention data-parallel ranks (TensorRT-LLM enable_attention_dp, SGLang
    #               --enable-dp-attention, vLLM --data-parallel-size on a MoE model)

    @property
    def gpus(self) -> int:
        """GPUs per replica: tp x dp per stage. EP reuses the stage's GPUs (ep <= tp x dp)."""
        return self.tp * self.dp * self.pp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: the attention DP group (tp x dp), over which MoE runs."""
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel degree inside each expert: the stage's GPUs not used for EP."""
        return max(1, self.tp * self.dp // self.ep)


@dataclass(frozen=True)
class Precision:
    weights: str = "bf16"     # GEMM / weight dtype: bf16 | fp8 | fp4
    kv_cache: str = "bf16"    # KV cache dtype: bf16 | fp8
    activations: str = "bf16"


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one engine iteration computes, summarised so step cost can be cached.

    A step mixes prefill chunks (new prompt tokens, possibly after cached/previous
    context) and decode tokens (one per running sequence).
    """

    prefill_tokens: int = 0        # new tokens computed by prefill chunks this step
    prefill_seqs: int = 0          # number of prefill chunks
    prefill_attn_pairs: float = 0.0  # sum over chunks of causal (query, key) pairs: n*ctx + n*(n+1)/2
    prefill_ctx_tokens: int = 0    # sum over chunks of context already in KV before the chunk
    decode_seqs: int = 0           # sequences producing one token each
    decode_kv_tokens: int = 0      # sum over decode sequences of their KV length

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs

    @staticmethod
    def build(prefill_chunks: list[tuple[int, int]] | tuple = (), decode_kv_lens: list[int] | tuple = ()) -> "StepShape":
        """From explicit (new_tokens, context_before) chunks and decode KV lengths."""
        pt = sum(n for n, _ in prefill_chunks)
        pairs = sum(n * c + n * (n + 1) / 2 for n, c in prefill_chunks)
        ctx = sum(c for _, c in prefill_chunks)
        return StepShape(pt, len(prefill_chunks), float(pairs), ctx, len(decode_kv_lens), int(sum(decode_kv_lens)))


@dataclass(frozen=True)
class OpTime:
    """One operator's contribution to a step (summed over layers on the critical path)."""

    name: str             # e.g. "qkv_proj", "attn_decode", "moe_experts", "tp_allreduce"
    family: str           # gemm | attn_prefill | attn_decode | moe | mla | memory | comm | host
    latency_ms: float
    bound: str            # compute | memory | latency | comm | host
    flops: float = 0.0
    bytes: float = 0.0
    tier: str = "spec"    # measured | cross-gen | spec  (calibration tier of its efficiency)
    extrapolated: bool = False  # the kernel query lies outside the fitted shape range
    table: str = ""       # engine whose measured kernel table answered (sim.kernels.KernelTime.table)


@dataclass(frozen=True)
class StepTiming:
    """Time of one iteration. ``latency_ms`` is the full forward through all pipeline stages;
    ``stage_ms`` is the slowest stage (the pipeline's throughput limit)."""

    latency_ms: float
    stage_ms: float
    ops: tuple[OpTime, ...] = field(default=())


class StepCostModel(Protocol):
    """Batch composition -> step time. Used by the analytical screen and the DES alike."""

    pp: int

    def step_time_ms(self, shape: StepShape) -> float:
        """Latency of one iteration through all pipeline stages (fast, cached)."""
        ...

    def stage_time_ms(self, shape: StepShape) -> float:
        """Time of the slowest pipeline stage for this iteration (== step time when pp=1)."""
        ...

    def breakdown(self, shape: StepShape) -> StepTiming:
        """Per-operator breakdown (slow path, for reports)."""
        ...


@dataclass(frozen=True)
class EngineProfile:
    """Serving-engine behaviour (vLLM / SGLang / TensorRT-LLM flavours)."""

    name: str = "vllm"                 # vllm | sglang | trtllm
    kernel_backend: str = "vllm"       # which measured kernel set calibrates this engine
    max_num_seqs: int = 256            # running sequences per replica
    max_num_batched_tokens: int = 8192  # token budget per iteration
    chunked_prefill: bool = True       # vLLM v1 semantics: decodes first, then prefill chunks
    # with chunked_prefill: prompts join a step only whole, never split over steps (TensorRT-LLM
    # in-flight batching without enable_chunked_prefill, its default)
    whole_prompts: bool = False
    block_size: int = 16               # KV cache block, tokens
    gpu_memory_utilization: float = 0.9  # vLLM: fraction of device memory the engine may use (default 0.9)
    watermark: float = 0.01            # free-block fraction kept when admitting new requests
    enable_prefix_caching: bool = True
    # host time per step (sim/engine_terms.py); None = the engine's fitted value from
    # sim/data/engine_profiles.json (the single source; conf/engine leaves them unset)
    host_overhead_ms: Optional[float] = None          # per step, not hidden behind the GPU
    host_overhead_per_seq_ms: Optional[float] = None  # per running sequence, not overlapped
    host_overlap_per_seq_ms: Optional[float] = None   # per sequence, overlapped with the GPU step
    # per-request TTFT outside the steps (API server, client round trip, tokenisation; sim/engine_terms.py)
    ttft_per_request_ms: Optional[float] = None
    ttft_per_prompt_token_ms: Optional[float] = None
    # per layer, added to a step that runs without CUDA graphs (sim/cuda_graphs.eager_step)
    eager_step_ms_per_layer: Optional[float] = None
    # Memory (sim/kv_budget.py). Activations, CUDA graphs and runtime are modelled per engine;
    # this is an extra per-GPU reserve on top of them (GB), 0 by default.
    activation_reserve_gb: float = 0.0
    # SGLang --mem-fraction-static; None = SGLang's own default (from GPU memory and TP)
    mem_fraction_static: Optional[float] = None
    # TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction (--kv_cache_free_gpu_memory_fraction), default 0.9
    kv_cache_free_gpu_mem_fraction: float = 0.9
    # MoE token exchange under attention data parallelism (sim/ep_comm.py):
    # allgather_reducescatter (the engines' default) | deepep (all-to-all dispatch/combine)
    moe_all2all: str = "allgather_reducescatter"
    # TensorRT-LLM batch waiting (sim/trtllm_batch_wait.py): prompts wait while generation runs, up to
    # this many steps or until prompt + decode tokens reach the ratio x max_num_batched_tokens; 0 = off
    # (TensorRT-LLM's default; TorchLlmArgs batch_wait_timeout_iters / batch_wait_max_tokens_ratio)
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # the front end that streams the output tokens (sim/frontend_ceiling.py): "engine" (the engine's own
    # API server, no per-token ceiling) or "dynamo" (Dynamo's in-process worker). frontend_per_token_ms
    # is that front end's serial time per streamed token; it bounds each step from below (max with the
    # GPU step, never added) and is ignored for "engine". None = the front end's fitted value
    # (sim/data/engine_profiles.json; 0 for "engine" and where none is fitted)
    frontend: str = "engine"
    # vLLM async scheduling (sim/vllm_async_scheduling.py): the next step is scheduled before the current
    # one's outputs, so a request arriving while busy joins one step later; False = a synchronous vLLM
    async_scheduling: bool = False
    frontend_per_token_ms: Optional[float] = None

    def __post_init__(self) -> None:
        if any(getattr(self, f) is None for f in FIELDS):
            vals, _ = fitted_terms(self.name)
            for f in FIELDS:
                if getattr(self, f) is None:
                    object.__setattr__(self, f, vals[f])
        if self.frontend_per_token_ms is None:
            object.__setattr__(self, "frontend_per_token_ms", fitted_frontend_ms(self.name, self.frontend))

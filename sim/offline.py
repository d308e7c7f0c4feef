"""Offline (maximum-throughput) runs: every request queued at time 0, the engine's own
batch limits, throughput over the whole run.

Benchmarks and buyers ask how fast a deployment drains a fixed batch of requests
(``trtllm-bench throughput``, ``vllm bench throughput``, SGLang's ``bench_offline_throughput``).
Those tools do not use the serving defaults: each engine picks its own batch limits for
offline work. :func:`offline_batch_limits` reproduces the documented choices:

* **TensorRT-LLM** ``trtllm-bench throughput`` (``tensorrt_llm/bench/build/tuning.py``,
  ``calc_engine_setting`` and ``finetune_setting``; described in
  https://nvidia.github.io/TensorRT-LLM/performance/perf-benchmarking.html and
  .../performance/performance-tuning-guide/tuning-max-batch-size-and-max-num-tokens.html,
  TensorRT-LLM 1.x). The requests that fit in the KV cache at the dataset's average
  ISL + OSL, ``R = kv_tokens / (ISL + OSL)``, set the raw batch
  ``bs = min(R, 4096) / pp`` and the raw token budget ``tok = min(bs (1 + ISL/OSL), 32768)``.
  Both are then rounded up "slightly optimistically": the batch to a multiple of 32 (at
  least 64) below 256, of 128 below 1024, else of 256; the token budget to a multiple of
  256 (at least 2048) below 4096, of 512 below 8192, else of 1024. The KV token count is
  this project's own memory model of the replica (sim/memory.py), not trtllm-bench's
  0.95-of-free-memory estimate.
* **vLLM** V1 ``LLM`` class (offline; ``vllm/engine/arg_utils.py``
  ``EngineArgs.get_batch_defaults``, vLLM 0.9-0.11): on GPUs with at least 70 GiB that
  are not A100s, ``max_num_seqs`` 1024 and ``max_num_batched_tokens`` 16384; otherwise
  256 and 8192 (the API server uses 1024/8192 and 256/2048).
* **SGLang** (``python/sglang/srt/server_args.py`` and ``model_executor/model_runner.py``,
  SGLang 0.4-0.5): ``max_running_requests`` unset becomes
  ``min(kv_tokens // 2, min(max(kv_tokens / context_len x 512, 2048), 4096))``
  (``sim.sglang_scheduling.sglang_max_running_requests``), and ``chunked_prefill_size``
  is 2048 below 35 GiB of device memory, 8192 below 160 GiB, else 16384.

The engine's own limits replace ``engine.max_num_seqs`` / ``engine.max_num_batched_tokens``
only when the workload asks for them (``offline_engine_limits``, the default); the
result says which limits were used and where they come from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmplan.sim.kv_budget import sglang_default_fraction
from llmplan.sim.sglang_scheduling import sglang_max_running_requests

#: TensorRT-LLM trtllm-bench caps (tuning.py): decoder buffers and activation buffers
TRTLLM_MAX_BATCH = 4096
TRTLLM_MAX_TOKENS = 32768
#: its "slightly optimistic" rounding: (below this value, round up to a multiple of this step)
TRTLLM_BATCH_TIERS = ((256, 32), (1024, 128), (math.inf, 256))
TRTLLM_TOKEN_TIERS = ((4096, 256), (8192, 512), (math.inf, 1024))
#: vLLM V1 offline (LLM class) defaults by device class (arg_utils.py get_batch_defaults)
VLLM_BIG_GPU_GIB = 70.0
VLLM_OFFLINE_BIG = (1024, 16384)
VLLM_OFFLINE_SMALL = (256, 8192)


@dataclass(frozen=True)
class OfflineLimits:
    """Batch limits an engine chooses for an offline run."""

    max_num_seqs: int
    max_num_batched_tokens: int
    source: str              # where the rule comes from, in words


def _round_tiered(x: float, tiers: tuple[tuple[float, int], ...], floor: int) -> int:
    """``x`` rounded up to the step of the first tier whose bound it is below; at least ``floor``."""
    step = next(st for bound, st in tiers if x < bound)
    return max(floor, step * math.ceil(x / step))


def trtllm_bench_limits(kv_tokens: int, mean_input_tokens: float, mean_output_tokens: float,
                        pp: int = 1) -> tuple[int, int]:
    """(max batch size, max num tokens) as ``trtllm-bench throughput`` picks them."""
    isl, osl = max(1.0, mean_input_tokens), max(1.0, mean_output_tokens)
    fit = kv_tokens / (isl + osl)
    bs = min(fit, TRTLLM_MAX_BATCH) / max(1, pp)
    tok = min(bs * (1.0 + isl / osl), TRTLLM_MAX_TOKENS)
    max_bs = _round_tiered(bs, TRTLLM_BATCH_TIERS, 64)
    max_tok = _round_tiered(tok, TRTLLM_TOKEN_TIERS, 2048)
    return int(max_bs), int(max_tok)


def offline_batch_limits(engine_name: str, kv_tokens: int, mean_input_tokens: float, mean_output_tokens: float,
                         gpu_memory_gib: float, gpu_key: str, context_tokens: int, pp: int = 1) -> OfflineLimits:
    """The batch limits ``engine_name`` (vllm | sglang | trtllm) uses offline (module docstring)."""
    if engine_name == "trtllm":
        bs, tok = trtllm_bench_limits(kv_tokens, mean_input_tokens, mean_output_tokens, pp)
        return OfflineLimits(bs, tok, "trtllm-bench heuristic (KV-fit batch at the mean ISL+OSL, rounded up)")
    if engine_name == "sglang":
        reqs = sglang_max_running_requests(kv_tokens, context_tokens)   # the one rule (sim/sglang_scheduling.py)
        # chunked_prefill_size by device memory: the one rule (kv_budget, ServerArgs._handle_gpu_memory_settings)
        chunk = sglang_default_fraction(round(gpu_memory_gib * 2**30), 1, pp)[1]
        return OfflineLimits(reqs, chunk, "SGLang defaults (max_running_requests from the KV pool, "
                                          "chunked_prefill_size from device memory)")
    big = gpu_memory_gib >= VLLM_BIG_GPU_GIB and "a100" not in gpu_key.lower()
    seqs, tok = VLLM_OFFLINE_BIG if big else VLLM_OFFLINE_SMALL
    kind = "a >=70 GiB non-A100 GPU" if big else "an A100 or a GPU below 70 GiB"
    return OfflineLimits(seqs, tok, f"vLLM offline (LLM class) defaults for {kind}")


def gpu_memory_gib(gpu) -> float:
    """Device memory in GiB as the engines see it (physical bytes; the marketed GB when absent)."""
    return gpu.memory_bytes / 2**30 if getattr(gpu, "memory_bytes", 0) else gpu.hbm_gb * 1e9 / 2**30


def offline_engine_profile(engine, gpu, model, pp: int, kv_tokens: int, mean_input_tokens: float,
                           mean_output_tokens: float, longest_tokens: int):
    """(engine with its offline batch limits, info dict) for one replica: :func:`offline_batch_limits`;
    SGLang's prefill chunk bounds the prompt tokens of a step, decodes ride on top; an engine that
    does not split prompts gets a budget covering the longest request (said in ``info['note']``)."""
    from dataclasses import replace

    lim = offline_batch_limits(engine.name, kv_tokens, mean_input_tokens, mean_output_tokens, gpu_memory_gib(gpu),
                               gpu.key, model.max_position_embeddings, pp)
    seqs, budget = lim.max_num_seqs, lim.max_num_batched_tokens
    if engine.name == "sglang":
        budget += seqs
    info = {"max_num_seqs": seqs, "max_num_batched_tokens": budget, "source": lim.source}
    if (not engine.chunked_prefill or getattr(engine, "whole_prompts", False)) and budget < longest_tokens:
        budget = longest_tokens  # a whole prompt must fit one step
        info["max_num_batched_tokens"] = budget
        info["note"] = (f"token budget raised to {budget} tokens to cover the longest request: this engine "
                        "does not split prompts")
    return replace(engine, max_num_seqs=seqs, max_num_batched_tokens=budget), info

"""Memory model of one replica: weights per GPU, runtime reserve, KV-cache token capacity.

Sharding follows vLLM/SGLang: attention and dense MLP weights split over TP; routed
experts split over the TP group (EP x expert-TP); layers split over PP; vocabulary-parallel
embedding and lm_head split over TP (first and last stage). KV cache: GQA heads split over
TP (replicated when TP > KV heads); the MLA latent is replicated on every TP rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.derived import kv_bytes_per_token, weight_bytes
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, ModelSpec
from llmplan.sim.types import EngineProfile, Parallelism, Precision

GB = 1e9


@dataclass(frozen=True)
class MemoryPlan:
    fits: bool
    reason: str                  # "" when it fits, else why not (names the binding term)
    hbm_gb: float                # per GPU
    usable_gb: float             # hbm x gpu_memory_utilization
    weights_gb: float            # per GPU, busiest stage
    reserve_gb: float            # activations, CUDA graphs, communication buffers
    kv_gb: float                 # left for the KV cache per GPU
    kv_bytes_per_token_gpu: float
    kv_capacity_tokens: int      # tokens of KV cache the replica can hold


def kv_bytes_per_token_per_gpu(model: ModelSpec, par: Parallelism, kv_dtype: str) -> float:
    total = kv_bytes_per_token(model, kv_dtype)
    stage_share = math.ceil(model.num_layers / par.pp) / model.num_layers
    if model.mla is not None:
        return total * stage_share  # latent replicated across TP ranks
    heads_per_gpu = max(1, math.ceil(model.num_kv_heads / par.tp))
    return total * stage_share * heads_per_gpu / model.num_kv_heads


def weights_per_gpu_bytes(model: ModelSpec, par: Parallelism, precision: str) -> float:
    total = weight_bytes(model, precision)
    embed = model.vocab_size * model.hidden_size * BYTES_PER_ELEMENT["bf16"]
    heads = embed if model.tie_word_embeddings else 2 * embed
    body = max(0.0, total - heads)
    stage_share = math.ceil(model.num_layers / par.pp) / model.num_layers
    # busiest stage: its layers plus (for pp=1 both, else one of) embedding / lm_head
    head_share = heads if par.pp == 1 else embed
    return body * stage_share / par.tp + head_share / par.tp


def plan_memory(model: ModelSpec, gpu: GPUSpec, par: Parallelism, prec: Precision,
                engine: EngineProfile, min_tokens: int) -> MemoryPlan:
    """Fit check. ``min_tokens``: KV tokens the replica must hold at least (one longest
    request, or what the workload needs); below that the deployment is rejected."""
    usable = gpu.hbm_gb * engine.gpu_memory_utilization
    w = weights_per_gpu_bytes(model, par, prec.weights) / GB
    reserve = engine.activation_reserve_gb + engine.max_num_batched_tokens * model.hidden_size * 2 * 8 / GB
    kv = usable - w - reserve
    per_tok = kv_bytes_per_token_per_gpu(model, par, prec.kv_cache)
    cap = int(max(0.0, kv) * GB / per_tok) if per_tok > 0 else 0
    if kv <= 0:
        reason = (f"weights {w:.1f} GB + runtime reserve {reserve:.1f} GB exceed usable "
                  f"{usable:.1f} GB of {gpu.hbm_gb:.0f} GB per GPU")
        return MemoryPlan(False, reason, gpu.hbm_gb, usable, w, reserve, kv, per_tok, 0)
    if cap < min_tokens:
        reason = f"KV cache holds {cap} tokens, fewer than the {min_tokens} one request needs"
        return MemoryPlan(False, reason, gpu.hbm_gb, usable, w, reserve, kv, per_tok, cap)
    return MemoryPlan(True, "", gpu.hbm_gb, usable, w, reserve, kv, per_tok, cap)

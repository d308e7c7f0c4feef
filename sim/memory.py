"""Memory model of one replica: weights per GPU, the engine's KV budget, KV-cache token capacity.

Sharding follows vLLM/SGLang: attention and dense MLP weights split over TP; routed
experts split over the TP group (EP x expert-TP); layers split over PP; vocabulary-parallel
embedding and lm_head split over TP (first and last stage). KV cache: GQA heads split over
TP (replicated when TP > KV heads); the MLA latent is replicated on every TP rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.derived import (bytes_per_element, kv_bytes_per_token_tp, param_breakdown,
                                           state_bytes_per_sequence, weight_bytes, weight_dtypes)
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, ModelSpec
from llmplan.sim.kv_budget import KVBudget, kv_budget
from llmplan.sim.types import EngineProfile, Parallelism, Precision

GB = 1e9


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of one replica (GB = 1e9 bytes) and the KV tokens it holds."""

    fits: bool
    reason: str                  # "" when it fits, else why not (names the binding term)
    memory_gb: float             # physical device memory per GPU (GPUSpec.memory_bytes / 1e9)
    usable_gb: float             # what the engine's memory knob hands its static pool (see budget)
    weights_gb: float            # per GPU, busiest stage
    reserve_gb: float            # activations + CUDA graphs + runtime + extra reserve + linear-attention state
    kv_gb: float                 # left for the KV cache per GPU
    kv_bytes_per_token_gpu: float
    kv_capacity_tokens: int      # tokens of KV cache the replica can hold (whole blocks)
    budget: KVBudget | None = None  # the engine's rule, terms and assumptions (printable)


def kv_bytes_per_token_per_gpu(model: ModelSpec, par: Parallelism, kv_dtype: str) -> float:
    """KV bytes per token on one GPU of the busiest stage: the TP share per layer kind
    (model_catalog.derived.kv_bytes_per_token_tp: GQA heads split or replicated, MLA latent and
    DSA indexer keys replicated) times the stage's share of the layers."""
    stage_share = math.ceil(model.num_layers / par.pp) / model.num_layers
    return kv_bytes_per_token_tp(model, kv_dtype, max(1, par.tp)) * stage_share


def state_bytes_per_seq_per_gpu(model: ModelSpec, par: Parallelism) -> float:
    """Linear-attention state of one sequence on one GPU of the busiest stage (0 without
    linear attention); heads split over TP (model_catalog.derived.state_bytes_per_sequence)."""
    state = state_bytes_per_sequence(model, "bf16", max(1, par.tp))
    return state * math.ceil(model.num_layers / par.pp) / model.num_layers if state else 0.0


def weights_per_gpu_bytes(model: ModelSpec, par: Parallelism, precision: str) -> float:
    total = weight_bytes(model, precision)
    embed = model.vocab_size * model.hidden_size * BYTES_PER_ELEMENT["bf16"]
    heads = embed if model.tie_word_embeddings else 2 * embed
    body = max(0.0, total - heads)
    stage_share = math.ceil(model.num_layers / par.pp) / model.num_layers
    # busiest stage: its layers plus (for pp=1 both, else one of) embedding / lm_head
    head_share = heads if par.pp == 1 else embed
    if par.dp > 1 and model.moe is not None:
        # attention DP: every rank keeps its own copy of attention, dense MLP, shared experts,
        # embedding and lm_head (split over its tp GPUs); the routed experts are split over the
        # whole stage (ep x moe_tp = tp x dp GPUs)
        routed = param_breakdown(model).routed_experts * bytes_per_element(weight_dtypes(model, precision)["routed_experts"])
        routed = min(routed, body)
        return ((body - routed) / par.tp + routed / par.stage_gpus) * stage_share + head_share / par.tp
    return body * stage_share / par.tp + head_share / par.tp


def plan_memory(model: ModelSpec, gpu: GPUSpec, par: Parallelism, prec: Precision,
                engine: EngineProfile, min_tokens: int) -> MemoryPlan:
    """Fit check with the engine's own KV budget (sim/kv_budget.py). ``min_tokens``: KV tokens
    the replica must hold at least (one longest request, or what the workload needs); below
    that the deployment is rejected. A memory fraction outside (0, 1] raises ConfigError.

    Attention DP (``par.dp > 1``): each rank has its own KV cache, so the replica holds ``dp``
    times one rank's tokens; one request must fit in one rank, and each rank's activations and
    CUDA graphs are sized for its share (``ceil(x / dp)`` of ``max_num_seqs`` and
    ``max_num_batched_tokens``) of the replica's batch and token budget."""
    w = weights_per_gpu_bytes(model, par, prec.weights)
    per_tok = kv_bytes_per_token_per_gpu(model, par, prec.kv_cache)
    dp = max(1, par.dp)
    rank_engine = engine if dp == 1 else replace(engine, max_num_seqs=max(1, -(-engine.max_num_seqs // dp)),
                                                 max_num_batched_tokens=max(1, -(-engine.max_num_batched_tokens // dp)))
    b = kv_budget(model, gpu, par, rank_engine, w, per_tok, state_bytes_per_seq_per_gpu(model, par))
    reserve = (b.activation_bytes + b.cuda_graph_bytes + b.runtime_bytes + b.extra_bytes + b.state_bytes) / GB
    args = (gpu.memory_bytes / GB, b.budget_bytes / GB, w / GB, reserve, b.kv_bytes / GB, per_tok, b.kv_tokens * dp)
    if b.kv_bytes <= 0:
        reason = (f"no memory left for the KV cache: weights {w / GB:.1f} GB per GPU do not fit {b.engine}'s "
                  f"budget ({b.fraction_key}={b.fraction:g} of {gpu.memory_bytes / GB:.1f} GB physical, "
                  f"less activations/CUDA graphs/runtime {reserve:.1f} GB)")
        return MemoryPlan(False, reason, *args, budget=b)
    if b.kv_tokens < min_tokens:
        rank = f" per attention-DP rank ({dp} ranks)" if dp > 1 else ""
        reason = f"KV cache holds {b.kv_tokens} tokens{rank}, fewer than the {min_tokens} one request needs"
        return MemoryPlan(False, reason, *args, budget=b)
    return MemoryPlan(True, "", *args, budget=b)

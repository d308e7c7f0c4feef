"""Quantities derived from a :class:`ModelSpec`: parameters, weight bytes, KV bytes, FLOPs.

Counting conventions (used everywhere in llmplan):

* **Total parameters** are every weight of the language model: the input embedding, the
  lm_head (counted once when tied to the embedding), attention projections (plus their
  biases where the config says ``attention_bias``), dense MLPs, routed and shared experts
  (plus biases for gpt-oss), routers and RMSNorm weights (two per layer, the final norm, and
  MLA's latent norms). Multi-token-prediction modules (DeepSeek ``num_nextn_predict_layers``,
  MiniMax ``num_mtp_modules``) and vision/audio encoders are *not* counted. Per-head q/k norms
  (Qwen3, MiniMax) and gpt-oss attention sinks are ignored (< 0.01 % of any model).
* **Active parameters** are the weights one token uses: attention, dense MLPs, the ``top_k``
  routed experts and all shared experts of each MoE layer, routers and norms. Embedding
  tables: ``embeddings="once"`` (default) adds the vocab x hidden matrix once, i.e. the
  lm_head (the input embedding is a one-row lookup; a tied table is one matrix anyway);
  ``"both"`` adds input embedding and lm_head (tied counted once); ``"none"`` adds neither.
  Model owners differ (OpenAI: once; Qwen, Meta, Mistral: both; MiniMax: none); the presets
  record which convention reproduces each published figure.
* **Weight bytes** put the transformer-block linear weights (attention projections, MLPs,
  experts, with their biases) in the requested precision. The input embedding, lm_head,
  norms and routers stay in bf16 when the precision is narrower than 2 bytes (fp8/fp4/int4,
  as shipped FP8/MXFP4 checkpoints do); at 2 bytes or wider everything uses the precision.
  At the checkpoint's own precision the shipped layout (``spec.quant``: each component in
  the format the checkpoint stores it in, with its scales; the rest bf16) is counted
  exactly (:func:`weight_bytes`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from llmplan.errors import ConfigError, suggest
from llmplan.model_catalog.quant import DEFAULT_FORMATS
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, ModelSpec
from llmplan.model_catalog.tensors import COMPONENTS, component_params, linear_attention_layers, linear_tensors

#: embedding conventions accepted by :func:`param_count_active`.
EMBEDDING_CONVENTIONS = ("once", "both", "none")
#: phases accepted by :func:`flops_per_token`.
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts by component, summed over all layers."""

    embedding: int              # input embedding table, vocab x hidden
    lm_head: int                # output projection; 0 when tied to the embedding
    attention: int              # q/k/v/o (or MLA) projections and their biases
    dense_mlp: int              # MLPs of dense layers (every layer of a dense model)
    routed_experts: int         # all routed experts of all MoE layers
    routed_experts_active: int  # the top_k routed experts of every MoE layer
    shared_experts: int         # always-active shared experts of all MoE layers
    router: int                 # expert-gate weights (and biases)
    norms: int                  # RMSNorm weights and other small non-matmul weights
    indexer: int = 0            # DSA lightning-indexer projections
    linear_attention: int = 0   # Gated DeltaNet projections of the linear-attention layers

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.non_embedding_total

    @property
    def non_embedding_total(self) -> int:
        return (self.attention + self.dense_mlp + self.routed_experts + self.shared_experts
                + self.router + self.norms + self.indexer + self.linear_attention)

    @property
    def non_embedding_active(self) -> int:
        return (self.attention + self.dense_mlp + self.routed_experts_active + self.shared_experts
                + self.router + self.norms + self.indexer + self.linear_attention)

    @property
    def vocab_matrix(self) -> int:
        """The vocab x hidden matrix the lm_head multiplies by (the embedding when tied)."""
        return self.lm_head or self.embedding

    def active(self, embeddings: str = "once") -> int:
        """Active parameters under an embedding convention (see module docstring)."""
        if embeddings not in EMBEDDING_CONVENTIONS:
            raise ConfigError(f"unknown embedding convention '{embeddings}'", key="embeddings",
                              fix=suggest(embeddings, EMBEDDING_CONVENTIONS))
        extra = {"once": self.vocab_matrix, "both": self.embedding + self.lm_head, "none": 0}
        return self.non_embedding_active + extra[embeddings]


def bytes_per_element(precision: str) -> float:
    """Bytes per element of a precision name; ConfigError for an unknown name."""
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError:
        raise ConfigError(f"unknown precision '{precision}'", key="precision",
                          fix=suggest(str(precision), BYTES_PER_ELEMENT)) from None


def _mlp_params(spec: ModelSpec, intermediate: int, hidden: int = 0) -> int:
    """One (gated or plain) MLP of width ``intermediate``, with biases when the spec says."""
    h = hidden or spec.hidden_size
    mats = 3 if spec.gated_mlp else 2
    params = mats * h * intermediate
    if spec.mlp_bias:
        params += (2 if spec.gated_mlp else 1) * intermediate + h
    return params


def expert_params(spec: ModelSpec) -> int:
    """Parameters of one routed expert (0 for a dense model)."""
    return 0 if spec.moe is None else _mlp_params(spec, spec.moe.expert_intermediate_size, spec.moe.latent_size)


def _first_full_attention_layer(spec: ModelSpec) -> int:
    linear = linear_attention_layers(spec)
    return next(i for i in range(spec.num_layers) if i not in linear)


def attention_params_per_layer(spec: ModelSpec) -> int:
    """Attention projection weights (and biases) of one full-attention layer, norms and
    the DSA indexer excluded.

    GQA: q = hidden x heads*head_dim (twice that with Qwen3.5's output gate), k and v =
    hidden x kv_heads*head_dim each, o = heads*head_dim x hidden. MLA: q_a (hidden x
    q_lora_rank) and q_b (q_lora_rank x heads*(nope+rope)) or a plain q_proj when
    q_lora_rank is 0; kv_a (hidden x kv_lora_rank+rope); kv_b (kv_lora_rank x
    heads*(nope+v)); o (heads*v x hidden).
    """
    layer = _first_full_attention_layer(spec)
    return sum(t.params for t in linear_tensors(spec) if t.layer == layer and t.component == "attention")


def _small_params(spec: ModelSpec) -> int:
    """Norm weights and other small non-matmul weights: two RMSNorms per layer and the
    final norm; MLA latent norms; GDN conv1d, A_log, dt_bias and gated-norm weights; DSA
    indexer key LayerNorm (weight and bias)."""
    h, layers = spec.hidden_size, spec.num_layers
    norms = (1 if spec.block_pattern else 2) * h * layers + h  # Nemotron-H: one norm per block
    if spec.mla is not None:
        norms += (spec.mla.q_lora_rank + spec.mla.kv_lora_rank) * spec.num_full_attention_layers
    if spec.linear is not None:
        g = spec.linear
        if g.kind == "mamba2":  # conv1d (+bias), dt_bias, A_log, D, gated RMSNorm over d_inner
            vd = g.num_value_heads * g.value_head_dim
            norms += g.num_layers * (g.conv_channels * (g.conv_kernel + (1 if g.conv_bias else 0))
                                     + 3 * g.num_value_heads + vd)
        else:
            norms += g.num_layers * (g.conv_channels * g.conv_kernel + 2 * g.num_value_heads + g.value_head_dim)
    if spec.sparse is not None:
        norms += spec.sparse.num_indexer_layers * 2 * spec.sparse.index_head_dim
    return norms


@functools.lru_cache(maxsize=512)
def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Count the parameters of ``spec`` by component (conventions: module docstring)."""
    h = spec.hidden_size
    c = component_params(spec)
    routed_active = router = 0
    if spec.moe is not None:
        moe, moe_layers = spec.moe, spec.num_moe_layers
        routed_active = moe_layers * moe.top_k * expert_params(spec)
        router = moe_layers * (h * moe.num_experts + (moe.num_experts if spec.mlp_bias else 0))
    return ParamBreakdown(
        embedding=spec.vocab_size * h,
        lm_head=c["lm_head"],
        attention=c["attention"],
        dense_mlp=c["dense_mlp"],
        routed_experts=c["routed_experts"],
        routed_experts_active=routed_active,
        shared_experts=c["shared_experts"],
        router=router,
        norms=_small_params(spec),
        indexer=c["indexer"],
        linear_attention=c["linear_attention"],
    )


def param_count_total(spec: ModelSpec) -> int:
    """All weights including input embedding and lm_head (tied once); MTP excluded."""
    return param_breakdown(spec).total


def param_count_active(spec: ModelSpec, embeddings: str = "once") -> int:
    """Weights used per token; ``embeddings`` is "once" (default), "both" or "none"."""
    return param_breakdown(spec).active(embeddings)


@functools.lru_cache(maxsize=2048)
def weight_bytes(spec: ModelSpec, precision: str) -> float:
    """Bytes of all weights when the model is served at weight ``precision``.

    At the checkpoint's own precision (``spec.quant.precision``) the shipped layout is
    exact: each component in the format the checkpoint stores it in (values, block scales
    and per-tensor scales, :class:`~model_catalog.spec.WeightFormat`) and everything else
    in bf16. Otherwise the block linears (attention, indexer, linear attention, MLPs,
    experts) take ``precision`` in its default format (``quant.DEFAULT_FORMATS``: fp8 per
    tensor, fp4 as NVFP4, int4 with a bf16 scale per 128) and embeddings, lm_head, norms
    and routers stay bf16; at 2 bytes or wider everything uses the precision.
    """
    b = bytes_per_element(precision)
    p = param_breakdown(spec)
    bf16 = BYTES_PER_ELEMENT["bf16"]
    q = spec.quant
    if q is not None and precision == q.precision:
        stored = sum(part.params * part.fmt.bytes_per_element + part.tensors * part.fmt.tensor_scale_bytes
                     for part in q.parts)
        return stored + (p.total - sum(part.params for part in q.parts)) * bf16
    if b >= bf16:
        return p.total * b
    fmt = DEFAULT_FORMATS.get(precision)
    linears = [t for t in linear_tensors(spec) if t.component != "lm_head"]
    quantized = sum(t.params * t.count for t in linears)
    tensors = sum(t.count for t in linears)
    per_elem = fmt.bytes_per_element if fmt is not None else b
    scales = tensors * fmt.tensor_scale_bytes if fmt is not None else 0.0
    return quantized * per_elem + scales + (p.total - quantized) * bf16


def weight_dtypes(spec: ModelSpec, precision: str) -> dict[str, str]:
    """The precision each weight component's matmuls read when the model is served at
    weight ``precision`` (keys: ``tensors.COMPONENTS``); see :func:`_weight_dtypes`."""
    return dict(_weight_dtypes(spec, precision))


@functools.lru_cache(maxsize=2048)
def _weight_dtypes(spec: ModelSpec, precision: str) -> tuple[tuple[str, str], ...]:
    """The precision each weight component's matmuls read when the model is served at
    weight ``precision`` (keys: ``tensors.COMPONENTS``).

    Serving a quantized checkpoint as shipped, a component takes the format that stores
    most of its parameters and bf16 where the checkpoint keeps it unquantized (NVIDIA NVFP4
    exports keep attention in bf16; gpt-oss and Kimi-K2.5 quantize only routed experts).
    Otherwise every component uses ``precision`` and the lm_head stays bf16 (as
    :func:`weight_bytes` counts it)."""
    if spec.quant is None or precision != spec.quant.precision:
        return tuple((c, "bf16" if c == "lm_head" else precision) for c in COMPONENTS)
    totals = component_params(spec)
    out = []
    for c in COMPONENTS:
        best = spec.quant.main_part(c)
        covered = best is not None and 2 * best.params >= totals[c] > 0
        out.append((c, best.fmt.precision if covered else "bf16"))
    return tuple(out)


def checkpoint_precision_note(spec: ModelSpec, precision: str) -> str | None:
    """A sentence for a user who asks for a weight precision other than the checkpoint's,
    or None when they match (bf16/fp16 checkpoints accept any precision: the engine
    quantizes at load time)."""
    if spec.quant is None or precision == spec.quant.precision:
        return None
    fmt = spec.quant.main
    return (f"{spec.hf_id} ships {fmt.name} weights ({fmt.precision}); weights={precision} is not what the "
            f"checkpoint holds: served at {precision} it would have to be re-quantized from another checkpoint")


#: DSA indexer key cache: fp8 keys plus one fp32 scale per 128 values, per token and
#: indexer layer (DeepGEMM ``fp8_mqa_logits`` reads fp8 keys; vLLM's DeepSeek-V3.2 indexer
#: cache is ``index_head_dim + index_head_dim // 128 * 4`` bytes per token, vLLM
#: ``vllm/model_executor/models/deepseek_v2.py`` Indexer, v0.11).
INDEXER_SCALE_BLOCK = 128
INDEXER_SCALE_BYTES = 4.0


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str) -> float:
    """KV-cache bytes one token occupies in one full-attention layer, indexer keys excluded.

    GQA: K and V, ``2 * kv_heads * head_dim`` elements. MLA: the compressed latent plus the
    decoupled rotary key, ``kv_lora_rank + qk_rope_head_dim`` elements.
    """
    b = bytes_per_element(kv_dtype)
    if spec.mla is not None:
        return (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * b
    return spec.num_kv_heads * (spec.head_dim + spec.value_head_dim) * b


def indexer_bytes_per_token(spec: ModelSpec) -> float:
    """DSA indexer-key bytes per token over all indexer layers (0 without DSA)."""
    s = spec.sparse
    if s is None:
        return 0.0
    per_layer = s.index_head_dim * 1.0 + math.ceil(s.index_head_dim / INDEXER_SCALE_BLOCK) * INDEXER_SCALE_BYTES
    return per_layer * s.num_indexer_layers


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str) -> float:
    """KV bytes per token over all layers: full-attention layers (sliding-window layers
    counted as full; linear-attention layers hold no per-token KV) plus DSA indexer keys."""
    return kv_bytes_per_token_tp(spec, kv_dtype, 1)


def _kv_layer_groups(spec: ModelSpec, kv_dtype: str, tp: int = 1) -> list[tuple[int, float, int]]:
    """(layers, KV bytes per token and layer on one of ``tp`` ranks, window or 0) for each
    kind of attention layer: full layers (Gemma-4 global geometry where given) and
    sliding-window layers. GQA K/V heads split over TP (``ceil(kv_heads / tp)`` per rank,
    replicated beyond the KV heads); the MLA latent is replicated on every rank."""
    sliding = spec.num_sliding_layers if spec.sliding_window > 0 else 0
    if spec.mla is not None:
        full_bytes = window_bytes = kv_bytes_per_token_per_layer(spec, kv_dtype)
    else:
        b = bytes_per_element(kv_dtype)
        dims = spec.head_dim + spec.value_head_dim
        window_bytes = math.ceil(spec.sliding_kv_heads / tp) * dims * b
        ga = spec.global_attention
        full_bytes = 2 * math.ceil(ga.num_kv_heads / tp) * ga.head_dim * b if ga is not None else \
            math.ceil(spec.num_kv_heads / tp) * dims * b
    groups = [(spec.num_full_attention_layers - sliding, full_bytes, 0)]
    if sliding:
        groups.append((sliding, window_bytes, spec.sliding_window))
    return groups


def kv_bytes_per_token_tp(spec: ModelSpec, kv_dtype: str, tp: int) -> float:
    """KV bytes per token held by one GPU of a ``tp``-way tensor-parallel group (all layers).

    GQA K/V heads split over TP and are replicated when TP exceeds the KV heads
    (``ceil(kv_heads / tp)`` per GPU), per layer kind (Gemma-4 global layers have their own
    KV heads); the MLA latent and the DSA indexer keys are replicated on every rank."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor parallelism must be a positive integer, got {tp!r}", key="tp")
    return sum(layers * per_layer for layers, per_layer, _ in _kv_layer_groups(spec, kv_dtype, tp)) \
        + indexer_bytes_per_token(spec)


def state_bytes_per_sequence(spec: ModelSpec, dtype: str = "bf16", tp: int = 1) -> float:
    """Fixed-size linear-attention state one sequence holds, per GPU under ``tp``-way
    tensor parallelism (0 for models without linear attention); it does not grow with
    the context.

    Per Gated DeltaNet layer: the recurrent state, ``value_heads x key_head_dim x
    value_head_dim`` in ``spec.linear.state_dtype`` (fp32 for Qwen3.5: ``mamba_ssm_dtype``),
    plus the causal-conv1d state, ``(conv_kernel - 1) x conv_channels`` in ``dtype`` (the
    activation dtype). Heads and conv channels split over TP (vLLM ``MambaStateShapeCalculator
    .gated_delta_net_state_shape``, v0.11).
    """
    g = spec.linear
    if g is None:
        return 0.0
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor parallelism must be a positive integer, got {tp!r}", key="tp")
    v_heads = math.ceil(g.num_value_heads / tp)
    k_heads = math.ceil(g.num_key_heads / tp)
    ssm = v_heads * g.key_head_dim * g.value_head_dim * bytes_per_element(g.state_dtype)
    conv_channels = 2 * k_heads * g.key_head_dim + v_heads * g.value_head_dim
    conv = (g.conv_kernel - 1) * conv_channels * bytes_per_element(dtype)
    return g.num_layers * (ssm + conv)


def _check_context(context_len: int) -> None:
    if isinstance(context_len, bool) or not isinstance(context_len, int) or context_len < 0:
        raise ConfigError(f"context length must be a non-negative integer, got {context_len!r}",
                          key="context_len")


def kv_bytes_sequence(spec: ModelSpec, kv_dtype: str, context_len: int) -> float:
    """KV bytes one sequence of ``context_len`` tokens holds, sliding layers capped at the window."""
    _check_context(context_len)
    return sum(layers * per_layer * (min(context_len, window) if window else context_len)
               for layers, per_layer, window in _kv_layer_groups(spec, kv_dtype)) \
        + indexer_bytes_per_token(spec) * context_len


def kv_bytes_per_token_windowed(spec: ModelSpec, kv_dtype: str, context_len: int) -> float:
    """Mean KV bytes per token of a ``context_len``-token sequence with sliding layers capped.

    Equals :func:`kv_bytes_per_token` for models without sliding windows or for sequences
    no longer than the window; ``context_len`` 0 gives the uncapped figure.
    """
    _check_context(context_len)
    if context_len == 0:
        return kv_bytes_per_token(spec, kv_dtype)
    return kv_bytes_sequence(spec, kv_dtype, context_len) / context_len


def _mean_attended(context_len: int, window: int, phase: str) -> float:
    """Keys one query attends to: at ``context_len`` (decode) or averaged over a causal
    prompt of ``context_len`` tokens (prefill), capped by ``window`` when it is > 0."""
    length = float(context_len)
    if phase == "decode":
        return min(length, window) if window > 0 else length
    if window <= 0 or length <= window:
        return length / 2.0
    return window - window * window / (2.0 * length)  # mean of min(p, W) for p in [0, L)


def attention_flops_per_token(spec: ModelSpec, context_len: int, phase: str) -> float:
    """Score and value FLOPs (QK^T and AV) for one token over all layers.

    Only full-attention layers attend (linear-attention layers add their fixed recurrent
    update, :func:`linear_attention_flops_per_token`). DSA layers attend to at most
    ``index_topk`` keys and their indexer adds ``2 * index_heads * index_head_dim`` per
    cached key. GQA: ``4 * heads * head_dim`` per attended key and layer. MLA prefill runs un-absorbed
    (``2*heads*(nope+rope) + 2*heads*v``); MLA decode runs weight-absorbed over the latent
    cache (``2*heads*(kv_lora+rope) + 2*heads*kv_lora``), as FlashMLA-style kernels do.
    Sliding-window layers attend to at most the window.
    """
    _check_context(context_len)
    if phase not in PHASES:
        raise ConfigError(f"unknown phase '{phase}'", key="phase", fix=suggest(str(phase), PHASES))
    n = spec.num_attention_heads
    full_per_key = None
    if spec.mla is None:
        per_key = 2 * n * (spec.head_dim + spec.value_head_dim)
        if spec.global_attention is not None:
            full_per_key = 4 * n * spec.global_attention.head_dim
    elif phase == "prefill":
        m = spec.mla
        per_key = 2 * n * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
    else:
        m = spec.mla
        per_key = 2 * n * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank)
    sliding = spec.num_sliding_layers if spec.sliding_window > 0 else 0
    full = spec.num_full_attention_layers - sliding
    extra = 0.0
    if spec.sparse is not None:  # MLA reads only the top-k keys; the indexer scores all of them
        s = spec.sparse
        full_keys = _mean_attended(context_len, s.index_topk, phase)
        extra = 2.0 * s.index_n_heads * s.index_head_dim * _mean_attended(context_len, 0, phase) * s.num_indexer_layers
    else:
        full_keys = _mean_attended(context_len, 0, phase)
    window_keys = sliding * _mean_attended(context_len, spec.sliding_window, phase)
    flops = (full_per_key or per_key) * full * full_keys + per_key * window_keys
    return flops + extra + linear_attention_flops_per_token(spec)


#: FLOPs per recurrent-state element and token of the Gated DeltaNet update
#: ``S <- a S + b k (v - S^T k)^T``, read-out ``S^T q``: 2 each for the read-out, the
#: prediction ``S^T k`` and the rank-1 update (Yang et al., arXiv:2412.06464, eq. 8).
GDN_FLOPS_PER_STATE_ELEMENT = 6.0


def linear_attention_flops_per_token(spec: ModelSpec) -> float:
    """Recurrent-update FLOPs of the linear-attention layers for one token (independent of
    the context: the state has a fixed size)."""
    g = spec.linear
    if g is None:
        return 0.0
    return GDN_FLOPS_PER_STATE_ELEMENT * g.num_value_heads * g.key_head_dim * g.value_head_dim * g.num_layers


def flops_per_token(spec: ModelSpec, context_len: int, phase: str) -> float:
    """Forward FLOPs for one token: matmuls plus attention.

    ``2 * (active non-embedding parameters - norms)`` for the block matmuls, ``2 * vocab *
    hidden`` for the lm_head, plus :func:`attention_flops_per_token`. ``phase`` "prefill"
    averages attention over a causal prompt of ``context_len`` tokens (mean context
    ``context_len / 2``); "decode" attends to ``context_len`` tokens.
    """
    p = param_breakdown(spec)
    linear = 2.0 * (p.non_embedding_active - p.norms) + 2.0 * p.vocab_matrix
    return linear + attention_flops_per_token(spec, context_len, phase)

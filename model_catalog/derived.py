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
  When the precision has the width of the model's native format and the shipped recipe
  only covers routed experts (``spec.quant_scope == "experts"``: gpt-oss, Kimi-K2.5), the
  other block linears stay bf16 as shipped. fp8 block scales (1 float per 128x128) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmplan.errors import ConfigError, suggest
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, ModelSpec

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
    norms: int                  # RMSNorm weights

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.non_embedding_total

    @property
    def non_embedding_total(self) -> int:
        return (self.attention + self.dense_mlp + self.routed_experts + self.shared_experts
                + self.router + self.norms)

    @property
    def non_embedding_active(self) -> int:
        return (self.attention + self.dense_mlp + self.routed_experts_active + self.shared_experts
                + self.router + self.norms)

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


def _mlp_params(spec: ModelSpec, intermediate: int) -> int:
    """One (gated or plain) MLP of width ``intermediate``, with biases when the spec says."""
    h = spec.hidden_size
    mats = 3 if spec.gated_mlp else 2
    params = mats * h * intermediate
    if spec.mlp_bias:
        params += (2 if spec.gated_mlp else 1) * intermediate + h
    return params


def expert_params(spec: ModelSpec) -> int:
    """Parameters of one routed expert (0 for a dense model)."""
    return 0 if spec.moe is None else _mlp_params(spec, spec.moe.expert_intermediate_size)


def attention_params_per_layer(spec: ModelSpec) -> int:
    """Attention projection weights (and biases) of one layer, norms excluded.

    GQA: q = hidden x heads*head_dim, k and v = hidden x kv_heads*head_dim each,
    o = heads*head_dim x hidden. MLA: q_a (hidden x q_lora_rank) and q_b (q_lora_rank x
    heads*(nope+rope)) or a plain q_proj when q_lora_rank is 0; kv_a (hidden x
    kv_lora_rank+rope); kv_b (kv_lora_rank x heads*(nope+v)); o (heads*v x hidden).
    """
    h, n = spec.hidden_size, spec.num_attention_heads
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * m.q_lora_rank + m.q_lora_rank * n * qk if m.q_lora_rank else h * n * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + n * m.v_head_dim * h
    q_out, kv_out = n * spec.head_dim, spec.num_kv_heads * spec.head_dim
    params = 2 * h * q_out + 2 * h * kv_out
    if spec.attention_bias:
        params += q_out + 2 * kv_out + h
    return params


def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Count the parameters of ``spec`` by component (conventions: module docstring)."""
    h, layers = spec.hidden_size, spec.num_layers
    embedding = spec.vocab_size * h
    norms = 2 * h * layers + h
    if spec.mla is not None:
        norms += (spec.mla.q_lora_rank + spec.mla.kv_lora_rank) * layers
    routed = routed_active = shared = router = 0
    dense_layers = layers
    if spec.moe is not None:
        moe, moe_layers = spec.moe, spec.num_moe_layers
        dense_layers = moe.num_dense_layers
        one = expert_params(spec)
        routed = moe_layers * moe.num_experts * one
        routed_active = moe_layers * moe.top_k * one
        shared = moe_layers * moe.num_shared_experts * _mlp_params(spec, moe.shared_intermediate_size)
        router = moe_layers * (h * moe.num_experts + (moe.num_experts if spec.mlp_bias else 0))
    return ParamBreakdown(
        embedding=embedding,
        lm_head=0 if spec.tie_word_embeddings else embedding,
        attention=layers * attention_params_per_layer(spec),
        dense_mlp=dense_layers * _mlp_params(spec, spec.intermediate_size),
        routed_experts=routed,
        routed_experts_active=routed_active,
        shared_experts=shared,
        router=router,
        norms=norms,
    )


def param_count_total(spec: ModelSpec) -> int:
    """All weights including input embedding and lm_head (tied once); MTP excluded."""
    return param_breakdown(spec).total


def param_count_active(spec: ModelSpec, embeddings: str = "once") -> int:
    """Weights used per token; ``embeddings`` is "once" (default), "both" or "none"."""
    return param_breakdown(spec).active(embeddings)


def weight_bytes(spec: ModelSpec, precision: str) -> float:
    """Bytes of all weights when block linears are stored in ``precision``.

    Embeddings, lm_head, norms and routers stay bf16 below 2 bytes per element; for a
    model whose native recipe quantizes routed experts only, at the native width the other
    block linears stay bf16 too (see module docstring).
    """
    b = bytes_per_element(precision)
    keep = b if b >= BYTES_PER_ELEMENT["bf16"] else BYTES_PER_ELEMENT["bf16"]
    p = param_breakdown(spec)
    kept = p.embedding + p.lm_head + p.norms + p.router
    others = p.attention + p.dense_mlp + p.shared_experts
    experts_only = (spec.quant_scope == "experts"
                    and b == BYTES_PER_ELEMENT.get(spec.native_dtype, -1.0))
    if experts_only:
        return p.routed_experts * b + (others + kept) * keep
    return (p.routed_experts + others) * b + kept * keep


def kv_bytes_per_token_per_layer(spec: ModelSpec, kv_dtype: str) -> float:
    """KV-cache bytes one token occupies in one layer.

    GQA: K and V, ``2 * kv_heads * head_dim`` elements. MLA: the compressed latent plus the
    decoupled rotary key, ``kv_lora_rank + qk_rope_head_dim`` elements.
    """
    b = bytes_per_element(kv_dtype)
    if spec.mla is not None:
        return (spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim) * b
    return 2 * spec.num_kv_heads * spec.head_dim * b


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str) -> float:
    """KV bytes per token over all layers, sliding-window layers counted as full."""
    return kv_bytes_per_token_per_layer(spec, kv_dtype) * spec.num_layers


def _check_context(context_len: int) -> None:
    if isinstance(context_len, bool) or not isinstance(context_len, int) or context_len < 0:
        raise ConfigError(f"context length must be a non-negative integer, got {context_len!r}",
                          key="context_len")


def kv_bytes_sequence(spec: ModelSpec, kv_dtype: str, context_len: int) -> float:
    """KV bytes one sequence of ``context_len`` tokens holds, sliding layers capped at the window."""
    _check_context(context_len)
    sliding = spec.num_sliding_layers if spec.sliding_window > 0 else 0
    tokens = (spec.num_layers - sliding) * context_len + sliding * min(context_len, spec.sliding_window)
    return kv_bytes_per_token_per_layer(spec, kv_dtype) * tokens


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

    GQA: ``4 * heads * head_dim`` per attended key and layer. MLA prefill runs un-absorbed
    (``2*heads*(nope+rope) + 2*heads*v``); MLA decode runs weight-absorbed over the latent
    cache (``2*heads*(kv_lora+rope) + 2*heads*kv_lora``), as FlashMLA-style kernels do.
    Sliding-window layers attend to at most the window.
    """
    _check_context(context_len)
    if phase not in PHASES:
        raise ConfigError(f"unknown phase '{phase}'", key="phase", fix=suggest(str(phase), PHASES))
    n = spec.num_attention_heads
    if spec.mla is None:
        per_key = 2 * n * (spec.head_dim + spec.head_dim)
    elif phase == "prefill":
        m = spec.mla
        per_key = 2 * n * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
    else:
        m = spec.mla
        per_key = 2 * n * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank)
    sliding = spec.num_sliding_layers if spec.sliding_window > 0 else 0
    keys = ((spec.num_layers - sliding) * _mean_attended(context_len, 0, phase)
            + sliding * _mean_attended(context_len, spec.sliding_window, phase))
    return per_key * keys


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

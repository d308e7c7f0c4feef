"""The linear weight tensors of a :class:`ModelSpec`, layer by layer, with module names.

One list serves two purposes: :mod:`model_catalog.derived` sums it into parameter counts,
and :mod:`model_catalog.quant` matches its module names against a checkpoint's
quantization patterns (``exclude_modules``, ``ignore``, ``targets``) to find which tensors
a quantized checkpoint stores in which format.

Module names follow the Hugging Face implementations (``self_attn.q_proj``,
``linear_attn.in_proj_qkv``, ``self_attn.indexer.wk``, ``mlp.experts.0.gate_proj``, ...);
where families name the same tensor differently all variants are listed, and the layer
prefix (``model.layers.``, ``model.language_model.layers.`` ...) is tried in every form.
Layers with a dense MLP are taken to be the leading ones (DeepSeek/GLM/Kimi
``first_k_dense_replace``); Llama-4 interleaves them, which only matters for a per-layer
quantization pattern (no Llama-4 checkpoint here has one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from llmplan.model_catalog.spec import ModelSpec

#: weight components a quantization format can cover.
COMPONENTS = ("attention", "indexer", "linear_attention", "dense_mlp", "shared_experts", "routed_experts",
              "lm_head")
#: layer prefixes used by the families' module trees (text-only and multimodal wrappers).
LAYER_PREFIXES = ("model.layers.", "model.language_model.layers.", "language_model.model.layers.",
                  "backbone.layers.", "model.language_model.model.layers.")


@dataclass(frozen=True)
class LinearTensor:
    component: str                 # one of COMPONENTS
    layer: int                     # layer index; -1 for lm_head
    names: tuple[str, ...]         # module names relative to the layer (variants)
    params: int                    # parameters of one tensor, bias included
    count: int = 1                 # identical tensors (routed experts)

    def full_names(self) -> list[str]:
        if self.layer < 0:
            return [*self.names, *(f"language_model.{n}" for n in self.names)]
        return [f"{pre}{self.layer}.{n}" for pre in LAYER_PREFIXES for n in self.names]


#: module paths of one routed expert; Gemma-4 keeps experts beside (not under) its dense ``mlp``.
_ROUTED_STEMS = ("mlp.experts.0", "block_sparse_moe.experts.0", "feed_forward.experts.0", "mlp.experts")
_ROUTED_STEMS_GEMMA4 = ("experts.0", "moe.experts.0", "experts")


def linear_attention_layers(spec: ModelSpec) -> frozenset[int]:
    if spec.linear is None:
        return frozenset()
    return frozenset(spec.linear.layer_indices)


def _mlp(spec: ModelSpec, component: str, layer: int, inter: int, stems: tuple[str, ...], count: int = 1,
         gate_up_down: tuple[tuple[str, ...], ...] = (), hidden: int = 0) -> list[LinearTensor]:
    """Gate (if gated), up and down projections; ``gate_up_down`` names them explicitly."""
    h, bias = hidden or spec.hidden_size, spec.mlp_bias
    default = (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))
    parts = gate_up_down or (default if spec.gated_mlp else default[1:])
    out = []
    for mats in parts:
        down = mats[0] == "down_proj"
        params = h * inter + ((h if down else inter) if bias else 0)
        names = tuple(f"{stem}.{m}" for stem in stems for m in mats)
        out.append(LinearTensor(component, layer, names, params, count))
    return out


def _attention(spec: ModelSpec, i: int) -> list[LinearTensor]:
    h, n = spec.hidden_size, spec.num_attention_heads
    t: list[LinearTensor] = []
    if i in linear_attention_layers(spec):
        g = spec.linear
        vd = g.num_value_heads * g.value_head_dim
        if g.kind == "mamba2":  # in_proj: z, x, B, C, dt; out_proj
            return [LinearTensor("linear_attention", i, ("mixer.in_proj",), h * (g.conv_channels + vd + g.num_value_heads)),
                    LinearTensor("linear_attention", i, ("mixer.out_proj",), vd * h)]
        for name, params in (("in_proj_qkv", h * g.conv_channels), ("in_proj_z", h * vd),
                             ("in_proj_b", h * g.num_value_heads), ("in_proj_a", h * g.num_value_heads),
                             ("out_proj", vd * h)):
            t.append(LinearTensor("linear_attention", i, (f"linear_attn.{name}",), params))
        return t
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            t += [LinearTensor("attention", i, ("self_attn.q_a_proj",), h * m.q_lora_rank),
                  LinearTensor("attention", i, ("self_attn.q_b_proj",), m.q_lora_rank * n * qk)]
        else:
            t.append(LinearTensor("attention", i, ("self_attn.q_proj",), h * n * qk))
        t += [LinearTensor("attention", i, ("self_attn.kv_a_proj_with_mqa",), h * (m.kv_lora_rank + m.qk_rope_head_dim)),
              LinearTensor("attention", i, ("self_attn.kv_b_proj",),
                           m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)),
              LinearTensor("attention", i, ("self_attn.o_proj",), n * m.v_head_dim * h)]
        s = spec.sparse
        if s is not None and i < s.num_indexer_layers:
            q_in = m.q_lora_rank or h
            t += [LinearTensor("indexer", i, ("self_attn.indexer.wq_b",), q_in * s.index_n_heads * s.index_head_dim),
                  LinearTensor("indexer", i, ("self_attn.indexer.wk",), h * s.index_head_dim),
                  LinearTensor("indexer", i, ("self_attn.indexer.weights_proj",), h * s.index_n_heads)]
        return t
    ga = spec.global_attention
    if ga is not None and i in ga.layer_indices:  # Gemma-4 global layer; k_eq_v: no v_proj
        q_out, kv_out = n * ga.head_dim, ga.num_kv_heads * ga.head_dim
        t = [LinearTensor("attention", i, ("self_attn.q_proj",), h * q_out),
             LinearTensor("attention", i, ("self_attn.k_proj",), h * kv_out),
             LinearTensor("attention", i, ("self_attn.o_proj",), q_out * h)]
        if not ga.k_eq_v:
            t.append(LinearTensor("attention", i, ("self_attn.v_proj",), h * kv_out))
        return t
    kv = spec.sliding_kv_heads if i in spec.sliding_layers else spec.num_kv_heads
    q_out, k_out, v_out = n * spec.head_dim, kv * spec.head_dim, kv * spec.value_head_dim
    o_in = n * spec.value_head_dim
    b = spec.attention_bias
    gate = 2 if spec.attn_output_gate else 1
    mod = "mixer" if spec.block_pattern else "self_attn"
    return [LinearTensor("attention", i, (f"{mod}.q_proj",), gate * h * q_out + (gate * q_out if b else 0)),
            LinearTensor("attention", i, (f"{mod}.k_proj",), h * k_out + (k_out if b else 0)),
            LinearTensor("attention", i, (f"{mod}.v_proj",), h * v_out + (v_out if b else 0)),
            LinearTensor("attention", i, (f"{mod}.o_proj",), o_in * h + (h if b else 0))]


def _nemotron_block(spec: ModelSpec, i: int, kind: str) -> list[LinearTensor]:
    """One Nemotron-H block: Mamba2 (M), attention (*), MoE (E) or MLP (-) mixer."""
    if kind in "M*":
        return _attention(spec, i)
    up_down = (("up_proj",), ("down_proj",))
    if kind == "-":
        return _mlp(spec, "dense_mlp", i, spec.intermediate_size, ("mixer",), gate_up_down=up_down)
    e, h = spec.moe, spec.hidden_size
    out = _mlp(spec, "routed_experts", i, e.expert_intermediate_size, ("mixer.experts.0", "mixer.experts"),
               count=e.num_experts, gate_up_down=up_down, hidden=e.latent_size)
    if e.num_shared_experts:
        out += _mlp(spec, "shared_experts", i, e.shared_intermediate_size, ("mixer.shared_experts",),
                    count=e.num_shared_experts, gate_up_down=up_down)
    if e.latent_size:  # always-active projections into and out of the experts' latent width
        out += [LinearTensor("shared_experts", i, ("mixer.fc1_latent_proj",), h * e.latent_size),
                LinearTensor("shared_experts", i, ("mixer.fc2_latent_proj",), e.latent_size * h)]
    return out


def layer_is_moe(spec: ModelSpec, layer: int) -> bool:
    return spec.moe is not None and layer >= spec.moe.num_dense_layers


def linear_tensors(spec: ModelSpec) -> tuple[LinearTensor, ...]:
    """Every linear weight of the language model (no embeddings, norms or routers)."""
    return _linear_tensors(spec)


@functools.lru_cache(maxsize=512)
def _linear_tensors(spec: ModelSpec) -> tuple[LinearTensor, ...]:
    out: list[LinearTensor] = []
    if spec.block_pattern:
        for i, kind in enumerate(spec.block_pattern):
            out += _nemotron_block(spec, i, kind)
        if not spec.tie_word_embeddings:
            out.append(LinearTensor("lm_head", -1, ("lm_head",), spec.vocab_size * spec.hidden_size))
        return tuple(out)
    for i in range(spec.num_layers):
        out += _attention(spec, i)
        if layer_is_moe(spec, i):
            e = spec.moe
            out += _mlp(spec, "routed_experts", i, e.expert_intermediate_size,
                        _ROUTED_STEMS_GEMMA4 if spec.architecture.startswith("Gemma4") else _ROUTED_STEMS,
                        count=e.num_experts)
            if e.num_shared_experts:
                stems = ("mlp",) if e.shared_is_dense_mlp else ("mlp.shared_experts", "mlp.shared_expert",
                                                                 "feed_forward.shared_expert")
                out += _mlp(spec, "shared_experts", i, e.shared_intermediate_size, stems, count=e.num_shared_experts)
        else:
            out += _mlp(spec, "dense_mlp", i, spec.intermediate_size, ("mlp", "feed_forward"))
    if not spec.tie_word_embeddings:
        out.append(LinearTensor("lm_head", -1, ("lm_head",), spec.vocab_size * spec.hidden_size))
    return tuple(out)


def component_params(spec: ModelSpec) -> dict[str, int]:
    """Parameters of each component (COMPONENTS order), summed over layers."""
    return dict(_component_params(spec))


@functools.lru_cache(maxsize=512)
def _component_params(spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    total = dict.fromkeys(COMPONENTS, 0)
    for t in linear_tensors(spec):
        total[t.component] += t.params * t.count
    return tuple(total.items())

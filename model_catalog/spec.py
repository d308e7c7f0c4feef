"""The typed, frozen architecture record parsed from a config.json.

Only the fields the performance model needs. Derived quantities (parameter counts,
weight bytes, KV bytes per token, linear-attention state per sequence, FLOPs per token)
live in :mod:`model_catalog.derived` so they stay consistent.

Families (:attr:`ModelSpec.family`): dense GQA, MoE, MLA (DeepSeek-style latent KV),
sparse attention (DSA: an indexer picks the ``index_topk`` keys each query attends to)
and hybrid linear attention (Gated DeltaNet layers with a fixed-size recurrent state
per sequence, mixed with full-attention layers).
"""

from __future__ import annotations

from dataclasses import dataclass


#: bytes per element of each precision name used in configs (weights, activations, KV).
#: fp4 counts the MX/NV block scales (1 byte per 32 or 16 elements) as ~0.53 byte. This is
#: the kernel model's traffic estimate; exact weight bytes use :class:`QuantSpec`.
BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.53, "int4": 0.53}


@dataclass(frozen=True)
class MoESpec:
    num_experts: int              # routed experts per MoE layer
    top_k: int                    # experts each token is routed to
    expert_intermediate_size: int  # FFN width of one routed expert
    num_shared_experts: int = 0   # always-active shared experts (DeepSeek, Qwen2-MoE)
    shared_intermediate_size: int = 0  # FFN width of one shared expert
    num_dense_layers: int = 0     # layers with a dense MLP: leading (DeepSeek first_k_dense_replace)
    #                               or interleaved (Llama-4 Maverick); a count, not positions
    shared_is_dense_mlp: bool = False  # the "shared expert" is the layer's dense MLP running beside
    #                                    the routed experts (Gemma-4 enable_moe_block)
    latent_size: int = 0          # routed experts work in a latent width (Nemotron-3 moe_latent_size):
    #                               hidden -> latent and latent -> hidden projections around them


@dataclass(frozen=True)
class MLASpec:
    q_lora_rank: int              # 0 when queries are not low-rank compressed
    kv_lora_rank: int             # latent KV width cached per token
    qk_nope_head_dim: int
    qk_rope_head_dim: int         # decoupled rotary part, also cached per token
    v_head_dim: int


@dataclass(frozen=True)
class SparseAttentionSpec:
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a lightning indexer scores every
    cached token with ``index_n_heads`` small heads over its own fp8 key cache
    (``index_head_dim`` per token and layer), and MLA attends only to the ``index_topk``
    best tokens. Source: DeepSeek-V3.2-Exp report (github.com/deepseek-ai/DeepSeek-V3.2-Exp,
    "DeepSeek Sparse Attention"); GLM-5 config.json (zai-org/GLM-5)."""

    index_n_heads: int
    index_head_dim: int
    index_topk: int               # keys each query attends to (once the context is longer)
    num_indexer_layers: int       # layers that run their own indexer (GLM-5.2: others share)


@dataclass(frozen=True)
class LinearAttentionSpec:
    """Linear-attention layers of a hybrid model: Gated DeltaNet (Qwen3.5 / Qwen3-Next) or
    Mamba2 (Nemotron-H). Per sequence a recurrent state of ``num_value_heads x key_head_dim x
    value_head_dim`` (``state_dtype``) plus a causal-conv1d state of ``(conv_kernel - 1)``
    tokens of the conv channels; no per-token KV. Mamba2 maps onto the same shape: value
    heads = ``mamba_num_heads``, value head dim = ``mamba_head_dim``, key heads = ``n_groups``
    (B/C groups), key head dim = ``ssm_state_size``. Sources: Yang et al., "Gated Delta
    Networks" (arXiv:2412.06464); Dao and Gu, "Transformers are SSMs" (Mamba2,
    arXiv:2405.21060); the Qwen3.5 and Nemotron-H config.json files."""

    kind: str                     # "gdn" | "mamba2"
    num_layers: int               # linear-attention layers (the rest are full attention)
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    state_dtype: str = "fp32"     # recurrent (SSM) state precision
    layer_indices: tuple[int, ...] = ()  # which layers are linear attention
    conv_bias: bool = False       # conv1d has a bias (Mamba2 use_conv_bias)

    @property
    def conv_channels(self) -> int:
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class GlobalAttentionSpec:
    """Full-attention layers whose geometry differs from the sliding-window layers
    (Gemma-4: ``global_head_dim``, ``num_global_key_value_heads``; with
    ``attention_k_eq_v`` the key projection doubles as the value, so the layer has no
    v_proj). The KV cache still holds K and V per token (paged-attention caches store both
    tensors); ModelSpec's ``head_dim`` / ``num_kv_heads`` describe the sliding layers."""

    head_dim: int
    num_kv_heads: int
    k_eq_v: bool
    layer_indices: tuple[int, ...]


@dataclass(frozen=True)
class WeightFormat:
    """A stored weight format: ``bits`` per value plus one ``scale_bytes`` scale per
    ``group_size`` values, plus ``tensor_scale_bytes`` per tensor.

    Sources: NVFP4 = e2m1 values, one fp8 (e4m3) scale per 16 values and fp32 per-tensor
    scales (NVIDIA, "Introducing NVFP4", developer.nvidia.com/blog, 2025; ModelOpt stores
    ``weight_scale_2`` and ``input_scale``); MXFP4 = one e8m0 scale per 32 values (OCP
    Microscaling Formats v1.0); DeepSeek-style fp8 = one fp32 scale per 128x128 block
    (DeepSeek-V3 report, arXiv:2412.19437 sec. 3.3); compressed-tensors int4 group
    quantization = one bf16 scale per ``group_size`` values (Kimi-K2.5 config).
    """

    name: str                     # fp8_tensor | fp8_block128 | nvfp4 | mxfp4 | int4_g32 ...
    precision: str                # fp8 | fp4 | int4 | int8 (a BYTES_PER_ELEMENT key)
    bits: int
    group_size: int = 0           # values per block scale; 0 = no block scales
    scale_bytes: float = 0.0      # bytes of one block scale
    tensor_scale_bytes: float = 0.0  # per-tensor scalars (bytes per tensor)

    @property
    def bytes_per_element(self) -> float:
        return self.bits / 8.0 + (self.scale_bytes / self.group_size if self.group_size else 0.0)


@dataclass(frozen=True)
class QuantPart:
    """Parameters of one weight component stored in one format."""

    component: str                # attention | indexer | linear_attention | dense_mlp | shared_experts | routed_experts | lm_head
    fmt: WeightFormat
    params: int
    tensors: int                  # quantized tensors (for the per-tensor scales)


@dataclass(frozen=True)
class QuantSpec:
    """The shipped weight format of a quantized checkpoint, read from its
    ``quantization_config`` (config.json) or ``hf_quant_config.json`` (NVIDIA ModelOpt),
    resolved per weight component: the linear weights each format covers (``parts``);
    every other weight stays bf16 (e.g. NVIDIA NVFP4 checkpoints keep attention in bf16).
    ``precision`` is the format that covers the most parameters."""

    parts: tuple[QuantPart, ...]
    source: str = ""

    @property
    def main(self) -> WeightFormat:
        by_fmt: dict[WeightFormat, int] = {}
        for part in self.parts:
            by_fmt[part.fmt] = by_fmt.get(part.fmt, 0) + part.params
        return max(by_fmt, key=lambda f: (by_fmt[f], -f.bits))

    @property
    def precision(self) -> str:
        return self.main.precision

    def quantized_params(self, component: str) -> int:
        return sum(p.params for p in self.parts if p.component == component)

    def main_part(self, component: str) -> QuantPart | None:
        """The part that stores most of ``component``'s quantized parameters (None: none)."""
        return max((p for p in self.parts if p.component == component), key=lambda p: p.params, default=None)


@dataclass(frozen=True)
class ModelSpec:
    key: str                      # catalog short name, e.g. "llama3_1_70b"
    hf_id: str                    # Hugging Face id, e.g. "meta-llama/Llama-3.1-70B"
    architecture: str             # e.g. "LlamaForCausalLM"
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int        # dense MLP width (dense layers of MoE models too)
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    native_dtype: str             # "bf16", "fp8" (shipped FP8 weights), "fp4" (gpt-oss mxfp4)
    gated_mlp: bool = True        # SwiGLU-style (3 matrices) vs 2-matrix MLP
    sliding_window: int = 0       # tokens; 0 = none
    num_sliding_layers: int = 0   # layers using the sliding window (gpt-oss alternates)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    source: str = ""              # where the config.json came from
    # --- added by the model catalog (defaults keep older constructors valid) ---
    attention_bias: bool = False  # q/k/v/o projections carry biases (gpt-oss; config attention_bias)
    mlp_bias: bool = False        # MLP/expert projections and router carry biases (gpt-oss)
    sparse: SparseAttentionSpec | None = None   # DSA indexer (with MLA)
    linear: LinearAttentionSpec | None = None   # hybrid linear-attention layers
    attn_output_gate: bool = False  # full-attention q_proj also emits a sigmoid output gate (Qwen3.5)
    quant: QuantSpec | None = None  # shipped weight format; None for bf16/fp16 checkpoints
    vision_excluded: bool = False   # config has a vision encoder that text serving leaves out
    global_attention: GlobalAttentionSpec | None = None  # full layers with their own geometry (Gemma-4)
    v_head_dim: int = 0           # value head dim where it differs from head_dim (MiMo-V2); 0 = same
    sliding_num_kv_heads: int = 0  # KV heads of the sliding-window layers where they differ (MiMo-V2)
    sliding_layers: tuple[int, ...] = ()  # which layers slide (recorded when their geometry differs)
    block_pattern: str = ""       # Nemotron-H: one block type per layer (M Mamba2, * attention,
    #                               E MoE, - MLP); each "layer" is then a single block with one norm

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def quant_scope(self) -> str:
        """Which linear weights the shipped low-precision format covers: "experts" when it
        quantizes routed experts only (gpt-oss mxfp4, Kimi-K2.5 int4; the rest ships in
        bf16), else "all" (read from ``quant``)."""
        if self.quant is not None and all(p.component == "routed_experts" for p in self.quant.parts):
            return "experts"
        return "all"

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def sliding_kv_heads(self) -> int:
        return self.sliding_num_kv_heads or self.num_kv_heads

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with softmax attention and a per-token KV cache."""
        if self.block_pattern:
            return self.block_pattern.count("*")
        return self.num_layers - (self.linear.num_layers if self.linear is not None else 0)

    @property
    def num_dense_mlp_layers(self) -> int:
        """Layers with a dense MLP (not counting the dense MLP of Gemma-4 MoE layers)."""
        if self.block_pattern:
            return self.block_pattern.count("-")
        return self.num_layers - self.num_moe_layers

    @property
    def family(self) -> str:
        """Architecture family: attention kind plus "MoE" where routed experts exist."""
        if self.linear is not None:
            attn = f"hybrid linear attention ({'Mamba2' if self.linear.kind == 'mamba2' else 'GDN'})"
        elif self.sparse is not None:
            attn = "sparse attention (DSA+MLA)"
        elif self.mla is not None:
            attn = "MLA"
        elif self.num_kv_heads < self.num_attention_heads:
            attn = "GQA"
        else:
            attn = "MHA"
        if self.sliding_window and self.num_sliding_layers and self.linear is None:
            attn += "+sliding"
        return (f"MoE, {attn}" if self.is_moe else f"dense {attn}")

    @property
    def num_moe_layers(self) -> int:
        if self.moe is None:
            return 0
        if self.block_pattern:
            return self.block_pattern.count("E")
        return self.num_layers - self.moe.num_dense_layers

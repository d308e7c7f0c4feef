"""The typed, frozen architecture record parsed from a config.json.

Only the fields the performance model needs. Derived quantities (parameter counts,
weight bytes, KV bytes per token, FLOPs per token) are methods so they stay consistent.
"""

from __future__ import annotations

from dataclasses import dataclass


#: bytes per element of each precision name used in configs (weights, activations, KV).
#: fp4 counts the MX/NV block scales (1 byte per 32 or 16 elements) as ~0.53 byte.
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


@dataclass(frozen=True)
class MLASpec:
    q_lora_rank: int              # 0 when queries are not low-rank compressed
    kv_lora_rank: int             # latent KV width cached per token
    qk_nope_head_dim: int
    qk_rope_head_dim: int         # decoupled rotary part, also cached per token
    v_head_dim: int


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
    quant_scope: str = "all"      # which linear weights the shipped low-precision format covers:
    #                               "all" (every block linear) or "experts" (routed experts only:
    #                               gpt-oss mxfp4, Kimi-K2.5 int4; attention etc. ship in bf16)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.num_dense_layers

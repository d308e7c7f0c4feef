"""Elementwise kernels TensorRT-LLM folds into others, per model architecture.

The step model times RMSNorm (two per layer) and RoPE (one per attention layer) as their own
memory-bound kernels, at the launch floor when the batch is small (5 us each, i.e. 1.2 ms per
decode step for Llama-3.1-70B's 80 layers, 0.94 ms of norms for Qwen3-235B's 94). TensorRT-LLM's
PyTorch backend runs some of them inside other kernels, decided per modeling file:

* **RMSNorm inside the TP all-reduce** (``AllReduceFusionOp.RESIDUAL_RMS_NORM``: all-reduce +
  residual add + RMSNorm of the next block's input in one kernel, only where a TP all-reduce
  runs, i.e. tensor parallel and no attention DP):

  - ``LlamaForCausalLM`` (``LlamaDecoderLayer``, tensorrt_llm/_torch/models/modeling_llama.py,
    TensorRT-LLM 1.0-1.2): after attention (``PRE_MLP_FUSION``: TP and no attention DP) and after
    the MLP (``POST_MLP_FUSION``: TP), both only for ``hidden_size > 4096`` ("Disable fusion for
    small models due to accuracy issues") unless ``TRTLLM_LLAMA_EAGER_FUSION_DISABLED=1``.
    Llama-3.1-70B / 405B at TP > 1 fold both norms; Llama-3.1-8B (hidden 4096) and TP 1 none.
  - ``Qwen3MoeForCausalLM`` (``Qwen3MoEDecoderLayer``, modeling_qwen3_moe.py, the same in the
    mid-2025 file and the current one): ``enable_fusion`` unless
    ``TRTLLM_QWEN3_EAGER_FUSION_DISABLED=1`` and not with attention DP;
    ``PRE_MOE_FUSION = enable_fusion and has_tp`` (post-attention norm),
    ``POST_MOE_FUSION = PRE_MOE_FUSION and not has_pp`` (next layer's input norm). No hidden-size
    condition: Qwen3-235B-A22B at TP 4/8 folds both. The dense ``Qwen3ForCausalLM``
    (``Qwen3DecoderLayer``, modeling_qwen3.py) fuses nothing: its norms stay.

* **RoPE inside the attention kernel.** The default attention backend ``TRTLLM`` applies the
  rotary embedding in the attention op's fused QKV preprocessing
  (``TrtllmAttention.support_fused_rope() -> True``,
  tensorrt_llm/_torch/attention_backend/trtllm.py), so Llama runs no rotary kernel of its own.
  Qwen3 (dense and MoE) does not use it: ``Qwen3Attention`` applies q/k RMSNorm and RoPE in one
  kernel of its own before attention (``fuse_qk_norm_rope=True``,
  ``torch.ops.trtllm.fused_qk_norm_rope``), which the step model's rotary operator stands for.

Not covered (not checked against their modeling files or left out on purpose): DeepSeek MLA
(``DeepseekV3DecoderLayer`` also fuses, but MLA's own ``q_a_layernorm`` / ``kv_a_layernorm``
kernels, not operators of the step model, still run; docs/ACCURACY.md "TensorRT-LLM rows"),
gpt-oss and the other architectures.
"""

from __future__ import annotations

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.types import Parallelism

LLAMA_ARCHITECTURES = frozenset({"LlamaForCausalLM"})
QWEN3_MOE_ARCHITECTURES = frozenset({"Qwen3MoeForCausalLM"})
#: ``self.enable_fusion &= config.hidden_size > 4096`` in TensorRT-LLM's LlamaDecoderLayer
MIN_FUSED_HIDDEN = 4096


def _trtllm(backend: str, model: ModelSpec, architectures: frozenset[str]) -> bool:
    return backend == "trtllm" and model.architecture in architectures and model.mla is None


def norms_in_allreduce(backend: str, model: ModelSpec, par: Parallelism) -> int:
    """RMSNorms per layer that run inside the TP all-reduce kernel (0, 1 or 2)."""
    if par.tp <= 1:
        return 0  # no all-reduce to fuse into
    if _trtllm(backend, model, LLAMA_ARCHITECTURES):
        if model.hidden_size <= MIN_FUSED_HIDDEN:
            return 0
        return 2 if par.dp <= 1 else 1
    if _trtllm(backend, model, QWEN3_MOE_ARCHITECTURES):
        if par.dp > 1:
            return 0  # enable_fusion &= not enable_attention_dp
        return 2 if par.pp <= 1 else 1  # POST_MOE_FUSION needs no pipeline parallelism
    return 0


def rope_in_attention(backend: str, model: ModelSpec) -> bool:
    """Whether RoPE runs inside the attention kernel (no rotary kernel of its own)."""
    return _trtllm(backend, model, LLAMA_ARCHITECTURES)

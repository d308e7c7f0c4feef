"""Elementwise kernels TensorRT-LLM folds into others when it serves a Llama model.

The step model times RMSNorm (two per layer) and RoPE (one per attention layer) as their own
memory-bound kernels, at the launch floor when the batch is small (5 us each, i.e. 1.2 ms per
decode step for Llama-3.1-70B's 80 layers). TensorRT-LLM's PyTorch backend runs neither as a
kernel of its own for ``LlamaForCausalLM``:

* **RMSNorm inside the TP all-reduce.** ``LlamaDecoderLayer`` fuses all-reduce + residual add +
  RMSNorm (+ the fp8 / nvfp4 quantization of the next GEMM's input) into one kernel
  (``AllReduceFusionOp.RESIDUAL_RMS_NORM[_QUANT_FP8]``): after attention (``PRE_MLP_FUSION``:
  tensor parallel and no attention DP) and after the MLP (``POST_MLP_FUSION``: tensor parallel),
  both only for ``hidden_size > 4096`` ("Disable fusion for small models due to accuracy
  issues") unless ``TRTLLM_LLAMA_EAGER_FUSION_DISABLED=1``
  (tensorrt_llm/_torch/models/modeling_llama.py, TensorRT-LLM 1.0-1.2). Llama-3.1-70B / 405B
  at TP > 1 fold both norms; Llama-3.1-8B (hidden 4096) and TP 1 fold none.
* **RoPE inside the attention kernel.** Its default attention backend ``TRTLLM`` applies the
  rotary embedding in the attention op's fused QKV preprocessing
  (``TrtllmAttention.support_fused_rope() -> True``,
  tensorrt_llm/_torch/attention_backend/trtllm.py), so no separate rotary kernel runs.

Only ``LlamaForCausalLM`` is covered: the other models TensorRT-LLM serves here (Qwen3 with its
fused QK-norm + RoPE kernel, DeepSeek MLA) have their own modeling files, not checked.
"""

from __future__ import annotations

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.types import Parallelism

LLAMA_ARCHITECTURES = frozenset({"LlamaForCausalLM"})
#: ``self.enable_fusion &= config.hidden_size > 4096`` in TensorRT-LLM's LlamaDecoderLayer
MIN_FUSED_HIDDEN = 4096


def _applies(backend: str, model: ModelSpec) -> bool:
    return backend == "trtllm" and model.architecture in LLAMA_ARCHITECTURES and model.mla is None


def norms_in_allreduce(backend: str, model: ModelSpec, par: Parallelism) -> int:
    """RMSNorms per layer that run inside the TP all-reduce kernel (0, 1 or 2)."""
    if not _applies(backend, model) or par.tp <= 1 or model.hidden_size <= MIN_FUSED_HIDDEN:
        return 0
    return 2 if par.dp <= 1 else 1


def rope_in_attention(backend: str, model: ModelSpec) -> bool:
    """Whether RoPE runs inside the attention kernel (no rotary kernel of its own)."""
    return _applies(backend, model)

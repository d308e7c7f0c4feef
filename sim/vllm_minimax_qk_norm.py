"""vLLM's MiniMax-M2 q/k RMSNorm under tensor parallelism: one extra all-reduce per layer.

MiniMax-M2 / M2.5 normalise the *whole* query and key projections (RMSNorm over
``num_attention_heads x head_dim`` and ``num_key_value_heads x head_dim``), not each head as
Qwen3 does. Under TP every rank holds only its heads, so vLLM's ``MiniMaxM2Attention`` runs
``MiniMaxText01RMSNormTP.forward_qk`` (vllm/model_executor/models/minimax_m2.py and
vllm/model_executor/layers/mamba/linear_attn.py, vllm-project/vllm, read at fb33ec8 / 01d9958):

1. each rank computes the mean square of its q and k shards in fp32 (``q.pow(2).mean(-1)``,
   ``k.pow(2).mean(-1)``),
2. ``torch.cat([q_var, k_var], -1)`` goes through ``tensor_model_parallel_all_reduce`` when
   ``tp_world > 1``: an all-reduce of ``tokens x 2`` fp32 values per attention layer, on top of
   the two hidden-state all-reduces of the layer,
3. each rank scales its q and k by ``rsqrt(var / tp + eps) x weight``.

The collective splits the norm into a reduction pass before it and an elementwise pass after
it. vLLM's fusion of the three into one kernel (``PassConfig.fuse_minimax_qk_norm``, "Q/K
variance all-reduce -> Q/K RMSNorm") is "Off by default" (vLLM's fusion table,
https://docs.vllm.ai/en/stable/design/fusions/), and nothing recorded about the launches of the served vLLM
MiniMax rows (0.16.0, 0.18.0; docs/ACCURACY.md, "vLLM MiniMax-M2.5") turns it on: unfused here.

Modelled here, vLLM only and only with TP > 1 (at TP 1 the catalog ignores per-layer q/k norms,
as it does Qwen3's, model_catalog/derived.py): per attention layer one all-reduce of
``tokens x 2 x 4`` bytes over the TP group (the kernel model's all-reduce, the same link as the
layer's other all-reduces), one memory pass reading q and k (the variance) and one reading and
writing them (the scaling), both at the activation width. SGLang and TensorRT-LLM were not
checked (TensorRT-LLM added a dedicated MiniMax all-reduce-RMS kernel, NVIDIA/TensorRT-LLM PR
#12163, 2026-04-20), so they keep the step model as before.
"""

from __future__ import annotations

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.types import Parallelism

#: architectures whose vLLM attention all-reduces the q/k variances under TP
QK_NORM_TP_ARCHITECTURES = frozenset({"MiniMaxM2ForCausalLM"})
#: fp32 mean squares, one for q and one for k per token
VARIANCE_BYTES_PER_TOKEN = 2 * 4


def applies(backend: str, model: ModelSpec, par: Parallelism) -> bool:
    """Whether a step of ``model`` on ``backend`` at ``par`` runs the q/k-variance all-reduce."""
    return backend == "vllm" and par.tp > 1 and model.architecture in QK_NORM_TP_ARCHITECTURES


def variance_allreduce_bytes(tokens: int) -> float:
    """Message of the per-layer q/k-variance all-reduce of a step of ``tokens`` token rows."""
    return float(tokens) * VARIANCE_BYTES_PER_TOKEN


def qk_bytes(tokens: int, heads: int, kv_heads: int, head_dim: int, act_bytes: float) -> float:
    """Bytes of one rank's q and k shards of a step (the variance pass reads them once; the
    scaling pass reads and writes them: twice this)."""
    return float(tokens) * (heads + kv_heads) * head_dim * act_bytes

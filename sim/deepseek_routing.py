"""Kernels of a TensorRT-LLM DeepSeek-V3 MoE layer that no measured MoE table times.

TensorRT-LLM's DeepSeek-V3 MoE layer (``Deepseekv3MoE`` in
tensorrt_llm/_torch/models/modeling_deepseekv3.py, TensorRT-LLM 1.x main, late 2025) runs:

* the router GEMM (``DeepseekV3Gate.forward``: ``dsv3_router_gemm_op``, fp32 logits): the step
  model's ``router`` operator;
* inside the fused-MoE module, ``DeepseekV3Gate.apply`` -> ``Deepseekv3RoutingImpl.noaux_tc``:
  ``get_scores`` (sigmoid of the logits plus the score-correction bias, one ``torch.compile``
  kernel reading the fp32 logits and writing two fp32 score tensors) and ``noaux_tc_op`` (group
  top-k), then the CUTLASS fused MoE (input quantization, permute, two grouped GEMMs, SwiGLU,
  finalize);
* the shared expert as its own ``GatedMLP`` (tensorrt_llm/_torch/modules/gated_mlp.py:
  ``gate_up_proj`` -> ``swiglu`` -> ``down_proj``): the step model's ``shared_up`` /
  ``shared_down`` GEMMs plus the activation kernel between them.

What the measured tables time (aiconfigurator ``collector/trtllm/collect_moe.py``,
ai-dynamo/aiconfigurator, ``run_moe_torch``): the fused-MoE module's ``forward`` with
``RenormalizeMoeRoutingMethod(topk)`` as its routing (DeepSeek's gate only in the Blackwell
min-latency mode), so the table's routing is a renormalize top-k, in place of ``noaux_tc_op``;
DeepSeek's ``get_scores`` kernel is not in it. The GEMM tables time one GEMM (with its input
quantization, ``sim/trtllm_fp8_inputs.py``), not the activation between two.

So a TensorRT-LLM step of a DeepSeek-V3-architecture model gets, per MoE layer, two elementwise
kernels from the kernel model's memory-bound model (``KernelModel.memory_op``, as the dense
MLP's ``mlp_act`` and the norms):

* ``moe_routing_scores``: ``get_scores`` over the rank's ``tokens x experts`` fp32 logits (read
  the logits, write scores and biased scores: 12 bytes per logit). Neither table has it: the
  wide-EP collector (``collect_wideep_moe_compute.py``, behind ``sim/wideep_moe.py``) routes with
  the same ``RenormalizeMoeRoutingMethod`` outside the min-latency mode;
* ``shared_act``: the shared expert's SwiGLU over ``tokens x shared width`` (read gate and up,
  write the product in bf16: 6 bytes per element of the width), whenever the shared expert runs
  as its own MLP.

Other engines are left as they are (their shared-expert and routing paths were not checked here).
"""

from __future__ import annotations

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.kernels import KernelModel, KernelTime

#: engines whose DeepSeek-V3 MoE layer this module describes (kernel backend names)
ENGINES = frozenset({"trtllm"})
#: architectures TensorRT-LLM serves with ``Deepseekv3MoE`` and its ``noaux_tc`` gate
NOAUX_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM"})
#: bytes per router logit of ``get_scores``: read fp32 logits, write fp32 scores and biased scores
SCORE_BYTES_PER_LOGIT = 12.0
#: bytes per element of the shared expert's width in its SwiGLU: read gate and up, write one (bf16)
SWIGLU_BYTES_PER_ELEMENT = 6.0


def applies(backend: str, model: ModelSpec) -> bool:
    """Whether a step of ``model`` on ``backend`` runs TensorRT-LLM's DeepSeek-V3 MoE layer."""
    return backend in ENGINES and model.moe is not None and model.architecture in NOAUX_ARCHITECTURES


def moe_layer_extra_ops(kernels: KernelModel, backend: str, model: ModelSpec, tokens: int,
                        shared_width: int) -> tuple[tuple[str, KernelTime], ...]:
    """(name, time) per MoE layer of the kernels above that the step's other operators leave out.

    ``tokens``: the rank's tokens of the step; ``shared_width``: the shared expert's local
    intermediate width (0: none, or folded into the fused MoE)."""
    if tokens <= 0 or not applies(backend, model):
        return ()
    e = model.moe
    out = [("moe_routing_scores", kernels.memory_op(tokens * e.num_experts * SCORE_BYTES_PER_LOGIT))]
    if shared_width > 0:
        out.append(("shared_act", kernels.memory_op(tokens * shared_width * SWIGLU_BYTES_PER_ELEMENT)))
    return tuple(out)

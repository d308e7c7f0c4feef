"""TensorRT-LLM's expert-parallel MoE without attention DP timed by its own measured CUTLASS curve.

A TensorRT-LLM replica with tensor-parallel attention and expert-parallel MoE (``moe_ep > 1``,
no attention DP; e.g. DeepSeek-V3's TP 8 / EP 8 context servers) runs every MoE layer with the
``CUTLASS`` MoE backend, the default of ``MoeConfig.backend``: ``get_moe_cls`` in
tensorrt_llm/_torch/modules/fused_moe/create_moe.py returns ``CutlassFusedMoE``, whose compute is
the ``torch.ops.trtllm.fused_moe`` CUTLASS grouped GEMMs (FP8 block scales on Hopper). The
``WIDEEP`` backend delegates the same computation to that CUTLASS op
(tensorrt_llm/_torch/modules/fused_moe/moe_backend.py: "used by MoE modules (like WideEPMoE) to
delegate the actual computation"); the measurement database's ``wideep_moe`` table
(kernel_source ``wideep_compute_cutlass``, shared/measurements/README.md) times exactly that op,
with ``num_tokens`` the tokens of the whole EP group routed over the EP ranks and the busiest
(rank 0) rank's time reported.

Without attention DP every rank holds the step's ``T`` tokens (attention output all-reduced), and
each rank runs its own experts on the tokens routed to them: the same work as the wide-EP table's
row of ``num_tokens = T`` at the same EP size, routing skew and expert shape. It is TensorRT-LLM's
only measured table with DeepSeek-V3's expert shape (7168 x 2048, 256 experts, top-8,
fp8_block): the plain ``moe`` table has TensorRT-LLM rows only for other shapes, so
``KernelModel.moe`` answers this query by cross-shape extrapolation (flagged), which at 8k tokens
(0.50 ms per layer at 1k, 1.42 ms at 8k, 2.28 ms at 16k on H200, EP 8) is sublinear where the
measured op is ~linear (0.67 / 2.50 / 4.64 ms).

Steps with a prompt only. A decode-only step (4-64 tokens per TP8 step) keeps ``KernelModel.moe``:
there the table's power-law draw puts nearly every token on the measured rank (``rank0_num_tokens``
= ``num_tokens`` up to 16 tokens at EP 8), a floor of 0.14-0.33 ms per layer that would make the
served TP8 decode rows far too slow (docs/ACCURACY.md session 9: cfg303 at 36 clients 20.4 ms
against 13.4 measured; here the training rows cfg297/301/347 TPOT 0.96-0.97x -> 1.29-1.61x), while
TensorRT-LLM's EPLB-balanced CUTLASS rows and ``KernelModel.moe`` agree within ~20 us per layer at
4-64 tokens.

The curve's lookup (interpolation, linear extrapolation flagged past 16k tokens) is
``sim.wideep_moe.wideep_moe``. No curve (other engines, GPUs, shapes or EP 1): None, and the
caller keeps ``KernelModel.moe``.
"""

from __future__ import annotations

from dataclasses import replace

from llmplan.sim.kernels import KernelTime
from llmplan.sim.wideep_moe import wideep_moe

#: engines whose non-attention-DP expert-parallel MoE runs the kernel the wide-EP table times
ENGINES = frozenset({"trtllm"})


def ep_curve_applies(engine: str, has_moe: bool, ep: int) -> bool:
    """Whether a replica's MoE steps may read the curve (the step model then keys its linear
    operators by decode-only / with a prompt, which it otherwise does only under attention DP)."""
    return engine in ENGINES and has_moe and ep > 1


def tp_ep_moe(kernels: object, gpu: str, engine: str, decode_only: bool, tokens: int, hidden: int, inter: int,
              top_k: int, num_experts: int, moe_tp: int, ep: int, dtype: str) -> KernelTime | None:
    """One MoE layer's expert time of a replica without attention DP from the measured CUTLASS
    curve (module docstring), or None where that mapping does not apply."""
    if not ep_curve_applies(engine, True, ep) or decode_only or tokens <= 0 or not getattr(kernels, "measured", False):
        return None
    kt = wideep_moe(gpu, engine, decode_only, tokens, hidden, inter, top_k, num_experts, moe_tp, ep, dtype,
                    float(getattr(kernels, "moe_skew", 1.01)))
    if kt is None:
        return None
    phys = kernels.moe(tokens, hidden, inter, top_k, num_experts, moe_tp, ep, dtype)
    # the measured time with the work of the same query (the power model reads FLOPs and bytes)
    return replace(kt, flops=phys.flops, bytes=phys.bytes, table=engine)

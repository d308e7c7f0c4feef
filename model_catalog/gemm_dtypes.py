"""The kernel dtype group each weight component's GEMMs read.

:func:`model_catalog.derived.weight_dtypes` names a component's storage precision
(``fp8``, ``fp4``, ``bf16``...), which sizes memory. The kernels also depend on the scaling
layout: block-scaled fp8 weights (``weight_block_size: [128, 128]``: DeepSeek-V3/R1,
Qwen3-*-FP8, MiniMax-M2.x, GLM-*-FP8) run on block-fp8 GEMMs, measured as their own
``fp8_block`` group and ~4x slower than per-tensor fp8 at decode sizes (vLLM, H100,
n=6144, k=4096, m=1: 0.062 ms against 0.014 ms). Per-tensor or per-channel fp8 stays
``fp8``.
"""

from __future__ import annotations

import functools

from llmplan.model_catalog.derived import weight_dtypes
from llmplan.model_catalog.quant import gemm_dtype
from llmplan.model_catalog.spec import ModelSpec


def gemm_dtypes(spec: ModelSpec, precision: str) -> dict[str, str]:
    """Per component (keys: ``tensors.COMPONENTS``) the dtype its matmul kernels are timed
    with: :func:`weight_dtypes`, with ``fp8`` components whose covering checkpoint format
    is block-scaled reported as ``fp8_block``."""
    return dict(_gemm_dtypes(spec, precision))


@functools.lru_cache(maxsize=2048)
def _gemm_dtypes(spec: ModelSpec, precision: str) -> tuple[tuple[str, str], ...]:
    wd = weight_dtypes(spec, precision)
    if spec.quant is None or precision != spec.quant.precision:
        return tuple(wd.items())
    out = []
    for c, d in wd.items():
        best = spec.quant.main_part(c)
        out.append((c, gemm_dtype(best.fmt) if best is not None and best.fmt.precision == d else d))
    return tuple(out)


#: the MoE query dtype of routed experts stored as OCP MXFP4 (e2m1 values, one e8m0 scale per 32):
#: their fused-MoE kernels are the MXFP4 ones (``sim.calibrated.mxfp4_moe_group``), not the NVFP4
#: (W4A4, 16-value blocks) kernels that an ``fp4`` query reaches on Blackwell
MXFP4_MOE_DTYPE = "mxfp4"


def moe_query_dtype(spec: ModelSpec, precision: str) -> str:
    """The dtype the fused routed-expert kernel is queried with: :func:`gemm_dtypes`'
    ``routed_experts``, or :data:`MXFP4_MOE_DTYPE` when those weights are an MXFP4 checkpoint's
    own format (gpt-oss: ``quantization_config.quant_method = mxfp4``)."""
    d = gemm_dtypes(spec, precision)["routed_experts"]
    if d == "fp4" and spec.quant is not None and precision == spec.quant.precision:
        part = spec.quant.main_part("routed_experts")
        if part is not None and part.fmt.name == "mxfp4":
            return MXFP4_MOE_DTYPE
    return d

"""The cross-gen tier's prior: what a GPU far from every measured one reverts to.

The pool weighs a measured GPU by exp(-(d/s)^2), d the distance between its and the
target's log figures (:func:`llmplan.sim.kernel_calibration.crossgen.similarity_weights`).
Normalised, those weights hand a target far from *every* measured GPU to the least far one
alone: B200 (2.3x H200's bf16 peak, 1.7x its bandwidth, 2.5x its L2) took 80% of every
answer from H200 and 20% from H100, so wherever the Hopper kernels differ from Blackwell's
(vLLM per-tensor fp8 MoE, TensorRT-LLM fp8 MLA absorb matmuls, SGLang fp8-KV MLA decode) the
tier carried Hopper's 2-5x slower figures over; the Arc Pro B60 (another vendor) took 99%
from A100.

Kernel regression with a prior mean fixes this the usual way: the prior counts as one more
member at a fixed similarity :data:`PRIOR_SIMILARITY` (a GPU at distance
``s * sqrt(-ln PRIOR_SIMILARITY)`` = 1.4 from every target, s = 0.6), so its share is
``PRIOR_SIMILARITY / (PRIOR_SIMILARITY + sum of the members' unnormalised similarities)``:
0.6% for H100 with H200 in the pool and 0.4% for GB200/B300 (under the 1% member cut: none),
3% for L40S / RTX PRO 6000 / MI300X, 12% for A100, 20-29% for H100/H200 without their twin,
32% for B200, 100% for the Arc Pro B60 (no measured GPU of its vendor). The prior itself is a
geometric mean of the specification roofline (share :data:`PRIOR_ROOFLINE_SHARE`; sim.kernels
constants, evaluated on the same physical terms) and the equal-weight pool (every member of
the group, similarity ignored).

Both constants were chosen leave-one-GPU-out on the six GPUs other than B200, with the H100/H200
rows scored with and without their twin (docs/ACCURACY.md, "Cross-gen tier"); B200's cells were
scored only after.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernels import (ATTN_DECODE_ETA_MEM, ATTN_PREFILL_ETA, GDN_CONTEXT_ETA_COMPUTE,
                                 GDN_CONTEXT_FLOOR_US, GDN_DECODE_ETA_MEM, GDN_DECODE_FLOOR_US, GEMM_ETA_COMPUTE,
                                 LAUNCH_FLOOR_US, MEM_ETA, MOE_ETA_COMPUTE)

#: unnormalised similarity the prior counts with (0: no prior)
PRIOR_SIMILARITY = 0.004
#: share of the specification roofline inside the prior (the rest: the equal-weight pool)
PRIOR_ROOFLINE_SHARE = 0.3

#: family -> (compute efficiency, memory efficiency, floor us, floor kind) of the
#: specification roofline (sim.kernels.RooflineKernelModel's constants for that family);
#: floor kind "launch": t < floor -> floor, else t + 0.2 floor; "min": max(t, floor)
ROOFLINE: dict[str, tuple[float, float, float, str]] = {
    "gemm": (GEMM_ETA_COMPUTE, MEM_ETA, LAUNCH_FLOOR_US, "launch"),
    "mla_bmm": (GEMM_ETA_COMPUTE, MEM_ETA, LAUNCH_FLOOR_US, "launch"),
    "attention_prefill": (ATTN_PREFILL_ETA, MEM_ETA, LAUNCH_FLOOR_US, "launch"),
    "mla_prefill": (ATTN_PREFILL_ETA, MEM_ETA, LAUNCH_FLOOR_US, "launch"),
    "attention_decode": (ATTN_PREFILL_ETA, ATTN_DECODE_ETA_MEM, LAUNCH_FLOOR_US, "launch"),
    "mla_decode": (ATTN_PREFILL_ETA, ATTN_DECODE_ETA_MEM, LAUNCH_FLOOR_US, "launch"),
    "moe": (MOE_ETA_COMPUTE, MEM_ETA, LAUNCH_FLOOR_US, "launch"),
    "gdn_prefill": (GDN_CONTEXT_ETA_COMPUTE, MEM_ETA, GDN_CONTEXT_FLOOR_US, "min"),
    "gdn_decode": (ATTN_PREFILL_ETA, GDN_DECODE_ETA_MEM, GDN_DECODE_FLOOR_US, "min"),
}


def prior_share(similarity_sum: float, prior_similarity: float | None = None) -> float:
    """The prior's share of the answer given the members' summed unnormalised similarity."""
    p = PRIOR_SIMILARITY if prior_similarity is None else prior_similarity
    if p <= 0:
        return 0.0
    return p / (p + max(float(similarity_sum), 0.0))


def roofline_log_us(family: str, phys: F.Phys) -> Any:
    """log(us) of the specification roofline on a family's physical terms (arrays or scalars):
    max(q t_c / eta_c, t_m / eta_m) with the family's floor (GEMMs and absorb matmuls keep
    their tile/wave quantization ``q``, as sim.kernels.RooflineKernelModel.gemm does)."""
    eta_c, eta_m, floor_us, kind = ROOFLINE.get(family, ROOFLINE["gemm"])
    quant = phys.q if family in ("gemm", "mla_bmm") else 1.0
    if np.ndim(phys.t_c) == 0 and np.ndim(phys.t_m) == 0:
        t = max(float(quant) * float(phys.t_c) / eta_c, float(phys.t_m) / eta_m)
        t = max(t, floor_us) if kind == "min" else (floor_us if t < floor_us else t + 0.2 * floor_us)
        return math.log(t)
    t = np.maximum(np.asarray(quant, dtype=np.float64) * np.asarray(phys.t_c, dtype=np.float64) / eta_c,
                   np.asarray(phys.t_m, dtype=np.float64) / eta_m)
    t = np.maximum(t, floor_us) if kind == "min" else np.where(t < floor_us, floor_us, t + 0.2 * floor_us)
    return np.log(t)

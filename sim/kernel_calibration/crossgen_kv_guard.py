"""The cross-gen tier's fp8-KV guard for MLA decode: a member GPU's fp8-KV path slower than its
own 16-bit-KV path is that GPU's fallback, not something a new generation inherits.

An fp8 KV cache halves the bytes an MLA decode kernel reads at the same FLOPs, so a native
fp8-KV kernel is never slower than the 16-bit one. On H100/H200 SGLang's fp8-KV MLA decode
is (median 1.97 vs 0.85 in log(measured / roofline), i.e. ~3x slower than bf16 KV, up to 6x at
long contexts): a fallback path. B200 runs the same queries natively (0.74, as fast as its bf16
KV), so the tier, which took 100% of B200's answer from the Hopper pair, was up to 6x too slow
(SGLang fp8-KV rows: 180% MAPE). The guard times each member's fp8-KV query as the smaller of
its fp8-KV and its 16-bit-KV prediction (the same fitted model: kv dtype is one of its
features), except for a member with the target's own compute silicon
(:func:`llmplan.sim.kernel_calibration.crossgen.same_compute`), whose kernels the target runs.
Leave-one-GPU-out on the six GPUs other than B200 it changes MLA decode by at most 0.4 points
(L40S 28.0 -> 27.6%); B200's MLA decode went 60.4 -> 25.3% with it (prior of the time), 89.8%
before this session's guards, 29.3% with all of them (roofline 48.0%; docs/ACCURACY.md,
"Cross-gen tier").

Only MLA decode: for GEMM, MoE and MLA absorb matmuls the 16-bit kernels are separate fitted
groups, and timing an 8-bit query with the 16-bit group (its peak and bytes outside that
group's data) made the six GPUs' leave-one-out worse (no-twin mean 28.3 -> 30.1%).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

#: families whose members' fp8-KV answers are bounded by their own 16-bit-KV answers
KV_GUARD_FAMILIES = ("mla_decode",)
#: index of the kv_fp8 flag in the MLA decode features
_KV_FP8 = F.FEATURES["mla_decode"].index("kv_fp8")


def fp8_kv_rows(phys: F.Phys) -> Any:
    """True where the query reads an 8-bit KV cache (array for a frame, bool for one shape)."""
    flag = phys.x[_KV_FP8]
    return np.asarray(flag) > 0.5 if np.ndim(flag) else bool(flag > 0.5)


def bf16_kv_phys(phys: F.Phys, gpu: GPUFeatures) -> F.Phys:
    """The physical terms of the same MLA decode query with a 16-bit KV cache, rebuilt from
    an fp8-KV query's terms (batch, context and heads from its features; latent and rope
    widths from its FLOPs and bytes); 16-bit-KV rows come back as they were."""
    frame = np.ndim(phys.t_c) > 0
    ops = F.NP if frame else F.PY
    x = phys.x
    b, kv, h = (np.exp2(np.asarray(x[i], dtype=np.float64)) if frame else 2.0 ** float(x[i]) for i in range(3))
    # rows already 16-bit come back unchanged
    kv_bytes = np.where(fp8_kv_rows(phys), F.DTYPE_BYTES["fp8"], 2.0)
    lat_plus_rope = phys.nbytes / (b * kv * kv_bytes + 4.0 * b * h)                # kv_lora + rope
    two_lat_plus_rope = phys.flops / (2.0 * b * h * kv)                           # 2 kv_lora + rope
    kv_lora = two_lat_plus_rope - lat_plus_rope
    rope = lat_plus_rope - kv_lora
    if not frame:
        b, kv, h, kv_lora, rope = (float(v) for v in (b, kv, h, kv_lora, rope))
    return F.mla_decode(b, kv, h, 2.0, gpu.peak("bf16"), gpu, ops, kv_lora, rope)

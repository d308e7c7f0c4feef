"""The cross-gen tier's clock scaling: per-wave and on-chip costs are counted in cycles.

A measured GPU's fitted base model (:mod:`llmplan.sim.kernel_calibration.physics`) carries two
terms that no specification figure of the tier rescales: ``wave_us``, the fixed cost of each
wave of tiles / CTAs (prologue, pipeline fill, epilogue), and ``l2_bw_sm``, the L2 bandwidth
per SM. Both are a number of SM cycles (a tile's pipeline takes so many cycles; an SM moves
so many L2 bytes per cycle), so on another GPU they scale with its SM clock. Evaluated on a
target unchanged, a member's microseconds carry the *member's* clock over: the A100 (1.41 GHz)
was predicted from GPUs clocked 1.83-2.52 GHz and its latency-bound kernels came out 30-45%
too fast in every family (docs/ACCURACY.md, "Cross-gen tier ... (session 12)").

The clock is the one the vendor's dense bf16 tensor peak is quoted at, derived from the figures
the tier already uses: ``peak_bf16 / (SM count x dense bf16 FLOP per clock per SM)``, the last
an architecture constant from the vendors' architecture documents (:data:`FLOP_PER_CLOCK_SM`).
A GPU whose architecture is not listed gets no scaling (its members are used unchanged, as
before). Only members of the target's vendor are scaled: across vendors the launch path
(driver, runtime) differs and the pool holds no GPU of the target's vendor to say how.
"""

from __future__ import annotations

from dataclasses import replace

from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

#: dense bf16 tensor FLOP per clock per SM (NVIDIA) / Xe core (Intel) / CU (AMD), per architecture.
#: Each entry reproduces the catalog's dense bf16 peak at the vendor's quoted clock where one is
#: quoted (peak = SMs x entry x clock):
#: * ``ampere_ga100``: 1,024 dense FP16 FMA per clock per SM (NVIDIA A100 architecture whitepaper,
#:   2020); 108 x 2,048 x 1.41 GHz (its boost clock) = 312 TFLOP/s.
#: * ``hopper``: twice A100's SM rate clock for clock (NVIDIA H100 architecture whitepaper, 2022);
#:   132 x 4,096 x 1.83 GHz = 989.4 TFLOP/s (the tensor peak is quoted at 1.83 GHz:
#:   https://glennklockwood.com/garden/processors/h100, "1.83 GHz (low precision)").
#: * ``ada``: 142 x 1,024 x 2.52 GHz (L40S boost clock) = 366 TFLOP/s (catalog 362, 1% apart);
#:   L4 58 x 1,024 x 2.04 GHz = 121 TFLOP/s.
#: * ``ampere_ga10x`` (A10G): 4 third-generation tensor cores per SM x 128 dense FP16 FLOP per clock
#:   at the GA10x fp32-accumulate rate = 512 (the catalog's own derivation of the A10G peak,
#:   hardware_catalog/data/gpus.yaml ``a10g.sources.dense_tflops``); 80 x 512 x 1.71 GHz (boost) = 70 TFLOP/s.
#: * ``blackwell`` (B200/GB200/B300/GB300): assumed twice Hopper's SM rate; B200's implied clock
#:   is 2,250 / (148 x 8,192) = 1.86 GHz (not checked against a published tensor clock).
#: * ``blackwell_gb202``: RTX PRO 6000 Blackwell Server: 188 x 1,024 x 2.43 GHz = 467.8 TFLOP/s
#:   (the catalog's rates are scaled to the collection node's 2,430 MHz, aiconfigurator
#:   systems/rtx_pro_6000_server.yaml).
#: * ``xe2``: Arc Pro B60 (Intel product brief: 20 Xe cores, 2,400 MHz, XMX 98.3 TFLOP/s fp16):
#:   20 x 2,048 x 2.4 GHz = 98.3 TFLOP/s.
#: * ``cdna3``: MI300X/MI325X: 304 x 2,048 x 2.1 GHz (peak engine clock) = 1,307 TFLOP/s (catalog 1,300).
#: * ``cdna4``: MI355X (AMD ISSCC 2026 as cited in the catalog: FP8 8,192 FLOP per clock per CU,
#:   FP16 half of it): 256 x 4,096 x 2.4 GHz = 2,517 TFLOP/s.
FLOP_PER_CLOCK_SM: dict[str, float] = {
    "ampere_ga100": 2048.0, "ampere_ga10x": 512.0, "hopper": 4096.0, "ada": 1024.0, "blackwell": 8192.0,
    "blackwell_gb202": 1024.0, "xe2": 2048.0, "cdna3": 2048.0, "cdna4": 4096.0,
}
#: catalog key -> architecture (GPUs not listed: no clock, no scaling; every GPU of the packaged
#: catalog is listed, tests/test_crossgen_clock.py)
ARCHITECTURE: dict[str, str] = {
    "a100_sxm": "ampere_ga100", "a100_40gb_sxm": "ampere_ga100", "a10g": "ampere_ga10x",
    "h100_sxm": "hopper", "h100_pcie": "hopper", "h200_sxm": "hopper",
    "l40s": "ada", "l4": "ada",
    "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell", "gb300": "blackwell",
    "rtx_pro_6000_server": "blackwell_gb202", "b60": "xe2",
    "mi300x": "cdna3", "mi325x": "cdna3", "mi355x": "cdna4",
}
#: base parameters counted in cycles: multiplied (``+1``) or divided (``-1``) by
#: member clock / target clock
CYCLE_PARAMS: dict[str, int] = {"wave_us": 1, "l2_bw_sm": -1}


def tensor_clock_ghz(gpu: GPUFeatures) -> float | None:
    """The clock the GPU's dense bf16 peak implies (GHz), or None for an unlisted architecture."""
    arch = ARCHITECTURE.get(gpu.key)
    if arch is None or gpu.sm_count <= 0 or gpu.peak_bf16_tflops <= 0:
        return None
    return gpu.peak_bf16_tflops * 1e3 / (gpu.sm_count * FLOP_PER_CLOCK_SM[arch])


def clock_ratio(member: GPUFeatures, target: GPUFeatures | None) -> float:
    """Member clock / target clock (1.0 where either is unknown)."""
    if target is None:
        return 1.0
    a, b = tensor_clock_ghz(member), tensor_clock_ghz(target)
    return 1.0 if a is None or b is None else a / b


def scaled_base(base: BaseParams, ratio: float) -> BaseParams:
    """``base`` with its cycle-counted parameters moved to a GPU clocked 1/``ratio`` as fast."""
    if ratio == 1.0:
        return base
    return replace(base, **{k: getattr(base, k) * ratio ** s for k, s in CYCLE_PARAMS.items()})

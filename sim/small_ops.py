"""Time of the small memory-bound operators of a step (norms, activation, RoPE, embedding,
sampling, routing scores...): one graph-launched kernel's measured floor plus the bytes at the
roofline bandwidth.

No measured table times these operators themselves, but every GPU folder of
``../shared/measurements`` holds ``scale_matrix``: an elementwise bf16 -> fp8 quantization that
aiconfigurator times inside a CUDA graph (``collector/helper.py`` ``benchmark_with_power``, graph
capture by default; ``collector/{vllm,trtllm,sglang}/collect_computescale.py``). At sizes up to
64 KiB its time does not depend on size: it is what one small kernel launched from a CUDA graph
costs on that GPU with that engine's kernels, 1.3-2.2 us on H100 / H200 / B200 (SGLang's call is
four PyTorch elementwise kernels, counted per kernel). The spec roofline's ``LAUNCH_FLOOR_US``
(5 us, sim/kernels.py) is 2.5-3.8x that. Derivation and check:
``python -m llmplan.calibration.small_op_floor --measurements ../shared/measurements``
(``tests/test_small_ops.py`` asserts the constants below equal it).

Above the floor the measured kernel adds its bytes at about the HBM roofline (intercept and
slope of the large rows: a few us plus ~0.9 of peak), so a small operator takes
``floor + bytes / (bandwidth x MEM_ETA)``. GPUs or engines without the table keep the spec
roofline (5 us floor). The decode-step operators stay one kernel each as the step model lists
them (vLLM / SGLang fused add + RMSNorm and SiLU-and-mul are one kernel each).
"""

from __future__ import annotations

from llmplan.sim.kernels import MEM_ETA, KernelTime

#: (GPU catalog key, engine kernel backend) -> per-kernel floor in us (calibration/small_op_floor.py)
SMALL_OP_FLOOR_US: dict[tuple[str, str], float] = {
    ("b200", "sglang"): 1.97, ("b200", "trtllm"): 2.11, ("b200", "vllm"): 2.17,
    ("h100_sxm", "sglang"): 1.98, ("h100_sxm", "trtllm"): 1.37, ("h100_sxm", "vllm"): 2.03,
    ("h200_sxm", "sglang"): 1.93, ("h200_sxm", "trtllm"): 1.32, ("h200_sxm", "vllm"): 1.94,
    ("l40s", "sglang"): 1.45, ("l40s", "trtllm"): 2.73, ("l40s", "vllm"): 1.60,
    ("rtx_pro_6000_server", "sglang"): 1.57, ("rtx_pro_6000_server", "trtllm"): 1.40,
    ("rtx_pro_6000_server", "vllm"): 1.74,
}


def small_op_floor_us(gpu_key: str, backend: str) -> float | None:
    """The measured per-kernel floor of ``backend``'s small kernels on ``gpu_key`` (None: no table)."""
    return SMALL_OP_FLOOR_US.get((gpu_key, backend))


def small_memory_op(nbytes: float, hbm_bw_gbps: float, floor_us: float, tier: str = "spec") -> KernelTime:
    """One small memory-bound kernel: ``floor_us`` plus ``nbytes`` at MEM_ETA of HBM bandwidth."""
    ms = floor_us / 1e3 + (nbytes / (hbm_bw_gbps * 1e9 * MEM_ETA) * 1e3 if nbytes else 0.0)
    return KernelTime(ms, 0.0, nbytes, "latency" if ms < 2 * floor_us / 1e3 else "memory", tier)

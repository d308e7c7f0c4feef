"""Small memory-bound step operators at the measured per-kernel CUDA-graph floor (sim/small_ops.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmplan.calibration.small_op_floor import derive, floors_us
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import kernel_model_for
from llmplan.sim.kernels import LAUNCH_FLOOR_US, MEM_ETA
from llmplan.sim.small_ops import SMALL_OP_FLOOR_US, small_memory_op, small_op_floor_us

MEASUREMENTS = Path(__file__).resolve().parents[1] / ".." / "shared" / "measurements"


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "scale_matrix.csv.gz").is_file(),
                    reason="measurements not present")
def test_constants_are_the_measured_floors():
    assert derive(MEASUREMENTS) == SMALL_OP_FLOOR_US
    # every measured floor is well below the 5 us spec floor it replaces
    assert max(SMALL_OP_FLOOR_US.values()) < 0.6 * LAUNCH_FLOOR_US


def test_floor_rule_on_a_synthetic_table():
    import pandas as pd
    rows = [  # m, k, latency_ms, backend: tiny rows (<= 64 KiB moved) give the median, big rows are ignored
        (1, 128, 0.0020, "vllm"), (4, 1024, 0.0022, "vllm"), (8, 2048, 0.0024, "vllm"), (4096, 4096, 0.040, "vllm"),
        (1, 128, 0.0080, "sglang"), (2, 256, 0.0084, "sglang"), (4096, 4096, 0.3, "sglang"),
    ]
    t = pd.DataFrame(rows, columns=["m", "k", "latency_ms", "backend"]).assign(quant_dtype="fp8")
    # vLLM: one kernel per call; SGLang: four PyTorch elementwise kernels per call
    assert floors_us(t) == {"vllm": 2.2, "sglang": 2.05}


def test_small_memory_op_is_floor_plus_roofline_bytes():
    kt = small_memory_op(0.0, 4800.0, 1.93)
    assert kt.latency_ms == pytest.approx(1.93e-3)
    nbytes = 16 * 5120 * 2 * 2  # a decode step's RMSNorm over 16 rows of Qwen3-32B
    kt = small_memory_op(nbytes, 4800.0, 1.93)
    assert kt.latency_ms == pytest.approx(1.93e-3 + nbytes / (4800e9 * MEM_ETA) * 1e3)
    assert kt.bound == "latency"
    big = small_memory_op(200e6, 4800.0, 1.93)
    assert big.bound == "memory" and big.latency_ms == pytest.approx(1.93e-3 + 200e6 / (4800e9 * MEM_ETA) * 1e3)


def test_kernel_model_uses_the_engine_floor_where_measured():
    nbytes = 16 * 5120 * 4
    for key, backend, us in (("h200_sxm", "sglang", 1.93), ("h100_sxm", "vllm", 2.03), ("h100_sxm", "trtllm", 1.37)):
        gpu = get_gpu(key)
        got = kernel_model_for(gpu, backend).memory_op(nbytes).latency_ms
        assert got == pytest.approx(us / 1e3 + nbytes / (gpu.hbm_bw_gbps * 1e9 * MEM_ETA) * 1e3)
    # no scale_matrix table for A100: the spec roofline's 5 us floor stays
    assert small_op_floor_us("a100_sxm", "vllm") is None
    assert kernel_model_for(get_gpu("a100_sxm"), "vllm").memory_op(nbytes).latency_ms == pytest.approx(LAUNCH_FLOOR_US / 1e3)

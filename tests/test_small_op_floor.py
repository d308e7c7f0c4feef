"""Per-kernel CUDA-graph floor of small memory-bound kernels from the scale_matrix tables
(calibration/small_op_floor.py, diagnosis only)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from llmplan.calibration.small_op_floor import SMALL_OP_FLOOR_US, derive, floors_us, main
from llmplan.sim.kernels import LAUNCH_FLOOR_US

MEASUREMENTS = Path(__file__).resolve().parents[1] / ".." / "shared" / "measurements"


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "scale_matrix.csv.gz").is_file(),
                    reason="measurements not present")
def test_constants_are_the_measured_floors(capsys):
    assert derive(MEASUREMENTS) == SMALL_OP_FLOOR_US
    # every measured floor is well below the 5 us spec floor of sim/kernels.py
    assert max(SMALL_OP_FLOOR_US.values()) < 0.6 * LAUNCH_FLOOR_US
    # SGLang's four PyTorch kernels per call give the same per-kernel floor as vLLM's one kernel on Hopper
    for gpu in ("h100_sxm", "h200_sxm"):
        assert SMALL_OP_FLOOR_US[(gpu, "sglang")] == pytest.approx(SMALL_OP_FLOOR_US[(gpu, "vllm")], abs=0.06)
    assert main(["--measurements", str(MEASUREMENTS)]) == 0
    assert "h200_sxm               sglang   1.93 us" in capsys.readouterr().out


def test_floor_rule_on_a_synthetic_table():
    rows = [  # m, k, latency_ms, backend: tiny rows (<= 64 KiB moved) give the median, big rows are ignored
        (1, 128, 0.0020, "vllm"), (4, 1024, 0.0022, "vllm"), (8, 2048, 0.0024, "vllm"), (4096, 4096, 0.040, "vllm"),
        (1, 128, 0.0080, "sglang"), (2, 256, 0.0084, "sglang"), (4096, 4096, 0.3, "sglang"),
        (1, 128, 0.0010, "other"),
    ]
    t = pd.DataFrame(rows, columns=["m", "k", "latency_ms", "backend"]).assign(quant_dtype="fp8")
    # vLLM: one kernel per call; SGLang: four PyTorch elementwise kernels per call; unknown engines skipped
    assert floors_us(t) == {"vllm": 2.2, "sglang": 2.05}
    # other quantization dtypes are not the fp8 kernel
    assert floors_us(t.assign(quant_dtype="nvfp4")) == {}

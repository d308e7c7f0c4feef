"""GEMM weight formats of the A100 TensorRT-LLM tables are counted with their own weight bytes:
int8 weight-only and SmoothQuant (w8a8) read half the weight bytes of bf16, int4 about a quarter."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures


def _dram_us(dtype: str, m: int = 1, n: int = 8192, k: int = 8192) -> float:
    gf = GPUFeatures.from_spec(get_gpu("a100_sxm"))
    df = pd.DataFrame({"m": [m], "n": [n], "k": [k], "dtype": [dtype]})
    return float(F.frame_phys("gemm", df, gf).t_m[0])


@pytest.mark.parametrize("dtype,weight_bytes", [("bf16", 2.0), ("int8_wo", 1.0), ("sq", 1.0), ("int4_wo", 0.53)])
def test_weight_bytes_set_the_dram_time(dtype, weight_bytes):
    m, n, k = 1, 8192, 8192
    gf = GPUFeatures.from_spec(get_gpu("a100_sxm"))
    expected_bytes = m * k * 2.0 + k * n * weight_bytes + m * n * 2.0
    assert _dram_us(dtype, m, n, k) == pytest.approx(expected_bytes / (gf.hbm_bw_gbps * 1e3), rel=1e-12)
    # at m = 1 the weights dominate: int8 formats read about half the bf16 bytes
    if dtype in ("int8_wo", "sq"):
        assert _dram_us(dtype) / _dram_us("bf16") == pytest.approx(0.5, abs=0.01)

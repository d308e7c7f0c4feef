"""TensorRT-LLM per-tensor fp8 GEMMs without the eager activation-quantization floor of its
``fp8`` table (sim.calibrated.GEMM_FP8_TENSOR_FLOOR): the smaller of its fp8 / fp8_block figures."""

from __future__ import annotations

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import GEMM_FP8_TENSOR_FLOOR, CalibratedKernelModel

# Llama-3.1-70B at tp 4: qkv, o, gate/up, down projections (n, k)
SHAPES = ((2560, 8192), (8192, 2048), (14336, 8192), (8192, 7168))


def _raw(m: CalibratedKernelModel, rows: int, n: int, k: int, dtype: str) -> float:
    shape = {"m": rows, "n": n, "k": k}
    return m._predict("gemm", dtype, {**shape, "dtype": dtype}, shape).latency_ms


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_trtllm_fp8_decode_gemms_below_the_per_call_floor(gpu):
    trt = CalibratedKernelModel(get_gpu(gpu), "trtllm")
    assert "trtllm" in GEMM_FP8_TENSOR_FLOOR
    for n, k in SHAPES:
        t = trt.gemm(4, n, k, "fp8")
        # the fp8 table never times below 0.0118 ms (H100/H200/B200); the decode GEMM now does for
        # the small shapes and is never above the block-fp8 kernel of the same engine
        assert t.latency_ms <= _raw(trt, 4, n, k, "fp8_block") + 1e-12
        assert t.latency_ms < _raw(trt, 4, n, k, "fp8")
    assert trt.gemm(4, 8192, 2048, "fp8").latency_ms < 0.0118


def test_trtllm_fp8_prefill_gemms_keep_the_per_tensor_figure_where_it_is_faster():
    trt = CalibratedKernelModel(get_gpu("h200_sxm"), "trtllm")
    for n, k in SHAPES:
        raw = _raw(trt, 8192, n, k, "fp8")
        assert trt.gemm(8192, n, k, "fp8").latency_ms == pytest.approx(min(raw, _raw(trt, 8192, n, k, "fp8_block")))


def test_other_engines_keep_their_per_tensor_fp8_group():
    for backend in ("sglang", "vllm"):
        m = CalibratedKernelModel(get_gpu("h200_sxm"), backend)
        assert m.gemm(4, 8192, 7168, "fp8").latency_ms == pytest.approx(_raw(m, 4, 8192, 7168, "fp8"))

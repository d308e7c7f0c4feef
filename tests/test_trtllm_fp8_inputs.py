"""TensorRT-LLM Llama qkv / gate_up GEMMs on fp8 inputs from the fused all-reduce (sim/trtllm_fp8_inputs.py,
calibration/trtllm_quant_table.py, CalibratedKernelModel.gemm_prequantized)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llmplan.calibration import trtllm_quant_table as qt
from llmplan.calibration.serving_rows import engine_profiles
from llmplan.errors import EXIT_USER_ERROR, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.kernels import KernelTime
from llmplan.sim.trtllm_fp8_inputs import (QUANT_FILE, PrequantizedInputs, normed_gemm_ms, prequantized_inputs,
                                             quantize_ms)
from llmplan.sim.types import Parallelism, Precision, StepShape

L70 = "meta-llama/Llama-3.1-70B"


def test_conditions_follow_the_fused_allreduce():
    l70, l8, q = load_model(L70), load_model("meta-llama/Llama-3.1-8B-Instruct"), load_model("Qwen/Qwen3-235B-A22B-FP8")
    tail = (l70.num_layers - 1) / l70.num_layers   # layer 0's qkv follows a plain input_layernorm
    both = prequantized_inputs("trtllm", l70, Parallelism(tp=8), "fp8", "fp8")
    assert both.qkv_share == pytest.approx(tail) and both.gate_up
    # attention DP: no pre-MLP fusion (gate_up quantizes itself), the post-MLP one still feeds qkv
    adp = prequantized_inputs("trtllm", l70, Parallelism(tp=8, dp=2), "fp8", "fp8")
    assert adp.qkv_share == pytest.approx(tail) and not adp.gate_up
    # each GEMM by its own dtype: a bf16 attention has no input scale, the fp8 MLP still does
    mixed = prequantized_inputs("trtllm", l70, Parallelism(tp=8), "bf16", "fp8")
    assert mixed.qkv_share == 0.0 and mixed.gate_up
    mixed = prequantized_inputs("trtllm", l70, Parallelism(tp=8), "fp8", "fp8_block")
    assert mixed.qkv_share == pytest.approx(tail) and not mixed.gate_up
    none = PrequantizedInputs()
    assert prequantized_inputs("trtllm", l70, Parallelism(tp=1), "fp8", "fp8") == none         # no all-reduce
    assert prequantized_inputs("trtllm", l8, Parallelism(tp=8), "fp8", "fp8") == none          # hidden 4096: fusion off
    assert prequantized_inputs("vllm", l70, Parallelism(tp=8), "fp8", "fp8") == none
    assert prequantized_inputs("trtllm", l70, Parallelism(tp=8), "fp8_block", "fp8_block") == none  # per-tensor only
    assert prequantized_inputs("trtllm", l70, Parallelism(tp=8), "bf16", "bf16") == none
    assert prequantized_inputs("trtllm", q, Parallelism(tp=8, ep=8), "fp8", "fp8") == none     # Qwen3-MoE: no quant fusion


class _Kernels:
    def gemm(self, m, n, k, dtype):
        return KernelTime(1.0, flops=2.0 * m * n * k)

    def gemm_prequantized(self, m, n, k):
        return KernelTime(0.6, flops=2.0 * m * n * k)


def test_normed_gemm_weights_the_fused_layers():
    k = _Kernels()
    assert normed_gemm_ms(k, 4, 8, 16, "fp8", 1.0).latency_ms == pytest.approx(0.6)
    assert normed_gemm_ms(k, 4, 8, 16, "fp8", 0.75).latency_ms == pytest.approx(0.75 * 0.6 + 0.25 * 1.0)
    assert normed_gemm_ms(k, 4, 8, 16, "fp8", 0.0).latency_ms == pytest.approx(1.0)
    assert normed_gemm_ms(k, 4, 8, 16, "bf16", 1.0).latency_ms == pytest.approx(1.0)   # no fp8 input to take
    assert normed_gemm_ms(k, 4, 8, 16, "fp8", 0.75).flops == pytest.approx(2.0 * 4 * 8 * 16)


def test_quantize_ms_reads_the_grid_and_interpolates_in_log_m(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps({"gpus": {"g": {"m": [1, 4, 16], "k": [1024, 8192], "ms": [[0.008, 0.009], [0.010, 0.012],
                                                                                       [0.014, 0.020]]}}}))
    assert quantize_ms("g", 4, 1024, p) == pytest.approx(0.010)
    assert quantize_ms("g", 4, 6000, p) == pytest.approx(0.012)       # nearest measured k (in log k)
    assert quantize_ms("g", 2, 1024, p) == pytest.approx(0.009)       # halfway in log m between 1 and 4
    assert quantize_ms("g", 64, 8192, p) == pytest.approx(0.020)      # beyond the grid: the edge value
    assert quantize_ms("other", 4, 1024, p) is None
    assert quantize_ms("g", 0, 1024, p) is None


def test_shipped_table_holds_the_measured_gpus():
    doc = json.loads(QUANT_FILE.read_text())
    assert {"h100_sxm", "h200_sxm"} <= set(doc["gpus"])
    g = doc["gpus"]["h200_sxm"]
    assert all(x > 0.0 for row in g["ms"] for x in row)
    j = g["k"].index(8192)   # a whole 32k-token activation costs more to quantize than one token
    assert g["ms"][-1][j] > g["ms"][0][j]


def _raw_fp8(m: CalibratedKernelModel, rows: int, n: int, k: int) -> float:
    shape = {"m": rows, "n": n, "k": k}
    return m._predict("gemm", "fp8", {**shape, "dtype": "fp8"}, shape).latency_ms


def test_gemm_prequantized_is_the_fp8_table_less_the_quantization():
    gpu = get_gpu("h200_sxm")
    trt, vllm = CalibratedKernelModel(gpu, "trtllm"), CalibratedKernelModel(gpu, "vllm")
    for n, k in ((1280, 8192), (7168, 8192)):
        got = trt.gemm_prequantized(4, n, k).latency_ms
        assert got == pytest.approx(_raw_fp8(trt, 4, n, k) - quantize_ms("h200_sxm", 4, k))
        assert 0.0 < got < trt.gemm(4, n, k, "fp8").latency_ms
    # another engine's figure is left alone
    assert vllm.gemm_prequantized(4, 1280, 8192).latency_ms == pytest.approx(vllm.gemm(4, 1280, 8192, "fp8").latency_ms)
    # a GPU without the measured quantization tables keeps the plain answer
    a100 = CalibratedKernelModel(get_gpu("a100_sxm"), "trtllm")
    assert a100.gemm_prequantized(4, 1280, 8192).latency_ms == pytest.approx(a100.gemm(4, 1280, 8192, "fp8").latency_ms)


def test_gemm_prequantized_is_never_slower_than_the_plain_fp8_gemm():
    """The plain per-tensor answer still quantizes its input; where it takes the block-scaled floor
    (GEMM_FP8_TENSOR_FLOOR: H100 gate_up at TP 2-4, small m) that floor bounds the prequantized one."""
    trt = CalibratedKernelModel(get_gpu("h100_sxm"), "trtllm")
    capped = 0
    for tp in (2, 4):
        for m in (1, 8, 32, 64, 128):
            for n, k in ((57344 // tp, 8192), (10240 // tp, 8192)):
                pre, plain = trt.gemm_prequantized(m, n, k).latency_ms, trt.gemm(m, n, k, "fp8").latency_ms
                assert pre <= plain
                capped += pre == plain
                assert pre == pytest.approx(min(_raw_fp8(trt, m, n, k) - quantize_ms("h100_sxm", m, k), plain))
    assert capped > 0   # the floor does bind on these shapes


def _ops(tp: int) -> dict:
    dep = Deployment(load_model(L70), get_gpu("h200_sxm"), Parallelism(tp=tp), Precision("fp8", "fp8"),
                     engine_profiles()["trtllm"])
    return {o.name: o.latency_ms for o in build(dep, None, 4096)[0].breakdown(StepShape.build([], [2048] * 4)).ops}


def test_llama70b_decode_step_uses_it_for_qkv_and_gate_up_only():
    trt = CalibratedKernelModel(get_gpu("h200_sxm"), "trtllm")
    m = load_model(L70)
    ops, h = _ops(8), m.hidden_size
    heads, kv, hd = m.num_attention_heads // 8, m.num_kv_heads // 8, m.head_dim
    qkv_n = (heads + 2 * kv) * hd   # layer 0 quantizes its own qkv input, the other 79 take fp8
    assert ops["qkv_proj"] == pytest.approx(trt.gemm_prequantized(4, qkv_n, h).latency_ms * (m.num_layers - 1)
                                            + trt.gemm(4, qkv_n, h, "fp8").latency_ms)
    assert ops["mlp_up"] == pytest.approx(trt.gemm_prequantized(4, 2 * m.intermediate_size // 8, h).latency_ms * m.num_layers)
    # o_proj and down_proj keep the plain fp8 answer
    assert ops["o_proj"] == pytest.approx(trt.gemm(4, h, heads * hd, "fp8").latency_ms * m.num_layers)
    assert ops["mlp_down"] == pytest.approx(trt.gemm(4, h, m.intermediate_size // 8, "fp8").latency_ms * m.num_layers)
    # TP 1: no fusion, plain answers
    tp1 = _ops(1)
    assert tp1["qkv_proj"] == pytest.approx(trt.gemm(4, (m.num_attention_heads + 2 * m.num_kv_heads) * hd, h, "fp8").latency_ms
                                            * m.num_layers)


def _frame(backend: str, m: int, k: int, ms: float, dtype: str = "fp8") -> dict:
    return {"backend": backend, "backend_version": "1.3.0rc20" if backend == "trtllm" else "0.24.0", "m": m, "k": k,
            "quant_dtype": dtype, "latency_ms": ms}


def test_quant_grid_sums_the_two_trtllm_tables_on_shared_points():
    cs = pd.DataFrame([_frame("trtllm", 1, 1024, 0.007), _frame("trtllm", 4, 1024, 0.0072), _frame("vllm", 1, 1024, 9.0),
                       _frame("trtllm", 8, 1024, 0.0075)])
    sm = pd.DataFrame([_frame("trtllm", 1, 1024, 0.0013), _frame("trtllm", 4, 1024, 0.0014), _frame("vllm", 1, 1024, 9.0)])
    g = qt.quant_grid(cs, sm)
    assert g["m"] == [1, 4] and g["k"] == [1024]        # m = 8 has no scale_matrix row
    assert g["ms"] == [[pytest.approx(0.0083)], [pytest.approx(0.0086)]]
    assert g["backend_version"] == "1.3.0rc20"
    with pytest.raises(UserError):
        qt.quant_grid(cs, pd.DataFrame([_frame("vllm", 1, 1024, 1.0)]))


def test_cli_writes_the_gpus_with_both_tables_and_refuses_none(tmp_path):
    g = tmp_path / "meas" / "h200_sxm"
    g.mkdir(parents=True)
    pd.DataFrame([_frame("trtllm", 1, 1024, 0.007)]).to_csv(g / "computescale.csv.gz", index=False)
    pd.DataFrame([_frame("trtllm", 1, 1024, 0.001)]).to_csv(g / "scale_matrix.csv.gz", index=False)
    (tmp_path / "meas" / "a100_sxm").mkdir()
    out = tmp_path / "q.json"
    assert qt.main(["--measurements", str(tmp_path / "meas"), "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["gpus"]) == {"h200_sxm"}
    assert qt.main(["--measurements", str(tmp_path / "meas" / "a100_sxm"), "--out", str(out)]) == EXIT_USER_ERROR
    assert qt.main(["--measurements", str(tmp_path / "missing"), "--out", str(out)]) == EXIT_USER_ERROR

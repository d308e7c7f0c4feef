"""Block-scaled fp8 checkpoints time their dense GEMMs with the measured block-fp8 group.

Kernel tables (README of the measurements): vLLM on H100 times block-fp8 GEMMs
(``gemm_dtype=fp8_block``) about 4x slower than per-tensor fp8 at decode sizes (n=6144,
k=4096, m=1: 0.062 vs 0.014 ms); the shipped calibration must keep that difference and
the step model must ask for the block group when the checkpoint is block-scaled.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration.serving_rows import engine_profiles, map_row
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.gemm_dtypes import gemm_dtypes
from llmplan.model_catalog.loader import load_model
from llmplan.model_catalog.quant import block_fp8_requant, gemm_dtype, is_block_fp8
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernels import KernelTime, RooflineKernelModel
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape


def test_block_fp8_checkpoint_components_read_the_block_group():
    spec = load_model("Qwen/Qwen3-32B-FP8")          # config.json weight_block_size [128, 128]
    assert is_block_fp8(spec.quant.main)
    wd = gemm_dtypes(spec, "fp8")
    assert wd["attention"] == "fp8_block" and wd["dense_mlp"] == "fp8_block"
    assert wd["lm_head"] == "bf16"                    # not quantized in the checkpoint


def test_per_tensor_and_load_time_fp8_stay_per_tensor():
    pt = load_model("nvidia/Llama-3.1-8B-Instruct-FP8")   # ModelOpt FP8: per-tensor scales
    assert not is_block_fp8(pt.quant.main) and gemm_dtype(pt.quant.main) == "fp8"
    assert gemm_dtypes(pt, "fp8")["attention"] == "fp8"
    bf16 = load_model("Qwen/Qwen3-32B")                    # quantized at load time (per-tensor)
    assert set(gemm_dtypes(bf16, "fp8").values()) == {"fp8", "bf16"}


def test_block_requant_of_a_bf16_checkpoint():
    spec = load_model("Qwen/Qwen3-32B")
    q = block_fp8_requant(spec, "test")
    assert q is not None and q.main.name == "fp8_block128"
    assert gemm_dtypes(replace(spec, quant=q), "fp8")["dense_mlp"] == "fp8_block"


def test_calibrated_block_group_is_measured_where_it_differs():
    # TensorRT-LLM H100 tables, n=6144, k=4096, m=1: block 0.0143 ms, per-tensor 0.0218 ms
    km = CalibratedKernelModel(get_gpu("h100_sxm"), "trtllm")
    block, tensor = km.gemm(1, 6144, 4096, "fp8_block"), km.gemm(1, 6144, 4096, "fp8")
    assert block.tier == "measured" and not block.extrapolated
    assert block.latency_ms == pytest.approx(0.0143, rel=0.25)
    # the per-tensor table's 0.0218 ms carries an eager activation-quantization floor that
    # CUDA graphs remove (sim.calibrated.GEMM_FP8_TENSOR_FLOOR): the block figure, flagged
    assert tensor.latency_ms == pytest.approx(block.latency_ms) and tensor.extrapolated


def test_vllm_host_bound_block_table_is_replaced_and_flagged():
    # vLLM's block tables carry a 0.055-0.15 ms dispatch floor (GEMM_FP8_BLOCK_HOST_BOUND):
    # its block-fp8 GEMMs take the per-tensor figures, marked extrapolated
    km = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm")
    block, tensor = km.gemm(1, 6144, 4096, "fp8_block"), km.gemm(1, 6144, 4096, "fp8")
    assert block.latency_ms == pytest.approx(tensor.latency_ms)
    assert block.extrapolated and not tensor.extrapolated


def test_engine_without_block_group_falls_back_flagged():
    # the Intel B60 tables have per-tensor fp8 GEMMs only: block queries use them, flagged
    km = CalibratedKernelModel(get_gpu("b60"), "vllm")
    block, tensor = km.gemm(64, 4096, 4096, "fp8_block"), km.gemm(64, 4096, 4096, "fp8")
    assert block.latency_ms == pytest.approx(tensor.latency_ms)
    assert block.extrapolated and not tensor.extrapolated


def test_roofline_times_fp8_block_as_fp8():
    roof = RooflineKernelModel(get_gpu("h100_sxm"))
    assert roof.gemm(4096, 4096, 4096, "fp8_block").latency_ms == pytest.approx(
        roof.gemm(4096, 4096, 4096, "fp8").latency_ms)


class _Recorder:
    """Kernel model that records the GEMM dtypes it is asked for (roofline times)."""

    def __init__(self, gpu):
        self.roof, self.gemm_dtypes = RooflineKernelModel(gpu), set()

    def gemm(self, m, n, k, dtype) -> KernelTime:
        self.gemm_dtypes.add(dtype)
        return self.roof.gemm(m, n, k, dtype)

    def __getattr__(self, name):
        return getattr(self.roof, name)


@pytest.mark.parametrize("model, expected", [("Qwen/Qwen3-32B-FP8", "fp8_block"), ("Qwen/Qwen3-32B", "fp8")])
def test_step_model_asks_the_checkpoints_group(model, expected):
    gpu = get_gpu("h100_sxm")
    rec = _Recorder(gpu)
    step = AnalyticalStepModel(load_model(model), gpu, Parallelism(tp=1), Precision("fp8", "fp8"), EngineProfile(), rec)
    step.step_time_ms(StepShape.build([], [512]))
    assert expected in rec.gemm_dtypes
    assert ({"fp8", "fp8_block"} - {expected}).isdisjoint(rec.gemm_dtypes)


def _row(model: str, mode: str) -> dict:
    return {"id": "r", "silicon_data_source": "silicon_concurrency=8", "backend": "vllm", "model_path": model,
            "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 128,
            "gemm_quant_mode": mode, "batch_size": 8, "tp_size": 8, "pp_size": 1, "attention_dp_size": 1,
            "moe_tp_size": 8, "moe_ep_size": 1, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}


@pytest.mark.parametrize("model, mode, expected", [
    ("Qwen/Qwen3-32B", "fp8_block", "fp8_block"),          # bf16 checkpoint, block quantized at load
    ("Qwen/Qwen3-32B", "fp8", "fp8"),                      # bf16 checkpoint, per-tensor at load
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8", "fp8_block"),      # block checkpoint runs its blocks
    ("Qwen/Qwen3-235B-A22B-FP8", "fp8_block", "fp8_block"),
])
def test_replay_maps_gemm_quant_mode(model, mode, expected):
    m = map_row(_row(model, mode), 0, engine_profiles())
    assert m.case is not None, m.status
    dep = m.case.dep
    assert dep.prec.weights == "fp8"
    assert gemm_dtypes(dep.model, dep.prec.weights)["attention"] == expected

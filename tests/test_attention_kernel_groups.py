"""Attention rows of one engine table that ran different kernels are fitted and answered apart
(sim/kernel_calibration/attention_kernels.py); queries naming no kernel keep the whole table's model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmplan.calibration.fit import _kernel_items
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration import attention_kernels as AK
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel, predict_family_frame, row_kernels
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("b200"))


def _group(floor_us: float) -> GroupModel:
    base = BaseParams(floor_us=floor_us, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5,
                      l2_bw_sm=60.0)
    return GroupModel(base, None, 100, {"batch": [1.0, 2048.0]})


def _model() -> FamilyModel:
    return FamilyModel("attention_decode", {"all": _group(10.0)},
                       kernel_groups={"all/triton": _group(20.0), "all/trtllm_mha": _group(30.0)})


def test_row_kernel_is_the_label():
    df = pd.DataFrame({"kernel_source": ["Triton", "trtllm_mha", None, np.nan, ""]})
    assert row_kernels("attention_decode", df).tolist() == ["triton", "trtllm_mha", None, None, None]
    assert row_kernels("attention_prefill", df.iloc[:2]).tolist() == ["triton", "trtllm_mha"]
    assert row_kernels("gemm", df).tolist() == [None] * 5
    assert row_kernels("attention_decode", pd.DataFrame({"x": [1]})).tolist() == [None]
    assert AK.attention_kernels(["a"]).tolist() == ["a"]


def test_resolution_by_kernel():
    fm = _model()
    assert fm.resolve_group(None) == ("all", True)
    assert fm.resolve_group(None, "triton") == ("all/triton", True)
    assert fm.resolve_group(None, "trtllm_mha") == ("all/trtllm_mha", True)
    assert fm.resolve_group(None, "flashinfer") == ("all", True)         # no rows of that kernel
    assert FamilyModel("attention_decode", {"all": _group(10.0)}).resolve_group(None, "triton") == ("all", True)
    back = FamilyModel.from_dict("attention_decode", fm.to_dict())
    assert back.to_dict() == fm.to_dict() and back.group("all/triton").base.floor_us == 20.0


def test_table_rows_take_their_kernels_model_and_queries_the_whole_table():
    fm = _model()
    shape = {"batch": 1, "kv_len": 1, "num_heads": 8, "num_kv_heads": 1, "head_dim": 256, "kv_dtype": "bf16",
             "window": 0}
    rows = pd.DataFrame([{**shape, "kernel_source": "trtllm_mha"}, {**shape, "kernel_source": "triton"},
                         {**shape, "kernel_source": "flashinfer"}, shape])
    pred, ok = predict_family_frame(fm, rows, GPU)
    assert ok.all()
    # floors 30 / 20 us dominate a 1-token decode: each row its kernel's model; a kernel without rows and
    # an unlabelled row: the whole table's model (floor 10 us)
    assert pred[0] > pred[1] > pred[2] and pred[2] == pred[3]
    assert 0.030 < pred[0] < 0.032 and 0.020 < pred[1] < 0.022 and 0.010 < pred[3] < 0.012
    # the simulator's query names no kernel: the whole table's model, as before
    km = CalibratedKernelModel(get_gpu("b200"), "sglang",
                               Calibration({}, {"b200": GPU}, {"b200": {"sglang": {"attention_decode": fm}}}))
    assert abs(km.attention_decode(1, 1, 8, 1, 256, "bf16").latency_ms - pred[3]) < 1e-12


def test_kernel_items_for_attention_tables_that_mix_kernels():
    mixed = pd.DataFrame({"kernel_source": ["triton"] * 2 + ["trtllm_mha"] * 3, "x": range(5)})
    single = pd.DataFrame({"kernel_source": ["vllm_flash_attn"] * 2, "x": range(2)})
    items = [("b200", "sglang", "attention_decode", "all", mixed), ("b60", "vllm", "attention_decode", "all", single),
             ("b200", "sglang", "attention_prefill", "all", mixed), ("b200", "sglang", "gemm", "bf16", mixed)]
    extra, kernels = _kernel_items(items)
    assert [(e[2], e[3], len(e[4])) for e in extra] == [
        ("attention_decode", "all/triton", 2), ("attention_decode", "all/trtllm_mha", 3),
        ("attention_prefill", "all/triton", 2), ("attention_prefill", "all/trtllm_mha", 3)]
    # no kernel records for attention groups: a single-kernel table's section is unchanged
    assert kernels == {}


def test_band_statistics_describe_the_kernel_less_query():
    """The measured-tier band of attention is the error of the whole table's model (what the simulator's
    queries get), not of the per-kernel models the table rows are scored with."""
    from types import SimpleNamespace

    from llmplan.calibration.fit import residual_stats

    cal = Calibration({}, {"b200": GPU}, {"b200": {"sglang": {"attention_decode": _model()}}})
    shape = {"gpu": "b200", "backend": "sglang", "batch": 1, "kv_len": 1, "num_heads": 8, "num_kv_heads": 1,
             "head_dim": 256, "kv_dtype": "bf16", "window": 0}
    rows = pd.DataFrame([{**shape, "kernel_source": "trtllm_mha", "latency_ms": 0.0315},
                         {**shape, "kernel_source": "triton", "latency_ms": 0.0210}])
    test = SimpleNamespace(frames={"attention_decode": rows}, gpu_specs={"b200": get_gpu("b200")})
    st = residual_stats(cal, test, "measured", "m")["attention_decode"]
    whole, _ = predict_family_frame(_model(), rows.drop(columns="kernel_source"), GPU)
    own, _ = predict_family_frame(_model(), rows, GPU)
    ape_whole = np.abs(whole / rows["latency_ms"].to_numpy() - 1) * 100
    ape_own = np.abs(own / rows["latency_ms"].to_numpy() - 1) * 100
    assert st["rows"] == 2 and abs(st["mape"] * 100 - ape_whole.mean()) < 1e-2     # stats are fractions
    assert ape_own.mean() < 3.0 < ape_whole.mean()

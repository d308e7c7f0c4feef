"""Attention rows of one engine table that ran different kernels are fitted and answered apart
(sim/kernel_calibration/attention_kernels.py); queries and table rows alike get the kernel of the engine's
rule (the recorded kernel per head configuration), never a row's own label."""

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


def test_rows_and_queries_take_the_rules_kernel_not_the_label():
    shape = {"batch": 1, "kv_len": 1, "num_heads": 8, "num_kv_heads": 1, "head_dim": 256, "kv_dtype": "bf16",
             "window": 0}
    rows = pd.DataFrame([{**shape, "kernel_source": "trtllm_mha"}, {**shape, "kernel_source": "triton"},
                         {**shape, "kernel_source": "flashinfer"}, shape])
    km_of = lambda fm: CalibratedKernelModel(get_gpu("b200"), "sglang", Calibration(
        {}, {"b200": GPU}, {"b200": {"sglang": {"attention_decode": fm}}}))
    # no recorded rule (a table with one kernel per engine): every row and the query get the whole table
    pred, ok = predict_family_frame(_model(), rows, GPU)
    assert ok.all() and np.ptp(pred) == 0.0 and 0.010 < pred[0] < 0.012
    assert abs(km_of(_model()).attention_decode(1, 1, 8, 1, 256, "bf16").latency_ms - pred[0]) < 1e-12
    # the rule names triton for this head configuration: every row (whatever its label) and the query
    # get the triton model (floor 20 us dominates a 1-token decode)
    fm = _model()
    fm.head_kernels = {"d256/q8/k1/16bit/w0": "triton", "d256": "trtllm_mha"}
    pred, ok = predict_family_frame(fm, rows, GPU)
    assert ok.all() and np.ptp(pred) == 0.0 and 0.020 < pred[0] < 0.022
    assert abs(km_of(fm).attention_decode(1, 1, 8, 1, 256, "bf16").latency_ms - pred[0]) < 1e-12
    # another head configuration of dim 256: the head dim's kernel (trtllm_mha, floor 30 us)
    assert 0.030 < km_of(fm).attention_decode(1, 1, 16, 2, 256, "bf16").latency_ms < 0.032
    # a head dim the table never ran: no kernel, the whole table
    assert 0.010 < km_of(fm).attention_decode(1, 1, 8, 1, 128, "bf16").latency_ms < 0.012


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


def test_band_statistics_describe_the_rule_path():
    """The measured-tier band of attention is the error of what the simulator's queries get: the rule's
    kernel (FamilyModel.head_kernels), not each row's own label."""
    from types import SimpleNamespace

    from llmplan.calibration.fit import residual_stats

    fm = _model()
    fm.head_kernels = {"d256": "trtllm_mha"}
    cal = Calibration({}, {"b200": GPU}, {"b200": {"sglang": {"attention_decode": fm}}})
    shape = {"gpu": "b200", "backend": "sglang", "batch": 1, "kv_len": 1, "num_heads": 8, "num_kv_heads": 1,
             "head_dim": 256, "kv_dtype": "bf16", "window": 0}
    rows = pd.DataFrame([{**shape, "kernel_source": "trtllm_mha", "latency_ms": 0.0315},
                         {**shape, "kernel_source": "triton", "latency_ms": 0.0210}])
    test = SimpleNamespace(frames={"attention_decode": rows}, gpu_specs={"b200": get_gpu("b200")})
    st = residual_stats(cal, test, "measured", "m")["attention_decode"]
    rule, _ = predict_family_frame(fm, rows, GPU)
    assert np.ptp(rule) == 0.0 and 0.030 < rule[0] < 0.032        # both rows: the trtllm_mha model
    ape_rule = np.abs(rule / rows["latency_ms"].to_numpy() - 1) * 100
    assert st["rows"] == 2 and abs(st["mape"] * 100 - ape_rule.mean()) < 1e-2     # stats are fractions
    assert ape_rule.mean() > 20.0      # the triton row's error is counted (its label is not used)

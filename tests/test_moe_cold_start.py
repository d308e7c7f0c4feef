"""A 16-bit MoE query that an engine has no bf16 group for takes the engine's own 8-bit group,
timed with 2-byte weights and the bf16 peak (family_model.GROUP_FALLBACK / MOE_16BIT), and the
table path (validation, residual bands) and the one-query path (plan, simulate) agree on it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import (FamilyModel, GroupModel, predict_family_frame,
                                                         scalar_phys)
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
# DeepSeek-V3-like experts: hidden 7168, expert width 2048, top-8 of 256, EP 1
SHAPE = {"hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256, "moe_tp": 1, "moe_ep": 1, "skew": 0.0}


def _group() -> GroupModel:
    base = BaseParams(floor_us=5.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)
    return GroupModel(base, None, 100, {"num_tokens": [1.0, 16384.0]})


def _query(tokens: int, dtype: str) -> dict:
    return {"num_tokens": tokens, **SHAPE, "dtype": dtype}


def test_bf16_falls_back_to_the_engines_own_fp8_group_not_exactly():
    only8 = FamilyModel("moe", {"fp8": _group()})
    assert only8.resolve_group("bf16") == ("fp8", False)
    assert only8.resolve_group("fp16") == ("fp8", False)
    assert FamilyModel("moe", {"fp8_block": _group()}).resolve_group("bf16") == ("fp8_block", False)
    both = FamilyModel("moe", {"bf16": _group(), "fp8": _group()})
    assert both.resolve_group("bf16") == ("bf16", True)
    # no 16-bit or 8-bit group: the engine has no answer, the next tier candidate gives one
    assert FamilyModel("moe", {"w4a16_mxfp4": _group()}).resolve_group("bf16") == (None, False)


@pytest.mark.parametrize("group", ["fp8", "fp8_block"])
def test_a_bf16_query_keeps_its_own_bytes_and_peak_on_an_8bit_group(group):
    p16 = scalar_phys("moe", GPU, group, _query(64, "bf16"))
    ref = scalar_phys("moe", GPU, "bf16", _query(64, "bf16"))   # as a bf16 group times it
    assert p16.nbytes == pytest.approx(ref.nbytes) and p16.flops == pytest.approx(ref.flops)
    assert p16.t_c == pytest.approx(ref.t_c) and p16.t_m == pytest.approx(ref.t_m)
    assert p16.x == pytest.approx(ref.x)
    p8 = scalar_phys("moe", GPU, group, _query(64, "fp8"))
    # weights dominate the bytes at 64 tokens: 2-byte weights move ~2x the 1-byte ones
    assert 1.9 < p16.nbytes / p8.nbytes < 2.0
    assert p16.t_c == pytest.approx(p8.t_c * GPU.peak("fp8") / GPU.peak("bf16"))


@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_table_and_one_query_paths_agree_on_the_cold_start(tokens):
    fm = FamilyModel("moe", {"fp8": _group()})
    row = pd.DataFrame([_query(tokens, "bf16")])
    table, ok = predict_family_frame(fm, row, GPU)
    assert ok.all()
    one, _ = fm.groups["fp8"].predict_one(scalar_phys("moe", GPU, "fp8", _query(tokens, "bf16")))
    assert table[0] == pytest.approx(one, rel=1e-9)
    # and a 16-bit query is slower than the 8-bit one on the same fitted kernel
    t8, _ = fm.groups["fp8"].predict_one(scalar_phys("moe", GPU, "fp8", _query(tokens, "fp8")))
    assert one > t8


def test_frame_phys_of_a_bf16_row_matches_the_scalar_phys():
    row = pd.DataFrame([_query(256, "bf16")])
    fp = F.frame_phys("moe", row, GPU)
    sp = scalar_phys("moe", GPU, "fp8", _query(256, "bf16"))
    assert float(np.asarray(fp.t_m)[0]) == pytest.approx(sp.t_m)
    assert float(np.asarray(fp.t_c)[0]) == pytest.approx(sp.t_c)
    assert F.feature_matrix(fp)[0] == pytest.approx(np.array(sp.x))

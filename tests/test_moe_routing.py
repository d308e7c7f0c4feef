"""MoE work terms from the tables' routing (sim/kernel_calibration/moe_routing.py, features.moe
"routed" form): the load on the timed GPU under the collectors' balanced and power-law routing,
and calibration files fitted with the older "uniform" form keep predicting with it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.errors import UserError
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration import moe_routing as R
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel, predict_family_frame, scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures("h100_sxm", 989.0, 1979.0, 1979.0, 3350.0, 132, 50.0, 450.0, 64.0)


def _balanced_counts(tokens: int, experts: int, topk: int) -> np.ndarray:
    """Pairs per expert of the collectors' balanced routing, token by token (collector/helper.py
    balanced_logits: token i's j-th expert is (i + j*stride) mod E, or for fewer tokens than the
    stride (floor(i*stride/T) + j*stride) mod E; a token keeps a repeated expert once)."""
    stride = math.ceil(experts / topk)
    counts = np.zeros(experts)
    for i in range(tokens):
        chosen = set()
        for j in range(topk):
            off = i if tokens >= stride else math.floor(i * stride / tokens)
            chosen.add((off + j * stride) % experts)
        for e in chosen:
            counts[e] += 1
    return counts


@pytest.mark.parametrize("tokens,experts,topk,ep", [(16, 512, 22, 1), (16, 512, 22, 8), (24, 512, 22, 256),
                                                    (320, 128, 8, 4), (100, 160, 8, 32), (2, 256, 8, 1),
                                                    (1024, 60, 4, 8)])
def test_balanced_load_is_the_collectors_assignment(tokens, experts, topk, ep):
    counts = _balanced_counts(tokens, experts, topk)[: -(-experts // ep)]
    pairs, touched, tiles = R.routing_load(tokens, experts, topk, ep, 0.0)
    assert pairs == counts.sum()
    assert touched == (counts > 0).sum()
    assert tiles == np.ceil(counts / R.TILE_M).sum()


def test_large_token_counts_interpolate_between_grid_points():
    # above EXACT_TOKENS the load is exact on 32 steps per octave (1024..2047: steps of 32)
    # and linear in between
    lo, hi = R.routing_load(1024, 256, 8, 8, 1.01), R.routing_load(1056, 256, 8, 8, 1.01)
    mid = R.routing_load(1040, 256, 8, 8, 1.01)
    assert lo == R._routing_exact(1024, 256, 8, 8, 1.01)
    assert mid == pytest.approx(tuple((a + b) / 2 for a, b in zip(lo, hi)))


def test_few_tokens_touch_distinct_experts_not_uniform_draws():
    # 16 tokens x top-22 of 512 experts: the balanced routing touches 347 experts (5 tokens
    # repeat one), where 352 independent uniform draws would touch ~255
    _, touched, _ = R.routing_load(16, 512, 22, 1, 0.0)
    assert touched == 347
    legacy = F.moe(16.0, 1024.0, 2688.0, 22.0, 512.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0, 989.0, GPU, F.PY,
                   form=F.MOE_FORM_UNIFORM)
    routed = F.moe(16.0, 1024.0, 2688.0, 22.0, 512.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0, 989.0, GPU, F.PY,
                   form=F.MOE_FORM_ROUTED)
    weights = 3 * 1024 * 2688 * 2.0
    assert routed.nbytes - legacy.nbytes == pytest.approx((347 - 512 * (1 - (1 - 1 / 512) ** 352)) * weights)


def test_power_law_loads_the_busiest_rank():
    tokens, experts, topk = 4096, 256, 8
    for ep in (1, 8, 64):
        for alpha in (1.01, 1.2):
            pairs, touched, tiles = R.routing_load(tokens, experts, topk, ep, alpha)
            even = tokens * topk / ep
            assert touched <= experts // ep
            assert tiles >= touched
            if ep == 1:
                assert pairs == pytest.approx(even, rel=1e-3)     # every pair lands on the only rank
            else:
                assert even < pairs <= tokens * topk              # the timed rank is the busiest
    # a stronger skew piles more pairs on the busiest rank
    assert R.routing_load(tokens, experts, topk, 64, 1.2)[0] > R.routing_load(tokens, experts, topk, 64, 1.01)[0]


def test_power_law_expectation_is_deterministic():
    first = R.routing_load(777, 384, 6, 16, 1.2)
    R.routing_load.cache_clear()
    R._routing_exact.cache_clear()
    assert R.routing_load(777, 384, 6, 16, 1.2) == first
    a = R.routing_load_arrays(np.array([777.0, 5.0, 777.0]), 384.0, 6.0, 16.0, np.array([1.2, 0.0, 1.2]))
    assert a[0][0] == a[0][2] == first[0] and a[1][1] == R.routing_load(5, 384, 6, 16, 0.0)[1]


def _frame(tokens: list[int], skew: float = 1.01, ep: int = 8) -> pd.DataFrame:
    n = len(tokens)
    return pd.DataFrame({"num_tokens": tokens, "hidden": [7168] * n, "inter": [2048] * n, "topk": [8] * n,
                         "num_experts": [256] * n, "moe_tp": [1] * n, "moe_ep": [ep] * n, "dtype": ["fp8_block"] * n,
                         "skew": [skew] * n, "kernel_source": ["sglang_fused_moe_triton"] * n,
                         "latency_ms": [1.0] * n})


@pytest.mark.parametrize("form", F.MOE_FORMS)
def test_scalar_and_frame_terms_agree(form):
    df = _frame([1, 64, 5000])
    frame = F.frame_phys("moe", df, GPU, form)
    for i, t in enumerate(df["num_tokens"]):
        q = {"num_tokens": int(t), "hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256, "moe_tp": 1,
             "moe_ep": 8, "dtype": "fp8_block", "skew": 1.01}
        one = scalar_phys("moe", GPU, "fp8_block", q, form)
        assert one.t_c == pytest.approx(frame.t_c[i], rel=1e-12)
        assert one.t_m == pytest.approx(frame.t_m[i], rel=1e-12)
        assert one.q == pytest.approx(frame.q[i], rel=1e-12)
        assert np.allclose(np.array(one.x, dtype=float), F.feature_matrix(frame)[i], rtol=1e-12)


def test_tile_work_counts_both_gemms():
    # 64 tokens x top-8 of 256 experts, EP 8, balanced: 512 pairs, 2 on each expert -> 64 on the
    # 32 local experts, one 64-row M tile each (2 rows used); N tiles: gate+up 4096/128 = 32,
    # down 7168/128 = 56
    p = F.moe(64.0, 7168.0, 2048.0, 8.0, 256.0, 1.0, 8.0, 1.0, 1.0, 0.0, 0.0, 1979.0, GPU, F.PY,
              form=F.MOE_FORM_ROUTED)
    assert p.waves == math.ceil(32 * (32 + 56) / GPU.sm_count)
    assert R.routing_load(64, 256, 8, 8, 0.0) == (64.0, 32.0, 32.0)
    assert p.q == pytest.approx(64 / 2)


def _model(form: str) -> FamilyModel:
    gm = GroupModel(BaseParams.prior(), None, 10, {})
    return FamilyModel("moe", {"fp8_block": gm}, None, form)


def test_old_files_keep_the_uniform_form():
    d = _model(F.MOE_FORM_ROUTED).to_dict()
    assert d["work_form"] == F.MOE_FORM_ROUTED
    assert FamilyModel.from_dict("moe", d).work_form == F.MOE_FORM_ROUTED
    del d["work_form"]                       # a file fitted before the routed form
    old = FamilyModel.from_dict("moe", d)
    assert old.work_form == F.MOE_FORM_UNIFORM
    df = _frame([16, 4096])
    got, _ = predict_family_frame(old, df, GPU)
    want = GroupModel(BaseParams.prior()).predict_frame(F.frame_phys("moe", df, GPU, F.MOE_FORM_UNIFORM))
    assert np.array_equal(got, want)
    new, _ = predict_family_frame(_model(F.MOE_FORM_ROUTED), df, GPU)
    assert not np.allclose(new, got)
    # other families' dictionaries are unchanged (no work_form key)
    assert "work_form" not in FamilyModel("gemm", {}).to_dict()


def test_unknown_form_is_refused():
    d = _model(F.MOE_FORM_ROUTED).to_dict()
    d["work_form"] = "from-the-future"
    with pytest.raises(UserError, match="work form"):
        FamilyModel.from_dict("moe", d)

"""The cross-gen tier pools the measured GPUs' *predictions* (crossgen_blend.BlendGroupModel)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.crossgen_blend import MIN_WEIGHT, BlendGroupModel
from llmplan.sim.kernel_calibration.family_model import GroupModel, predict_family_frame, scalar_phys
from llmplan.sim.kernel_calibration.gbt import GBTParams, fit_gbt
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
SHAPES = pd.DataFrame({"m": [1, 16, 256, 4096, 8192], "n": [4096, 7168, 2048, 4096, 28672],
                       "k": [4096, 2048, 7168, 4096, 4096], "dtype": ["bf16"] * 5})


def _member(floor_us: float, eta_c: float, with_gbt: bool) -> GroupModel:
    bp = BaseParams(floor_us, 0.5, eta_c, 0.7, 0.5, 3.0, 0.5, 60.0)
    gbt = None
    if with_gbt:     # a residual that depends on a GPU-normalised feature (waves)
        x = F.feature_matrix(F.frame_phys("gemm", SHAPES, GPU))
        y = 0.3 * (x[:, F.FEATURES["gemm"].index("log_tiles_per_sm")] > 0)
        gbt = fit_gbt(np.repeat(x, 4, axis=0), np.repeat(y, 4), list(F.FEATURES["gemm"]),
                      GBTParams(n_trees=10, depth=2, subsample=1.0)).rounded()
    return GroupModel(bp, gbt, 10, {"m": [1.0, 8192.0]})


def _blend(members: list[tuple[GroupModel, float]], residual: bool) -> BlendGroupModel:
    pooled = GroupModel(crossgen.mean_params([m.base for m, _ in members], [w for _, w in members]), None, 20)
    return BlendGroupModel.of(pooled, members, residual)


def _frame(gm: GroupModel) -> np.ndarray:
    return gm.predict_frame(F.frame_phys("gemm", SHAPES, GPU))


def test_one_member_gives_its_own_prediction():
    m = _member(6.0, 0.6, with_gbt=True)
    np.testing.assert_allclose(_frame(_blend([(m, 1.0)], residual=True)), _frame(m), rtol=1e-12)
    plain = GroupModel(m.base)
    np.testing.assert_allclose(_frame(_blend([(m, 1.0)], residual=False)), _frame(plain), rtol=1e-12)


def test_weighted_geometric_mean_of_member_predictions():
    a, b = _member(4.0, 0.8, True), _member(20.0, 0.3, False)
    got = _frame(_blend([(a, 0.25), (b, 0.75)], residual=True))
    want = np.exp(0.25 * np.log(_frame(a)) + 0.75 * np.log(_frame(b)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # not the model of the averaged parameters (which ignores the residual and the joint fit)
    pooled = GroupModel(crossgen.mean_params([a.base, b.base], [0.25, 0.75]))
    assert np.max(np.abs(got / _frame(pooled) - 1.0)) > 1e-3


def test_scalar_and_frame_paths_agree():
    gm = _blend([(_member(4.0, 0.8, True), 0.4), (_member(9.0, 0.5, True), 0.6)], residual=True)
    frame = _frame(gm)
    for i, r in enumerate(SHAPES.to_dict("records")):
        ms, bound = gm.predict_one(scalar_phys("gemm", GPU, "bf16", r))
        assert ms == pytest.approx(frame[i], rel=1e-9)
        assert bound in ("latency", "compute", "memory")


def test_negligible_members_dropped_and_weights_renormalised():
    a, b = _member(4.0, 0.8, False), _member(9.0, 0.5, False)
    gm = _blend([(a, 1.0 - MIN_WEIGHT / 10), (b, MIN_WEIGHT / 10)], residual=False)
    assert len(gm.members) == 1 and gm.members[0][1] == pytest.approx(1.0)
    np.testing.assert_allclose(_frame(gm), _frame(a), rtol=1e-12)


def test_crossgen_family_excludes_target_and_weights_by_similarity():
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    cal = load_calibration(None)
    target = cal.gpus["h200_sxm"]
    fm = crossgen.crossgen_family(cal, "gemm", "vllm", exclude="h200_sxm", target=target,
                                  vendor="nvidia", vendor_of=lambda k: "intel" if k == "b60" else "nvidia")
    gm = fm.groups["bf16"]
    assert isinstance(gm, BlendGroupModel)
    assert sum(w for _, w, _ in gm.members) == pytest.approx(1.0)
    own = cal.family_model("h200_sxm", "vllm", "gemm").groups["bf16"]
    assert all(m is not own for m, _, _ in gm.members)
    # the twin (same silicon, H100) carries most of the weight for H200
    h100 = cal.family_model("h100_sxm", "vllm", "gemm").groups["bf16"]
    w_h100 = sum(w for m, w, _ in gm.members if m is h100)
    assert w_h100 == max(w for _, w, _ in gm.members)
    # and the pooled prediction is finite and positive on the target's figures
    ms, _ = predict_family_frame(fm, SHAPES.assign(backend="vllm"), target)
    assert np.all(np.isfinite(ms)) and np.all(ms > 0)
    assert crossgen.USE_RESIDUAL == any(r for _, _, r in gm.members)
    assert math.isfinite(gm.base.floor_us)


def test_collectives_pool_by_fabric():
    """A PCIe GPU pools every measured GPU's alpha-beta (PCIe boxes differ in topology); a
    scale-up GPU pools only GPUs measured over a scale-up fabric."""
    from llmplan.sim.kernel_calibration.calib_file import load_calibration
    from llmplan.sim.kernel_calibration.collectives import geo_mean

    cal = load_calibration(None)
    key = "nccl|all_reduce|fp16|8"
    pcie = crossgen.crossgen_alpha_beta(cal, cal.gpus["rtx_pro_6000_server"])[key]
    have = [g for g, c in sorted(cal.collectives.items()) if g != "rtx_pro_6000_server" and key in c.alpha_beta]
    assert len(have) > 1
    assert pcie == geo_mean([cal.collectives[g].alpha_beta[key] for g in have])
    nvl = crossgen.crossgen_alpha_beta(cal, cal.gpus["h100_sxm"])[key]
    scaleup = [g for g in have if g != "h100_sxm" and cal.gpus[g].fabric == "scaleup"]
    assert scaleup and nvl == geo_mean([cal.collectives[g].alpha_beta[key] for g in scaleup])


def test_member_residual_capped_at_a_factor_of_two():
    """A member's residual correction larger than RESIDUAL_CAP (a kernel quirk of that GPU)
    is capped on the target, on both evaluation paths."""
    from llmplan.sim.kernel_calibration.crossgen_blend import RESIDUAL_CAP

    m = _member(4.0, 0.8, False)
    x = F.feature_matrix(F.frame_phys("gemm", SHAPES, GPU))
    big = fit_gbt(np.repeat(x, 4, axis=0), np.full(4 * len(x), 3.0), list(F.FEATURES["gemm"]),
                  GBTParams(n_trees=5, depth=2, subsample=1.0)).rounded()
    assert np.all(big.predict(x) > 2.0 * RESIDUAL_CAP)
    quirky = GroupModel(m.base, big, 10)
    gm = _blend([(quirky, 1.0)], residual=True)
    np.testing.assert_allclose(_frame(gm), _frame(m) * math.exp(RESIDUAL_CAP), rtol=1e-12)
    ms, _ = gm.predict_one(scalar_phys("gemm", GPU, "bf16", SHAPES.iloc[3].to_dict()))
    assert ms == pytest.approx(_frame(m)[3] * math.exp(RESIDUAL_CAP), rel=1e-9)


def test_pooled_model_moves_the_members_mean_by_at_most_the_cap():
    """The pooled GEMM model pulls the members' log mean toward it with weight ``pooled_weight``,
    by at most POOLED_CAP in log space: a pooled model 3x slower than the members moves the
    answer by exactly the cap times the weight; one within the cap by weight x difference."""
    from llmplan.sim.kernel_calibration.crossgen_blend import POOLED_CAP

    m = _member(4.0, 0.8, False)
    base = np.log(_frame(m) * 1e3)

    class Shifted:
        def __init__(self, d: float):
            self.d = d

        def log_us_frame(self, phys: F.Phys) -> np.ndarray:
            return np.log(GroupModel(m.base).predict_frame(phys) * 1e3) + self.d

        def log_us_one(self, phys: F.Phys) -> float:
            return math.log(GroupModel(m.base).predict_one(phys)[0] * 1e3) + self.d

    pooled = GroupModel(m.base, None, 10)
    for d, pw in ((math.log(3.0), 0.5), (-math.log(3.0), 0.5), (POOLED_CAP / 3, 0.5), (math.log(3.0), 1.0)):
        gm = BlendGroupModel.of(pooled, [(m, 1.0)], False, Shifted(d), pw)
        want = base + pw * float(np.clip(d, -POOLED_CAP, POOLED_CAP))
        np.testing.assert_allclose(np.log(_frame(gm) * 1e3), want, rtol=1e-12)
        ms, _ = gm.predict_one(scalar_phys("gemm", GPU, "bf16", SHAPES.iloc[2].to_dict()))
        assert math.log(ms * 1e3) == pytest.approx(want[2], rel=1e-9)

"""The cross-gen prior (crossgen_prior): a target far from every measured GPU reverts toward
the equal-weight pool and the specification roofline; a target near one does not."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration import crossgen_prior as P
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.crossgen_blend import MIN_WEIGHT, BlendGroupModel
from llmplan.sim.kernel_calibration.family_model import GroupModel, scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams
from llmplan.sim.kernels import GEMM_ETA_COMPUTE, LAUNCH_FLOOR_US, MEM_ETA

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
SHAPES = pd.DataFrame({"m": [1, 16, 256, 4096, 8192], "n": [4096, 7168, 2048, 4096, 28672],
                       "k": [4096, 2048, 7168, 4096, 4096], "dtype": ["bf16"] * 5})


def _member(floor_us: float, eta_c: float) -> GroupModel:
    return GroupModel(BaseParams(floor_us, 0.5, eta_c, 0.7, 0.5, 3.0, 0.5, 60.0), None, 10)


def _phys() -> F.Phys:
    return F.frame_phys("gemm", SHAPES, GPU)


def _log_us(gm: GroupModel) -> np.ndarray:
    return np.log(gm.predict_frame(_phys()) * 1e3)


def test_prior_share_falls_with_the_members_similarity():
    eps = P.PRIOR_SIMILARITY
    assert P.prior_share(0.0) == pytest.approx(1.0)
    assert P.prior_share(eps) == pytest.approx(0.5)
    assert P.prior_share(9 * eps) == pytest.approx(0.1)
    assert P.prior_share(1.0) < 0.01                    # a near member (the H100/H200 twins: ~0.7)
    assert P.prior_share(0.5, prior_similarity=0.0) == 0.0


def test_roofline_terms_follow_sim_kernels_constants():
    phys = _phys()
    got = P.roofline_log_us("gemm", phys)
    t = np.maximum(phys.q * phys.t_c / GEMM_ETA_COMPUTE, phys.t_m / MEM_ETA)
    want = np.where(t < LAUNCH_FLOOR_US, LAUNCH_FLOOR_US, t + 0.2 * LAUNCH_FLOOR_US)
    np.testing.assert_allclose(got, np.log(want), rtol=1e-12)
    assert got[-1] > got[0]                              # the 8192x28672x4096 GEMM is the slowest
    # scalar path equals the frame path
    for i, r in enumerate(SHAPES.to_dict("records")):
        assert P.roofline_log_us("gemm", scalar_phys("gemm", GPU, "bf16", r)) == pytest.approx(got[i], rel=1e-12)
    # GDN floors are a minimum, not launch + 20%
    small = F.Phys(0.01, 0.02, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, [])
    assert math.exp(P.roofline_log_us("gdn_decode", small)) == pytest.approx(P.ROOFLINE["gdn_decode"][2])


def test_blend_reverts_to_equal_pool_and_roofline_by_the_prior_share():
    """(1 - a) * similarity-weighted members + a * (r * roofline + (1 - r) * equal-weight mean of
    ALL members, the ones dropped under MIN_WEIGHT included)."""
    near, far = _member(4.0, 0.8), _member(30.0, 0.2)
    w_far = MIN_WEIGHT / 4                                # dropped from the weighted mean
    a = 0.3
    pooled = GroupModel(crossgen.mean_params([near.base, far.base]), None, 20)
    gm = BlendGroupModel.of(pooled, [(near, 1 - w_far), (far, w_far)], False, prior_share=a, family="gemm")
    assert len(gm.members) == 1 and len(gm.dropped) == 1
    r = P.PRIOR_ROOFLINE_SHARE
    prior = r * P.roofline_log_us("gemm", _phys()) + (1 - r) * 0.5 * (_log_us(near) + _log_us(far))
    want = (1 - a) * _log_us(near) + a * prior
    np.testing.assert_allclose(_log_us(gm), want, rtol=1e-12)
    # the far member moves the answer only through the prior
    assert np.all(np.abs(_log_us(gm) - _log_us(near)) > 1e-3)
    # scalar path agrees
    frame = gm.predict_frame(_phys())
    for i, row in enumerate(SHAPES.to_dict("records")):
        ms, _ = gm.predict_one(scalar_phys("gemm", GPU, "bf16", row))
        assert ms == pytest.approx(frame[i], rel=1e-9)


def test_negligible_prior_share_changes_nothing():
    near, far = _member(4.0, 0.8), _member(30.0, 0.2)
    pooled = GroupModel(crossgen.mean_params([near.base, far.base]), None, 20)
    plain = BlendGroupModel.of(pooled, [(near, 0.6), (far, 0.4)], False)
    tiny = BlendGroupModel.of(pooled, [(near, 0.6), (far, 0.4)], False, prior_share=MIN_WEIGHT / 2, family="gemm")
    assert tiny.prior_share == 0.0
    np.testing.assert_allclose(tiny.predict_frame(_phys()), plain.predict_frame(_phys()), rtol=1e-12)


def test_far_target_gets_the_prior_near_target_does_not():
    """B200 (2.3x H200's peak, 1.7x its bandwidth, 2.5x its L2) is far from every other measured
    GPU: its pool takes a large prior share. H100, whose twin H200 is in the pool, takes none."""
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    cal = load_calibration(None)
    vendor_of = lambda k: "intel" if k == "b60" else "nvidia"  # noqa: E731
    shares = {}
    for gpu in ("b200", "h100_sxm"):
        fm = crossgen.crossgen_family(cal, "gemm", "vllm", exclude=gpu, target=cal.gpus[gpu], vendor="nvidia",
                                      vendor_of=vendor_of)
        shares[gpu] = fm.groups["bf16"].prior_share
        srcs = [g for g in sorted(cal.measured) if g not in (gpu, "b60")]
        want = P.prior_share(sum(crossgen.similarities(cal.gpus[gpu], [cal.gpus[g] for g in srcs])))
        assert shares[gpu] == (pytest.approx(want) if want >= MIN_WEIGHT else 0.0)
    assert shares["b200"] > 0.2
    assert shares["h100_sxm"] == 0.0

"""The cross-gen tier rescales members' cycle-counted terms to the target's clock (crossgen_clock)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration import crossgen_clock as C
from llmplan.sim.kernel_calibration.calib_file import load_calibration
from llmplan.sim.kernel_calibration.family_model import predict_family_frame
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams


def _feat(key: str) -> GPUFeatures:
    return GPUFeatures.from_spec(get_gpu(key))


@pytest.mark.parametrize("key, ghz", [("a100_sxm", 1.41), ("h100_sxm", 1.83), ("h200_sxm", 1.83),
                                      ("l40s", 2.49), ("rtx_pro_6000_server", 2.43), ("b60", 2.40),
                                      ("b200", 1.856), ("l4", 2.04), ("a10g", 1.71), ("mi300x", 2.09), ("mi355x", 2.40)])
def test_clock_implied_by_the_catalog_peak(key, ghz):
    """peak / (SMs x FLOP per clock per SM) reproduces the vendors' quoted clocks (within 1%)."""
    assert C.tensor_clock_ghz(_feat(key)) == pytest.approx(ghz, rel=0.01)


def test_every_catalog_gpu_has_a_clock():
    """No GPU of the packaged catalog is left unscaled silently as a cross-gen target or member."""
    from llmplan.hardware_catalog.loader import load_catalog
    missing = [k for k in sorted(load_catalog()) if C.tensor_clock_ghz(_feat(k)) is None]
    assert missing == []


def test_unlisted_architecture_has_no_clock_and_no_scaling():
    g = GPUFeatures("custom_gpu", 100.0, 200.0, 200.0, 1000.0, 50, 20.0, 0.0, 32.0)
    assert C.tensor_clock_ghz(g) is None
    assert C.clock_ratio(g, _feat("a100_sxm")) == 1.0
    assert C.clock_ratio(_feat("h100_sxm"), None) == 1.0


def test_scaled_base_moves_only_cycle_counted_terms():
    b = BaseParams(5.0, 0.5, 0.7, 0.8, 0.5, 3.0, 0.5, 60.0)
    s = C.scaled_base(b, 1.3)
    assert s.wave_us == pytest.approx(0.65) and s.l2_bw_sm == pytest.approx(60.0 / 1.3)
    assert (s.floor_us, s.eta_c, s.eta_m, s.g, s.p, s.l2_cap) == (5.0, 0.7, 0.8, 0.5, 3.0, 0.5)
    assert C.scaled_base(b, 1.0) is b


SHAPES = pd.DataFrame({"m": [1, 8, 16384], "n": [4096, 2048, 16384], "k": [4096, 2048, 16384],
                       "dtype": ["bf16"] * 3, "backend": ["vllm"] * 3})


def _pool(cal, gpu: str, scaling: bool, monkeypatch) -> np.ndarray:
    monkeypatch.setattr(crossgen, "CLOCK_SCALING", scaling)
    vend = lambda k: "intel" if k == "b60" else "nvidia"  # noqa: E731
    fm = crossgen.crossgen_family(cal, "gemm", "vllm", exclude=gpu, target=cal.gpus[gpu],
                                  vendor=vend(gpu), vendor_of=vend)
    return predict_family_frame(fm, SHAPES, cal.gpus[gpu])[0]


def test_a_slower_clocked_target_runs_its_small_kernels_longer(monkeypatch):
    """A100 (1.41 GHz) from GPUs clocked 1.83-2.49 GHz: the small L2-resident GEMM (8 MB of
    weights, per-wave and L2 terms) gets slower, the DRAM-bound 32 MB one no faster, the large
    compute-bound one moves by a few percent at most."""
    cal = load_calibration(None)
    off, on = _pool(cal, "a100_sxm", False, monkeypatch), _pool(cal, "a100_sxm", True, monkeypatch)
    assert on[1] > off[1] * 1.05
    assert on[0] >= off[0]
    assert on[2] == pytest.approx(off[2], rel=0.05)


def test_other_vendor_members_and_same_clock_twins_are_not_scaled(monkeypatch):
    cal = load_calibration(None)
    # the B60 (Intel) pools NVIDIA GPUs only: no member is rescaled
    np.testing.assert_array_equal(_pool(cal, "b60", False, monkeypatch), _pool(cal, "b60", True, monkeypatch))
    # H200's twin H100 has its clock: its model is used as fitted (the same object)
    monkeypatch.setattr(crossgen, "CLOCK_SCALING", True)
    fm = crossgen.crossgen_family(cal, "gemm", "vllm", exclude="h200_sxm", target=cal.gpus["h200_sxm"],
                                  vendor="nvidia", vendor_of=lambda k: "nvidia")
    h100 = cal.family_model("h100_sxm", "vllm", "gemm").groups["bf16"]
    assert any(m is h100 for m, _, _ in fm.groups["bf16"].members)


def test_a_measured_gpus_own_fallback_pool_is_not_rescaled(monkeypatch):
    """tiers.KernelSource.pool answers a measured GPU's missing groups from the pool with no
    exclusion: those answers (and so the measured GPUs' served predictions) stay as before."""
    cal = load_calibration(None)
    target = cal.gpus["a100_sxm"]

    def fallback(scaling: bool) -> np.ndarray:
        monkeypatch.setattr(crossgen, "CLOCK_SCALING", scaling)
        fm = crossgen.crossgen_family(cal, "gemm", "vllm", exclude=None, target=target,
                                      vendor="nvidia", vendor_of=lambda k: "intel" if k == "b60" else "nvidia")
        return predict_family_frame(fm, SHAPES, target)[0]

    np.testing.assert_array_equal(fallback(True), fallback(False))
    # the same GPU scored leave-one-GPU-out (excluded from its pool) is rescaled
    assert not np.array_equal(_pool(cal, "a100_sxm", True, monkeypatch), _pool(cal, "a100_sxm", False, monkeypatch))

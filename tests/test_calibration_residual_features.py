"""Residual ensembles never split on a family's excluded features (MoE expert-configuration
identity), and measured-tier statistics can pool the held-out rows of further splits."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import fit as FIT
from llmplan.calibration.fit import FitOptions, fit_calibration, fit_group, residual_stats, split_measurements
from llmplan.calibration.reader import read_measurements
from llmplan.calibration.splits import Split
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gbt import GBTParams
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from test_calibration_synth import make_measurements_dir

OPTS = FitOptions(residuals=False, gbt=GBTParams(n_trees=30, depth=4), min_trees=10, rows_per_tree=10)


def _moe_frame(n: int = 1500) -> pd.DataFrame:
    """MoE rows whose latency carries a strong per-configuration factor (hidden size)."""
    rng = np.random.default_rng(3)
    configs = [(2048, 768, 8, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (3072, 1024, 6, 64)]
    rows = []
    for i in range(n):
        h, inter, k, e = configs[i % len(configs)]
        t = int(2 ** rng.integers(0, 13))
        work = t * k * h * inter * 6.0 / 1e12 + e * 3 * h * inter * 2 / 3e12
        quirk = 2.5 if h == 4096 else 1.0            # one configuration's kernel is slow
        rows.append({"num_tokens": t, "hidden": h, "inter": inter, "topk": k, "num_experts": e, "moe_tp": 1,
                     "moe_ep": 1, "dtype": "bf16", "skew": 0.0,
                     "latency_ms": (0.01 + 1e3 * work) * quirk * float(np.exp(rng.normal(0, 0.01)))})
    return pd.DataFrame(rows)


def _split_features(gm) -> set[str]:
    names = F.FEATURES["moe"]
    return {names[j] for j in np.unique(gm.gbt.feats)}


def test_moe_residual_never_splits_on_configuration_identity(monkeypatch):
    gf = GPUFeatures.from_spec(get_gpu("h100_sxm"))
    df = _moe_frame()
    used = _split_features(fit_group("moe", df, gf, OPTS, seed=1))
    assert used and not used & set(FIT.RESIDUAL_EXCLUDE["moe"])
    # without the exclusion the trees do pick the configuration identity (the test can fail)
    monkeypatch.setattr(FIT, "RESIDUAL_EXCLUDE", {})
    free = _split_features(fit_group("moe", df, gf, OPTS, seed=1))
    assert free & {"log_hidden", "log_inter_local", "log_topk", "log_local_experts"}


def test_residual_features_hold_excluded_columns_constant():
    gf = GPUFeatures.from_spec(get_gpu("h100_sxm"))
    phys = F.frame_phys("moe", _moe_frame(200), gf)
    x = FIT.residual_features("moe", phys)
    full = F.feature_matrix(phys)
    names = F.FEATURES["moe"]
    for j, name in enumerate(names):
        if name in FIT.RESIDUAL_EXCLUDE["moe"]:
            assert np.all(x[:, j] == 0.0) and np.ptp(full[:, j]) > 0, name
        else:
            assert np.array_equal(x[:, j], full[:, j]), name


def test_residual_stats_pool_extra_held_out_rows(tmp_path):
    meas = read_measurements(make_measurements_dir(tmp_path, ("h100_sxm",)))
    train, test = split_measurements(meas, Split("grouped", 0.3, 0))
    cal = fit_calibration(train, OPTS)
    one = residual_stats(cal, test, "measured", "m")
    two = residual_stats(cal, test, "measured", "m", extra=[(cal, test)])
    assert two["gemm"]["rows"] == 2 * one["gemm"]["rows"] > 0
    assert two["gemm"]["mape"] == pytest.approx(one["gemm"]["mape"])
    # duplicated rows: same mean, a p90 between the single set's neighbouring order statistics
    assert 0.8 * one["gemm"]["p90_ape"] <= two["gemm"]["p90_ape"] <= 1.2 * one["gemm"]["p90_ape"]


def test_band_folds_refit_only_the_few_group_families(tmp_path):
    from llmplan.calibration import kernel_bands

    meas = read_measurements(make_measurements_dir(tmp_path, ("h100_sxm",)))
    # the synthetic tables hold no MoE/MLA/GDN rows: the band families' folds are empty
    assert kernel_bands.band_families(meas).frames == {}
    assert set(FIT.BAND_EXTRA_FAMILIES) >= {"moe", "mla_decode", "gdn_prefill"}
    assert kernel_bands.n_folds(FitOptions().residual_split) == 5

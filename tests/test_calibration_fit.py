"""The fit recovers known parameters; the fitted file is portable and deterministic."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.calib_file import Calibration, load_calibration
from llmplan.calibration.fit import FitOptions, fit_calibration
from llmplan.sim.kernel_calibration.gbt import GBTParams, GBTModel, fit_gbt
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import fit_base, predict_us
from llmplan.sim.kernel_calibration.predict import predict_frame
from llmplan.calibration.reader import read_measurements
from llmplan.hardware_catalog.loader import get_gpu
from test_calibration_synth import TRUE, gemm_table, make_measurements_dir

FAST = FitOptions(residuals=False, gbt=GBTParams(n_trees=40, depth=4), min_trees=10, rows_per_tree=10,
                  fit_date="2025-01-01")


def _gemm_frame(gpu: str, sigma: float):
    from llmplan.calibration.reader import _canonicalise

    df = gemm_table(gpu, np.random.default_rng(1), sigma)
    return _canonicalise("gemm", df)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_base_fit_recovers_known_parameters(dtype):
    df = _gemm_frame("h100_sxm", sigma=0.0)
    df = df[df["dtype"] == dtype]
    gf = GPUFeatures.from_spec(get_gpu("h100_sxm"))
    phys = F.frame_phys("gemm", df, gf)
    bp = fit_base(phys, df["latency_ms"].to_numpy() * 1e3)
    true = TRUE[dtype]
    assert bp.floor_us == pytest.approx(true.floor_us, rel=0.1)
    assert bp.eta_c == pytest.approx(true.eta_c, rel=0.08)
    assert bp.eta_m == pytest.approx(true.eta_m, rel=0.08)
    err = np.abs(predict_us(bp, phys) / (df["latency_ms"].to_numpy() * 1e3) - 1)
    assert err.max() < 0.05


def test_gbt_learns_a_known_step_function_and_round_trips():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(3000, 3))
    y = 0.3 * (x[:, 0] > 0.2) - 0.2 * (x[:, 1] < -0.5) + 0.1 * x[:, 2]
    m = fit_gbt(x, y, ["a", "b", "c"], GBTParams(n_trees=80, depth=4, learning_rate=0.2)).rounded()
    assert np.abs(m.predict(x) - y).mean() < 0.02
    again = GBTModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert np.array_equal(again.predict(x), m.predict(x))
    assert again.predict_one(x[5]) == pytest.approx(m.predict(x[5:6])[0], abs=1e-12)


def test_calibration_fit_predicts_held_in_rows_and_is_deterministic(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    meas = read_measurements(root)
    cal = fit_calibration(meas, FAST)
    gf = cal.gpus["h100_sxm"]
    for fam in ("gemm", "attention_prefill", "attention_decode", "nccl", "custom_allreduce"):
        df = meas.family(fam)
        pred, tier = predict_frame(cal, fam, df, gf)
        assert (tier == "measured").all(), fam
        ape = np.abs(pred / df["latency_ms"].to_numpy() - 1)
        assert np.median(ape) < 0.05, (fam, np.median(ape))
    # same input -> byte-identical file; JSON only
    text = cal.dumps()
    assert fit_calibration(read_measurements(root), FAST).dumps() == text
    d = json.loads(text)
    assert d["provenance"]["fit_date"] == "2025-01-01"
    assert {s["table"] for s in d["provenance"]["data"]} >= {"gemm", "nccl"}
    assert all(len(s["sha256"]) == 64 for s in d["provenance"]["data"])


def test_json_round_trip_gives_identical_predictions(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    meas = read_measurements(root)
    cal = fit_calibration(meas, FAST)
    path = cal.save(tmp_path / "cal.json")
    assert path.read_bytes()[:1] == b"{"          # plain JSON text, not a pickle
    back = load_calibration(path)
    for fam in ("gemm", "attention_decode", "nccl"):
        df = meas.family(fam)
        a, _ = predict_frame(cal, fam, df, cal.gpus["h100_sxm"])
        b, _ = predict_frame(back, fam, df, back.gpus["h100_sxm"])
        assert np.array_equal(a, b), fam
    assert back.dumps() == cal.dumps()
    with pytest.raises(Exception, match="pickle"):
        cal.save(tmp_path / "cal.pkl")


def test_residual_statistics_per_tier(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm", "a100_sxm"))
    cal = fit_calibration(read_measurements(root), FitOptions(gbt=GBTParams(n_trees=20, depth=4), min_trees=10,
                                                              rows_per_tree=10, spec_rows=200))
    assert {"measured", "cross-gen", "spec"} <= set(cal.residuals)
    st = cal.residuals["measured"]["gemm"]
    assert 0 <= st["p50_ape"] <= st["p90_ape"] and st["rows"] > 0 and "split" in st["method"]
    assert cal.residuals["cross-gen"]["gemm"]["method"] == "leave-one-GPU-out"

"""Reliability of P(SLO met) on served rows (calibration/risk_reliability.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import risk_reliability as rr
from llmplan.calibration.serving_rows import SIMULATED
from llmplan.errors import EXIT_USER_ERROR
from llmplan.sim import served_error
from llmplan.sim.served_error import lognormal_error


@pytest.fixture(autouse=True)
def _lognormal_shipped(monkeypatch, tmp_path):
    """Synthetic rows follow the bands' lognormal: score them with it (no shipped residual file)."""
    monkeypatch.setattr(served_error, "RESIDUALS_PATH", tmp_path / "none.json")


def _rows(n: int, scale: float, seed: int = 0) -> pd.DataFrame:
    """Served rows whose log residuals follow vLLM's shipped error model with sigma x ``scale``."""
    rng = np.random.default_rng(seed)
    et, ep = lognormal_error("vllm", "ttft"), lognormal_error("vllm", "tpot")
    pt, pp = rng.uniform(50, 500, n), rng.uniform(10, 60, n)
    return pd.DataFrame({
        "status": SIMULATED, "backend": "vllm", "predicted_ttft_ms": pt, "predicted_tpot_ms": pp,
        "silicon_ttft_ms": pt * np.exp(rng.normal(et.mu, et.sigma * scale, n)),
        "silicon_tpot_ms": pp * np.exp(rng.normal(ep.mu, ep.sigma * scale, n)),
        # distinct deployments, so the cross-fold split has two halves
        **{c: [f"d{i}" for i in range(n)] for c in ("model_path", "system")}})


def test_a_model_that_matches_the_residuals_is_reliable():
    rep = rr.analyse(_rows(2000, 1.0))
    t = rep["tables"]["shipped"]
    assert t["ece"] < 0.02
    for b in t["bins"]:
        assert b["observed"] == pytest.approx(b["predicted"], abs=0.04)
    assert rep["tables"]["cross-fold lognormal"]["ece"] < 0.03 and rep["tables"]["cross-fold empirical"]["ece"] < 0.03
    assert abs(rep["residual_correlation"]["vllm"]) < 0.1  # drawn independently


def test_residuals_wider_than_the_band_are_caught():
    t = rr.analyse(_rows(2000, 2.0))["tables"]["shipped"]
    low, high = t["bins"][0], t["bins"][-1]
    assert low["observed"] > low["predicted"] + 0.1 and high["observed"] < high["predicted"] - 0.1
    assert t["ece"] > 0.08


def test_synthetic_slos_spread_the_predicted_probabilities_evenly():
    c = rr.cases(rr.simulated_rows(_rows(50, 1.0)), rr.shipped_models(["vllm"]), "tpot")
    assert len(c) == 50 * len(rr.LEVELS)
    assert sorted(c["p"].round(6).unique()) == pytest.approx(list(rr.LEVELS))


def test_unscorable_rows_are_left_out():
    df = _rows(10, 1.0)
    df.loc[0, "status"] = "parallelism: not simulable"
    df.loc[1, "predicted_tpot_ms"] = math.nan
    assert len(rr.simulated_rows(df)) == 8


def test_cli_reads_a_replay_csv_and_refuses_a_missing_one(tmp_path, capsys):
    p = tmp_path / "pred.csv"
    _rows(40, 1.0).to_csv(p, index=False)
    assert rr.main(["--predictions", str(p), "--json", str(tmp_path / "r.json")]) == 0
    assert "predicted P(met)" in capsys.readouterr().out and (tmp_path / "r.json").is_file()
    assert rr.main(["--predictions", str(tmp_path / "none.csv")]) == EXIT_USER_ERROR
    assert "--predictions" in capsys.readouterr().err


def test_written_residuals_keep_the_sets_of_other_fits(tmp_path):
    import hashlib

    profiles = tmp_path / "profiles.json"
    profiles.write_text("{}")
    doc = rr.residual_quantiles(_rows(60, 1.0), profiles)
    sha = hashlib.sha256(b"{}").hexdigest()
    mine = doc["by_engine_profiles_sha256"][sha]["engines"]["vllm"]["tpot"]
    assert mine["p"] == list(rr.QUANTILE_P) and mine["log_residual"] == sorted(mine["log_residual"])
    profiles.write_text('{"refit": 1}')
    doc2 = rr.residual_quantiles(_rows(60, 1.0, seed=2), profiles, previous=doc)
    assert len(doc2["by_engine_profiles_sha256"]) == 2 and sha in doc2["by_engine_profiles_sha256"]

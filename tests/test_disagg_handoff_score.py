"""Scoring a hand-off refit before it is shipped (calibration.serving_disagg_rows.score_heldout)."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration import serving_disagg_rows as sdr
from llmplan.calibration.serving_rows import Prediction


def test_fitted_handoffs_carry_the_pooled_value_for_other_engines():
    doc = {"engines": {"trtllm": {"handoff_ms": 120.0}, "sglang": {"handoff_ms": 1020.0}}, "pooled_handoff_ms": 570.0}
    assert sdr.fitted_handoffs(doc) == {"trtllm": 120.0, "sglang": 1020.0, "*": 570.0}


def test_score_replays_the_held_out_half_with_the_refit(monkeypatch):
    seen = {}

    def fake_replay(df, opts, overrides, handoffs, limit, workers, progress, jitter, holdout_seed, train_only=False):
        seen.update(handoffs=handoffs, seed=holdout_seed, train_only=train_only)
        return {0: (Prediction(110.0, 11.0, "measured"), "m"), 1: (Prediction(50.0, 5.0, "measured"), "m"),
                2: (Prediction(float("nan"), float("nan"), "", "train: not scored"), "m")}

    monkeypatch.setattr(sdr, "replay_disagg", fake_replay)
    df = pd.DataFrame({"mode": ["disagg"] * 3 + ["agg"], "backend": ["trtllm"] * 4,
                       "silicon_ttft_ms": [100.0, 100.0, 100.0, 100.0], "silicon_tpot_ms": [10.0] * 4})
    out = sdr.score_heldout(df, {}, {"engines": {"trtllm": {"handoff_ms": 120.0}}, "pooled_handoff_ms": 120.0}, 7)
    assert seen == {"handoffs": {"trtllm": 120.0, "*": 120.0}, "seed": 7, "train_only": False}
    row = out[out["backend"] == "trtllm"].iloc[0]
    assert row["rows"] == 2   # the training row and the aggregated row are not scored
    assert row["ttft_median"] == pytest.approx(30.0) and row["tpot_median"] == pytest.approx(30.0)  # 10% and 50%

"""Measured closed-loop prefill throughput of disaggregated rows against the replayed prefill
workers' capacity (calibration/disagg_prefill_rate.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration.disagg_prefill_rate import RATE_COLUMNS, closed_loop_rate_rps, prefill_rate_row, prefill_rates
from llmplan.errors import UserError


def test_little_law_of_a_closed_loop():
    # 100 clients, each request 1 s to the first token and 99 tokens at 10 ms: 1.98 s per request
    assert closed_loop_rate_rps(100, 1000.0, 10.0, 100) == pytest.approx(100 / 1.99)
    # one output token: no decode time at all
    assert closed_loop_rate_rps(4, 500.0, 99.0, 1) == pytest.approx(8.0)
    with pytest.raises(ValueError):
        closed_loop_rate_rps(0, 1.0, 1.0, 10)


def _row(**kw):
    r = {"concurrency": 576, "osl": 1024, "measured_ttft_ms": 1807.868, "measured_tpot_ms": 30.901,
         "prefill_workers": 1, "prefill_seqs_per_step": 1, "prefill_ms": 60.203}
    r.update(kw)
    return r


def test_a_saturated_replay_is_flagged_by_its_capacity():
    # the held-out cfg303 row at 576 clients: 17.2 prompts/s through one batch-1 worker, which the
    # replayed 60.2 ms prefill cannot serve (16.6/s)
    x = prefill_rate_row(_row())
    assert x["measured_rate_rps"] == pytest.approx(576 / ((1807.868 + 1023 * 30.901) / 1000))
    assert x["measured_ms_per_prompt_max"] == pytest.approx(1000 / x["measured_rate_rps"])
    assert x["simulated_capacity_rps"] == pytest.approx(1000 / 60.203)
    assert x["measured_vs_replay_capacity"] > 1.0
    # more workers and prompts per step raise the replayed capacity, not the measured rate
    y = prefill_rate_row(_row(prefill_workers=2, prefill_seqs_per_step=8))
    assert y["measured_rate_rps"] == pytest.approx(x["measured_rate_rps"])
    assert y["measured_rps_per_prefill_worker"] == pytest.approx(x["measured_rate_rps"] / 2)
    assert y["simulated_capacity_rps"] == pytest.approx(16 * x["simulated_capacity_rps"])
    assert y["replayed_ms_per_prompt"] == pytest.approx(60.203 / 8)


def test_frame_gets_the_columns_and_a_missing_input_is_named():
    f = prefill_rates(pd.DataFrame([_row(), _row(concurrency=36, measured_ttft_ms=673.2, measured_tpot_ms=13.39)]))
    assert set(RATE_COLUMNS) <= set(f.columns)
    assert f["measured_vs_replay_capacity"].iloc[1] < f["measured_vs_replay_capacity"].iloc[0]
    with pytest.raises(UserError, match="prefill_seqs_per_step"):
        prefill_rates(pd.DataFrame([{k: v for k, v in _row().items() if k != "prefill_seqs_per_step"}]))

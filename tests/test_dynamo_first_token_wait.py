"""The first-token wait behind Dynamo (calibration/dynamo_first_token_wait.py): a count of requests that
stays put across output lengths, which a serial front end's backlog does not give."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import dynamo_first_token_wait as fw

GEN = "source_file=/u/aic/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=512"
#: SGLang Llama-3.1-8B H200 TP 8, isl 1,000, N = 512 (../shared/measurements/h200_sxm/e2e_serving.csv):
#: osl, measured TTFT, measured TPOT, the shipped replay's TTFT (llmplan validate serving, in-sample)
TP8 = [(500, 1991.87, 22.79, 507.3), (1000, 3177.46, 22.97, 507.3), (2000, 7978.08, 29.38, 507.3)]


def _row(osl, ttft, tpot, pred=None, tp=8, n=512, source=GEN, mode="agg"):
    r = {"silicon_data_source": source, "backend": "sglang", "backend_version": "0.5.6.post2", "mode": mode,
         "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": "bf16",
         "gemm_quant_mode": "", "tp_size": tp, "pp_size": 1, "moe_ep_size": "", "isl": 1000, "osl": osl,
         "batch_size": n, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot}
    if pred is not None:
        r["predicted_ttft_ms"] = pred
    return r


def test_littles_law_counts_the_requests_before_their_first_token():
    # E2E = 1,991.87 + 499 x 22.79 = 13,364.1 ms; 512 x 1,991.87 / 13,364.1 = 76.3 waiting
    assert fw.e2e_ms(1991.87, 22.79, 500) == pytest.approx(13364.08, abs=0.01)
    assert fw.waiting_before_first_token(512, 1991.87, 22.79, 500) == pytest.approx(76.31, abs=0.01)
    assert fw.excess_waiting(512, 1991.87, 507.3, 22.79, 500) == pytest.approx(56.88, abs=0.01)
    assert math.isnan(fw.waiting_before_first_token(4, 0.0, 0.0, 1))


def test_the_measured_wait_beyond_the_replay_is_a_count_not_a_time():
    """The excess TTFT grows 5x from osl 500 to 2,000; the requests it amounts to stay within 52-58."""
    out = fw.excess_rows([_row(o, t, p_, pred) for o, t, p_, pred in TP8])
    assert [d["osl"] for d in out] == [500, 1000, 2000]
    ms = [d["excess_ms"] for d in out]
    count = [d["excess_waiting"] for d in out]
    assert ms[2] / ms[0] > 5.0
    assert all(52.0 < c < 58.0 for c in count)
    # rows of other sources, disaggregated rows and rows without a prediction are left out
    assert fw.excess_rows([_row(500, 1991.87, 22.79, 507.3, source="db-dump/2026-04-27; silicon_concurrency=512"),
                           _row(500, 1991.87, 22.79, 507.3, mode="disagg"), _row(500, 1991.87, 22.79)]) == []
    assert fw.excess_rows([_row(o, t, p_, pred) for o, t, p_, pred in TP8], min_concurrency=513) == []


def test_wait_forms_predict_the_longest_output_from_the_shorter_ones():
    """Fitted on osl 500 and 1,000, the count form a + q x E2E / N predicts the osl-2,000 TTFT 13% low,
    the time form (their mean, 2,585 ms) 68% low."""
    (w,) = fw.wait_forms([_row(o, t, p_) for o, t, p_, _ in TP8])
    assert (w["tp"], w["n"], w["osl"]) == (8, 512, "500/1000/2000")
    assert w["time_form_ms"] == pytest.approx((1991.87 + 3177.46) / 2)
    assert w["count_form_ms"] / w["last_ttft_ms"] - 1 == pytest.approx(-0.129, abs=0.002)
    assert w["time_form_ms"] / w["last_ttft_ms"] - 1 == pytest.approx(-0.676, abs=0.002)
    assert w["queued"] == pytest.approx(58.2, abs=0.1)   # the slope over all three (serving_regimes.queue_slopes)


def test_wait_forms_need_three_output_lengths_and_an_exact_count_is_recovered():
    assert fw.wait_forms([_row(o, t, p_) for o, t, p_, _ in TP8[:2]]) == []
    # a synthetic slot wait: TTFT = 300 ms + 40 x E2E / N exactly -> the count form is exact, q = 40
    rows = []
    for osl in (500, 1000, 2000):
        tpot = 25.0
        # solve TTFT = 300 + 40 (TTFT + (osl - 1) tpot) / 512 for TTFT
        ttft = (300 + 40 * (osl - 1) * tpot / 512) / (1 - 40 / 512)
        rows.append(_row(osl, ttft, tpot))
    (w,) = fw.wait_forms(rows)
    assert w["queued"] == pytest.approx(40.0, abs=1e-6)
    assert w["count_form_ms"] == pytest.approx(w["last_ttft_ms"], rel=1e-9)


def test_an_engine_running_ahead_of_a_serial_front_end_keeps_too_few_running():
    """Fluid balance h0 + b x B = t x B: TP 8 (10.9 ms device step at 512) keeps 70 of 512 running, i.e.
    442 waiting against the ~57 measured; TP 2 (22.8 ms) is slower than the front end and keeps all 512."""
    assert fw.run_ahead_running(512, 1.654, 0.045, 10.9 / 512) == pytest.approx(69.8, abs=0.1)
    assert fw.run_ahead_running(512, 1.654, 0.045, 22.8 / 512) == 512.0
    assert fw.run_ahead_running(512, 1.654, 0.0, 0.02) == 512.0


def test_wait_forms_fit_no_row_of_the_longest_output():
    """A repeated run of the longest output is predicted, not fitted: with two osl-2,000 rows the forms are
    fitted to osl 500 and 1,000 alone (as with one) and predict the mean of the two."""
    rows = [_row(o, t, p_) for o, t, p_, _ in TP8]
    (one,) = fw.wait_forms(rows)
    (two,) = fw.wait_forms(rows + [_row(2000, 7978.08, 29.38)])
    assert two["time_form_ms"] == pytest.approx(one["time_form_ms"], rel=1e-12)
    assert two["count_form_ms"] == pytest.approx(one["count_form_ms"], rel=1e-12)
    assert two["last_ttft_ms"] == pytest.approx(7978.08, rel=1e-12)
    (mix,) = fw.wait_forms(rows + [_row(2000, 6978.08, 29.38)])
    assert mix["time_form_ms"] == pytest.approx(one["time_form_ms"], rel=1e-12)
    assert mix["last_ttft_ms"] == pytest.approx(7478.08, rel=1e-12)

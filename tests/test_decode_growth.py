"""calibration.decode_growth: splitting the served TPOT error into decode step and prompt parts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import decode_growth as dg
from llmplan.errors import UserError


def _rows(d_meas, p_meas, d_pred, p_pred, n=64, isl=1024, osls=(128, 256, 512), tp=4, backend="trtllm",
          ttft=None) -> list[dict]:
    out = []
    for osl in osls:
        x = n / osl
        out.append({"backend": backend, "backend_version": "1.0", "model_path": "m", "system": "h100_sxm",
                    "precision": "fp8", "gemm_quant_mode": np.nan, "tp_size": tp, "pp_size": 1,
                    "attention_dp_size": np.nan, "moe_ep_size": 1, "mode": "agg", "isl": isl, "osl": osl,
                    "batch_size": n, "silicon_data_source": f"x; silicon_concurrency={n}",
                    "silicon_tpot_ms": d_meas + p_meas * x, "predicted_tpot_ms": d_pred + p_pred * x,
                    "silicon_ttft_ms": ttft[0](isl) if ttft else 100.0,
                    "predicted_ttft_ms": ttft[1](isl) if ttft else 100.0})
    return out


def test_split_recovers_the_decode_step_and_the_prompt_share_exactly():
    df = pd.DataFrame(_rows(20.0, 40.0, 18.0, 24.0) + _rows(10.0, 30.0, 11.0, 33.0, n=8, tp=8))
    s = dg.decode_prompt_split(df).set_index("N")
    assert s.loc[64, "D_meas"] == pytest.approx(20.0) and s.loc[64, "P_meas"] == pytest.approx(40.0)
    assert s.loc[64, "D_ratio"] == pytest.approx(0.9) and s.loc[64, "P_ratio"] == pytest.approx(0.6)
    assert s.loc[8, "D_ratio"] == pytest.approx(1.1) and s.loc[8, "P_ratio"] == pytest.approx(1.1)
    # the NaN attention_dp / gemm columns did not drop the groups out of groupby
    assert len(s) == 2 and set(s["bucket"]) == {"17-64", "5-16"}


def test_groups_with_one_output_length_or_no_prediction_are_skipped():
    one = _rows(20.0, 40.0, 18.0, 24.0, osls=(128,))
    unscored = _rows(20.0, 40.0, 18.0, 24.0, n=32)
    for r in unscored:
        r["predicted_tpot_ms"] = np.nan
    disagg = _rows(20.0, 40.0, 18.0, 24.0, n=16)
    for r in disagg:
        r["mode"] = "disagg"
    assert dg.decode_prompt_split(pd.DataFrame(one + unscored + disagg)).empty


def test_bucket_table_orders_buckets_and_takes_medians():
    rows = []
    for n, (dr, pr) in {4: (1.0, 1.0), 128: (0.8, 0.5), 256: (0.9, 0.7), 512: (0.7, 0.2)}.items():
        rows += _rows(10.0, 10.0, 10.0 * dr, 10.0 * pr, n=n, tp=n)
    t = dg.bucket_table(dg.decode_prompt_split(pd.DataFrame(rows)))
    assert list(t["bucket"]) == ["2-4", "65-256", "257-1024"]
    mid = t.set_index("bucket").loc["65-256"]
    assert mid["groups"] == 2 and mid["D_ratio"] == pytest.approx(0.85) and mid["P_ratio"] == pytest.approx(0.6)


def test_ttft_slope_over_prompt_length_at_low_concurrency():
    rows = []
    for isl in (1024, 2048, 4096):
        rows += _rows(10.0, 10.0, 10.0, 10.0, n=8, isl=isl,
                      ttft=(lambda i: 50.0 + 0.2 * i, lambda i: 120.0 + 0.1 * i))
        rows += _rows(10.0, 10.0, 10.0, 10.0, n=64, isl=isl,  # above the concurrency limit: ignored
                      ttft=(lambda i: 50.0 + 0.2 * i, lambda i: 120.0 + 0.3 * i))
    s = dg.ttft_isl_slopes(pd.DataFrame(rows), max_concurrency=8)
    assert len(s) == 3  # one group per osl
    assert np.allclose(s["slope_meas"], 200.0) and np.allclose(s["slope_ratio"], 0.5)


def test_bucket_of_covers_the_flatness_table():
    assert [dg.bucket_of(n) for n in (1, 3, 16, 17, 256, 1000, 4096, 5000)] == \
        ["1", "2-4", "5-16", "17-64", "65-256", "257-1024", "1025-4096", ">4096"]


def test_a_file_without_predictions_is_a_user_error():
    df = pd.DataFrame(_rows(20.0, 40.0, 18.0, 24.0)).drop(columns=["predicted_tpot_ms"])
    with pytest.raises(UserError, match="predicted_tpot_ms"):
        dg.decode_prompt_split(df)

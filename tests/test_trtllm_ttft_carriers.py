"""calibration/trtllm_ttft_carriers.py: training-half TTFT error per group of rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import trtllm_ttft_carriers as tc
from llmplan.errors import UserError


def test_concurrency_buckets_follow_the_flatness_edges():
    assert tc.concurrency_bucket(1) == "(0, 8]"
    assert tc.concurrency_bucket(8) == "(0, 8]"
    assert tc.concurrency_bucket(9) == "(8, 16]"
    assert tc.concurrency_bucket(128) == "(64, 256]"
    assert tc.concurrency_bucket(512) == f"(256, {1 << 20}]"
    with pytest.raises(ValueError):
        tc.concurrency_bucket(0)


def test_source_kind_of_collection_sweep_and_dump_rows():
    coll = {"silicon_data_source": "source_file=/x/data/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-32B.csv; c=8"}
    assert tc.source_kind(coll) == "collection"
    assert tc.source_kind({"silicon_data_source": "db-dump/2026-04-27; config_id=83"}) == "db-dump"
    assert tc.source_kind({"silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1"}) == "sweep"


def _frame():
    # group a: predicted 2x and 0.5x (log errors +-ln 2); group b: exact, and 1.1x
    return pd.DataFrame({"g": ["a", "a", "b", "b"],
                         "predicted_ttft_ms": [200.0, 50.0, 100.0, 110.0],
                         "measured_ttft_ms": [100.0, 100.0, 100.0, 100.0],
                         "predicted_tpot_ms": [10.0, 10.0, 10.0, 10.0],
                         "measured_tpot_ms": [10.0, 10.0, 10.0, float("nan")]})


def test_carrier_table_shares_medians_and_order():
    t = tc.carrier_table(_frame(), ["g"])
    assert list(t["g"]) == ["a", "b"]                     # the larger share first
    total = 2 * math.log(2) + math.log(1.1)
    a, b = t.iloc[0], t.iloc[1]
    assert a["rows"] == 2 and b["rows"] == 2
    assert a["share"] == pytest.approx(2 * math.log(2) / total)
    assert b["share"] == pytest.approx(math.log(1.1) / total)
    assert t["share"].sum() == pytest.approx(1.0)
    assert a["median_log_error"] == pytest.approx(0.0)    # +ln 2 and -ln 2 cancel in the median
    assert a["median_ape"] == pytest.approx(0.75)         # APE 1.0 and 0.5
    assert b["median_log_error"] == pytest.approx(math.log(1.1) / 2)


def test_carrier_table_leaves_out_unmeasured_rows():
    t = tc.carrier_table(_frame(), ["g"], metric="tpot")
    assert dict(zip(t["g"], t["rows"])) == {"a": 2, "b": 1}
    assert t["share"].sum() == pytest.approx(0.0)          # every TPOT exact: no error to share


def test_load_bases_refuses_a_file_without_the_engine(tmp_path):
    p = tmp_path / "bases.json"
    p.write_text('{"key": "k", "skipped": {}, "bases": {"0.02": []}}')
    with pytest.raises(UserError) as exc:
        tc.load_bases(p, "trtllm")
    assert exc.value.key == "--backend" and "--backend trtllm" in exc.value.fix
    with pytest.raises(UserError) as exc:
        tc.load_bases(tmp_path / "missing.json", "trtllm")
    assert exc.value.key == "--bases-cache" and exc.value.fix


def test_prefill_ratio_table_in_units_of_the_prefill_step():
    f = pd.DataFrame({"index": [0, 1, 2], "model": ["m", "m", "m"], "isl": [1024, 1024, 4096], "tp": [1, 1, 1],
                      "concurrency": [8, 8, 8], "measured_ttft_ms": [300.0, 500.0, 800.0],
                      "predicted_ttft_ms": [250.0, 250.0, 500.0], "request_ms": [50.0, 50.0, 100.0]})
    p1 = {0: 100.0, 1: 100.0, 2: 200.0}
    meas = tc.prefill_ratio_table(f, p1, "measured")
    rep = tc.prefill_ratio_table(f, p1, "replay")
    assert meas.loc[("m", 1024, 1), 8] == pytest.approx(4.0)      # median of 3.0 and 5.0
    assert meas.loc[("m", 4096, 1), 8] == pytest.approx(4.0)
    assert rep.loc[("m", 1024, 1), 8] == pytest.approx(2.0)       # (250 - 50) / 100
    assert rep.loc[("m", 4096, 1), 8] == pytest.approx(2.0)       # (500 - 100) / 200
    # a row without a prefill step is left out
    assert tc.prefill_ratio_table(f, {0: 100.0}, "measured").shape == (1, 1)

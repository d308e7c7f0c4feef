"""The TTFT decomposition of disaggregated served rows (calibration/disagg_decompose.py) and
repeated measurements counted once (calibration/serving_disagg_rows.measurement_key)."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration.disagg_decompose import PARTS, decompose_case
from llmplan.calibration.serving_disagg_rows import (MEASUREMENT_COLUMNS, disagg_targets, map_disagg_row,
                                                     measurement_key)
from llmplan.calibration.serving_rows import SIMULATED, SimOptions, engine_profiles

from tests.test_serving_disagg_rows import row

ENGINES = engine_profiles()
OPTS = SimOptions(calibration="spec", waves=3, min_requests=12)


def test_a_run_repeated_under_another_id_is_one_measurement():
    a = row(id="2026_03_25_x_c4_1", silicon_data_source="source_file=2026-03-25.csv; silicon_concurrency=4")
    b = row(id="2026_04_06_x_c4_9", silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=4")
    assert measurement_key(a) == measurement_key(b)
    assert measurement_key(a) != measurement_key(row(silicon_ttft_ms=301.0))
    assert measurement_key(a) != measurement_key(row(decode_num_workers=3))
    # the dumps relabel runs (DeepSeek-R1 as -V3): the model label is not part of a measurement's identity
    assert measurement_key(a) == measurement_key({**a, "model_path": "deepseek-ai/DeepSeek-V3"})


def test_targets_score_a_repeated_measurement_once():
    rows = [row(id="a", system="h200_sxm"), row(id="b", system="h200_sxm"), row(id="c", silicon_ttft_ms=400.0)]
    res = pd.DataFrame(rows)
    res["status"] = SIMULATED
    res["predicted_ttft_ms"] = [330.0, 330.0, 400.0]    # 10%, 10% (the same run twice), 0%
    res["predicted_tpot_ms"] = 12.0
    assert set(MEASUREMENT_COLUMNS) <= set(res.columns)
    t = disagg_targets(res).set_index("backend")
    assert t.loc["vllm", "rows"] == 2
    assert t.loc["vllm", "ttft_median"] == pytest.approx(5.0)    # median of 10% and 0%, not of 10, 10, 0


def test_targets_score_once_a_repeat_whose_floats_differ_in_the_last_bit():
    # the 2026_04_06 dump repeats 2026_03_25 runs with e.g. TPOT 23.31753080856876 vs ...762
    a, b = row(id="a", silicon_tpot_ms=23.31753080856876), row(id="b", silicon_tpot_ms=23.317530808568762)
    assert measurement_key(a) == measurement_key(b)
    res = pd.DataFrame([a, b, row(id="c", silicon_ttft_ms=400.0)])
    res["status"] = SIMULATED
    res["predicted_ttft_ms"] = [330.0, 330.0, 400.0]    # 10%, 10% (the same run twice), 0%
    res["predicted_tpot_ms"] = 12.0
    t = disagg_targets(res).set_index("backend")
    assert t.loc["vllm", "rows"] == 2
    assert t.loc["vllm", "ttft_median"] == pytest.approx(5.0)


def test_parts_add_up_to_the_simulated_ttft():
    case = map_disagg_row(row(), 0, ENGINES).case      # 1 prefill worker (batch 1), 2 decode workers, 4 clients
    d = decompose_case(case, OPTS)
    assert sum(d[k] for k in PARTS) == pytest.approx(d["simulated_ttft_ms"], abs=0.01)
    assert d["prefill_ms"] > 0 and d["kv_transfer_ms"] > 0 and d["handoff_ms"] == 0.0
    assert d["front_end_ms"] > 0      # the engine's fitted per-request TTFT (sim.engine_terms), once
    # four clients start together on a batch-1 prefill worker: the first wave queues
    assert d["prefill_queue_ms"] > 0


def test_kv_transfer_part_is_the_link_model_and_handoff_adds_once():
    from llmplan.sim.kv_transfer import pool_link, request_kv_payload, transfer_ms

    case = map_disagg_row(row(silicon_data_source="x; silicon_concurrency=1"), 0, ENGINES).case
    p, dec = case.prefill.dep, case.decode.dep
    link = pool_link(p.gpu, dec.gpu, p.par.gpus, dec.par.gpus)
    want = transfer_ms(request_kv_payload(dec.model, dec.prec.kv_cache, case.isl, p.par.tp, dec.par.tp), link)
    d0 = decompose_case(case, OPTS)
    assert d0["kv_transfer_ms"] == pytest.approx(want, abs=1e-3)   # rounded to 1 us
    d1 = decompose_case(case, OPTS, handoff_ms=250.0)
    assert d1["handoff_ms"] == 250.0
    assert d1["simulated_ttft_ms"] == pytest.approx(d0["simulated_ttft_ms"] + 250.0, abs=0.01)


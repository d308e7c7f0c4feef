"""Disaggregated served rows -> deployments (calibration/serving_disagg_rows.py): pool mapping,
missing inputs named, the concurrency-1 rule, the deployment key of the split, the replay."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration.serving_disagg_rows import (disagg_concurrency, disagg_deployment_key, disagg_targets,
                                                     map_disagg_row, simulate_disagg_case)
from llmplan.calibration.serving_rows import SIMULATED, SimOptions, engine_profiles


def row(**kw) -> dict:
    r = {"id": "t", "silicon_data_source": "x; silicon_concurrency=4", "backend": "vllm", "backend_version": "0.12.0",
         "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "fp8", "mode": "disagg",
         "isl": 1000, "osl": 50, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
         "prefill_batch_size": 1, "prefill_num_workers": 1, "prefill_tp_size": 1, "prefill_pp_size": 1,
         "prefill_attention_dp_size": 1, "prefill_moe_tp_size": 0, "prefill_moe_ep_size": 0,
         "decode_batch_size": 4, "decode_num_workers": 2, "decode_tp_size": 2, "decode_pp_size": 1,
         "decode_attention_dp_size": 1, "decode_moe_tp_size": 0, "decode_moe_ep_size": 0,
         "silicon_ttft_ms": 300.0, "silicon_tpot_ms": 12.0}
    r.update(kw)
    return r


ENGINES = engine_profiles()


def test_each_pool_gets_its_own_columns_and_batch_limit():
    m = map_disagg_row(row(), 0, ENGINES)
    assert m.status == SIMULATED
    c = m.case
    assert (c.prefill.dep.par.tp, c.decode.dep.par.tp) == (1, 2)
    assert (c.prefill_workers, c.decode_workers) == (1, 2)
    assert (c.prefill.dep.engine.max_num_seqs, c.decode.dep.engine.max_num_seqs) == (1, 4)
    assert c.concurrency == 4 and c.gpus == 1 + 2 * 2


def test_missing_worker_counts_are_named_in_the_status():
    m = map_disagg_row(row(prefill_num_workers=math.nan, decode_batch_size=math.nan), 0, ENGINES)
    assert m.case is None and m.status.startswith("missing_input:")
    assert "prefill_num_workers" in m.status and "decode_batch_size" in m.status
    assert "decode_num_workers" not in m.status


def test_concurrency_one_replays_without_worker_counts():
    r = row(silicon_data_source="x; silicon_concurrency=1", prefill_num_workers=math.nan,
            decode_num_workers=math.nan, prefill_batch_size=math.nan, decode_batch_size=math.nan)
    m = map_disagg_row(r, 0, ENGINES)
    assert m.status == SIMULATED
    assert (m.case.prefill_workers, m.case.decode_workers, m.case.concurrency) == (1, 1, 1)


def test_concurrency_without_the_source_field_is_a_missing_input():
    # the decode pool's total batch is not a stand-in for the client count (module docstring)
    r = row(silicon_data_source="no concurrency here", decode_batch_size=6, decode_num_workers=3)
    assert disagg_concurrency(r) == 0
    m = map_disagg_row(r, 0, ENGINES)
    assert m.case is None and m.status.startswith("missing_input:") and "silicon_concurrency" in m.status


def test_unsupported_pool_names_the_pool():
    m = map_disagg_row(row(decode_tp_size=3), 0, ENGINES)
    assert m.case is None and "decode pool" in m.status


def test_deployment_key_ignores_concurrency_and_batch_but_not_workers():
    a = disagg_deployment_key(row())
    assert a == disagg_deployment_key(row(silicon_data_source="x; silicon_concurrency=64", decode_batch_size=32))
    assert a != disagg_deployment_key(row(decode_num_workers=3))
    assert a != disagg_deployment_key(row(prefill_tp_size=2))


def test_replay_handoff_adds_to_ttft_at_concurrency_one():
    c = map_disagg_row(row(silicon_data_source="x; silicon_concurrency=1"), 0, ENGINES).case
    opts = SimOptions(calibration="spec", waves=2, min_requests=3)
    p0 = simulate_disagg_case(c, opts)
    p1 = simulate_disagg_case(c, opts, handoff_ms=200.0)
    assert p0.status == SIMULATED and p0.requests == 3
    assert p1.ttft_ms == pytest.approx(p0.ttft_ms + 200.0, rel=1e-9)
    assert p1.tpot_ms == pytest.approx(p0.tpot_ms, rel=1e-9)
    assert 0 < p0.tpot_ms < p0.ttft_ms


def test_targets_table_per_engine_and_all():
    res = pd.DataFrame({"mode": ["disagg"] * 3 + ["agg"], "status": [SIMULATED] * 4,
                        "backend": ["trtllm", "trtllm", "sglang", "trtllm"],
                        "predicted_ttft_ms": [110.0, 80.0, 100.0, 1.0], "silicon_ttft_ms": [100.0] * 4,
                        "predicted_tpot_ms": [10.5, 9.0, 20.0, 1.0], "silicon_tpot_ms": [10.0] * 4})
    t = disagg_targets(res).set_index("backend")
    assert t.loc["trtllm", "rows"] == 2 and t.loc["all", "rows"] == 3
    assert t.loc["trtllm", "ttft_median"] == pytest.approx(15.0)
    assert bool(t.loc["trtllm", "tpot_met"]) is True and bool(t.loc["sglang", "tpot_met"]) is False


def test_best_handoff_minimises_the_median_ape():
    from llmplan.calibration.serving_disagg_rows import best_handoff

    # three rows 500 ms short, one 5 s short: the median APE is zero at 500 ms, not at the mean residual
    pairs = [(1000.0, 500.0), (2000.0, 1500.0), (800.0, 300.0), (9000.0, 4000.0)]
    assert best_handoff(pairs) == 500.0
    assert best_handoff([(100.0, 200.0)]) == 0.0      # never negative


def test_dynamo_rows_meet_the_per_request_constant_only():
    from llmplan.calibration.serving_disagg_rows import row_request_terms
    from llmplan.sim.engine_terms import cost_model_request_ttft_ms

    dyn = row(silicon_data_source="db-dump; config_id=1; silicon_concurrency=1; "
                                  "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post1")
    assert row_request_terms(dyn) == "request"
    assert row_request_terms(row(silicon_data_source="x; silicon_concurrency=1; image=lmsysorg/sglang:v0.5.8")) \
        == "prompt"
    c = map_disagg_row(dyn, 0, ENGINES).case
    opts = SimOptions(calibration="spec", waves=2, min_requests=3)
    p = simulate_disagg_case(c, opts, request_terms="prompt")
    q = simulate_disagg_case(c, opts, request_terms="request")
    from llmplan.calibration.serving_disagg_rows import disagg_spec

    cm = disagg_spec(c, opts).decode.replica.cost_model
    per_token = cost_model_request_ttft_ms(cm, c.isl) - cost_model_request_ttft_ms(cm, 0.0)
    assert per_token > 0
    # one client, nothing queues: the TTFTs differ by exactly the per-prompt-token term; TPOT does not move
    assert p.ttft_ms - q.ttft_ms == pytest.approx(per_token, rel=1e-9)
    assert q.tpot_ms == pytest.approx(p.tpot_ms, rel=1e-9)

"""The benchmark client of a served row (calibration/benchmark_clients.py): InferenceMAX sweep rows
draw prompt and output lengths uniformly in [0.8 L, L]; collection rows send fixed lengths."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from llmplan.calibration import benchmark_clients as bc
from llmplan.calibration import serving_rows as sr
from llmplan.sim.workload import generate_workload

SWEEP = "db-dump/2026-04-27; config_id=81; silicon_concurrency=16; workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130"
COLLECTION = ("source_file=/home/u/aic/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv; "
              "silicon_concurrency=16")


@pytest.mark.parametrize("source, isl, osl, ratio", [
    (SWEEP, 1024, 1024, 0.8), (SWEEP, 8192, 1024, 0.8), (SWEEP, 1024, 8192, 0.8),
    ("source_file=2026-03-25.csv; silicon_concurrency=16", 8192, 1024, 0.8),
    (SWEEP, 1000, 1000, 1.0),            # not an InferenceMAX scenario
    (COLLECTION, 1024, 1024, 1.0),       # a per-engine-version collection file: fixed lengths
])
def test_the_client_is_read_from_the_rows_shape_and_provenance(source, isl, osl, ratio):
    assert bc.length_range_ratio({"silicon_data_source": source, "backend": "sglang"}, isl, osl) == ratio


def test_the_client_is_the_harness_s_whatever_the_engine():
    for backend in ("vllm", "trtllm", "sglang"):
        assert bc.length_range_ratio({"silicon_data_source": SWEEP, "backend": backend}, 1024, 1024) == 0.8
    assert bc.length_range_ratio({"silicon_data_source": SWEEP, "backend": "other"}, 1024, 1024) == 1.0


def test_length_bounds_follow_the_clients_randint():
    assert bc.length_bounds(1024, 0.8) == (819, 1024)
    assert bc.length_bounds(8192, 0.8) == (6553, 8192)
    assert bc.length_bounds(1024, 1.0) == (1024, 1024)


def test_the_replayed_workload_draws_lengths_in_the_clients_range():
    opts = sr.SimOptions(waves=50)
    spec, _ = sr.benchmark_workload(8192, 1024, 16, opts, 0.8)
    wl = generate_workload(spec, np.random.default_rng([spec.seed, 0]))
    isl = np.array([r.input_tokens for r in wl.requests])
    osl = np.array([r.output_tokens for r in wl.requests])
    assert isl.min() >= 6553 and isl.max() <= 8192
    assert osl.min() >= 819 and osl.max() <= 1024
    # uniform: mean 0.9 L within sampling error of 800 draws
    assert isl.mean() == pytest.approx(0.9 * 8192, rel=0.02)
    assert osl.mean() == pytest.approx(0.9 * 1024, rel=0.02)
    # fixed-length clients are unchanged
    spec1, _ = sr.benchmark_workload(8192, 1024, 16, opts)
    wl1 = generate_workload(spec1, np.random.default_rng([spec1.seed, 0]))
    assert {(r.input_tokens, r.output_tokens) for r in wl1.requests} == {(8192, 1024)}


def _row(source: str, n: int = 16, isl: int = 8192, osl: int = 1024) -> dict:
    return {"id": "r", "silicon_data_source": source, "backend": "sglang", "backend_version": "0.5.9",
            "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": math.nan,
            "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": math.nan, "moe_quant_mode": math.nan,
            "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 1,
            "moe_ep_size": 1, "silicon_ttft_ms": 500.0, "silicon_tpot_ms": 20.0}


def test_a_sweep_row_is_replayed_with_its_client_and_the_clients_drift_apart():
    """Fixed lengths keep the closed-loop clients in lock-step: every cycle all N prompts arrive
    together and queue behind each other (prefill-first), so the mean TTFT holds about half of
    N prefills. With lengths drawn per request they drift apart and queue far less."""
    case = sr.map_row(_row(SWEEP), 0, sr.engine_profiles()).case
    assert case.length_ratio == 0.8
    assert sr.map_row(_row(COLLECTION), 0, sr.engine_profiles()).case.length_ratio == 1.0
    opts = sr.SimOptions(calibration="spec", waves=6)
    drift = sr.simulate_case(case, opts)
    lock = sr.simulate_case(case, replace(opts, client_lengths=False))
    same = sr.simulate_case(replace(case, length_ratio=1.0), opts)
    assert lock.ttft_ms == pytest.approx(same.ttft_ms, rel=1e-12)
    assert drift.ttft_ms < 0.6 * lock.ttft_ms
    # the prompts' work is not lost: the prefills now land between other requests' decode steps
    assert drift.tpot_ms > lock.tpot_ms

"""Little's law on the measured closed-loop rows (calibration/vllm_running_sequences.py): the vLLM
gpt-oss-120b N = 512 rows ran about 100 sequences past their first token, at every TP size and
shape, while the replayed KV pool holds far more at TP 4 and 8; where the KV pool is the limit
(Qwen3-32B TP 2, 4k prompts, N = 128) the estimate matches the pool."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmplan.calibration import vllm_running_sequences as vrs
from llmplan.calibration.serving_rows import read_serving_files

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "measurements"


def test_littles_law_identity():
    # no wait for the first token: every client is decoding
    e = vrs.running_estimate(10, 0.0, 5.0, 101.0)
    assert e.running == pytest.approx(10.0) and e.waiting == pytest.approx(0.0)
    # TTFT equal to the decode time: half of the clients wait for their first token
    e = vrs.running_estimate(64, 500.0, 5.0, 101.0)
    assert e.decode_ms == pytest.approx(500.0) and e.e2e_ms == pytest.approx(1000.0)
    assert e.running == pytest.approx(32.0) and e.waiting == pytest.approx(32.0)
    assert math.isnan(vrs.running_estimate(4, 0.0, 0.0, 1.0).running)


def test_mean_client_length_follows_the_client():
    assert vrs.mean_client_length(1024, 1.0) == 1024.0
    assert vrs.mean_client_length(1024, 0.8) == pytest.approx((819 + 1024) / 2)   # randint(int(0.8 L), L + 1)


@pytest.fixture(scope="module")
def vllm_rows():
    if not MEASUREMENTS.is_dir():
        pytest.skip("measurements not available")
    df = read_serving_files([MEASUREMENTS])
    return df[(df["backend"] == "vllm") & (df["mode"] == "agg")].reset_index(drop=True)


def test_gpt_oss_n512_rows_ran_about_100_sequences(vllm_rows):
    rows = vllm_rows[vllm_rows["model_path"].str.contains("gpt-oss-120b") & (vllm_rows["batch_size"] == 512)]
    assert len(rows) == 9
    running = {}
    for i, r in rows.iterrows():
        row = r.to_dict()
        est = vrs.row_estimate(row)
        assert est.concurrency == 512
        assert 85.0 <= est.running <= 100.0, (row["id"], est.running)
        running[row["id"]] = (int(float(row["tp_size"])), int(row["isl"]), est.running, vrs.kv_pool_sequences(row, i))
    # not the KV pool: at TP 4 and 8 it holds at least 3x what ran, and what ran does not grow with it
    for tp, isl, ran, kv in running.values():
        if tp >= 4:
            assert kv >= 3 * ran, (tp, isl, ran, kv)
    assert {tp for tp, *_ in running.values()} == {2, 4, 8}


def test_kv_limited_rows_run_what_the_pool_holds(vllm_rows):
    sel = (vllm_rows["model_path"] == "Qwen/Qwen3-32B") & (vllm_rows["batch_size"] == 128) \
        & (vllm_rows["tp_size"] == 2) & (vllm_rows["isl"] == 4096)
    rows = vllm_rows[sel]
    assert len(rows) == 3
    for i, r in rows.iterrows():
        row = r.to_dict()
        ran, kv = vrs.row_estimate(row).running, vrs.kv_pool_sequences(row, i)
        assert ran < 70 and kv < 80
        assert abs(ran / kv - 1) < 0.15, (row["id"], ran, kv)


def test_llama70b_h200_tp1_rows_held_more_kv_than_a_bf16_pool(vllm_rows):
    """The launch's fp8 KV cache shows in the rows: at N >= 32 on one H200 the runs held more KV
    tokens than the bf16 pool the replay computes, and no more than an fp8 pool."""
    sel = (vllm_rows["model_path"] == "meta-llama/Llama-3.1-70B") & (vllm_rows["system"] == "h200_sxm") \
        & (vllm_rows["tp_size"] == 1) & (vllm_rows["batch_size"] >= 32)
    rows = vllm_rows[sel]
    assert len(rows) >= 3
    over = 0
    for i, r in rows.iterrows():
        row = r.to_dict()
        used = vrs.kv_tokens_in_use(row)
        bf16, fp8 = vrs.kv_pool_tokens(row, i, "bf16"), vrs.kv_pool_tokens(row, i, "fp8")
        assert fp8 == pytest.approx(2 * bf16, rel=0.01)
        assert used <= fp8, (row["id"], used, fp8)
        over += used > 1.2 * bf16
    assert over >= 3

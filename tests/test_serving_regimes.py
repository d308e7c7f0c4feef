"""Regime flags of served rows (calibration/serving_regimes.py) and their use in the engine fit:
criteria from the row and the simulator only, never from the prediction error."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_regimes as rg
from llmplan.calibration import serving_rows as sr


def row(**kw) -> dict:
    """Aggregated dense Llama-3.1-8B on one H100 (bf16), vLLM, N from silicon_concurrency."""
    n = kw.pop("n", 8)
    r = {"id": "r", "silicon_data_source": f"synthetic; silicon_concurrency={n}", "backend": "vllm",
         "backend_version": "0.12.0", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
         "precision": math.nan, "mode": "agg", "isl": 1000, "osl": 100, "gemm_quant_mode": math.nan,
         "moe_quant_mode": math.nan, "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
         "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}
    r.update(kw)
    return r


def case(**kw) -> sr.ServingCase:
    m = sr.map_row(row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_ordinary_row_has_no_flag():
    c = case()
    assert rg.prompt_compute_ratio(c) < 0.2
    assert rg.admission_limit(c) >= 8
    assert rg.regime_flags(c) == ()


def test_prompt_compute_ratio_follows_littles_law():
    # E2E = TTFT + (osl - 1) x TPOT = 210 ms; the implied prompt rate is N / E2E
    base = rg.prompt_compute_ratio(case(osl=2, silicon_ttft_ms=200.0))
    assert rg.prompt_compute_ratio(case(osl=2, silicon_ttft_ms=95.0)) == pytest.approx(2 * base)
    assert rg.prompt_compute_ratio(case(osl=2, silicon_ttft_ms=200.0, n=16, batch_size=16)) == pytest.approx(2 * base)
    # twice the GPUs: half the fraction of the replica's peak
    assert rg.prompt_compute_ratio(case(osl=2, silicon_ttft_ms=200.0, tp_size=2)) == pytest.approx(base / 2)
    # TPOT counts in E2E: 100 + 11 x 10 = 210 ms
    assert rg.prompt_compute_ratio(case(osl=12, silicon_ttft_ms=100.0, silicon_tpot_ms=10.0)) == pytest.approx(base)


def test_prompts_faster_than_the_gpu_can_compute_are_cache_served():
    # 64 clients x 8,000-token prompts every 50 ms on one H100: ~160 PFLOP/s of prefill
    c = case(n=64, batch_size=64, isl=8000, osl=2, silicon_ttft_ms=50.0, silicon_tpot_ms=1.0)
    assert rg.prompt_compute_ratio(c) > 10
    assert rg.CACHE_SERVED in rg.regime_flags(c)


def test_concurrency_above_the_default_running_limit_is_admission_limited():
    limit = rg.default_max_running("vllm")
    ok = case(n=limit, batch_size=limit, isl=128, osl=16, silicon_ttft_ms=20000.0)
    over = case(n=limit + 1, batch_size=limit + 1, isl=128, osl=16, silicon_ttft_ms=20000.0)
    assert rg.ADMISSION_LIMITED not in rg.regime_flags(ok)
    assert rg.regime_flags(over) == (rg.ADMISSION_LIMITED,)


def test_concurrency_beyond_the_kv_capacity_is_admission_limited():
    # 100 sequences of 61k tokens: ~6.1M KV tokens, far beyond one H100 after 16 GB of weights
    c = case(n=100, batch_size=100, isl=60000, osl=1000, silicon_ttft_ms=5000.0)
    assert rg.admission_limit(c) < 100
    assert rg.ADMISSION_LIMITED in rg.regime_flags(c)


def _basis(index: int, backend: str = "vllm") -> ef.Basis:
    return ef.Basis(index, backend, "all", f"d{index}", "llama3_1_8b", True, "h100_sxm", 8, 1000, 100, 100.0, 10.0,
                    (50.0,) * len(ef.OVERLAP_GRID), (5.0,) * len(ef.OVERLAP_GRID), (1.0, 0.0, 0.0), (1.0, 0.0, 0.0),
                    "spec")


def test_fit_leaves_out_flagged_rows_only_when_asked():
    limit = rg.default_max_running("vllm")
    # TPOT above the decode floor of N sequences (calibration/decode_floor.py), so only admission flags it
    over = row(id="b", n=limit + 44, batch_size=limit + 44, silicon_ttft_ms=20000.0, silicon_tpot_ms=40.0)
    df = pd.DataFrame([row(id="a"), over, row(id="c", n=16, batch_size=16)])
    by_j = {0.0: [_basis(0), _basis(1), _basis(2)], 0.02: [_basis(0), _basis(1), _basis(2)]}
    kept, counts = ef.exclude_regimes(by_j, df)
    assert [b.index for b in kept[0.0]] == [0, 2] and [b.index for b in kept[0.02]] == [0, 2]
    assert counts == {rg.ADMISSION_LIMITED: 1}
    on = ef.fit_bases(by_j, {}, df.assign(silicon_data_source="measured=2025-01-01"), [], sr.SimOptions(),
                      exclude=True)
    off = ef.fit_bases(by_j, {}, df.assign(silicon_data_source="measured=2025-01-01"), [], sr.SimOptions())
    assert on.fits["vllm"].rows == 2 and off.fits["vllm"].rows == 3
    assert on.provenance["rows_excluded_by_regime"] == counts
    assert "rows_excluded_by_regime" not in off.provenance


def test_queue_slopes_count_requests_held_back_at_the_server():
    """TTFT = a + q x E2E / N across output lengths at fixed N: q requests wait on average."""
    recs = []
    for n, q in ((8, 1.0), (16, 0.0)):
        for osl in (128, 256, 512):
            tpot = 5.0
            ttft = 60.0   # solve ttft = 60 + q * (ttft + (osl - 1) tpot) / n for ttft
            ttft = (60.0 + q * (osl - 1) * tpot / n) / (1.0 - q / n)
            recs.append(row(n=n, osl=osl, silicon_ttft_ms=ttft, silicon_tpot_ms=tpot, backend="trtllm"))
    recs.append(row(n=4, osl=128))            # one output length only: no slope
    t = rg.queue_slopes(pd.DataFrame(recs)).set_index("n")
    assert sorted(t.index) == [8, 16]
    assert t.loc[8, "queued"] == pytest.approx(1.0) and t.loc[8, "ttft_at_zero_ms"] == pytest.approx(60.0)
    assert t.loc[16, "queued"] == pytest.approx(0.0, abs=1e-9) and t.loc[8, "rows"] == 3


def test_server_queued_flag_needs_queueing_the_replay_does_not_model():
    tpot, recs = 8.0, []   # above the decode floor of 8 sequences (one H100 reads 16 GB of weights: 4.8 ms)
    for osl in (128, 256, 512):   # one request always held back at N = 8
        ttft = (60.0 + (osl - 1) * tpot / 8) / (1.0 - 1 / 8)
        recs.append(row(n=8, osl=osl, silicon_ttft_ms=ttft, silicon_tpot_ms=tpot))
    recs.append(row(n=8, osl=1024, isl=2000))   # another deployment, one output length
    df = pd.DataFrame(recs)
    q = rg.queued_rows(df)
    assert q == frozenset({0, 1, 2})
    flags = rg.flags_of(df.to_dict("records"), [0, 3], sr.engine_profiles())
    assert flags[0] == (rg.SERVER_QUEUED,) and flags[3] == ()

"""The Dynamo front end's per-token time in the engine fit (calibration/engine_fit.py, session 11).

Hand-built bases as in tests/test_engine_terms_large_batch.py: a row of ``n`` sequences whose device
step is ``device_ms`` has, at overlap value x, the base TPOT ``max(device_ms, x x n)``; a row served
behind the front end takes ``max(c, t)`` of its overlap grid (the same floor, sim/frontend_ceiling.py).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration.serving_regimes import SERVER_QUEUED

GRID = ef.OVERLAP_GRID
TTFT_STEPS = 6.0
GEN = "source_file=/u/aic/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency={n}"
SWEEP = "db-dump/2026-04-27; config_id=81; silicon_concurrency={n}"


def _row(i: int, n: int, device_ms: float, truth: ef.EngineParams, frontend: bool) -> ef.Basis:
    tpot_base = tuple(max(device_ms, c * n) for c in GRID)
    b = ef.Basis(index=i, backend="sglang", family="<0.5.7", deployment=f"d{i}", model="m", dense=True,
                 gpu="h200_sxm", concurrency=n, isl=1000, osl=500, measured_ttft_ms=1.0, measured_tpot_ms=1.0,
                 ttft_base=tuple(TTFT_STEPS * t for t in tpot_base), tpot_base=tpot_base,
                 ttft=(TTFT_STEPS, TTFT_STEPS * n, 0.0), tpot=(1.0, float(n), 0.0), tier="measured", grid=GRID,
                 frontend=frontend)
    t, p = b.predict(truth)
    return replace(b, measured_ttft_ms=t, measured_tpot_ms=p)


#: (n, device ms): the front-end rows reach 512 sequences, the others stay at n <= 64
FRONT = [(2, 8.0), (16, 9.0), (64, 11.0), (128, 13.0), (256, 15.0), (448, 17.0), (512, 18.0), (512, 12.0)]
OTHER = [(4, 20.0), (8, 21.0), (16, 22.0), (32, 24.0), (64, 28.0)]


def _rows(truth: ef.EngineParams) -> list[ef.Basis]:
    return ([_row(i, n, d, truth, True) for i, (n, d) in enumerate(FRONT)]
            + [_row(len(FRONT) + i, n, d, truth, False) for i, (n, d) in enumerate(OTHER)])


def test_front_end_rows_take_the_larger_of_overlap_and_front_end_time():
    b = _row(0, 512, 12.0, ef.EngineParams(1.0), True)
    assert b.overlap_of(ef.EngineParams(1.0, frontend_per_token_ms=0.05)) == 0.05
    assert b.overlap_of(ef.EngineParams(1.0, 0.0, 0.08, frontend_per_token_ms=0.05)) == 0.08
    other = replace(b, frontend=False)
    assert other.overlap_of(ef.EngineParams(1.0, frontend_per_token_ms=0.05)) == 0.0
    # TPOT: max(12, 0.05 x 512 = 25.6) + h0 1.0; interpolated between the grid's 0.03 and 0.05 runs alike
    assert b.predict(ef.EngineParams(1.0, frontend_per_token_ms=0.05))[1] == pytest.approx(26.6)
    assert other.predict(ef.EngineParams(1.0, frontend_per_token_ms=0.05))[1] == pytest.approx(13.0)


def test_the_fit_finds_the_front_end_time_and_leaves_the_overlap_term_at_zero():
    truth = ef.EngineParams(1.0, frontend_per_token_ms=0.05)
    got = ef.fit_params(_rows(truth), ef.EngineParams(0.5), request="none", eager=False)
    assert got.frontend_per_token_ms == pytest.approx(0.05)
    assert got.host_overlap_per_seq_ms == 0.0
    assert got.host_overhead_ms == pytest.approx(1.0, abs=1e-3)


def test_rows_that_never_reach_the_ceiling_do_not_identify_it():
    """Front-end rows whose device steps are longer than 0.08 ms x n: no front-end time changes them,
    so the likelihood-ratio test keeps 0 (the grid's top would otherwise win by rounding)."""
    truth = ef.EngineParams(1.0)
    rows = [r for r in _rows(truth) if r.concurrency <= 128]
    assert ef.fit_params(rows, ef.EngineParams(0.5), request="none", eager=False).frontend_per_token_ms == 0.0
    assert ef._fit_frontend(rows, ef.EngineParams(0.5), False, "overlap", "none", False) == 0.0


def test_families_keep_the_engines_front_end_time():
    truth = ef.EngineParams(1.0, frontend_per_token_ms=0.05)
    rows = _rows(truth)
    fit = ef.fit_engine("sglang", {0.0: rows}, ef.EngineParams(0.5), seed=0, prefill_scale=False, request="none",
                        eager=False)
    assert fit.final.frontend_per_token_ms == pytest.approx(0.05)
    for p in fit.families.values():
        assert p.frontend_per_token_ms == fit.final.frontend_per_token_ms


def test_rows_kept_for_tpot_carry_no_ttft_residual():
    """A front-end row flagged only server-queued keeps its TPOT in the fit; its TTFT (a queue the
    replay does not model) is NaN: neither the fit nor the scores use it."""
    truth = ef.EngineParams(1.0, frontend_per_token_ms=0.05)
    rows = _rows(truth)
    queued = replace(rows[6], measured_ttft_ms=math.nan)
    wrong_ttft = replace(rows[6], measured_ttft_ms=rows[6].measured_ttft_ms * 10)
    a = ef.fit_with_cost(rows[:6] + [queued] + rows[7:], ef.EngineParams(0.5), request="none", eager=False,
                         frontend=0.05)
    b = ef.fit_with_cost(rows, ef.EngineParams(0.5), request="none", eager=False, frontend=0.05)
    assert a[0].host_overhead_ms == pytest.approx(b[0].host_overhead_ms, abs=1e-4)
    c = ef.fit_with_cost(rows[:6] + [wrong_ttft] + rows[7:], ef.EngineParams(0.5), request="none", eager=False,
                         frontend=0.05)
    assert c[1] > a[1]
    s = ef.score(rows[:6] + [queued] + rows[7:], truth)
    assert s.rows == len(rows) and s.ttft_median == pytest.approx(0.0, abs=1e-9)
    assert ef._residual_rows([queued, rows[0]]) == 1.5


def _frame() -> pd.DataFrame:
    rows = [{"silicon_data_source": GEN.format(n=512), "backend": "sglang", "mode": "agg"},
            {"silicon_data_source": GEN.format(n=512), "backend": "sglang", "mode": "agg"},
            {"silicon_data_source": SWEEP.format(n=64), "backend": "sglang", "mode": "agg"},
            {"silicon_data_source": GEN.format(n=512).replace("/sglang/", "/vllm/"), "backend": "vllm", "mode": "agg"}]
    return pd.DataFrame(rows)


def test_only_generator_sglang_rows_are_tagged_and_kept_for_tpot():
    df = _frame()
    b = _row(0, 512, 12.0, ef.EngineParams(1.0), False)
    tagged = ef.tag_frontend_rows({0.0: [replace(b, index=i) for i in range(4)]}, df)[0.0]
    assert [x.frontend for x in tagged] == [True, True, False, False]
    flags = {0: (SERVER_QUEUED,), 1: (SERVER_QUEUED, "admission-limited"), 2: (SERVER_QUEUED,), 3: (SERVER_QUEUED,)}
    assert ef.frontend_bound_queued(flags, df) == {0}


def test_the_rate_table_reads_each_engines_generator_rows():
    from llmplan.calibration import sglang_frontend_rate as fr

    row = {"silicon_data_source": GEN.format(n=512).replace("/sglang/", "/trtllm/"), "backend": "trtllm",
           "mode": "agg", "model_path": "m", "system": "h100_sxm", "backend_version": "1.0.0rc3", "tp_size": 2,
           "isl": 1024, "osl": 512, "batch_size": 128, "silicon_ttft_ms": 1105.9, "silicon_tpot_ms": 11.75}
    assert fr.generator_row(row, "trtllm") and not fr.generator_row(row, "sglang")
    from llmplan.calibration.sglang_launch import dynamo_frontend_row

    assert not dynamo_frontend_row(row)
    (g,) = fr.delivered_rates([row], "trtllm")
    assert g["max_tokens_per_s"] == pytest.approx(128 * 512 / ((1105.9 + 511 * 11.75) / 1000.0))
    assert fr.delivered_rates([row]) == []


def test_the_rate_tables_rows_are_the_front_end_terms_rows():
    """One predicate: the SGLang generator rows of the rate table are the rows the front-end term
    applies to (calibration.sglang_launch.dynamo_frontend_row), for aggregated and disaggregated rows."""
    from llmplan.calibration import sglang_frontend_rate as fr
    from llmplan.calibration.sglang_launch import dynamo_frontend_row

    src = "source_file=/u/aic/data/h200_sxm/{}/0.5.6.post2/m.csv; silicon_concurrency=8"
    rows = [{"silicon_data_source": src.format(b), "mode": m} for b in ("sglang", "vllm") for m in ("agg", "disagg", None)]
    rows.append({"silicon_data_source": "InferenceX sweep", "mode": "agg"})
    assert [fr.generator_sglang_row(r) for r in rows] == [dynamo_frontend_row(r) for r in rows]
    assert [dynamo_frontend_row(r) for r in rows] == [True, False, True, False, False, False, False]


def test_rows_kept_for_tpot_are_not_counted_as_left_out(monkeypatch):
    """The provenance's ``rows_excluded_by_regime`` counts under ``server-queued`` only the rows left out;
    the Dynamo rows kept for their TPOT are counted under their own key (no row counted twice)."""
    import llmplan.calibration.serving_regimes as rg

    df = _frame()
    flags = {0: (SERVER_QUEUED,), 1: (SERVER_QUEUED, "admission-limited"), 2: (SERVER_QUEUED,)}
    monkeypatch.setattr(rg, "flags_of", lambda rows, indices, engines: flags)
    b = _row(0, 512, 12.0, ef.EngineParams(1.0), False)
    kept, counts = ef.exclude_regimes({0.0: [replace(b, index=i) for i in range(4)]}, df)
    assert [x.index for x in kept[0.0]] == [0, 3] and math.isnan(kept[0.0][0].measured_ttft_ms)
    assert counts == {"admission-limited": 1, SERVER_QUEUED: 2, f"{SERVER_QUEUED} (kept for TPOT: Dynamo front end)": 1}
    left_out = {i for i in range(4)} - {x.index for x in kept[0.0]}
    assert counts[SERVER_QUEUED] == sum(SERVER_QUEUED in flags[i] for i in left_out)

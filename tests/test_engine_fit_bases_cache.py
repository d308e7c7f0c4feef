"""The engine fit's --bases-cache: reused only for the same inputs and basis version; a cache written
before the TensorRT-LLM overlap scheduler (basis version 4) is rebuilt, never reused."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_rows as sr


def _frame() -> pd.DataFrame:
    return pd.DataFrame([{"id": "t2", "silicon_data_source": "synthetic; silicon_concurrency=2", "backend": "trtllm",
                          "backend_version": "1.0.0rc3", "model_path": "meta-llama/Llama-3.1-8B-Instruct",
                          "system": "h100_sxm", "precision": math.nan, "mode": "agg", "isl": 128, "osl": 8,
                          "gemm_quant_mode": math.nan, "moe_quant_mode": math.nan, "batch_size": 2, "tp_size": 1,
                          "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 1, "moe_ep_size": 1,
                          "silicon_ttft_ms": 20.0, "silicon_tpot_ms": 5.0}])


@pytest.fixture
def calls(monkeypatch):
    """collect_bases/fit_bases replaced by recorders: which bases fit_frame fitted, and how often it
    simulated."""
    seen = {"collect": 0, "fitted": []}

    def collect(*_a, **_k):
        seen["collect"] += 1
        return {0.0: []}, {"fresh": 1}

    def fit(by_j, skipped, *_a, **_k):
        seen["fitted"].append(skipped)
        return None

    monkeypatch.setattr(ef, "collect_bases", collect)
    monkeypatch.setattr(ef, "fit_bases", fit)
    return seen


def _fit(df, cache):
    return ef.fit_frame(df, [], sr.SimOptions(min_requests=4, waves=2), cache=cache, jitters=(0.0,))


def _key(df):
    return ef._cache_key(df, sr.SimOptions(min_requests=4, waves=2), ef.BACKENDS, (0.0,), None, False)


def test_a_cache_of_the_same_inputs_and_version_is_reused(tmp_path, calls):
    df, cache = _frame(), tmp_path / "bases.json"
    ef._write_cache(cache, _key(df), {0.0: []}, {"cached": 1})
    _fit(df, cache)
    assert calls["collect"] == 0 and calls["fitted"] == [{"cached": 1}]


def test_a_cache_from_before_the_overlap_scheduler_is_rebuilt(tmp_path, calls, monkeypatch):
    df, cache = _frame(), tmp_path / "bases.json"
    current = ef.BASIS_VERSION
    with monkeypatch.context() as m:
        m.setattr(ef, "BASIS_VERSION", 4)           # the version of bases replayed without the overlap scheduler
        stale = _key(df)
        ef._write_cache(cache, stale, {0.0: []}, {"stale": 1})
    assert ef.BASIS_VERSION == current and _key(df) != stale
    _fit(df, cache)
    assert calls["collect"] == 1 and calls["fitted"] == [{"fresh": 1}]
    assert json.loads(cache.read_text())["key"] == _key(df)        # rewritten for the current version

"""Per-engine desynchronisation grids in the engine fit (calibration/engine_fit.py --engine-jitter)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_rows as sr
from llmplan.errors import UserError


def _row(backend: str, n: int) -> dict:
    return {"id": f"{backend}{n}", "silicon_data_source": f"synthetic; silicon_concurrency={n}", "backend": backend,
            "backend_version": "1.0.0", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
            "precision": math.nan, "mode": "agg", "isl": 128, "osl": 8, "gemm_quant_mode": math.nan,
            "moe_quant_mode": math.nan, "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
            "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 20.0, "silicon_tpot_ms": 5.0}


def test_each_engine_is_simulated_only_at_its_own_jitters():
    df = pd.DataFrame([_row("vllm", 2), _row("trtllm", 2)])
    by_j, skipped = ef.collect_bases(df, sr.SimOptions(min_requests=4, waves=2), workers=1, jitters=(0.0, 0.02),
                                     engine_jitters={"trtllm": (0.0,)})
    assert sorted(by_j) == [0.0, 0.02] and skipped == {}
    assert {b.backend for b in by_j[0.0]} == {"vllm", "trtllm"}
    assert {b.backend for b in by_j[0.02]} == {"vllm"}          # trtllm only at 0
    assert ef.engine_grids(by_j) == {"trtllm": [0.0], "vllm": [0.0, 0.02]}


def test_engine_jitter_option_is_parsed_and_checked():
    assert ef.parse_engine_jitters(["vllm=0.02", "sglang=0,0.02"]) == {"vllm": (0.02,), "sglang": (0.0, 0.02)}
    assert ef.parse_engine_jitters([]) is None
    for bad in ("foo=0.1", "vllm", "vllm=2"):
        with pytest.raises(UserError):
            ef.parse_engine_jitters([bad])

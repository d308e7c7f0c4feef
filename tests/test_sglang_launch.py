"""Server flags of the measured SGLang runs (calibration/sglang_launch.py): the rows launched by
aiconfigurator's generator from SGLang 0.5.6 on ran --enable-mixed-chunk, max_prefill_tokens isl + 1500."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import sglang_launch as sl

GEN = "source_file=/home/u/aic/data/h200_sxm/sglang/{v}/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=64"
SWEEP = "db-dump/2026-04-27; config_id=81; silicon_concurrency=64; workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130"


@pytest.mark.parametrize("source, mixed", [
    (GEN.format(v="0.5.6.post2"), True), (GEN.format(v="0.5.8.post1"), True),
    (GEN.format(v="0.5.1.post1"), False),  # the 0.5.1 template never passes the flag
    (SWEEP, False), ("", False),
])
def test_which_runs_had_mixed_chunks(source, mixed):
    assert sl.generator_mixed_chunk({"silicon_data_source": source}) is mixed


def _row(source: str, backend: str = "sglang", isl: int = 4000, osl: int = 500, n: int = 64) -> dict:
    return {"id": "r", "silicon_data_source": source, "backend": backend, "backend_version": "0.5.6.post2",
            "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": math.nan,
            "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": math.nan, "moe_quant_mode": math.nan,
            "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 1,
            "moe_ep_size": 1, "silicon_ttft_ms": 800.0, "silicon_tpot_ms": 30.0}


def test_a_generator_row_is_replayed_with_mixed_chunks():
    case = sr.map_row(_row(GEN.format(v="0.5.6.post2")), 0, sr.engine_profiles()).case
    assert case.mixed_chunk
    assert not sr.map_row(_row(GEN.format(v="0.5.1.post1")), 0, sr.engine_profiles()).case.mixed_chunk
    # the flag is SGLang's: a vLLM row of the same collection layout is not touched
    assert not sr.map_row(_row(GEN.format(v="0.5.6.post2"), backend="vllm"), 0, sr.engine_profiles()).case.mixed_chunk
    assert sl.generator_max_prefill_tokens(4000) == 5500


def test_mixed_chunks_keep_the_decodes_going_while_prompts_arrive():
    """Prefill-first pauses every decode while any prompt waits, so a closed loop's prompts
    queue behind each other and its decode steps run back to back; with mixed chunks each
    prompt is prefilled next to the decodes: shorter TTFT, longer TPOT (the prompts' work now
    lands in the decode steps)."""
    from dataclasses import replace

    case = sr.map_row(_row(GEN.format(v="0.5.6.post2")), 0, sr.engine_profiles()).case
    opts = sr.SimOptions(calibration="spec", waves=4)
    mixed = sr.simulate_case(case, opts)
    first = sr.simulate_case(replace(case, mixed_chunk=False), opts)
    assert mixed.ttft_ms < 0.5 * first.ttft_ms
    assert mixed.tpot_ms > first.tpot_ms

"""Engine settings of the measured TensorRT-LLM runs (calibration/trtllm_launch.py): the collection
rows were launched by aiconfigurator's generator with max_num_tokens = max_batch_size + isl + 1500
and no chunked prefill."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import trtllm_launch as tl

GEN = "source_file=/home/u/aic/data/h100_sxm/{b}/1.0.0rc3/Qwen_Qwen3-32B.csv; silicon_concurrency={n}"
SWEEP = "db-dump/2026-04-27; config_id=81; silicon_concurrency=8; workflow_run_id=337; nvcr.io/x:0.8.1"


@pytest.mark.parametrize("source, launched", [
    (GEN.format(b="trtllm", n=8), True),
    (GEN.format(b="sglang", n=8), False),   # another engine's collection file
    (SWEEP, False), ("", False),
])
def test_which_runs_the_generator_launched(source, launched):
    assert tl.generator_launch({"silicon_data_source": source}) is launched


@pytest.mark.parametrize("isl, bs, tokens", [
    (1024, 8, 2532),
    (2048, 8, 3556),
    (4096, 128, 5724),
    (100, 4, 1604),
    (1, 1, 1502),
])
def test_harness_budget_is_batch_plus_prompt_plus_1500(isl, bs, tokens):
    assert tl.generator_max_num_tokens(isl, bs) == tokens


def test_generator_budget_refuses_empty_inputs():
    with pytest.raises(ValueError, match="isl"):
        tl.generator_max_num_tokens(0, 8)
    with pytest.raises(ValueError, match="max_batch_size"):
        tl.generator_max_num_tokens(1024, 0)


def _row(source: str, backend: str = "trtllm", isl: int = 2048, osl: int = 256, n: int = 8, dp=math.nan) -> dict:
    return {"id": "r", "silicon_data_source": source, "backend": backend, "backend_version": "1.0.0rc3",
            "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "fp8", "mode": "agg",
            "isl": isl, "osl": osl, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": n,
            "tp_size": 1, "pp_size": 1, "attention_dp_size": dp, "moe_tp_size": 1, "moe_ep_size": 1,
            "silicon_ttft_ms": 500.0, "silicon_tpot_ms": 20.0}


def test_a_collection_row_gets_the_generator_budget_and_others_keep_the_default():
    prof = sr.engine_profiles()
    default = prof["trtllm"].max_num_batched_tokens
    gen = sr.map_row(_row(GEN.format(b="trtllm", n=8)), 0, prof).case
    assert gen.dep.engine.max_num_batched_tokens == tl.generator_max_num_tokens(2048, 8) == 3556
    sweep = sr.map_row(_row(SWEEP), 0, prof).case
    assert sweep.dep.engine.max_num_batched_tokens == default != 3556
    # the budget follows the prompt length and the batch: 128 clients of 4,096-token prompts
    big = sr.map_row(_row(GEN.format(b="trtllm", n=128), isl=4096, n=128), 0, prof).case
    assert big.dep.engine.max_num_batched_tokens == 5724


def test_the_generator_budget_prefills_fewer_prompts_per_step_and_only_whole_ones():
    """With max_num_tokens 8,192 (the engine default) eight simultaneous 2,048-token prompts share
    steps up to four at a time; with the harness's 3,556 only one fits a step, so the lock-step
    clients' prompts are prefilled one per step and their mean TTFT is shorter."""
    prof = sr.engine_profiles()
    prof = {k: (replace(v, whole_prompts=True) if k == "trtllm" else v) for k, v in prof.items()}
    gen = sr.map_row(_row(GEN.format(b="trtllm", n=8)), 0, prof).case
    dflt = sr.map_row(_row(SWEEP), 0, prof).case
    assert gen.dep.engine.whole_prompts and dflt.dep.engine.whole_prompts
    opts = sr.SimOptions(calibration="spec", waves=1, osl_jitter=0.0)
    one = sr.simulate_case(gen, opts)
    four = sr.simulate_case(dflt, opts)
    assert one.status == four.status == sr.SIMULATED
    # mean TTFT of a synchronized burst: (n + k) / 2 prompt-steps with k prompts per step, so
    # fewer prompts per step lowers the mean when the step time is proportional to the prompts
    assert one.ttft_ms < four.ttft_ms

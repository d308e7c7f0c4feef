"""Server flags of the measured SGLang runs (calibration/sglang_launch.py): the rows launched by
aiconfigurator's generator from SGLang 0.5.6 on ran --enable-mixed-chunk, max_prefill_tokens isl + 1500."""

from __future__ import annotations

import math
from dataclasses import replace

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


@pytest.mark.parametrize("source, every", [
    (GEN.format(v="0.5.6.post2"), True),
    (GEN.format(v="0.5.1.post1"), True),  # every template passes --cuda-graph-bs
    (SWEEP, False), ("", False),
])
def test_which_runs_captured_every_decode_batch(source, every):
    assert sl.generator_cuda_graph_every_batch({"silicon_data_source": source}) is every


def test_a_generator_row_is_mapped_with_every_batch_captured():
    prof = sr.engine_profiles()
    assert sr.map_row(_row(GEN.format(v="0.5.1.post1")), 0, prof).case.graph_every_batch
    assert not sr.map_row(_row(SWEEP), 0, prof).case.graph_every_batch
    assert not sr.map_row(_row(GEN.format(v="0.5.6.post2"), backend="vllm"), 0, prof).case.graph_every_batch


def _decode_ms(step, n: int) -> tuple[float, int]:
    from llmplan.sim.types import StepShape

    shape = StepShape.build([], [1000] * n)
    return step.step_time_ms(shape), step.eager_layers(shape)


def test_every_batch_up_to_n_replays_a_graph_unpadded():
    """SGLang's default capture on an H200 at TP 1 stops at 256 and pads to multiples of 8; the
    generator's --cuda-graph-bs 1..N (N = 352 here) captures every decode batch up to N: a batch
    of 300 is no longer eager, one of 17 no longer computes 24 rows, one of 24 (captured by both)
    costs the same, and above N the step is eager again."""
    case = sr.map_row(_row(GEN.format(v="0.5.6.post2"), n=352), 0, sr.engine_profiles()).case
    assert case.graph_every_batch and case.dep.engine.max_num_seqs == 352
    default = sr.step_model(replace(case, graph_every_batch=False), "spec")
    every = sr.step_model(case, "spec")
    layers = case.dep.model.num_layers
    assert _decode_ms(default, 300)[1] == layers and _decode_ms(every, 300)[1] == 0
    assert _decode_ms(every, 353)[1] == layers
    assert _decode_ms(every, 17)[0] < _decode_ms(default, 17)[0]
    assert _decode_ms(every, 24)[0] == pytest.approx(_decode_ms(default, 24)[0], rel=1e-12)


def test_only_sglang_step_models_take_the_capture_list():
    case = sr.map_row(_row(GEN.format(v="0.5.6.post2"), backend="vllm"), 0, sr.engine_profiles()).case
    with pytest.raises(ValueError, match="cuda-graph-bs"):
        sr.step_model(case, "spec").capture_every_batch(64)

"""vLLM launch flags of the measured runs (calibration/vllm_launch.py): gpt-oss on Hopper captures
CUDA graphs up to 2,048 tokens (vLLM's gpt-oss Hopper recipe, InferenceX's launch scripts), so a
step with one 1k prompt is not eager there, while vLLM's default capture stops at 2 x max_num_seqs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_launch as vl
from llmplan.sim.cuda_graphs import capture_sizes, eager_step
from llmplan.sim.types import StepShape


def _row(**kw) -> dict:
    r = {"id": "r", "silicon_data_source": "source_file=2026-03-25.csv; model=GPT-OSS-120B; silicon_concurrency=4; "
                                           "image=vllm/vllm-openai:v0.18.0",
         "backend": "vllm", "backend_version": "0.18.0", "model_path": "openai/gpt-oss-120b", "system": "h200_sxm",
         "precision": "fp4", "mode": "agg", "isl": 1024, "osl": 1024, "gemm_quant_mode": "nvfp4",
         "moe_quant_mode": "nvfp4", "batch_size": 4.0, "tp_size": 1.0, "pp_size": 1.0, "attention_dp_size": 1.0,
         "moe_tp_size": 1.0, "moe_ep_size": 1.0, "silicon_ttft_ms": 85.7, "silicon_tpot_ms": 6.33}
    r.update(kw)
    return r


def test_gptoss_sweep_rows_on_hopper_capture_up_to_2048_tokens():
    assert vl.max_capture_tokens(_row(), 1024, 1024) == 2048
    assert vl.max_capture_tokens(_row(system="h100_sxm"), 8192, 1024) == 2048


def test_other_rows_keep_vllms_default_capture():
    # fixed-length collection rows (not the InferenceX client), other models, engines and GPUs
    collection = "source_file=/x/data/h200_sxm/vllm/0.12.0/openai_gpt-oss-120b.csv; silicon_concurrency=4"
    assert vl.max_capture_tokens(_row(silicon_data_source=collection), 1024, 1024) == 0
    assert vl.max_capture_tokens(_row(), 1000, 1000) == 0          # not an InferenceX scenario
    assert vl.max_capture_tokens(_row(model_path="moonshotai/Kimi-K2.5"), 1024, 1024) == 0
    assert vl.max_capture_tokens(_row(backend="sglang"), 1024, 1024) == 0
    assert vl.max_capture_tokens(_row(system="b200"), 1024, 1024) == 0


def test_vllm_capture_sizes_follow_the_launch_maximum():
    assert capture_sizes("vllm", 4)[-1] == 8                        # min(2 x max_num_seqs, 512)
    sizes = capture_sizes("vllm", 4, 2048)
    assert sizes[-1] == 2048 and 1024 in sizes and 1040 in sizes and 1032 not in sizes
    # a one-prompt step of 1,024 tokens: eager by default at max_num_seqs 4, a graph up to 2,048
    assert eager_step("vllm", 4, 1024, False)
    assert not eager_step("vllm", 4, 1024, False, 2048)
    assert eager_step("vllm", 4, 4096, False, 2048)


def test_mapped_row_replays_its_prompt_steps_with_graphs():
    m = sr.map_row(_row(), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    assert m.case.graph_capture_tokens == 2048
    step = sr.step_model(m.case, None)
    one_prompt, long_prompt = StepShape.build([(1024, 0)], []), StepShape.build([(4096, 0)], [])
    assert step.eager_layers(one_prompt) == 0
    assert step.eager_layers(long_prompt) == m.case.dep.model.num_layers
    default = sr.step_model(replace(m.case, graph_capture_tokens=0), None)
    assert default.eager_layers(one_prompt) == m.case.dep.model.num_layers
    # with an eager launch term of 0.5 ms per layer the default replay charges it to the 1k-prompt
    # step; the graph step pads to the next capture size (1,040 tokens) instead
    e = replace(m.case.dep.engine, eager_step_ms_per_layer=0.5)
    case = replace(m.case, dep=replace(m.case.dep, engine=e))
    graphed = sr.step_model(case, None).step_time_ms(one_prompt)
    eager = sr.step_model(replace(case, graph_capture_tokens=0), None).step_time_ms(one_prompt)
    layers = m.case.dep.model.num_layers
    assert 0.4 * layers < eager - graphed <= 0.5 * layers


def test_capture_up_to_is_vllms_flag_only():
    m = sr.map_row(_row(backend="sglang", backend_version="0.5.9"), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    with pytest.raises(ValueError):
        sr.step_model(m.case, None).capture_up_to(2048)

"""CUDA-graph batch padding (sim/cuda_graphs.py) and its effect on the step time."""

from __future__ import annotations

import pytest

from llmplan.sim.cuda_graphs import capture_sizes, padded_tokens
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape


def test_vllm_default_capture_list_and_cap():
    sizes = capture_sizes("vllm", 256)
    assert sizes[:5] == (1, 2, 4, 8, 16)
    assert all(b - a == 8 for a, b in zip(sizes[3:], sizes[4:]) if b <= 256)
    assert all(b - a == 16 for a, b in zip(sizes, sizes[1:]) if a >= 256)
    assert sizes[-1] == 512                        # min(2 x max_num_seqs, 512)
    assert capture_sizes("vllm", 8)[-1] == 16      # 2 x 8
    assert capture_sizes("trtllm", 256) == ()      # enable_padding False by default


@pytest.mark.parametrize("engine,tokens,decode_only,expected", [
    ("vllm", 3, True, 4), ("vllm", 9, True, 16), ("vllm", 17, False, 24),   # piecewise graphs pad mixed steps
    ("vllm", 257, True, 272), ("vllm", 600, False, 600),                   # above the largest size: unpadded
    ("sglang", 9, True, 16), ("sglang", 9, False, 9),                      # SGLang pads decode batches only
    ("sglang", 300, True, 300), ("trtllm", 9, True, 9), ("vllm", 8, True, 8),
])
def test_padding_rule(engine, tokens, decode_only, expected):
    assert padded_tokens(engine, 256, tokens, decode_only) == expected


def _step(name: str):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel

    gpu = get_gpu("h100_sxm")
    e = EngineProfile(name=name, kernel_backend=name, host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0,
                      host_overlap_per_seq_ms=0.0, eager_step_ms_per_layer=0.0)  # padding alone (eager: test_eager_steps)
    return AnalyticalStepModel(load_model("llama3_1_70b"), gpu, Parallelism(4), Precision(), e,
                               RooflineKernelModel(gpu))


def test_padded_decode_batch_costs_its_captured_size_in_linear_ops():
    """vLLM pads a decode batch of 129 to 136 rows: the GEMMs of 136 rows, the attention of 129
    sequences; TensorRT-LLM (no padding) costs 129 rows."""
    vllm, trt = _step("vllm"), _step("trtllm")
    kv = [2048] * 129
    s129 = StepShape.build((), kv)
    linear = {o.name: o.latency_ms for o in vllm.breakdown(s129).ops}
    linear_trt = {o.name: o.latency_ms for o in trt.breakdown(s129).ops}
    ref136 = {o.name: o.latency_ms for o in trt.breakdown(StepShape.build((), [2048] * 136)).ops}
    assert linear["mlp_up"] == pytest.approx(ref136["mlp_up"])
    assert linear["attn_decode"] == pytest.approx(linear_trt["attn_decode"])   # real sequences only
    assert linear["lm_head"] == pytest.approx(linear_trt["lm_head"])
    assert vllm.step_time_ms(s129) >= trt.step_time_ms(s129)
    # captured sizes are not padded: both engines cost the same (but the norm and rotary kernels
    # TensorRT-LLM's Llama folds into others, sim/trtllm_fusions.py)
    s128 = StepShape.build((), [2048] * 128)
    body = lambda m: sum(o.latency_ms for o in m.breakdown(s128).ops if o.name not in ("norms", "rotary"))  # noqa: E731
    assert body(vllm) == pytest.approx(body(trt))

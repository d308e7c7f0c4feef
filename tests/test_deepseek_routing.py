"""TensorRT-LLM DeepSeek-V3 MoE layers: the routing-score kernel and the shared expert's SwiGLU,
untimed by the measured tables (sim/deepseek_routing.py), in the step model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deepseek_routing import (SCORE_BYTES_PER_LOGIT, SWIGLU_BYTES_PER_ELEMENT, applies,
                                          moe_layer_extra_ops)
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.kernels import RooflineKernelModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

DS = load_model("deepseek-ai/DeepSeek-V3")


def _step(kernel_backend: str, par: Parallelism):
    engine = EngineProfile(name=kernel_backend, kernel_backend=kernel_backend, max_num_seqs=256, host_overhead_ms=0.0,
                           host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0)   # device time only
    step, _ = build(Deployment(DS, get_gpu("h200_sxm"), par, Precision(weights="fp8", kv_cache="fp8"), engine),
                    calibration="spec", min_kv_tokens=2048)
    return step


def _ops(step, shape):
    return {o.name: o for o in step.breakdown(shape).ops}


def test_only_trtllm_deepseek_v3_layers_take_them():
    assert applies("trtllm", DS)
    assert not applies("vllm", DS) and not applies("sglang", DS)
    assert not applies("trtllm", load_model("Qwen/Qwen3-235B-A22B"))       # renormalize routing, no shared expert
    assert not applies("trtllm", replace(DS, architecture="DeepseekV2ForCausalLM"))
    k = RooflineKernelModel(get_gpu("h200_sxm"))
    assert moe_layer_extra_ops(k, "vllm", DS, 4, 256) == ()
    assert moe_layer_extra_ops(k, "trtllm", DS, 0, 256) == ()


def test_bytes_follow_tokens_experts_and_shared_width():
    k = RooflineKernelModel(get_gpu("h200_sxm"))
    ops = dict(moe_layer_extra_ops(k, "trtllm", DS, 8192, 256))
    assert ops["moe_routing_scores"].bytes == pytest.approx(8192 * DS.moe.num_experts * SCORE_BYTES_PER_LOGIT)
    assert ops["shared_act"].bytes == pytest.approx(8192 * 256 * SWIGLU_BYTES_PER_ELEMENT)
    # at 8k tokens the score kernel is bandwidth-bound, so it grows with the tokens; no shared width: no SwiGLU
    small = dict(moe_layer_extra_ops(k, "trtllm", DS, 64, 0))
    assert set(small) == {"moe_routing_scores"}
    assert ops["moe_routing_scores"].latency_ms > small["moe_routing_scores"].latency_ms


def test_trtllm_tp8_decode_step_carries_both_per_moe_layer():
    step = _step("trtllm", Parallelism(tp=8, ep=8))
    shape = StepShape.build([], [1536] * 4)
    ops = _ops(step, shape)
    k = step.kernels
    n_moe = DS.num_moe_layers
    sh = DS.moe.num_shared_experts * DS.moe.shared_intermediate_size // 8
    assert ops["moe_routing_scores"].latency_ms == pytest.approx(
        n_moe * k.memory_op(4 * DS.moe.num_experts * SCORE_BYTES_PER_LOGIT).latency_ms)
    assert ops["shared_act"].latency_ms == pytest.approx(n_moe * k.memory_op(4 * sh * SWIGLU_BYTES_PER_ELEMENT).latency_ms)
    t = step.breakdown(shape)
    assert t.latency_ms == pytest.approx(sum(o.latency_ms for o in t.ops))


def test_other_engines_do_not_change():
    for backend in ("vllm", "sglang"):
        names = set(_ops(_step(backend, Parallelism(tp=8, ep=8)), StepShape.build([], [1536] * 4)))
        assert not names & {"moe_routing_scores", "shared_act"}


def test_attention_dp_routes_the_ranks_own_tokens():
    """Under attention DP the gate runs on each rank's tokens (the experts see the group's)."""
    step = _step("trtllm", Parallelism(tp=1, dp=8, ep=8))
    ops = _ops(step, StepShape.build([], [1536] * 4))
    k = step.kernels
    assert ops["moe_routing_scores"].latency_ms == pytest.approx(
        DS.num_moe_layers * k.memory_op(4 * DS.moe.num_experts * SCORE_BYTES_PER_LOGIT).latency_ms)

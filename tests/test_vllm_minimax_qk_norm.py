"""vLLM MiniMax-M2: the q/k RMSNorm's variance all-reduce under TP (sim/vllm_minimax_qk_norm.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration.serving_rows import engine_profiles
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim import step_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.types import Parallelism, Precision, StepShape
from llmplan.sim.vllm_minimax_qk_norm import applies, qk_bytes, variance_allreduce_bytes

GPU = get_gpu("h200_sxm")
MINIMAX = "MiniMaxAI/MiniMax-M2.5"
NEW_OPS = ("qk_norm_allreduce", "qk_norm_variance", "qk_norm_scale")
DECODE = StepShape.build([], [2048] * 4)          # 4 sequences decoding
PREFILL = StepShape.build([(1024, 0)], [])        # one 1k prompt, no cached context


def _step(backend: str, model: str, par: Parallelism):
    dep = Deployment(load_model(model), GPU, par, Precision("fp8", "bf16"), engine_profiles()[backend])
    return build(dep, None, 4096)[0]


def _ops(step, shape) -> dict[str, float]:
    return {o.name: o.latency_ms for o in step.breakdown(shape).ops}


def test_conditions_follow_the_vllm_model_code():
    mm, qwen = load_model(MINIMAX), load_model("Qwen/Qwen3-235B-A22B-FP8")
    assert mm.architecture == "MiniMaxM2ForCausalLM"
    assert applies("vllm", mm, Parallelism(tp=8))
    assert applies("vllm", mm, Parallelism(tp=4, ep=4))
    assert not applies("vllm", mm, Parallelism(tp=1, dp=4, ep=4))   # tp_world 1: no all-reduce
    assert not applies("sglang", mm, Parallelism(tp=8))              # other engines not checked: unchanged
    assert not applies("trtllm", mm, Parallelism(tp=8))
    assert not applies("vllm", qwen, Parallelism(tp=8))              # per-head q/k norm: no collective
    # the message is two fp32 mean squares per token; q and k shards at the activation width
    assert variance_allreduce_bytes(4) == 32.0
    assert qk_bytes(4, 6, 1, 128, 2.0) == 4 * 7 * 128 * 2.0


@pytest.mark.parametrize("shape", [DECODE, PREFILL])
def test_minimax_tp8_step_adds_exactly_the_three_kernels_per_attention_layer(monkeypatch, shape):
    par = Parallelism(tp=8)
    with_norm = _step("vllm", MINIMAX, par)
    ops = _ops(with_norm, shape)
    t_with = with_norm.step_time_ms(shape)
    k = with_norm.kernels
    layers = load_model(MINIMAX).num_full_attention_layers
    tokens = shape.tokens
    # one all-reduce of tokens x 2 fp32 per attention layer, timed by the kernel model on the TP link
    ar = k.collective("all_reduce", variance_allreduce_bytes(tokens), 8, with_norm.tp_link).latency_ms
    assert ops["qk_norm_allreduce"] == pytest.approx(ar * layers)
    # smaller message than the hidden-state all-reduce: never slower per call, and not free
    assert 0 < ops["qk_norm_allreduce"] / layers <= ops["tp_allreduce"] / (2 * layers) + 1e-12
    qk = qk_bytes(tokens, with_norm.heads, with_norm.kv_heads, 128, 2.0)
    assert ops["qk_norm_variance"] == pytest.approx(k.memory_op(qk).latency_ms * layers)
    assert ops["qk_norm_scale"] == pytest.approx(k.memory_op(2 * qk).latency_ms * layers)
    # everything else unchanged: the step is longer by exactly the three operators
    monkeypatch.setattr(step_model, "minimax_qk_norm_tp", lambda *a: False)
    plain = _step("vllm", MINIMAX, par)
    plain_ops = _ops(plain, shape)
    assert not set(NEW_OPS) & set(plain_ops)
    assert {n: v for n, v in ops.items() if n not in NEW_OPS} == pytest.approx(plain_ops)
    assert t_with - plain.step_time_ms(shape) == pytest.approx(sum(ops[n] for n in NEW_OPS))


def test_other_deployments_keep_their_operators():
    for backend, model, par in (("vllm", MINIMAX, Parallelism(tp=1, dp=4, ep=4)),
                                ("sglang", MINIMAX, Parallelism(tp=8)),
                                ("vllm", "Qwen/Qwen3-235B-A22B-FP8", Parallelism(tp=4))):
        assert not set(NEW_OPS) & set(_ops(_step(backend, model, par), DECODE)), (backend, model, par)

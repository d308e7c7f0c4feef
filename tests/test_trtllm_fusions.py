"""TensorRT-LLM: RMSNorm inside the TP all-reduce (Llama, Qwen3-MoE), RoPE inside attention (Llama)
(sim/trtllm_fusions.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration.serving_rows import engine_profiles
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim import step_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.trtllm_fusions import norms_in_allreduce, rope_in_attention
from llmplan.sim.types import Parallelism, Precision, StepShape

GPU = get_gpu("h200_sxm")


SHAPE = StepShape.build([], [2048] * 4)


def _step(backend: str, model: str, tp: int):
    dep = Deployment(load_model(model), GPU, Parallelism(tp=tp), Precision("fp8", "fp8"), engine_profiles()[backend])
    return build(dep, None, 4096)[0]


def _ops(backend: str, model: str, tp: int) -> dict:
    return {o.name: o.latency_ms for o in _step(backend, model, tp).breakdown(SHAPE).ops}


def test_trtllm_llama70b_tp8_runs_no_norm_or_rotary_kernel(monkeypatch):
    trt = _ops("trtllm", "meta-llama/Llama-3.1-70B", 8)
    vllm = _ops("vllm", "meta-llama/Llama-3.1-70B", 8)
    assert trt["norms"] == 0.0 and trt["rotary"] == 0.0
    # vLLM runs both (80 layers x 2 norms, 80 rotary kernels at the launch floor)
    assert vllm["norms"] >= 160 * 0.004 and vllm["rotary"] >= 80 * 0.004
    # same GEMMs and attention otherwise: the decode step is shorter by exactly those kernels
    fused_ms = _step("trtllm", "meta-llama/Llama-3.1-70B", 8).step_time_ms(SHAPE)
    monkeypatch.setattr(step_model, "norms_in_allreduce", lambda *a: 0)
    monkeypatch.setattr(step_model, "rope_in_attention", lambda *a: False)
    plain = _step("trtllm", "meta-llama/Llama-3.1-70B", 8)
    unfused = {o.name: o.latency_ms for o in plain.breakdown(SHAPE).ops}
    assert unfused["norms"] > 0 and unfused["rotary"] > 0
    assert {k: v for k, v in unfused.items() if k not in ("norms", "rotary")} == \
        pytest.approx({k: v for k, v in trt.items() if k not in ("norms", "rotary")})
    assert plain.step_time_ms(SHAPE) - fused_ms == pytest.approx(unfused["norms"] + unfused["rotary"])


def test_fusion_conditions_follow_the_engine_code():
    l70, l8, qwen = (load_model(n) for n in ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B-Instruct",
                                             "Qwen/Qwen3-32B"))
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=8)) == 2
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=8, dp=2)) == 1   # no PRE_MLP_FUSION with attention DP
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=1)) == 0         # no all-reduce to fuse into
    assert norms_in_allreduce("trtllm", l8, Parallelism(tp=2)) == 0          # hidden 4096: fusion off
    assert norms_in_allreduce("vllm", l70, Parallelism(tp=8)) == 0
    assert norms_in_allreduce("trtllm", qwen, Parallelism(tp=8)) == 0        # dense Qwen3DecoderLayer: no fusion
    assert rope_in_attention("trtllm", l8) and not rope_in_attention("sglang", l8)
    # TP 1: the norms stay, the rotary kernel goes
    tp1 = _ops("trtllm", "meta-llama/Llama-3.1-70B", 1)
    assert tp1["norms"] > 0 and tp1["rotary"] == 0.0


def test_qwen3_moe_fusion_conditions_follow_the_engine_code():
    moe = load_model("Qwen/Qwen3-235B-A22B-FP8")
    assert moe.architecture == "Qwen3MoeForCausalLM"
    # PRE_MOE_FUSION = enable_fusion and has_tp; POST_MOE_FUSION = PRE_MOE_FUSION and not has_pp
    assert norms_in_allreduce("trtllm", moe, Parallelism(tp=4, ep=4)) == 2
    assert norms_in_allreduce("trtllm", moe, Parallelism(tp=8, ep=8, pp=2)) == 1
    assert norms_in_allreduce("trtllm", moe, Parallelism(tp=1)) == 0            # no all-reduce to fuse into
    assert norms_in_allreduce("trtllm", moe, Parallelism(tp=2, dp=4, ep=8)) == 0  # attention DP: fusion off
    assert norms_in_allreduce("sglang", moe, Parallelism(tp=4, ep=4)) == 0
    # the fused QK-norm + RoPE kernel still runs: the rotary operator stays
    assert not rope_in_attention("trtllm", moe)


def test_trtllm_qwen3_moe_decode_step_drops_exactly_the_norm_kernels(monkeypatch):
    model, par = load_model("Qwen/Qwen3-235B-A22B-FP8"), Parallelism(tp=4, ep=4)

    def step():
        dep = Deployment(model, GPU, par, Precision("fp8", "fp8"), engine_profiles()["trtllm"])
        return build(dep, None, 4096)[0]

    fused = step()
    ops = {o.name: o.latency_ms for o in fused.breakdown(SHAPE).ops}
    assert ops["norms"] == 0.0 and ops["rotary"] > 0.0
    monkeypatch.setattr(step_model, "norms_in_allreduce", lambda *a: 0)
    plain = step()
    unfused = {o.name: o.latency_ms for o in plain.breakdown(SHAPE).ops}
    # 94 layers x 2 RMSNorm kernels, each at least the launch floor
    assert unfused["norms"] >= 2 * model.num_layers * 0.004
    assert {k: v for k, v in unfused.items() if k != "norms"} == pytest.approx({k: v for k, v in ops.items() if k != "norms"})
    assert plain.step_time_ms(SHAPE) - fused.step_time_ms(SHAPE) == pytest.approx(unfused["norms"])

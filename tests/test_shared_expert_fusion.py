"""SGLang folds DeepSeek-V3/R1's shared expert into the fused MoE (sim/shared_experts.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration.serving_rows import engine_profiles
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.shared_experts import fused_shared_experts
from llmplan.sim.types import Parallelism, Precision, StepShape

GPU = get_gpu("h200_sxm")


def _step(backend: str, model: str = "deepseek-ai/DeepSeek-V3", ep: int = 1):
    dep = Deployment(load_model(model), GPU, Parallelism(tp=8, pp=1, ep=ep), Precision("fp8", "bf16"),
                     engine_profiles()[backend])
    step, _ = build(dep, None, 4096)
    return step


def _ops(step, seqs: int = 4):
    return {o.name: o for o in step.breakdown(StepShape.build([], [2048] * seqs)).ops}


def test_sglang_deepseek_runs_the_shared_expert_inside_the_fused_moe():
    step = _step("sglang")
    ops = _ops(step)
    assert "shared_up" not in ops and "shared_down" not in ops
    m = step.model
    # the fused MoE runs top-9 over 257 experts (the shared expert always selected)
    want = step.kernels.moe(4, m.hidden_size, m.moe.expert_intermediate_size, 9, 257, 8, 1, "fp8")
    assert ops["moe_experts"].latency_ms == pytest.approx(want.latency_ms * m.num_moe_layers)


def test_fusion_is_cheaper_than_separate_shared_gemms_at_decode():
    fused = _step("sglang")
    m = fused.model
    k = fused.kernels
    T, sh, h = 4, m.moe.shared_intermediate_size // 8, m.hidden_size
    separate = (k.moe(T, h, m.moe.expert_intermediate_size, 8, 256, 8, 1, "fp8").latency_ms
                + k.gemm(T, 2 * sh, h, "fp8_block").latency_ms + k.gemm(T, h, sh, "fp8_block").latency_ms)
    assert _ops(fused)["moe_experts"].latency_ms / m.num_moe_layers < separate


def test_other_engines_and_expert_parallelism_keep_the_shared_mlp():
    assert "shared_up" in _ops(_step("vllm"))
    assert "shared_up" in _ops(_step("trtllm"))
    assert "shared_up" in _ops(_step("sglang", ep=8))   # SGLang disables the fusion under EP
    # Kimi-K2.5 (384 experts) is not folded
    kimi = load_model("moonshotai/Kimi-K2.5")
    assert fused_shared_experts("sglang", kimi, Parallelism(tp=8), "int4", "int4") == 0
    ds = load_model("deepseek-ai/DeepSeek-R1")
    assert fused_shared_experts("sglang", ds, Parallelism(tp=8), "fp8_block", "fp8_block") == 1
    # shared and routed experts in different formats: not folded (SGLang's w4afp8 guard)
    assert fused_shared_experts("sglang", ds, Parallelism(tp=8), "fp4", "fp8_block") == 0

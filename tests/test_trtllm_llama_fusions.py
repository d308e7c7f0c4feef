"""TensorRT-LLM Llama: RMSNorm inside the TP all-reduce, RoPE inside attention (sim/trtllm_llama_fusions.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration.serving_rows import engine_profiles
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.trtllm_llama_fusions import norms_in_allreduce, rope_in_attention
from llmplan.sim.types import Parallelism, Precision, StepShape

GPU = get_gpu("h200_sxm")


def _ops(backend: str, model: str, tp: int) -> dict:
    dep = Deployment(load_model(model), GPU, Parallelism(tp=tp), Precision("fp8", "fp8"), engine_profiles()[backend])
    step, _ = build(dep, None, 4096)
    return {o.name: o.latency_ms for o in step.breakdown(StepShape.build([], [2048] * 4)).ops}


def test_trtllm_llama70b_tp8_runs_no_norm_or_rotary_kernel():
    trt = _ops("trtllm", "meta-llama/Llama-3.1-70B", 8)
    vllm = _ops("vllm", "meta-llama/Llama-3.1-70B", 8)
    assert trt["norms"] == 0.0 and trt["rotary"] == 0.0
    # vLLM runs both (80 layers x 2 norms, 80 rotary kernels at the launch floor)
    assert vllm["norms"] >= 160 * 0.004 and vllm["rotary"] >= 80 * 0.004
    # same GEMMs and attention otherwise: the decode step is shorter by exactly those kernels
    assert trt["attn_decode"] == pytest.approx(_ops("trtllm", "meta-llama/Llama-3.1-70B", 8)["attn_decode"])


def test_fusion_conditions_follow_the_engine_code():
    l70, l8, qwen = (load_model(n) for n in ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B-Instruct",
                                             "Qwen/Qwen3-32B"))
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=8)) == 2
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=8, dp=2)) == 1   # no PRE_MLP_FUSION with attention DP
    assert norms_in_allreduce("trtllm", l70, Parallelism(tp=1)) == 0         # no all-reduce to fuse into
    assert norms_in_allreduce("trtllm", l8, Parallelism(tp=2)) == 0          # hidden 4096: fusion off
    assert norms_in_allreduce("vllm", l70, Parallelism(tp=8)) == 0
    assert norms_in_allreduce("trtllm", qwen, Parallelism(tp=8)) == 0        # other modeling files: not covered
    assert rope_in_attention("trtllm", l8) and not rope_in_attention("sglang", l8)
    # TP 1: the norms stay, the rotary kernel goes
    tp1 = _ops("trtllm", "meta-llama/Llama-3.1-70B", 1)
    assert tp1["norms"] > 0 and tp1["rotary"] == 0.0

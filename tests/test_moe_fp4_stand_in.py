"""TensorRT-LLM's MXFP4 fused MoE on Hopper is timed with the kernel it runs there (its default
``TRITON`` backend: OpenAI's triton_kernels, measured in vLLM's gpt-oss tables), not with
SGLang's fused_moe_triton w4a16 kernel (sim.calibrated.MOE_FP4_STAND_IN)."""

from __future__ import annotations

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import MOE_FP4_STAND_IN, CalibratedKernelModel, kernel_model_for

# gpt-oss-120b experts: hidden 2880, expert width 2880, 128 experts, top-4, one GPU
GPT_OSS = (2880, 2880, 4, 128, 1, 1)


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
@pytest.mark.parametrize("tokens", [4, 64, 1024])
def test_trtllm_fp4_moe_on_hopper_uses_the_openai_triton_kernel(gpu, tokens):
    g = get_gpu(gpu)
    trt, vllm, sgl = (CalibratedKernelModel(g, b) for b in ("trtllm", "vllm", "sglang"))
    t = trt.moe(tokens, *GPT_OSS, "fp4")
    assert t.table == MOE_FP4_STAND_IN["trtllm"] == "vllm"
    assert t.tier == "measured"
    # vLLM's gpt-oss group of that kernel (sim/kernel_calibration/moe_kernels.py: Triton on SM90 for
    # TensorRT-LLM's MXFP4 and vLLM's gpt-oss alike)
    own = vllm.moe(tokens, *GPT_OSS, "fp4", architecture="GptOssForCausalLM").latency_ms
    assert t.latency_ms == pytest.approx(own, rel=1e-12)
    # the cached model the simulator uses answers the same
    assert kernel_model_for(g, "trtllm").moe(tokens, *GPT_OSS, "fp4").latency_ms == pytest.approx(t.latency_ms)
    if tokens >= 64:  # decode/prefill sizes: SGLang's triton w4a16 kernel is 1.8-2.4x slower in the tables
        assert t.latency_ms < 0.75 * sgl.moe(tokens, *GPT_OSS, "fp4").latency_ms


def test_stand_in_does_not_touch_other_dtypes_or_engines():
    g = get_gpu("h200_sxm")
    trt = kernel_model_for(g, "trtllm")
    # TensorRT-LLM's own measured fp8 group
    assert trt.moe(64, 2048, 5120, 22, 512, 1, 1, "fp8").table == "trtllm"
    sgl = kernel_model_for(g, "sglang")
    assert sgl.moe(64, *GPT_OSS, "fp4").table == "sglang"  # SGLang has its own w4a16 mxfp4 group

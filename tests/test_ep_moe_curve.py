"""TensorRT-LLM's EP MoE without attention DP from its measured CUTLASS curve (sim/ep_moe_curve.py)."""

from __future__ import annotations

import pytest

from llmplan.sim.ep_moe_curve import tp_ep_moe
from llmplan.sim.kernels import KernelTime

DSV3 = (7168, 2048, 8, 256)  # hidden, expert inter, top-k, experts


class _Kernels:
    """A measured-tier kernel model stub that records its fused-MoE queries."""

    measured, moe_skew = True, 1.01

    def __init__(self):
        self.calls = []

    def moe(self, *a):
        self.calls.append(a)
        return KernelTime(1.0, 3.0e12, 2.0e9)


def test_trtllm_tp8_ep8_reads_the_measured_cutlass_rows():
    k = _Kernels()
    # h200_sxm wideep_moe.csv.gz, wideep_compute_cutlass, fp8_block, EP 8, 256 slots, power_law_1.01:
    # 8192 tokens 2.496634 ms, 1024 tokens 0.667302 ms (measured points: no interpolation)
    kt = tp_ep_moe(k, "h200_sxm", "trtllm", False, 8192, *DSV3, 1, 8, "fp8")
    assert kt.latency_ms == pytest.approx(2.496634, abs=1e-6)
    assert not kt.extrapolated and kt.tier == "measured" and kt.table == "trtllm"
    # the work of the same query is kept (the power model reads FLOPs and bytes)
    assert (kt.flops, kt.bytes) == (3.0e12, 2.0e9) and k.calls == [(8192, *DSV3, 1, 8, "fp8")]
    assert tp_ep_moe(k, "h200_sxm", "trtllm", False, 1024, *DSV3, 1, 8, "fp8").latency_ms == \
        pytest.approx(0.667302, abs=1e-6)
    # past the table's 16k tokens: proportional to the tokens, flagged
    far = tp_ep_moe(k, "h200_sxm", "trtllm", False, 32768, *DSV3, 1, 8, "fp8")
    assert far.extrapolated and far.latency_ms == pytest.approx(2 * 4.639667, rel=1e-4)


def test_no_curve_or_another_kernel_keeps_the_kernel_model():
    k = _Kernels()
    a = (8192, *DSV3)
    assert tp_ep_moe(k, "h200_sxm", "trtllm", False, *a, 8, 1, "fp8") is None      # moe TP, no EP
    assert tp_ep_moe(k, "h200_sxm", "sglang", False, *a, 1, 8, "fp8") is None      # another engine's kernel
    assert tp_ep_moe(k, "h200_sxm", "trtllm", False, 8192, 5120, 2048, 8, 256, 1, 8, "fp8") is None  # no curve
    assert tp_ep_moe(k, "l40s", "trtllm", False, *a, 1, 8, "fp8") is None          # no table for the GPU
    assert tp_ep_moe(k, "h200_sxm", "trtllm", False, 0, *DSV3, 1, 8, "fp8") is None
    k.measured = False                                                              # roofline / cross-gen tier
    assert tp_ep_moe(k, "h200_sxm", "trtllm", False, *a, 1, 8, "fp8") is None
    assert k.calls == []


def test_decode_only_steps_keep_the_kernel_model():
    k = _Kernels()
    assert tp_ep_moe(k, "h200_sxm", "trtllm", True, 64, *DSV3, 1, 8, "fp8") is None
    assert k.calls == []


def _trtllm_step(par):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.deployment import Deployment, build
    from llmplan.sim.types import EngineProfile, Precision
    engine = EngineProfile(name="trtllm", kernel_backend="trtllm", max_num_seqs=256, host_overhead_ms=0.0,
                           host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0)
    fp8 = Precision("fp8", "fp8")
    step, _ = build(Deployment(load_model("deepseek-ai/DeepSeek-V3"), get_gpu("h200_sxm"), par, fp8, engine),
                    calibration=None, min_kv_tokens=16384)
    return step


def _moe_op(step, shape):
    return next(o for o in step.breakdown(shape).ops if o.name == "moe_experts")


def test_tp8_ep8_prompt_steps_read_the_curve_and_decode_steps_do_not():
    from llmplan.sim.types import Parallelism, StepShape
    step = _trtllm_step(Parallelism(tp=8, ep=8))
    layers = 58  # DeepSeek-V3's MoE layers
    prompt = _moe_op(step, StepShape.build([(8192, 0)], []))
    assert prompt.latency_ms == pytest.approx(layers * 2.496634, rel=1e-6) and not prompt.extrapolated
    # a decode-only step of 8 sequences keeps the kernel model's answer (not the curve's 0.332 ms floor)
    decode = _moe_op(step, StepShape.build([], [2048] * 8))
    assert decode.latency_ms < layers * 0.2
    # the step time of the hot path agrees with the breakdown (the decode-only flag is in the cache key)
    for shape in (StepShape.build([(8192, 0)], []), StepShape.build([], [2048] * 8)):
        assert step.step_time_ms(shape) == pytest.approx(step.breakdown(shape).latency_ms, rel=1e-9)
    # moe TP 8 without EP: no curve, no change of key
    assert not _trtllm_step(Parallelism(tp=8, ep=1))._ep_curve

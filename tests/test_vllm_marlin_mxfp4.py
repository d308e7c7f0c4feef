"""vLLM's Marlin MXFP4 fused MoE for the gpt-oss launches that set VLLM_MXFP4_USE_MARLIN=1
(sim/vllm_marlin_mxfp4.py, calibration/vllm_launch.mxfp4_marlin, calibration/vllm_marlin_mxfp4_table.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_launch as vl
from llmplan.calibration.vllm_marlin_mxfp4_table import build
from llmplan.sim.deployment import build as build_step
from llmplan.sim.kernels import KernelTime
from llmplan.sim.types import StepShape
from llmplan.sim.vllm_marlin_mxfp4 import MARLIN_FILE, marlin_moe, moe_on_marlin, routing_label
from test_vllm_launch import _row as launch_row

MEASUREMENTS = Path(__file__).resolve().parents[1].parent / "shared" / "measurements"
PROMPT_8K = StepShape.build([(8192, 0)], [])     # one 8k prompt
DECODE = StepShape.build([], [2048] * 8)         # 8 sequences decoding
GPTOSS = dict(hidden=2880, inter=2880, topk=4, num_experts=128)


def _step(**kw):
    r = launch_row()
    r.update(kw)
    m = sr.map_row(r, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case, sr.step_model(m.case, None)


def _moe_ms(step, shape) -> float:
    return next(o.latency_ms for o in step.breakdown(shape).ops if o.name == "moe_experts")


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "moe.csv.gz").exists(), reason="measurements not present")
def test_shipped_table_is_the_measured_rows():
    """sim/data/vllm_marlin_mxfp4.json is what the table builder writes from the measurements."""
    assert json.loads(MARLIN_FILE.read_text())["gpus"] == json.loads(json.dumps(build(MEASUREMENTS)))


def test_table_holds_hopper_marlin_curves():
    doc = json.loads(MARLIN_FILE.read_text())["gpus"]
    assert set(doc) == {"h100_sxm", "h200_sxm"}
    for gpu in doc.values():
        assert gpu["shape"] == [[3584, 3072, 896, 16]]        # the one shape the tables time Marlin at
        assert set(gpu["curves"]) == {"balanced", "power_law_1.01", "power_law_1.2"}
        assert {"1x1", "2x1", "4x1", "8x1"} <= set(gpu["curves"]["power_law_1.01"])


def test_transfer_is_flops_over_marlins_throughput_at_the_same_tokens_per_expert():
    curve = json.loads(MARLIN_FILE.read_text())["gpus"]["h200_sxm"]["curves"]["power_law_1.01"]["1x1"]
    # a measured point: 16,384 tokens x 16 / 896 = 292.57 tokens per expert
    tpe, tf = curve["tokens_per_expert"][-1], curve["tflops"][-1]
    tokens = tpe * 128 / 4
    kt = marlin_moe("h200_sxm", int(round(tokens)), **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01)
    flops = 6.0 * 2880 * 2880 * round(tokens) * 4
    assert kt.latency_ms == pytest.approx(flops / (tf * 1e9), rel=1e-3)
    assert kt.extrapolated and kt.tier == "measured" and kt.table == "vllm"
    # gpt-oss 8k prompt at TP 1, H200: 200-230 TFLOP/s -> 7-8 ms per layer (the triton kernel measures ~4)
    k8 = marlin_moe("h200_sxm", 8192, **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01)
    assert 6.5 < k8.latency_ms < 8.5
    # experts TP 8: an eighth of the flops at the moe_tp 8 curve
    k8tp8 = marlin_moe("h200_sxm", 8192, **GPTOSS, moe_tp=8, moe_ep=1, skew=1.01)
    assert k8tp8.flops == pytest.approx(k8.flops / 8) and k8tp8.latency_ms < k8.latency_ms / 4


def test_no_curve_no_answer():
    assert marlin_moe("b200", 1024, **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01) is None
    assert marlin_moe("h200_sxm", 1024, **GPTOSS, moe_tp=3, moe_ep=1, skew=1.01) is None
    assert marlin_moe("h200_sxm", 1024, **GPTOSS, moe_tp=1, moe_ep=1, skew=0.7) is None
    assert routing_label(0) == "balanced" and routing_label(1.01) == "power_law_1.01"


def test_the_slower_answer_stands():
    slow = marlin_moe("h200_sxm", 8192, **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01)
    fast = KernelTime(1.0, 0, 0, "compute", "measured")
    assert moe_on_marlin(fast, "h200_sxm", 8192, **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01) == slow
    # decode: the transfer would be faster than the measured kernel of the model's shape, which stays
    measured = KernelTime(0.05, 0, 0, "memory", "measured")
    assert marlin_moe("h200_sxm", 4, **GPTOSS, moe_tp=8, moe_ep=1, skew=1.01).latency_ms < 0.05
    assert moe_on_marlin(measured, "h200_sxm", 4, **GPTOSS, moe_tp=8, moe_ep=1, skew=1.01) is measured
    assert moe_on_marlin(measured, "b200", 8192, **GPTOSS, moe_tp=1, moe_ep=1, skew=1.01) is measured


def test_launch_rule():
    assert vl.mxfp4_marlin("openai/gpt-oss-120b", "h200_sxm", "0.18.0", 0.8)
    assert vl.mxfp4_marlin("openai/gpt-oss-120b", "h100_sxm", "0.19.1", 0.8)
    # older launches (2025-11 v0.10.2 rows without a version, 2025-12 0.11.2) set no VLLM_MXFP4_USE_MARLIN
    for v in ("0.11.2", "0.10.2", "", None):
        assert not vl.mxfp4_marlin("openai/gpt-oss-120b", "h200_sxm", v, 0.8), v
    assert not vl.mxfp4_marlin("openai/gpt-oss-120b", "h200_sxm", "0.18.0", 1.0)   # not the InferenceX client
    assert not vl.mxfp4_marlin("openai/gpt-oss-120b", "b200", "0.18.0", 0.8)
    assert not vl.mxfp4_marlin("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "0.18.0", 0.8)


def test_018_gptoss_row_runs_marlin_in_prompt_steps_and_keeps_its_decode_moe():
    case, marlin = _step(isl=8192)
    assert marlin._marlin_mxfp4
    _, triton = _step(isl=8192, backend_version="0.11.2")
    assert not triton._marlin_mxfp4
    # 8k prompt at TP 1: Marlin's 200-230 TFLOP/s instead of the triton kernel's ~560
    assert _moe_ms(marlin, PROMPT_8K) > 1.5 * _moe_ms(triton, PROMPT_8K)
    assert marlin.step_time_ms(PROMPT_8K) > triton.step_time_ms(PROMPT_8K)
    # decode of 8 sequences: the measured triton time of gpt-oss's shape stands
    assert _moe_ms(marlin, DECODE) == pytest.approx(_moe_ms(triton, DECODE))


def test_only_vllm_mxfp4_steps_take_marlin():
    case, _ = _step()
    sg = replace(case.dep, engine=sr.engine_profiles()["sglang"])
    with pytest.raises(ValueError):
        build_step(sg, None, 2048)[0].run_marlin_mxfp4_moe()

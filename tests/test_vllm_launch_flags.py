"""The Kimi-K2.5 InferenceX launch passes ``pass_config.fuse_allreduce_rms true`` on vLLM 0.16.0
(calibration/vllm_launch_flags.py): its served rows run the AllReduce + RMSNorm fusion that 0.16's
``-O2`` preset leaves off, with the step model's own conditions (sim/vllm_allreduce_rms.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_launch as vl
from llmplan.calibration.vllm_launch_flags import launch_fuses_allreduce_rms
from llmplan.sim.types import StepShape
from llmplan.sim.vllm_allreduce_rms import fused_max_tokens
from test_vllm_launch import _row as launch_row

DECODE = StepShape.build([], [2048] * 8)       # 8 sequences decoding
PROMPT = StepShape.build([(1024, 0)], [])      # one 1k prompt
#: a Kimi-K2.5 sweep row as ../shared/measurements writes it (h200_sxm, 2026-03-25.csv export), at N = 8
KIMI = {"model_path": "moonshotai/Kimi-K2.5", "backend_version": "0.16.0", "precision": "int4",
        "gemm_quant_mode": "int4_wo", "moe_quant_mode": "int4_wo", "batch_size": 8.0, "tp_size": 8.0,
        "moe_tp_size": 8.0, "silicon_data_source": "source_file=2026-03-25.csv; model=Kimi-K2.5; "
        "silicon_concurrency=8; measured=2026-03-02T23:25:25Z; image=vllm/vllm-openai:v0.16.0"}


def _step(**kw):
    r = launch_row(**KIMI)
    r.update(kw)
    m = sr.map_row(r, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case, sr.step_model(m.case, None)


def _norms(step, shape) -> float:
    return {o.name: o.latency_ms for o in step.breakdown(shape).ops}["norms"]


def test_rule_names_the_kimi_sweep_rows_on_hopper_only():
    assert launch_fuses_allreduce_rms("moonshotai/Kimi-K2.5", "h200_sxm", 0.8)
    assert launch_fuses_allreduce_rms("moonshotai/kimi-k2.5", "h100_sxm", 0.8)
    assert not launch_fuses_allreduce_rms("moonshotai/Kimi-K2.5", "h200_sxm", 1.0)   # not the InferenceX client
    assert not launch_fuses_allreduce_rms("moonshotai/Kimi-K2.5", "b200", 0.8)
    assert not launch_fuses_allreduce_rms("MiniMaxAI/MiniMax-M2.5", "h200_sxm", 0.8)
    assert not vl.allreduce_rms_fusion("0.16.0")   # the version default alone would not fuse


def test_kimi_016_row_folds_its_decode_norms_and_keeps_its_prompt_norms():
    case, step = _step()
    assert case.version == "0.16.0" and case.length_ratio < 1.0
    assert step._ar_rms_tokens == fused_max_tokens("h200_sxm", 8, 1, 1, 7168, 2.0) > 8
    assert _norms(step, DECODE) == 0.0
    assert _norms(step, PROMPT) > 0.0       # 1,024 tokens of hidden 7,168: above the 0.5 MiB cap at TP 8
    # the same row from a fixed-length collection (another launch) keeps the 0.16 default: no fusion
    _, plain = _step(isl=1000, osl=1000)
    assert plain._ar_rms_tokens == 0 and _norms(plain, DECODE) > 0.0
    assert plain.step_time_ms(DECODE) - step.step_time_ms(DECODE) == pytest.approx(_norms(plain, DECODE))

"""KV-cache dtype of replayed served rows follows each engine's ``--kv-cache-dtype`` default
(calibration.serving_rows.KV_AUTO_MODEL_DTYPE): vLLM and SGLang keep the model's bf16 cache
for fp8 checkpoints, TensorRT-LLM rows keep the fp8 cache of their precision."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.sim.types import StepShape


def _row(**kw) -> dict:
    r = {"id": "r", "silicon_data_source": "synthetic; silicon_concurrency=64", "backend": "sglang",
         "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-R1", "system": "h200_sxm",
         "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 8192, "gemm_quant_mode": "fp8",
         "moe_quant_mode": "fp8_block", "batch_size": 64, "tp_size": 8, "pp_size": 1, "attention_dp_size": 1,
         "moe_tp_size": 8, "moe_ep_size": 1, "silicon_ttft_ms": 420.05, "silicon_tpot_ms": 30.61}
    r.update(kw)
    return r


def _case(**kw) -> sr.ServingCase:
    m = sr.map_row(_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


@pytest.mark.parametrize("backend, kv", [("sglang", "bf16"), ("vllm", "bf16"), ("trtllm", "fp8")])
def test_fp8_row_kv_dtype_per_engine_default(backend, kv):
    c = _case(backend=backend, model_path="Qwen/Qwen3-32B", tp_size=2, moe_tp_size=math.nan, moe_ep_size=math.nan,
              attention_dp_size=math.nan)
    assert (c.dep.prec.weights, c.dep.prec.kv_cache) == ("fp8", kv)


def test_bf16_row_keeps_bf16_cache_on_every_engine():
    for backend in ("sglang", "vllm", "trtllm"):
        c = _case(backend=backend, model_path="Qwen/Qwen3-32B", precision=math.nan, gemm_quant_mode=math.nan,
                  tp_size=1, moe_tp_size=math.nan, moe_ep_size=math.nan, attention_dp_size=math.nan)
        assert c.dep.prec.kv_cache == "bf16"


def test_sglang_deepseek_decode_attention_fits_inside_the_measured_tpot():
    """The served SGLang DeepSeek-R1 run (H200, tp 8, N = 64, isl 1024, osl 8192) measured a
    30.6 ms TPOT. SGLang's MLA decode kernel with an fp8 cache (the old mapping) spends ~39 ms
    per such step in attention alone; with the engine's default bf16 cache it is well inside."""
    c = _case()
    assert c.dep.prec.kv_cache == "bf16"
    step = sr.step_model(c, None)
    kv = c.isl + c.osl // 2
    ops = step.breakdown(StepShape.build([], [kv] * c.concurrency)).ops
    attn_ms = sum(o.latency_ms for o in ops if o.family == "mla")
    assert attn_ms > 0 and all(o.tier == "measured" for o in ops if o.family == "mla")
    assert attn_ms < 0.5 * c.measured_tpot_ms, attn_ms
    # the same step with the fp8 cache: the attention alone exceeds the measured TPOT
    fp8 = type(step)(step.model, step.gpu, step.par, type(c.dep.prec)(c.dep.prec.weights, "fp8"), step.engine,
                     step.kernels)
    attn_fp8 = sum(o.latency_ms for o in fp8.breakdown(StepShape.build([], [kv] * c.concurrency)).ops
                   if o.family == "mla")
    assert attn_fp8 > c.measured_tpot_ms > attn_ms

"""The memory-traffic floor of a served TPOT (calibration.decode_floor) and its regime flag.

The rows are the measured vLLM gpt-oss-120b runs on H100 (h100_sxm/e2e_serving.csv): at 512
clients, 8k prompts and 1k outputs, TPOT 5.46 ms on 4 GPUs, below what 4 at 64 clients took
(16.7 ms, vLLM 0.18), while reading the KV of 512 sequences of ~8.7k tokens alone takes longer."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.decode_floor import BELOW_DECODE_FLOOR, decode_floor_ms, min_weight_bytes
from llmplan.calibration.serving_regimes import FLAGS, regime_flags
from llmplan.model_catalog.derived import kv_bytes_sequence, weight_bytes


def _row(**kw) -> dict:
    r = {"id": "gpt_oss_120b_h100_sxm_vllm_fp4_agg_8192x1024_c512_tp4", "backend": "vllm",
         "silicon_data_source": "synthetic; silicon_concurrency=512", "backend_version": "0.11.2",
         "model_path": "openai/gpt-oss-120b", "system": "h100_sxm", "precision": "fp4", "mode": "agg",
         "isl": 8192, "osl": 1024, "gemm_quant_mode": "fp4", "moe_quant_mode": "fp4", "batch_size": 512,
         "tp_size": 4, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 4, "moe_ep_size": 1,
         "silicon_ttft_ms": 24323.1, "silicon_tpot_ms": 5.456}
    r.update(kw)
    return r


def _case(**kw) -> sr.ServingCase:
    m = sr.map_row(_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_floor_is_kv_and_minimum_weights_over_the_gpus_at_peak_bandwidth():
    c = _case()
    kv = 512 * kv_bytes_sequence(c.dep.model, c.dep.prec.kv_cache, 8192 + 512)
    w = min_weight_bytes(c.dep.model, c.dep.prec.weights)
    assert 0 < w < weight_bytes(c.dep.model, c.dep.prec.weights)     # MoE: only top-k experts must be read
    assert decode_floor_ms(c) == pytest.approx((kv + w) / 4 / (c.dep.gpu.hbm_bw_gbps * 1e9) * 1e3)
    assert decode_floor_ms(c) > 2 * c.measured_tpot_ms


def test_floor_grows_with_clients_and_context_and_falls_with_gpus():
    c = _case()
    assert decode_floor_ms(replace(c, concurrency=64)) < decode_floor_ms(c)
    assert decode_floor_ms(replace(c, isl=1024)) < decode_floor_ms(c)
    assert decode_floor_ms(_case(tp_size=8, moe_tp_size=8)) == pytest.approx(decode_floor_ms(c) / 2)


def test_dense_model_floor_reads_every_weight():
    c = _case(model_path="meta-llama/Llama-3.1-70B", precision="fp8", gemm_quant_mode="fp8", moe_quant_mode="fp8",
              moe_tp_size=1, system="h200_sxm")
    assert min_weight_bytes(c.dep.model, "fp8") == weight_bytes(c.dep.model, "fp8")


def test_row_below_the_floor_is_flagged_and_a_plausible_one_is_not():
    assert BELOW_DECODE_FLOOR in FLAGS
    assert BELOW_DECODE_FLOOR in regime_flags(_case())
    # the same deployment at 64 clients measured 16.7 ms (vLLM 0.18): above its floor
    ok = _case(batch_size=64, silicon_data_source="synthetic; silicon_concurrency=64", silicon_tpot_ms=16.74,
               silicon_ttft_ms=652.7)
    assert BELOW_DECODE_FLOOR not in regime_flags(ok)

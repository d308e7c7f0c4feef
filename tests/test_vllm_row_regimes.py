"""Regimes of served rows the replay cannot reproduce, computed from the measured row, the model,
the GPU specification and the simulator's kernels only (never from a prediction of the row):

* the memory-traffic floor of a decode step (calibration.decode_floor): vLLM gpt-oss-120b on 4
  H100 at 512 clients, 8k prompts and 1k outputs measured TPOT 5.46 ms, below what the same 4
  GPUs took at 64 clients (16.7 ms, vLLM 0.18), while reading the KV of 512 sequences of ~8.7k
  tokens alone takes longer;
* the prompt rate a replica can compute at best (calibration.prefill_ceiling): vLLM
  nvidia/Llama-3.1-8B-Instruct-FP8 on one H200 at 64 clients, 2,000-token prompts, 100 outputs,
  TTFT 122 ms, TPOT 9.74 ms, i.e. 64 / 1.086 s x 2,000 = 118k prompt tokens/s, more than one
  H200 prefills by its measured kernels (h100_sxm and h200_sxm e2e_serving.csv)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.decode_floor import BELOW_DECODE_FLOOR, decode_floor_ms, min_weight_bytes
from llmplan.calibration.prefill_ceiling import beyond_prefill_ceiling, prefill_capacity_tps, prompt_rate_tps
from llmplan.calibration.serving_regimes import CACHE_SERVED, FLAGS, regime_flags
from llmplan.model_catalog.derived import kv_bytes_sequence, weight_bytes

GPT_OSS_C512 = {"id": "gpt_oss_120b_h100_sxm_vllm_fp4_agg_8192x1024_c512_tp4", "backend": "vllm",
                "silicon_data_source": "synthetic; silicon_concurrency=512", "backend_version": "0.11.2",
                "model_path": "openai/gpt-oss-120b", "system": "h100_sxm", "precision": "fp4", "mode": "agg",
                "isl": 8192, "osl": 1024, "gemm_quant_mode": "fp4", "moe_quant_mode": "fp4", "batch_size": 512,
                "tp_size": 4, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 4, "moe_ep_size": 1,
                "silicon_ttft_ms": 24323.1, "silicon_tpot_ms": 5.456}
LLAMA_8B_FP8 = {"id": "llama_3_1_8b_instruct_fp8_h200_sxm_vllm_agg_2000x100_c64_tp1", "backend": "vllm",
                "silicon_data_source": "synthetic; silicon_concurrency=64", "backend_version": "0.12.0",
                "model_path": "nvidia/Llama-3.1-8B-Instruct-FP8", "system": "h200_sxm", "precision": "fp8",
                "mode": "agg", "isl": 2000, "osl": 100, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
                "batch_size": 64, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": math.nan,
                "moe_ep_size": math.nan, "silicon_ttft_ms": 121.73, "silicon_tpot_ms": 9.74}


def _case(base: dict, **kw) -> sr.ServingCase:
    m = sr.map_row({**base, **kw}, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


# ----------------------------------------------------------------------------- decode floor


def test_floor_is_kv_and_minimum_weights_over_the_gpus_at_peak_bandwidth():
    c = _case(GPT_OSS_C512)
    kv = 512 * kv_bytes_sequence(c.dep.model, c.dep.prec.kv_cache, 8192 + 512)
    w = min_weight_bytes(c.dep.model, c.dep.prec.weights)
    assert 0 < w < weight_bytes(c.dep.model, c.dep.prec.weights)     # MoE: only top-k experts must be read
    assert decode_floor_ms(c) == pytest.approx((kv + w) / 4 / (c.dep.gpu.hbm_bw_gbps * 1e9) * 1e3)
    assert decode_floor_ms(c) > 2 * c.measured_tpot_ms


def test_floor_grows_with_clients_and_context_and_falls_with_gpus():
    c = _case(GPT_OSS_C512)
    assert decode_floor_ms(replace(c, concurrency=64)) < decode_floor_ms(c)
    assert decode_floor_ms(replace(c, isl=1024)) < decode_floor_ms(c)
    assert decode_floor_ms(_case(GPT_OSS_C512, tp_size=8, moe_tp_size=8)) == pytest.approx(decode_floor_ms(c) / 2)


def test_dense_model_floor_reads_every_weight():
    c = _case(GPT_OSS_C512, model_path="meta-llama/Llama-3.1-70B", precision="fp8", gemm_quant_mode="fp8",
              moe_quant_mode="fp8",
              moe_tp_size=1, system="h200_sxm")
    assert min_weight_bytes(c.dep.model, "fp8") == weight_bytes(c.dep.model, "fp8")


def test_row_below_the_floor_is_flagged_and_a_plausible_one_is_not():
    assert BELOW_DECODE_FLOOR in FLAGS
    assert BELOW_DECODE_FLOOR in regime_flags(_case(GPT_OSS_C512))
    # the same deployment at 64 clients measured 16.7 ms (vLLM 0.18): above its floor
    ok = _case(GPT_OSS_C512, batch_size=64, silicon_data_source="synthetic; silicon_concurrency=64", silicon_tpot_ms=16.74,
               silicon_ttft_ms=652.7)
    assert BELOW_DECODE_FLOOR not in regime_flags(ok)


# ----------------------------------------------------------------------------- prefill ceiling


def test_prompt_rate_is_littles_law():
    c = _case(LLAMA_8B_FP8)
    assert prompt_rate_tps(c) == pytest.approx(64 * 2000 / ((121.73 + 99 * 9.74) / 1e3))


def test_capacity_is_a_physical_prefill_rate_and_grows_with_gpus():
    one, two = prefill_capacity_tps(_case(LLAMA_8B_FP8)), prefill_capacity_tps(_case(LLAMA_8B_FP8, tp_size=2))
    # an 8B model needs ~16 GFLOP per token: an H200 (1,979 dense fp8 TFLOP/s) stays below 124k tokens/s
    assert 20_000 < one < 124_000
    assert one < two < 2 * one


def test_capacity_counts_kernels_only():
    c = _case(LLAMA_8B_FP8)
    hosty = replace(c, dep=replace(c.dep, engine=replace(c.dep.engine, host_overhead_ms=50.0)))
    assert prefill_capacity_tps(hosty) == pytest.approx(prefill_capacity_tps(c))


def test_measured_run_above_the_ceiling_is_cache_served_and_a_slower_one_is_not():
    c = _case(LLAMA_8B_FP8)
    assert beyond_prefill_ceiling(c) and CACHE_SERVED in regime_flags(c)
    # the same run at a third of the prompt rate (3x the latency) is computable
    slow = _case(LLAMA_8B_FP8, silicon_ttft_ms=3 * 121.73, silicon_tpot_ms=3 * 9.74)
    assert not beyond_prefill_ceiling(slow) and CACHE_SERVED not in regime_flags(slow)

"""InferenceX's Llama-3.x-70B FP8 vLLM launches ran an fp8 KV cache (calibration/vllm_launch.py
``kv_cache_dtype``): the replay maps those sweep rows to ``Precision(kv_cache="fp8")`` and nothing
else. The measured rows show it too: on one H200 the runs held more KV tokens (Little's law,
calibration/vllm_running_sequences.py) than a bf16 pool of that GPU can."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_running_sequences as vrs
from llmplan.calibration.benchmark_clients import length_range_ratio
from llmplan.calibration.vllm_launch import kv_cache_dtype
from llmplan.sim.memory import plan_memory

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "measurements"


def _row(**kw) -> dict:
    r = {"id": "2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_8192x1024_c32_tp1_ep1_639",
         "silicon_data_source": "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=32; "
                                "measured=2025-10-29T00:00:00.000Z; wip=False",
         "backend": "vllm", "backend_version": float("nan"), "model_path": "meta-llama/Llama-3.1-70B",
         "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 8192, "osl": 1024,
         "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": 32.0, "tp_size": 1.0, "pp_size": 1.0,
         "attention_dp_size": 1.0, "moe_tp_size": 1.0, "moe_ep_size": 1.0,
         "silicon_ttft_ms": 3132.1, "silicon_tpot_ms": 75.74}
    r.update(kw)
    return r


def test_launch_rule():
    assert kv_cache_dtype(_row()) == "fp8"
    assert kv_cache_dtype(_row(system="h100_sxm")) == "fp8"
    assert kv_cache_dtype(_row(backend="sglang")) == ""                  # another engine's launch
    assert kv_cache_dtype(_row(model_path="openai/gpt-oss-120b")) == ""  # gpt-oss launches keep 'auto'
    assert kv_cache_dtype(_row(system="b200_sxm")) == ""                 # not the H100/H200 scripts
    assert kv_cache_dtype(_row(gemm_quant_mode="bf16", precision="bf16")) == ""
    assert kv_cache_dtype(_row(isl=8000, osl=1000)) == ""                # not an InferenceX sweep shape


def test_replay_precision_follows_the_launch():
    engines = sr.engine_profiles()
    m = sr.map_row(_row(), 0, engines)
    assert m.case is not None, m.status
    assert m.case.dep.prec.kv_cache == "fp8" and m.case.dep.prec.weights == "fp8"
    other = sr.map_row(_row(model_path="Qwen/Qwen3-32B", id="x", silicon_data_source="source_file=2026-04-06.csv; "
                            "silicon_concurrency=32"), 0, engines)
    assert other.case is not None and other.case.dep.prec.kv_cache == "bf16"   # vLLM's auto


def test_rows_held_more_kv_than_a_bf16_pool():
    if not MEASUREMENTS.is_dir():
        pytest.skip("measurements not available")
    df = sr.read_serving_files([MEASUREMENTS])
    df = df[(df["backend"] == "vllm") & (df["model_path"] == "meta-llama/Llama-3.1-70B")
            & (df["system"] == "h200_sxm") & (df["tp_size"] == 1) & (df["batch_size"] >= 32)].reset_index(drop=True)
    assert len(df) >= 3
    over = 0
    for i, r in df.iterrows():
        row = r.to_dict()
        est = vrs.row_estimate(row)
        ratio = length_range_ratio(row, int(row["isl"]), int(row["osl"]))
        # tokens in use: each running sequence holds its prompt and on average half its output
        used = est.running * (vrs.mean_client_length(int(row["isl"]), ratio) + est.mean_output_tokens / 2)
        m = sr.map_row(row, i, sr.engine_profiles())
        d = m.case.dep
        fp8 = plan_memory(d.model, d.gpu, d.par, d.prec, d.engine, m.case.isl + m.case.osl).kv_capacity_tokens
        bf16 = plan_memory(d.model, d.gpu, d.par, replace(d.prec, kv_cache="bf16"), d.engine,
                           m.case.isl + m.case.osl).kv_capacity_tokens
        assert fp8 == pytest.approx(2 * bf16, rel=0.01)
        if used > 1.2 * bf16:
            over += 1
            assert used <= fp8, (row["id"], used, fp8)
    assert over >= 3   # 1k/8k N = 64, 8k/1k N = 32 and 64: 1.3-1.9x a bf16 pool

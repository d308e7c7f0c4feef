"""SGLang 0.5.8.post1 Qwen3-32B on one H100 (aiconfigurator collection rows, N = 16): the KV pool
SGLang's own memory rule gives, and the regime rule that flags the measured server queue.

SGLang 0.5.8.post1 ``ServerArgs._handle_gpu_memory_settings`` (read in the release wheel): on an
80 GB H100 (81,559 MiB) chunk 8,192 and graph batch 256 reserve 512 + 1.5 x 8,192 + 2 x 256 +
1 x 1 / 8 x 1,024 = 13,440 MiB, so ``mem_fraction_static`` = 0.835; piecewise CUDA graphs, whose
reserve would add to it, are off by default in 0.5.6.post2, 0.5.7, 0.5.8.post1 and 0.5.9
(``enable_piecewise_cuda_graph: bool = False``). With 61 GiB of bf16 weights and 256 KiB of KV per
token that leaves about 20.7k tokens, room for all 16 clients at 1,024 + 128 tokens. The measured
TTFT (6.8 / 14.6 / 28.9 s at outputs 128 / 256 / 512) instead grows with the output length at fixed
N, i.e. requests wait at the server for a reason this rule does not give; the regime rule
(calibration/serving_regimes.py) flags the deployment from the measured rows alone.
Measured values below are copied from h100_sxm/e2e_serving.csv as inputs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.serving_regimes import (ADMISSION_LIMITED, QUEUED_MIN, SERVER_QUEUED, admission_limit,
                                                 queue_slopes, queued_rows, regime_flags)
from llmplan.sim.kv_budget import MIB, sglang_default_fraction
from llmplan.sim.memory import plan_memory

#: (isl, osl, measured TTFT ms, measured TPOT ms) of the six rows
MEASURED = [(1024, 128, 6775.54, 25.476), (1024, 256, 14621.32, 26.843), (1024, 512, 28880.64, 26.555),
            (2048, 128, 16425.31, 24.658), (2048, 256, 30842.62, 25.583), (2048, 512, 88769.66, 26.328)]


def _row(isl: int, osl: int, ttft: float, tpot: float) -> dict:
    return {"id": f"qwen3_32b_h100_sxm_sglang_agg_{isl}x{osl}_c16_tp1", "backend": "sglang",
            "silicon_data_source": "source_file=collection/data/h100_sxm/sglang/0.5.8.post1/Qwen_Qwen3-32B.csv; "
                                   "silicon_concurrency=16",
            "backend_version": "0.5.8.post1", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm",
            "precision": math.nan, "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": math.nan,
            "moe_quant_mode": math.nan, "batch_size": 16, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
            "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot}


def _case(isl: int, osl: int, ttft: float, tpot: float) -> sr.ServingCase:
    m = sr.map_row(_row(isl, osl, ttft, tpot), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_sglang_rule_gives_a_pool_for_all_16_clients_at_1k_prompts():
    frac, chunk, bs = sglang_default_fraction(81559 * MIB, tp=1, pp=1)
    assert (frac, chunk, bs) == (0.835, 8192, 256)
    c = _case(*MEASURED[0])
    assert c.graph_every_batch and c.mixed_chunk          # generator launch (calibration/sglang_launch.py)
    mem = plan_memory(c.dep.model, c.dep.gpu, c.dep.par, c.dep.prec, c.dep.engine, c.isl + c.osl)
    per_token = 64 * 8 * 128 * 2 * 2                      # layers x KV heads x head dim x (K, V) x bf16
    assert mem.kv_capacity_tokens == pytest.approx(20.7e3, rel=0.02)
    assert mem.kv_capacity_tokens * per_token < 0.835 * c.dep.gpu.memory_bytes - 60 * 2**30
    # 16 x (1,024 + 128) tokens fit, 16 x (1,024 + 512) and 16 x (2,048 + 128) do not
    assert admission_limit(c) == 16
    assert admission_limit(_case(*MEASURED[2])) < 16 and admission_limit(_case(*MEASURED[3])) < 16


def test_measured_queue_flags_the_deployment_and_not_a_prediction():
    df = pd.DataFrame([_row(*m) for m in MEASURED])
    slopes = queue_slopes(df).set_index("isl")["queued"]
    # requests waiting at the server: about 11 of 16 at 1k prompts, 14 at 2k (Little's law fit)
    assert slopes[1024] == pytest.approx(10.9, abs=0.1) and slopes[2048] == pytest.approx(14.1, abs=0.1)
    assert min(slopes) >= QUEUED_MIN
    queued = queued_rows(df)
    assert queued == frozenset(range(6))
    flags = [regime_flags(_case(*m), queued) for m in MEASURED]
    assert flags[0] == (SERVER_QUEUED,) and flags[1] == (SERVER_QUEUED,)
    assert all(ADMISSION_LIMITED in f and SERVER_QUEUED not in f for f in flags[2:])
    # the same rows measured without a queue (TTFT flat in the output length) are not flagged
    flat = pd.DataFrame([_row(i, o, 700.0 + i / 10, t) for i, o, _, t in MEASURED])
    assert queued_rows(flat) == frozenset()

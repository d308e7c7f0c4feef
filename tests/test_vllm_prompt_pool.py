"""The vLLM 0.12.0 collection files' client reuses a pool of prompts (calibration.benchmark_clients):
aiperf's default synthetic dataset holds 100 distinct prompts drawn at random per request, and
vLLM V1's automatic prefix caching serves a repeated prompt from its cached blocks. Llama-3.1-8B-FP8
on one H200, 2,000 x 100 tokens at N = 64 measured TTFT 122 ms and TPOT 9.7 ms: 128k prompt tokens
per 1.09 s of E2E, while one 2,000-token prefill takes 35 ms by the measured kernels."""

from __future__ import annotations

import math
from dataclasses import replace

from pathlib import Path

import numpy as np
import pytest

from llmplan.calibration import benchmark_clients as bc
from llmplan.calibration import serving_rows as sr
from llmplan.calibration.serving_regimes import CACHE_SERVED, regime_flags
from llmplan.sim.workload import generate_workload

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "measurements"
CAMPAIGN = ("source_file=/Users/x/projects/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/"
            "nvidia_Llama-3.1-8B-Instruct-FP8.csv; silicon_concurrency={n}")


def _row(n: int = 64, isl: int = 2000, osl: int = 100, **kw) -> dict:
    r = {"id": f"llama_fp8_h200_vllm_agg_{isl}x{osl}_c{n}_tp1", "silicon_data_source": CAMPAIGN.format(n=n),
         "backend": "vllm", "backend_version": "0.12.0", "model_path": "nvidia/Llama-3.1-8B-Instruct-FP8",
         "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": "fp8",
         "moe_quant_mode": "fp8", "batch_size": float(n), "tp_size": 1.0, "pp_size": 1.0,
         "attention_dp_size": math.nan, "moe_tp_size": 1.0, "moe_ep_size": 1.0, "silicon_ttft_ms": 121.73,
         "silicon_tpot_ms": 9.74}
    r.update(kw)
    return r


def _case(row: dict) -> sr.ServingCase:
    m = sr.map_row(row, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_only_the_file_whose_rows_show_cache_served_prompts_reuses_prompts():
    assert bc.prompt_pool_size(_row()) == bc.AIPERF_DATASET_ENTRIES == 100
    other = [CAMPAIGN.replace("nvidia_Llama-3.1-8B-Instruct-FP8", "Qwen_Qwen3-235B-A22B-FP8"),
             CAMPAIGN.replace("h200_sxm/vllm/0.12.0/nvidia_Llama-3.1-8B-Instruct-FP8", "h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B"),
             CAMPAIGN.replace("vllm/0.12.0", "vllm/0.11.0"), CAMPAIGN.replace("vllm/0.12.0", "sglang/0.5.6"),
             "source_file=2026-03-25.csv; silicon_concurrency={n}", "synthetic; silicon_concurrency={n}"]
    for src in other:
        assert bc.prompt_pool_size(_row(silicon_data_source=src.format(n=64))) == 0, src


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "e2e_serving.csv").is_file(), reason="shared measurements absent")
def test_the_evidence_rows_of_the_vllm_0_12_collection_files():
    """The physics flag with unique prompts, per collection file: only the Llama-3.1-8B-FP8 file
    has rows whose prompts no replica could have computed."""
    rows = sr.read_serving_files([str(MEASUREMENTS / g / "e2e_serving.csv") for g in ("h100_sxm", "h200_sxm")])
    engines = sr.engine_profiles()
    flagged: dict[str, list[bool]] = {}
    for i, r in enumerate(rows.to_dict("records")):
        src = str(r.get("silicon_data_source") or "")
        if "/vllm/0.12.0/" not in src or str(r.get("mode")) != "agg":
            continue
        m = sr.map_row(r, i, engines)
        if m.case is None:
            continue
        name = src.split("/data/")[1].split(";")[0]
        flagged.setdefault(name, []).append(CACHE_SERVED in regime_flags(replace(m.case, prompt_pool=0)))
    assert {f for f, v in flagged.items() if any(v)} == set(bc.REPEATED_PROMPT_FILES)
    assert sum(flagged["h200_sxm/vllm/0.12.0/nvidia_Llama-3.1-8B-Instruct-FP8.csv"]) >= 10
    assert len(flagged) >= 3


def test_mapped_case_carries_the_pool_and_is_no_longer_flagged_cache_served():
    pooled = _case(_row())
    assert pooled.prompt_pool == 100
    assert CACHE_SERVED not in regime_flags(pooled)
    # the same measurement with unique prompts is beyond what one H200 can prefill
    unique = replace(pooled, prompt_pool=0)
    assert CACHE_SERVED in regime_flags(unique)


def test_workload_is_aiperfs_client_whole_prompts_from_a_pool_of_100():
    opts = sr.SimOptions()
    spec, window = sr.benchmark_workload(2000, 100, 16, opts, 1.0, 100, 16)
    assert spec.num_requests == (bc.AIPERF_WARMUP_WAVES + bc.AIPERF_MEASURED_WAVES) * 16 == 352
    assert window.measured_range(spec.num_requests) == (32, 352)     # 2N warm-up requests not reported
    wl = generate_workload(spec, np.random.default_rng(0))
    ids = [r.hash_ids for r in wl.requests]
    assert {len(h) for h in ids} == {(2000 - 1) // 16}              # the last token is always computed
    assert 1 < len(set(ids)) <= 100
    assert len(set(ids)) < len(ids)                                  # prompts repeat
    plain, _ = sr.benchmark_workload(2000, 100, 16, opts)
    assert plain.shared_prefix_tokens == 0 and plain.num_requests == sr.num_requests(16, opts)


def test_replay_serves_repeats_from_the_prefix_cache():
    opts = sr.SimOptions(osl_jitter=0.3)
    case = _case(_row(n=16, isl=4000, osl=20))
    pooled = sr.simulate_case(case, opts)
    unique = sr.simulate_case(replace(case, prompt_pool=0), opts)
    assert pooled.status == unique.status == sr.SIMULATED
    # 100 prompts of 4,000 tokens fit the H200's KV pool: after warm-up most prompts are cache hits
    assert pooled.ttft_ms < 0.6 * unique.ttft_ms
    assert pooled.tpot_ms < unique.tpot_ms

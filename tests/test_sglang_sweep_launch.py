"""SGLang prefill budget of the InferenceX sweep runs (calibration/sglang_sweep_launch.py): DeepSeek-R1/V3
on H200 ran --chunked-prefill-size 32768 --max-prefill-tokens 32768, Qwen3.5-397B --chunked-prefill-size
16384; the replay's prefill batches take that many tokens instead of SGLang's default 8,192."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import sglang_sweep_launch as sw
from llmplan.sim import sglang_scheduling as sg
from llmplan.sim.requests import Request
from llmplan.sim.scheduler import DECODE, EngineState, Seq
from llmplan.sim.types import EngineProfile

GIB = 1024 ** 3
SWEEP = "db-dump/2026-04-27; config_id=81; silicon_concurrency=4; workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130"
GEN = "source_file=/home/u/aic/data/h200_sxm/sglang/0.5.9/deepseek-ai_DeepSeek-V3.csv; silicon_concurrency=4"


def _row(model: str = "deepseek-ai/DeepSeek-V3", source: str = SWEEP, backend: str = "sglang",
         system: str = "h200_sxm", isl: int = 8192, osl: int = 1024, mode: str = "agg") -> dict:
    return {"id": "r", "silicon_data_source": source, "backend": backend, "backend_version": "0.5.9",
            "model_path": model, "system": system, "precision": "fp8", "mode": mode, "isl": isl, "osl": osl,
            "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8_block", "batch_size": 4, "tp_size": 8, "pp_size": 1,
            "attention_dp_size": 1, "moe_tp_size": 8, "moe_ep_size": 1, "silicon_ttft_ms": 447.0,
            "silicon_tpot_ms": 11.3}


@pytest.mark.parametrize("row, tokens", [
    (_row(), 32768),
    (_row(model="deepseek-ai/DeepSeek-R1", isl=1024, osl=1024), 32768),
    (_row(model="Qwen/Qwen3.5-397B-A17B", isl=1024, osl=8192), 16384),
    (_row(model="Qwen/Qwen3.5-397B-A17B-FP8", isl=1024, osl=8192), 16384),
    (_row(model="deepseek-ai/DeepSeek-V3.2"), 0),      # another model, another script
    (_row(model="zhipuai/GLM-5"), 0),                  # glm5_fp8_h200.sh passes no prefill flags
    (_row(source=GEN), 0),                             # a generator collection row: its own launch
    (_row(isl=4000, osl=500), 0),                      # not an InferenceX scenario
    (_row(system="h100_sxm"), 0),                      # the scripts are the H200 ones
    (_row(backend="vllm"), 0),
    (_row(mode="disagg"), 0),
])
def test_which_runs_took_the_inferencex_prefill_budget(row, tokens):
    assert sw.inferencex_prefill_tokens(row, int(row["isl"]), int(row["osl"])) == tokens


def _engine(budget: int = 8192) -> EngineProfile:
    return EngineProfile(name="sglang", kernel_backend="sglang", chunked_prefill=False, max_num_batched_tokens=budget,
                         max_num_seqs=64, enable_prefix_caching=False, watermark=0.0)


def test_replay_engine_takes_the_launch_budget_over_the_default():
    h200 = int(141 * GIB)
    assert sg.replay_engine(_engine(), h200, 8, 1).max_num_batched_tokens == 8192
    assert sg.replay_engine(_engine(), h200, 8, 1, chunk_tokens=32768).max_num_batched_tokens == 32768
    assert sg.replay_engine(_engine(), h200, 8, 1, dp=2, chunk_tokens=16384).max_num_batched_tokens == 32768


def _prefill_batches(budget: int, prompts: list[int]) -> list[list[tuple[int, int]]]:
    e = sg.replay_engine(_engine(), int(141 * GIB), 8, 1, chunk_tokens=budget)
    st = EngineState(0, e, 100_000, e.block_size, e.max_num_seqs)
    seqs = [Seq(i, Request(0.0, p, 4), True) for i, p in enumerate(prompts)]
    st.waiting.extend(seqs)
    out = []
    t = 0.0
    while not all(s.state == DECODE for s in seqs):
        assert st.plan(t)
        out.append([(s.idx, n) for s, n, _ in st.plan_chunks])
        st.complete(t + 1.0, [])
        t += 1.0
    return out


def test_four_8k_prompts_share_one_prefill_batch_at_32k_and_take_four_at_the_default():
    prompts = [8000, 7500, 7000, 8192]
    assert _prefill_batches(32768, prompts) == [[(0, 8000), (1, 7500), (2, 7000), (3, 8192)]]
    default = _prefill_batches(0, prompts)
    assert len(default) == 4
    assert default[0] == [(0, 8000), (1, 192)]


def test_a_sweep_row_is_mapped_with_its_launch_budget():
    prof = sr.engine_profiles()
    assert sr.map_row(_row(), 0, prof).case.prefill_chunk_tokens == 32768
    assert sr.map_row(_row(source=GEN), 0, prof).case.prefill_chunk_tokens == 0
    assert sr.map_row(_row(model="zhipuai/GLM-5", isl=1024, osl=1024), 0, prof).case.prefill_chunk_tokens == 0
    assert math.isclose(sr.map_row(_row(), 0, prof).case.measured_ttft_ms, 447.0)


@pytest.mark.parametrize("row, fraction", [
    (_row(), 0.82),
    (_row(model="deepseek-ai/DeepSeek-R1", isl=1024, osl=8192), 0.82),
    (_row(model="Qwen/Qwen3.5-397B-A17B", isl=1024, osl=1024), 0.8),
    (_row(model="zhipuai/GLM-5", isl=8192, osl=1024), 0.85),
    (_row(source=GEN), None),
    (_row(system="h100_sxm"), None),
    (_row(backend="trtllm"), None),
])
def test_the_launch_scripts_memory_fraction(row, fraction):
    assert sw.inferencex_mem_fraction(row, int(row["isl"]), int(row["osl"])) == fraction


def test_the_launch_fraction_shrinks_the_kv_pool_and_holds_back_requests():
    """DeepSeek-V3 TP 8 on H200 at 0.82 (SGLang's rule: 0.897): fewer KV tokens, and 64 requests of
    the full 8k + 1k tokens no longer fit at once (SGLang admits a request only with its prompt and
    output reserved)."""
    from dataclasses import replace

    from llmplan.calibration import serving_regimes as rg
    from llmplan.sim.memory import plan_memory

    row = dict(_row(), batch_size=64, silicon_data_source=SWEEP.replace("concurrency=4", "concurrency=64"))
    case = sr.map_row(row, 0, sr.engine_profiles()).case
    dep = case.dep
    assert dep.engine.mem_fraction_static == 0.82
    launched = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, dep.engine, case.isl + case.osl).kv_capacity_tokens
    default = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, replace(dep.engine, mem_fraction_static=None),
                          case.isl + case.osl).kv_capacity_tokens
    assert 0.7 < launched / default < 0.8
    assert launched < 64 * (8192 + 1024) < default
    full = replace(case, length_ratio=1.0)   # every request at the full 8k + 1k tokens
    assert rg.admission_limit(full) < 64
    assert rg.admission_limit(replace(full, dep=replace(dep, engine=replace(dep.engine, mem_fraction_static=None)))) == 64


def test_admission_counts_the_clients_mean_lengths():
    """The InferenceX client draws lengths in [0.8 L, L]: at 0.82 the DeepSeek-V3 TP 8 pool holds 59
    sequences of the full 8k + 1k tokens but 65 of the mean ones, so 64 clients are not flagged
    admission-limited (their measured TTFT: 420 ms at 1k/8k, N = 64, against 311 ms at N = 32)."""
    from dataclasses import replace

    from llmplan.calibration import serving_regimes as rg

    row = dict(_row(isl=1024, osl=8192), batch_size=64,
               silicon_data_source=SWEEP.replace("concurrency=4", "concurrency=64"))
    case = sr.map_row(row, 0, sr.engine_profiles()).case
    assert case.length_ratio == 0.8
    assert rg.admission_limit(case) == 64
    assert rg.admission_limit(replace(case, length_ratio=1.0)) == 59


@pytest.mark.parametrize("row, off", [
    (_row(), True),                                                           # dsr1_fp8_h200.sh
    (_row(model="deepseek-ai/DeepSeek-R1", isl=1024, osl=1024), True),
    (_row(model="Qwen/Qwen3.5-397B-A17B-FP8", isl=1024, osl=8192), True),     # qwen3.5_fp8_h200.sh
    (_row(model="zhipuai/GLM-5", isl=1024, osl=1024), False),                 # glm5_fp8_h200.sh keeps it
    (_row(source=GEN), False),
    (_row(system="h100_sxm"), False),
])
def test_the_launch_scripts_disable_the_radix_cache(row, off):
    """--disable-radix-cache with an --ignore-eos client: the replay runs without prefix caching and
    SGLang admits by the ignore_eos rule (sim.sglang_admission)."""
    assert sw.inferencex_radix_cache_off(row, int(row["isl"]), int(row["osl"])) is off


@pytest.mark.parametrize("row, off", [(_row(), True), (_row(source=GEN), False),
                                      (_row(model="zhipuai/GLM-5", isl=1024, osl=1024), False)])
def test_a_mapped_row_without_the_radix_cache_takes_the_ignore_eos_admission(row, off):
    engine = sr.map_row(row, 0, sr.engine_profiles()).case.dep.engine
    assert engine.enable_prefix_caching is (not off)
    st = EngineState(0, sg.replay_engine(engine, int(139.8 * GIB), 8, 1), 1000, 16, 64)
    assert st.sg is not None and st.sg.ignore_eos is off

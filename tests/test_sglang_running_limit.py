"""SGLang's limit of running requests (sim/sglang_scheduling.sglang_max_running_requests) and the
admission-limited flag of SGLang rows (calibration/serving_regimes.admission_limit): SGLang's own
rule, not the engine profile's planning default of 256."""

from __future__ import annotations

import math

from llmplan.calibration import serving_regimes as rg
from llmplan.calibration import serving_rows as sr
from llmplan.sim.sglang_scheduling import sglang_max_running_requests


def test_default_slots_follow_the_kv_pool_clamped_to_2048_4096():
    # 1M pool tokens, 128k context: 1e6 / 131072 x 512 = 3906 slots, below pool // 2
    assert sglang_max_running_requests(1_000_000, 131072) == 3906
    # small pool against a long context: the slot pool's floor 2048
    assert sglang_max_running_requests(100_000, 131072) == 2048
    # big pool: the ceiling 4096
    assert sglang_max_running_requests(10_000_000, 8192) == 4096
    # a tiny pool binds through pool // 2
    assert sglang_max_running_requests(3000, 131072) == 1500


def test_requested_limit_is_capped_by_half_the_pool():
    assert sglang_max_running_requests(1_000_000, 131072, requested=512) == 512
    assert sglang_max_running_requests(600, 131072, requested=512) == 300


def _row(n: int, source: str) -> dict:
    return {"id": "r", "silicon_data_source": f"{source}; silicon_concurrency={n}", "backend": "sglang",
            "backend_version": "0.5.6.post2", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm",
            "precision": math.nan, "mode": "agg", "isl": 1000, "osl": 100, "gemm_quant_mode": math.nan,
            "moe_quant_mode": math.nan, "batch_size": n, "tp_size": 4, "pp_size": 1, "attention_dp_size": math.nan,
            "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 800.0, "silicon_tpot_ms": 33.0}


def _case(n: int, source: str) -> sr.ServingCase:
    m = sr.map_row(_row(n, source), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_sglang_rows_above_256_clients_are_not_admission_limited_by_count():
    # the profile's max_num_seqs (256) is a planning default, not SGLang's: 352 clients all run
    assert rg.default_max_running("sglang") == 256
    for source in ("source_file=/x/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv",
                   "db-dump/2026-04-27"):
        c = _case(352, source)
        assert rg.admission_limit(c) >= 352
        assert rg.ADMISSION_LIMITED not in rg.regime_flags(c)


def test_sglang_generator_rows_run_their_requested_limit():
    # aiconfigurator's generator passes --max-running-requests = N: the limit is N itself
    c = _case(352, "source_file=/x/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv")
    assert c.graph_every_batch
    assert rg.admission_limit(c) == 352


def test_sglang_rows_beyond_the_kv_pool_stay_admission_limited():
    c = sr.map_row({**_row(100, "db-dump/2026-04-27"), "isl": 60000, "osl": 1000, "tp_size": 1}, 0,
                   sr.engine_profiles()).case
    assert c is not None
    assert rg.admission_limit(c) < 100
    assert rg.ADMISSION_LIMITED in rg.regime_flags(c)

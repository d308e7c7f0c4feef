"""calibration/vllm_launch.runs_data_parallel: the InferenceX vLLM launches pass no
--data-parallel-size, so an export that wrote attention_dp_size 4 for MiniMax-M2.5's ``tp 4, ep 4``
H100 launch is replayed as TP 4 EP 4 without attention DP; other engines and rows keep theirs."""

from __future__ import annotations

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_launch as vl
from llmplan.model_catalog.loader import load_model

SWEEP = "source_file=2026-04-06.csv; model=MiniMax-M2.5; silicon_concurrency=16; image=vllm/vllm-openai:v0.18.0"


def _row(**kw) -> dict:
    # the 2026-04-06 export of the InferenceX MiniMax-M2.5 H100 launch (tp 4, ep 4): its columns hold
    # tp 4 x attention_dp 4 = moe_ep 16, the id names the engine layout
    r = {"id": "2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep4_1327",
         "silicon_data_source": SWEEP, "backend": "vllm", "backend_version": "0.18.0",
         "model_path": "MiniMaxAI/MiniMax-M2.5", "system": "h100_sxm", "precision": "fp8", "mode": "agg",
         "isl": 1024, "osl": 1024, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": 4.0,
         "tp_size": 4.0, "pp_size": 1.0, "attention_dp_size": 4.0, "moe_tp_size": 1.0, "moe_ep_size": 16.0,
         "silicon_ttft_ms": 120.0, "silicon_tpot_ms": 16.0}
    r.update(kw)
    return r


def test_inferencex_vllm_sweep_rows_on_hopper_ran_no_data_parallel():
    assert not vl.runs_data_parallel(_row())
    assert not vl.runs_data_parallel(_row(system="h200_sxm", isl=8192, osl=1024))


@pytest.mark.parametrize("kw", [
    {"backend": "sglang"},                                   # SGLang's --enable-dp-attention runs exist
    {"backend": "trtllm"},
    {"system": "b200_sxm"},                                  # no InferenceX vLLM launch read there
    {"isl": 2000, "osl": 100},                               # not a sweep shape: another client
    {"silicon_data_source": "source_file=/x/data/h100_sxm/vllm/0.18.0/MiniMax-M2.5.csv"},  # collection file
])
def test_other_rows_keep_their_attention_dp(kw):
    assert vl.runs_data_parallel(_row(**kw))


def test_named_layout_of_the_export_is_replayed_without_attention_dp():
    model = load_model("MiniMaxAI/MiniMax-M2.5")
    par = sr.parallelism_of(_row(), model)
    assert (par.tp, par.ep, par.dp, par.pp) == (4, 4, 1, 1)
    # the same columns from SGLang keep the attention-DP reading of the named layout: 4 ranks of TP 1
    par_sglang = sr.parallelism_of(_row(backend="sglang"), model)
    assert (par_sglang.tp, par_sglang.ep, par_sglang.dp) == (1, 4, 4)


def test_mapped_row_runs_the_sibling_exports_layout_and_batch():
    # the 2026-03-25 export of the same launch writes attention_dp 1, moe_ep 4, batch = concurrency
    sibling = _row(id="2026_03_25_minimax_m2_5_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_0_ep4_0_235",
                   attention_dp_size=1.0, moe_ep_size=4.0, batch_size=16.0,
                   silicon_data_source=SWEEP.replace("2026-04-06", "2026-03-25"))
    engines = sr.engine_profiles()
    a, b = sr.map_row(_row(), 0, engines), sr.map_row(sibling, 1, engines)
    assert a.case is not None and b.case is not None
    pa, pb = a.case.dep.par, b.case.dep.par
    assert (pa.tp, pa.ep, pa.dp) == (pb.tp, pb.ep, pb.dp) == (4, 4, 1)
    assert a.case.dep.engine.max_num_seqs == b.case.dep.engine.max_num_seqs == 16
    assert a.case.dep.engine.max_num_batched_tokens == b.case.dep.engine.max_num_batched_tokens

"""Repeated measurements in the served-run dumps are counted once (calibration.serving_rows)."""

import pandas as pd

from llmplan.calibration.serving_rows import engine_profiles, map_rows, measurement_repeats


def _row(rid, tp=8, ttft=412.123456, tpot=9.87654, mode="agg", conc=8):
    return {"id": rid, "silicon_data_source": "x", "backend": "vllm", "backend_version": "0.12.0",
            "model_path": "openai/gpt-oss-120b", "system": "h200_sxm", "precision": "fp4", "mode": mode,
            "isl": 1024, "osl": 1024, "gemm_quant_mode": "mxfp4", "moe_quant_mode": "mxfp4", "batch_size": conc,
            "tp_size": tp, "pp_size": 1, "attention_dp_size": 1, "moe_tp_size": tp, "moe_ep_size": 1,
            "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot}


def test_a_reexported_run_is_a_repeat_of_the_first_and_distinct_runs_are_not():
    rows = [_row("a"), _row("b", tp=64),                       # same labels, lengths and means: a repeat
            _row("c", ttft=412.2), _row("d", tpot=9.89),         # another mean (beyond a 0.01 ms rounding): another measurement
            _row("e", mode="disagg"), _row("f", mode="disagg")]  # disaggregated rows: keyed elsewhere
    assert measurement_repeats(rows) == {1: 0}
    assert measurement_repeats([_row("a", ttft=float("nan")), _row("b", ttft=float("nan"))]) == {}


def test_map_rows_lists_a_repeat_with_the_row_it_repeats_and_does_not_simulate_it():
    maps = map_rows(pd.DataFrame([_row("first"), _row("again")]), engine_profiles())
    assert maps[0].reason == "simulated" and maps[0].case is not None
    assert maps[1].reason == "repeat" and maps[1].case is None and "row first" in maps[1].status


def test_a_run_relabelled_with_another_model_name_is_a_repeat():
    # the db dump labels DeepSeek-R1 runs deepseek-ai/DeepSeek-V3: same measurement, counted once
    relabelled = {**_row("dsr1_cfg"), "model_path": "deepseek-ai/DeepSeek-V3"}
    dated = {**_row("dated"), "model_path": "deepseek-ai/DeepSeek-R1"}
    other_gpu = {**_row("h100"), "model_path": "deepseek-ai/DeepSeek-R1", "system": "h100_sxm"}
    assert measurement_repeats([relabelled, dated, other_gpu]) == {1: 0}


def test_an_export_rounded_to_hundredths_of_a_ms_is_a_repeat():
    # the gap-analysis files write the means to 0.01 ms (233.475447 -> 233.48): the same run
    rows = [_row("full", ttft=233.475447, tpot=11.467447), _row("rounded", ttft=233.48, tpot=11.47),
            _row("other", ttft=233.49, tpot=11.47), _row("other2", ttft=233.48, tpot=11.48)]
    assert measurement_repeats(rows) == {1: 0}

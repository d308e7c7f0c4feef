"""The expert layout of the InferenceX gpt-oss-120b TensorRT-LLM H200 runs of 2025-11-02
(calibration/trtllm_inferencex_layout.py). The export writes them as expert TP
(``moe_tp_size = T, moe_ep_size = 1``). The script of that date, ``gptoss_fp4_h200_trt_slurm.sh``
at 9596d23d7, launched ``--ep_size=$TP``, so they are replayed with EP = T."""

from __future__ import annotations

import math

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.trtllm_inferencex_layout import script_ep_size

# h200_sxm/e2e_serving.csv row 2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_1024x1024_c16_tp8_ep1_277
GPT_OSS_TP8 = {"id": "2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_1024x1024_c16_tp8_ep1_277",
               "silicon_data_source": "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=16; "
                                      "measured=2025-11-02T00:00:00.000Z",
               "backend": "trtllm", "backend_version": "", "model_path": "openai/gpt-oss-120b", "system": "h200_sxm",
               "precision": "fp4", "mode": "agg", "isl": 1024, "osl": 1024, "gemm_quant_mode": "fp4",
               "moe_quant_mode": "fp4", "batch_size": 16.0, "tp_size": 8.0, "pp_size": 1.0,
               "attention_dp_size": 1.0, "moe_tp_size": 8.0, "moe_ep_size": 1.0,
               "silicon_ttft_ms": 129.84, "silicon_tpot_ms": 7.285}


def test_the_scripts_ep_replaces_the_exported_expert_tp():
    assert script_ep_size(GPT_OSS_TP8) == 8
    assert script_ep_size({**GPT_OSS_TP8, "tp_size": 2.0, "moe_tp_size": 2.0}) == 2
    m = sr.map_row(GPT_OSS_TP8, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    assert (m.case.dep.par.tp, m.case.dep.par.ep, m.case.dep.par.dp) == (8, 8, 1)


def test_other_rows_keep_their_columns():
    later = GPT_OSS_TP8["silicon_data_source"].replace("2025-11-02", "2025-12-15")
    assert script_ep_size({**GPT_OSS_TP8, "silicon_data_source": later}) is None      # a later script
    assert script_ep_size({**GPT_OSS_TP8, "system": "h100_sxm"}) is None              # a script not read
    assert script_ep_size({**GPT_OSS_TP8, "backend": "vllm"}) is None
    assert script_ep_size({**GPT_OSS_TP8, "tp_size": 1.0, "moe_tp_size": 1.0}) is None   # one GPU: nothing to split
    assert script_ep_size({**GPT_OSS_TP8, "moe_ep_size": 8.0, "moe_tp_size": 1.0}) is None  # EP already written
    m = sr.map_row({**GPT_OSS_TP8, "silicon_data_source": later}, 0, sr.engine_profiles())
    assert m.case is not None and (m.case.dep.par.tp, m.case.dep.par.ep) == (8, 1)
    assert not math.isnan(m.case.measured_tpot_ms)

"""TensorRT-LLM rows measured with MTP speculative decoding, known from the benchmark's provenance
(calibration/trtllm_speculative.py). InferenceX commit bf3456727 (PR #392, 2026-01-14T22:26:18Z)
added only the ``dsr1-*-trt-mtp`` configs to ``perf-changelog.yaml``, so its sweep ran only those.
Its H200 rows carry ``measured=2026-01-14T22:26:21Z``. The script
``dsr1_fp8_h200_trt_mtp_slurm.sh`` sets ``MTP=3``, or ``MTP=1`` with attention DP. These rows are
flagged as a regime the replay does not reproduce. The engine fit leaves them out, and
``validate serving`` still scores them."""

from __future__ import annotations

import math

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.serving_regimes import FLAGS, regime_flags
from llmplan.calibration.trtllm_speculative import SPECULATIVE, measured_time, mtp_layers, speculative_row

# the training-half row 2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_0_ep8_0_1256
# (h200_sxm/e2e_serving.csv), its columns as written
DSR1_MTP = {"id": "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_0_ep8_0_1256",
            "silicon_data_source": "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4; "
                                   "measured=2026-01-14T22:26:21Z; wip=False; "
                                   "image=nvcr.io#nvidia/tensorrt-llm/release:1.1.0rc2.post2",
            "backend": "trtllm", "backend_version": "1.1.0rc2.post2", "model_path": "deepseek-ai/DeepSeek-R1",
            "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 8192,
            "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": 4.0, "tp_size": 8.0, "pp_size": 1.0,
            "attention_dp_size": 1.0, "moe_tp_size": 1.0, "moe_ep_size": 8.0,
            "silicon_ttft_ms": 493.881, "silicon_tpot_ms": 7.1058}


def test_measured_time_is_read_from_the_source_string():
    assert measured_time(DSR1_MTP) == "2026-01-14T22:26:21Z"
    assert measured_time({"silicon_data_source": "synthetic; silicon_concurrency=4"}) == ""
    assert measured_time({}) == ""


def test_the_mtp_sweep_rows_get_the_scripts_draft_layers():
    assert mtp_layers(DSR1_MTP) == 3                                        # MTP=3 without attention DP
    assert mtp_layers({**DSR1_MTP, "tp_size": 1.0, "attention_dp_size": 8.0}) == 1   # MTP=1 with it
    dated = DSR1_MTP["silicon_data_source"].replace("2026-01-14T22:26:21Z", "2026-01-14T00:00:00.000Z")
    assert mtp_layers({**DSR1_MTP, "silicon_data_source": dated}) == 3      # the 2026-04-06 export's copy
    assert speculative_row(DSR1_MTP)


def test_other_sweeps_and_engines_are_not_speculative():
    # the full sweep of 2026-01-28 (e28c038f8) measured the same deployment at 1.66x the TPOT: not flagged
    later = DSR1_MTP["silicon_data_source"].replace("2026-01-14T22:26:21Z", "2026-01-28T06:18:44Z")
    assert mtp_layers({**DSR1_MTP, "silicon_data_source": later}) == 0
    assert mtp_layers({**DSR1_MTP, "model_path": "deepseek-ai/DeepSeek-V3"}) == 0
    assert mtp_layers({**DSR1_MTP, "backend": "sglang"}) == 0
    assert mtp_layers({**DSR1_MTP, "backend_version": "1.2.0rc6"}) == 0
    assert not speculative_row(None)


def test_regime_flag_comes_from_the_row_and_not_from_the_case():
    m = sr.map_row(DSR1_MTP, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    assert SPECULATIVE in FLAGS
    assert SPECULATIVE in regime_flags(m.case, frozenset(), DSR1_MTP)
    assert SPECULATIVE not in regime_flags(m.case, frozenset())             # no row: provenance unknown
    later = {**DSR1_MTP, "silicon_data_source": "measured=2026-01-28T06:18:44Z"}
    assert SPECULATIVE not in regime_flags(m.case, frozenset(), later)
    assert not math.isnan(m.case.measured_tpot_ms)

"""The vLLM gpt-oss-120b H100 rows recorded at N = 512 (calibration/inferencex_docker_client.py):
InferenceX's H100 Docker script ran its client with a hard-coded ``--max-concurrency 512`` over
``10 x CONC`` prompts and the server with ``--max-num-seqs CONC``; the rows are recognised, left out
of the replay with the reason, and their Little's-law count (88-98) is the ten-wave burst's 93."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmplan.calibration import inferencex_docker_client as idc
from llmplan.calibration import vllm_running_sequences as vrs
from llmplan.calibration.serving_rows import engine_profiles, map_row, read_serving_files

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "measurements"

ROW = {"backend": "vllm", "model_path": "openai/gpt-oss-120b", "system": "h100_sxm", "mode": "agg",
       "isl": 1024, "osl": 1024, "batch_size": 512, "tp_size": 4, "pp_size": 1, "precision": "fp4",
       "silicon_ttft_ms": 19976.8, "silicon_tpot_ms": 4.70,
       "silicon_data_source": "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=512; "
                              "measured=2025-12-05T00:00:00.000Z; wip=False"}


def test_rows_of_the_capped_script_only():
    assert idc.docker_capped_row(ROW)
    # the script's cap ran 2025-11-21 .. 2025-12-08 (PR #227 .. PR #310)
    assert idc.docker_capped_row({**ROW, "silicon_data_source": ROW["silicon_data_source"].replace(
        "2025-12-05", "2025-12-08")})
    assert not idc.docker_capped_row({**ROW, "silicon_data_source": ROW["silicon_data_source"].replace(
        "2025-12-05", "2025-12-09")})
    assert not idc.docker_capped_row({**ROW, "silicon_data_source": ROW["silicon_data_source"].replace(
        "2025-12-05", "2025-11-02")})
    # other concurrency, GPU, engine, model or a non-sweep shape: not this client
    assert not idc.docker_capped_row({**ROW, "silicon_data_source": ROW["silicon_data_source"].replace(
        "concurrency=512", "concurrency=64")})
    assert not idc.docker_capped_row({**ROW, "system": "h200_sxm"})
    assert not idc.docker_capped_row({**ROW, "backend": "sglang"})
    assert not idc.docker_capped_row({**ROW, "model_path": "Qwen/Qwen3-32B"})
    assert not idc.docker_capped_row({**ROW, "isl": 1000, "osl": 100})


def test_candidates_follow_the_master_config():
    assert idc.candidate_concurrencies(1024, 1024, 2) == (4, 8, 16, 32, 64)
    assert idc.candidate_concurrencies(8192, 1024, 8) == (4, 8, 16)    # conc-end 16 for TP 8 8k/1k
    assert idc.client_requests(16) == (160, 160)                        # all prompts at once
    assert idc.client_requests(64) == (512, 640)                        # the cap holds 128 back


def test_ten_wave_burst_reads_as_93_running():
    # 10 x CONC prompts at once, CONC slots: mean wait 4.5 services -> 512 / 5.5
    assert idc.burst_running(4) == pytest.approx(512 / 5.5)
    assert idc.burst_running(32) == pytest.approx(93.09, abs=0.01)
    with pytest.raises(ValueError):
        idc.burst_running(64)
    # the Little's-law identity on a run of exactly that shape gives the same count
    d = 1000.0
    e = vrs.running_estimate(512, 4.5 * d, d / 100.0, 101.0)
    assert e.running == pytest.approx(idc.burst_running(8))


def test_replay_leaves_the_row_out_with_the_reason():
    m = map_row(ROW, 0, engine_profiles())
    assert m.case is None and m.reason == "missing_input"
    assert "--max-concurrency" in m.status and "4/8/16/32/64" in m.status
    # the same run recorded at its own concurrency is replayed
    ok = map_row({**ROW, "silicon_data_source": ROW["silicon_data_source"].replace("concurrency=512",
                                                                                   "concurrency=64"),
                  "batch_size": 64}, 0, engine_profiles())
    assert ok.case is not None and ok.case.concurrency == 64


def test_the_nine_measured_rows():
    if not MEASUREMENTS.is_dir():
        pytest.skip("measurements not available")
    df = read_serving_files([MEASUREMENTS])
    rows = [r for r in df.to_dict("records") if idc.docker_capped_row(r)]
    assert len(rows) == 9
    assert {int(r["tp_size"]) for r in rows} == {2, 4, 8}
    assert {(int(r["isl"]), int(r["osl"])) for r in rows} == {(1024, 1024), (1024, 8192), (8192, 1024)}
    # every one reads as 88-98 running at N = 512, within 6 of the burst's 93 (prefill and the
    # CONC = 64 job, whose cap holds 128 prompts back, move it a little)
    for r in rows:
        e = vrs.running_estimate(512, float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"]),
                                 vrs.mean_client_length(int(r["osl"]), 0.8))
        assert abs(e.running - idc.burst_running(4)) < 6.0


def test_as_recorded_maps_the_deployment_for_the_evidence_tools():
    m = map_row(idc.as_recorded(ROW), 0, engine_profiles())
    assert m.case is not None and m.case.concurrency == 512
    other = {**ROW, "system": "h200_sxm"}
    assert idc.as_recorded(other) == other

"""calibration/trtllm_closed_loop.py: closed-loop arithmetic of a served row's means."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import trtllm_closed_loop as cl
from llmplan.calibration.serving_rows import read_serving_files
from llmplan.errors import EXIT_USER_ERROR


def test_rate_and_little_law_from_the_means():
    # N = 8, osl 128: cycle = 1,000 + 127 x 20 = 3,540 ms, 8 / 3.54 s = 2.26 requests/s
    c = cl.closed_loop(8, 128, 1000.0, 20.0, 250.0, 15.0)
    assert c.cycle_ms == pytest.approx(3540.0)
    assert c.rate_rps == pytest.approx(8 / 3.54)
    assert c.prefill_busy == pytest.approx(8 / 3.54 * 0.25)
    assert c.waiting == pytest.approx(8 / 3.54 * 0.75)          # (TTFT - prefill) x rate
    assert c.burst == pytest.approx(3.0)                           # 750 ms waiting / 250 ms prefill
    assert c.prompts_ahead == pytest.approx((1000 - 250 - 30) / 250)
    assert c.decode_prefills == pytest.approx(5 * 127 / 250)       # (20 - 15) x 127 / 250


def test_two_prompts_per_step_halve_the_busy_share_and_double_the_prompts_ahead():
    one = cl.closed_loop(16, 256, 600.0, 30.0, 100.0, 10.0, 1)
    two = cl.closed_loop(16, 256, 600.0, 30.0, 100.0, 10.0, 2)
    assert two.prefill_busy == pytest.approx(one.prefill_busy / 2)
    assert two.prompts_ahead == pytest.approx(2 * one.prompts_ahead)
    assert two.rate_rps == pytest.approx(one.rate_rps) and two.waiting == pytest.approx(one.waiting)


def test_a_burst_of_n_prompts_prefilled_one_per_step():
    # N clients send together into an idle engine that takes one prompt per step of P ms: the i-th
    # waits i - 1 prefills, mean TTFT (N + 1) / 2 x P; at the overlap scheduler's 2 decode steps
    # of zero length, (N - 1) / 2 prompts are ahead of the mean prompt
    n, p = 8, 200.0
    ttft = (n + 1) / 2 * p
    c = cl.closed_loop(n, 100, ttft, 10.0, p, 0.0)
    assert c.prompts_ahead == pytest.approx((n - 1) / 2)


def test_no_negative_waits_and_bad_inputs_refused():
    c = cl.closed_loop(4, 64, 50.0, 5.0, 80.0, 6.0)   # TTFT below one prefill (cache hits, faster kernels)
    assert c.waiting == 0.0 and c.prompts_ahead == 0.0 and c.decode_prefills == 0.0
    for bad in ((0, 64, 50.0, 5.0, 80.0, 6.0), (4, 0, 50.0, 5.0, 80.0, 6.0), (4, 64, 50.0, 5.0, 0.0, 6.0)):
        with pytest.raises(ValueError):
            cl.closed_loop(*bad)
    with pytest.raises(ValueError):
        cl.closed_loop(4, 64, 50.0, 5.0, 80.0, 6.0, 0)


def test_prompts_per_step_beside_the_decodes():
    # aiconfigurator's harness budget bs + isl + 1500 (calibration/trtllm_launch.py)
    assert cl.prompts_per_step(8 + 1024 + 1500, 1024, 8) == 2
    assert cl.prompts_per_step(8 + 4096 + 1500, 4096, 8) == 1
    assert cl.prompts_per_step(16 + 128 + 1500, 128, 16) == 12
    assert cl.prompts_per_step(100, 4096, 8) == 1                  # never below one whole prompt


def _row(**kw) -> dict:
    r = {"id": "q32", "silicon_data_source": "synthetic; silicon_concurrency=8", "backend": "trtllm",
         "backend_version": "1.0.0rc3", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "fp8",
         "mode": "agg", "isl": 2048, "osl": 128, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
         "batch_size": 8, "tp_size": 2, "pp_size": 1, "attention_dp_size": math.nan, "moe_tp_size": 1,
         "moe_ep_size": 1, "silicon_ttft_ms": 400.0, "silicon_tpot_ms": 15.0}
    r.update(kw)
    return r


@pytest.fixture()
def served(tmp_path):
    p = tmp_path / "e2e_serving.csv"
    pd.DataFrame([_row()]).to_csv(p, index=False)
    return p


def _pred(tmp_path, ttft: float = 400.0, tpot: float = 15.0):
    p = tmp_path / "pred.csv"
    pd.DataFrame([{"id": "q32", "backend": "trtllm", "model_path": "Qwen/Qwen3-32B", "silicon_ttft_ms": 400.0,
                   "silicon_tpot_ms": 15.0, "predicted_ttft_ms": ttft, "predicted_tpot_ms": tpot}]).to_csv(p, index=False)
    return p


def test_row_table_measured_and_replayed_sides_agree_when_the_means_do(served, tmp_path):
    df = read_serving_files([served])
    t = cl.row_table(df, pd.read_csv(_pred(tmp_path)), "none")
    r = t.iloc[0]
    assert (r["tp"], r["isl"], r["N"]) == (2, 2048, 8)
    assert r["prefill_ms"] > r["decode_ms"] > 0
    for q in ("rate", "ahead", "indec", "burst"):
        assert r[f"{q}_meas"] == pytest.approx(r[f"{q}_pred"])
    later = cl.row_table(df, pd.read_csv(_pred(tmp_path, ttft=400.0 + r["prefill_ms"])), "none").iloc[0]
    assert later["ahead_pred"] == pytest.approx(r["ahead_pred"] + r["k"])   # one more prefill step of waiting


def test_cli_refuses_bad_files_and_empty_selections(served, tmp_path, capsys):
    pred = _pred(tmp_path)
    assert cl.main(["--measurements", str(served), "--pred", str(pred), "--model", "Llama"]) == EXIT_USER_ERROR
    assert "--model" in capsys.readouterr().err
    assert cl.main(["--measurements", str(served), "--pred", str(tmp_path / "missing.csv")]) == EXIT_USER_ERROR
    pd.DataFrame([{"id": "q32", "backend": "trtllm"}]).to_csv(tmp_path / "short.csv", index=False)
    assert cl.main(["--measurements", str(served), "--pred", str(tmp_path / "short.csv")]) == EXIT_USER_ERROR
    assert "predicted_ttft_ms" in capsys.readouterr().err
    assert cl.main(["--measurements", str(served), "--pred", str(pred), "--engine-profiles", "none"]) == 0
    out = capsys.readouterr().out
    assert "ahead_meas" in out and "indec_pred" in out

"""calibration/trtllm_moe_implied.py: expert-layer time implied by a served row's TPOT error."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import trtllm_moe_implied as mi
from llmplan.calibration.serving_rows import read_serving_files
from llmplan.errors import EXIT_USER_ERROR


def _row(**kw) -> dict:
    r = {"id": "q235", "silicon_data_source": "synthetic; silicon_concurrency=16", "backend": "trtllm",
         "backend_version": "1.0.0rc3", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "system": "h100_sxm",
         "precision": "fp8", "mode": "agg", "isl": 512, "osl": 256, "gemm_quant_mode": "fp8_block",
         "moe_quant_mode": "fp8_block", "batch_size": 16, "tp_size": 4, "pp_size": 1, "attention_dp_size": math.nan,
         "moe_tp_size": 1, "moe_ep_size": 4, "silicon_ttft_ms": 200.0, "silicon_tpot_ms": 18.5}
    r.update(kw)
    return r


@pytest.fixture()
def served(tmp_path):
    p = tmp_path / "e2e_serving.csv"
    pd.DataFrame([_row(), _row(id="dense", model_path="Qwen/Qwen3-32B", gemm_quant_mode="fp8", moe_quant_mode="fp8",
                               moe_ep_size=1)]).to_csv(p, index=False)
    return p


def test_implied_time_takes_the_whole_tpot_error_per_layer():
    assert mi.implied_moe_per_layer(10.0, 20.0, 20.0, 100) == pytest.approx(0.1)
    # predicted 5 ms over the measured TPOT: the experts would have to be 5 ms faster in all
    assert mi.implied_moe_per_layer(10.0, 25.0, 20.0, 100) == pytest.approx(0.05)
    assert mi.implied_moe_per_layer(10.0, 18.0, 20.0, 100) == pytest.approx(0.12)
    with pytest.raises(ValueError):
        mi.implied_moe_per_layer(1.0, 1.0, 1.0, 0)


def test_row_table_matches_the_kernel_model_when_the_replay_is_exact(served):
    df = read_serving_files([served])
    layers = 94
    exact = pd.DataFrame([{"id": "q235", "predicted_tpot_ms": 18.5, "silicon_tpot_ms": 18.5},
                          {"id": "dense", "predicted_tpot_ms": 20.0, "silicon_tpot_ms": 18.0}])
    t = mi.row_table(df, exact, "none")
    assert list(t["id"]) == ["q235"]            # the dense model has no expert layers to blame
    r = t.iloc[0]
    assert (r["tp"], r["ep"], r["N"]) == (4, 4, 16)
    assert r["moe_fit_ms"] > 0 and r["moe_implied_ms"] == pytest.approx(r["moe_fit_ms"])
    over = mi.row_table(df, pd.DataFrame([{"id": "q235", "predicted_tpot_ms": 18.5 + 0.01 * layers,
                                           "silicon_tpot_ms": 18.5}]), "none").iloc[0]
    assert over["moe_implied_ms"] == pytest.approx(r["moe_fit_ms"] - 0.01)


def test_select_filters_and_reads_the_half_from_the_status():
    pred = pd.DataFrame([{"id": "a", "backend": "trtllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": 1.0},
                         {"id": "b", "backend": "trtllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": 1.0},
                         {"id": "c", "backend": "vllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": 1.0},
                         {"id": "d", "backend": "trtllm", "model_path": "Qwen/Qwen3-32B", "predicted_tpot_ms": 1.0},
                         {"id": "e", "backend": "trtllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": math.nan}])
    split = pd.DataFrame([{"id": "a", "status": "train: deployment in the training half (seed 0), not scored"},
                          {"id": "b", "status": "simulated"}])
    s = mi.select(pred, "235b", "trtllm", split)
    assert dict(zip(s["id"], s["half"])) == {"a": "train", "b": "held-out"}
    assert "half" not in mi.select(pred, None, None, None).columns


def test_summary_groups_by_half_and_layout():
    rows = pd.DataFrame([{"half": "train", "tp": 4, "ep": 4, "N": 16, "measured_tpot_ms": m, "predicted_tpot_ms": m,
                          "moe_fit_ms": 0.2, "moe_implied_ms": x} for m, x in ((1.0, 0.1), (3.0, 0.3), (2.0, 0.2))])
    s = mi.summary(rows)
    assert len(s) == 1 and s.iloc[0]["rows"] == 3
    assert s.iloc[0]["moe_implied_ms"] == pytest.approx(0.2) and s.iloc[0]["measured_tpot_ms"] == pytest.approx(2.0)


def test_cli_refuses_a_selection_without_rows(tmp_path, served, capsys):
    pred = tmp_path / "pred.csv"
    pd.DataFrame([{"id": "q235", "backend": "trtllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": 1.0,
                   "silicon_tpot_ms": 1.0}]).to_csv(pred, index=False)
    assert mi.main(["--measurements", str(served), "--pred", str(pred), "--model", "Llama"]) == EXIT_USER_ERROR
    assert "--model" in capsys.readouterr().err
    assert mi.main(["--measurements", str(served), "--pred", str(tmp_path / "missing.csv")]) == EXIT_USER_ERROR
    assert mi.main(["--measurements", str(served), "--pred", str(pred), "--split", str(tmp_path / "no.csv")]) == EXIT_USER_ERROR
    assert "--split" in capsys.readouterr().err
    pd.DataFrame([{"id": "q235", "backend": "trtllm"}]).to_csv(tmp_path / "short.csv", index=False)
    assert mi.main(["--measurements", str(served), "--pred", str(tmp_path / "short.csv")]) == EXIT_USER_ERROR
    assert "predicted_tpot_ms" in capsys.readouterr().err


def test_cli_prints_the_grouped_table(tmp_path, served, capsys):
    pred = tmp_path / "pred.csv"
    pd.DataFrame([{"id": "q235", "backend": "trtllm", "model_path": "Qwen/Qwen3-235B-A22B-FP8", "predicted_tpot_ms": 18.5,
                   "silicon_tpot_ms": 18.5}]).to_csv(pred, index=False)
    assert mi.main(["--measurements", str(served), "--pred", str(pred), "--engine-profiles", "none"]) == 0
    out = capsys.readouterr().out
    assert "moe_implied_ms" in out and "moe_fit_ms" in out

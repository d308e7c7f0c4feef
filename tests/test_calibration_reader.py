"""Measurement reader: canonical columns, dtypes, GPU folders, clear errors."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration.reader import read_measurements
from llmplan.errors import UserError
from test_calibration_synth import make_measurements_dir


def test_reads_all_tables_into_canonical_frames(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    meas = read_measurements(root)
    assert meas.gpus == ["h100_sxm"]
    assert set(meas.frames) == {"gemm", "attention_prefill", "attention_decode", "nccl", "custom_allreduce"}
    g = meas.family("gemm")
    assert set(g["dtype"]) == {"bf16", "fp8"}
    assert {"family", "gpu", "backend", "kernel_source", "m", "n", "k", "latency_ms", "gemm_dtype"} <= set(g.columns)
    assert g["m"].dtype.kind == "i" and g["latency_ms"].dtype.kind == "f"
    d = meas.family("attention_decode")
    assert (d["kv_len"] == d["step"]).all() and set(d["kv_dtype"]) == {"bf16"}
    n = meas.family("nccl")
    assert (n["backend"] == "nccl").all()
    assert (n["message_bytes"] == 2 * n["message_size_elements"]).all()
    c = meas.family("custom_allreduce")
    assert set(c["mode"]) == {"graph", "eager"}
    rec = next(meas.records("gemm"))
    assert rec.family == "gemm" and rec.gpu == "h100_sxm" and rec.latency_ms > 0 and "m" in rec.shape
    assert sum(s.rows for s in meas.sources) == meas.rows()
    assert all(len(s.sha256) == 64 for s in meas.sources)


def test_missing_column_names_file_and_column(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    f = root / "h100_sxm" / "gemm.csv.gz"
    pd.read_csv(f).drop(columns=["k"]).to_csv(f, index=False)
    with pytest.raises(UserError) as exc:
        read_measurements(root)
    msg = exc.value.render()
    assert "gemm.csv.gz" in msg and "'k'" in msg


def test_folder_matched_by_alias_and_unknown_folder_reported(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    (root / "h100_sxm").rename(root / "NVIDIA H100 80GB HBM3")
    assert read_measurements(root).gpus == ["h100_sxm"]
    (root / "NVIDIA H100 80GB HBM3").rename(root / "my_mystery_gpu")
    with pytest.raises(UserError, match="my_mystery_gpu"):
        read_measurements(root)


def test_gpu_selection_and_bad_directory(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm", "a100_sxm"))
    assert read_measurements(root, gpus=["a100"]).gpus == ["a100_sxm"]
    with pytest.raises(UserError, match="l40s"):
        read_measurements(root, gpus=["l40s"])
    with pytest.raises(UserError, match="does not exist"):
        read_measurements(tmp_path / "nope")


def test_moe_a2a_latency_read_as_microseconds(tmp_path):
    d = tmp_path / "h100_sxm"
    d.mkdir()
    pd.DataFrame({"backend": ["vllm"] * 2, "backend_version": ["0"] * 2, "op_name": ["moe_a2a"] * 2,
                  "kernel_source": ["deepep"] * 2, "comm_backend": ["deepep_ll"] * 2,
                  "phase": ["dispatch", "combine"], "comm_dtype": ["default"] * 2, "ep_size": [8, 8],
                  "node_num": [1, 1], "hidden_size": [7168, 7168], "topk": [8, 8], "num_experts": [256, 256],
                  "num_tokens": [128, 128], "sms": [0, 0], "transmit_us": [80.0, 60.0], "notify_us": [0.0, 0.0],
                  "latency_ms": [80.0, 60.0]}).to_csv(d / "moe_a2a.csv", index=False)
    a2a = read_measurements(tmp_path).family("moe_a2a")
    assert a2a["latency_ms"].tolist() == pytest.approx([0.08, 0.06])

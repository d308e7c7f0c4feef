"""Reader: GLM-5 sparse-attention (DSA) operator tables become the step model's three DSA
operator families, read only when asked for (the calibration does not fit them yet)."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration.reader import DSA_TABLES, KERNEL_TABLES, read_measurements
from llmplan.errors import UserError


def _rows(op: str, **extra):
    base = {"backend": "sglang", "backend_version": "kernel-level", "op_name": op, "kernel_source": "k",
            "model": "zai-org/GLM-5", "mla_dtype": "fp8_e4m3", "kv_cache_dtype": "fp8_e4m3",
            "gemm_type": "fp8_block", "num_heads": 64, "tp_size": 1, "compress_ratio": 1}
    return [{**base, "batch_size": 4, "isl": 1, "step": 8191, "latency_ms": 0.05, **extra},
            {**base, "batch_size": 1, "isl": 2048, "step": 0, "latency_ms": 0.30, **extra},
            {**base, "batch_size": 1, "isl": 16, "step": 0, "latency_ms": 0.0, **extra}]   # no time: dropped


def _write(tmp_path):
    d = tmp_path / "h100_sxm"
    d.mkdir(parents=True)
    pd.DataFrame(_rows("glm5_mqa_logits_module")).to_csv(d / "glm5_mqa_logits_module.csv", index=False)
    pd.DataFrame(_rows("glm5_topk_module", score_mode="top_last")).to_csv(d / "glm5_topk_module.csv.gz", index=False)
    pd.DataFrame(_rows("glm5_dsa_attn_module")).to_csv(d / "glm5_dsa_attn_module.csv", index=False)
    pd.DataFrame([{"backend": "vllm", "kernel_source": "x", "gemm_dtype": "bfloat16", "m": 1, "n": 64, "k": 64,
                   "latency_ms": 0.01}]).to_csv(d / "gemm.csv", index=False)
    return tmp_path


def test_dsa_tables_become_operator_families_with_decode_and_prefill_shapes(tmp_path):
    meas = read_measurements(_write(tmp_path), tables=DSA_TABLES)
    assert sorted(meas.frames) == ["dsa_attention", "dsa_mqa_logits", "dsa_topk"]
    for fam in meas.frames:
        df = meas.family(fam)
        assert len(df) == 2                                          # the zero-latency row is dropped
        dec, pre = df.iloc[0], df.iloc[1]
        assert (dec["batch"], dec["q_len"], dec["kv_len"]) == (4, 1, 8192)   # kv = isl + cached step
        assert (pre["batch"], pre["q_len"], pre["kv_len"]) == (1, 2048, 2048)
        assert set(df["kv_dtype"]) == {"fp8"} and set(df["tp"]) == {1} and set(df["num_heads"]) == {64}
    assert meas.family("dsa_topk")["mode"].tolist() == ["top_last", "top_last"]


def test_dsa_tables_are_not_read_by_default(tmp_path):
    assert not set(DSA_TABLES) & set(KERNEL_TABLES)
    meas = read_measurements(_write(tmp_path))
    assert sorted(meas.frames) == ["gemm"]
    assert {s.table for s in meas.sources} == {"gemm"}


def test_dsa_table_missing_a_shape_column_is_a_clear_error(tmp_path):
    d = tmp_path / "h100_sxm"
    d.mkdir(parents=True)
    pd.DataFrame(_rows("glm5_dsa_attn_module")).drop(columns="step").to_csv(d / "glm5_dsa_attn_module.csv",
                                                                            index=False)
    with pytest.raises(UserError, match="missing required column 'step'"):
        read_measurements(tmp_path, tables=DSA_TABLES)

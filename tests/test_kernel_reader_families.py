"""Reader: the 2026 tables (oneCCL collectives, MLA absorb matmuls, Gated DeltaNet layers,
nvfp4 GEMM/MoE dtype names) become canonical families the fit and the kernel model use."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration.reader import read_measurements


def _write(folder, name, rows):
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / f"{name}.csv", index=False)


def test_oneccl_is_the_nccl_family_of_engine_oneccl(tmp_path):
    _write(tmp_path / "h100_sxm", "oneccl", [
        {"backend": "oneccl", "backend_version": "2021.17", "op_name": "all_reduce", "kernel_source": "oneCCL",
         "nccl_dtype": "half", "num_gpus": 2, "message_size": 1024, "latency_ms": 0.02},
        {"backend": "oneccl", "backend_version": "2021.17", "op_name": "all_gather", "kernel_source": "oneCCL",
         "nccl_dtype": "int8", "num_gpus": 4, "message_size": 4096, "latency_ms": 0.03}])
    df = read_measurements(tmp_path).family("nccl")
    assert df["backend"].tolist() == ["oneccl", "oneccl"]
    assert df["message_bytes"].tolist() == [2048.0, 4096.0]       # elements x bytes of the dtype
    assert df["op"].tolist() == ["all_reduce", "all_gather"] and df["dtype"].tolist() == ["fp16", "int8"]


def test_mla_bmm_rows(tmp_path):
    rows = [{"backend": "sglang", "backend_version": "0.5", "op_name": op, "kernel_source": "torch_bmm",
             "bmm_dtype": dt, "num_tokens": 8, "num_heads": 128, "latency_ms": 0.01}
            for op in ("mla_gen_pre", "mla_gen_post") for dt in ("bfloat16", "fp8")]
    _write(tmp_path / "h100_sxm", "mla_bmm", rows)
    df = read_measurements(tmp_path).family("mla_bmm")
    assert df["op"].tolist() == ["pre", "pre", "post", "post"]
    assert df["dtype"].tolist() == ["bf16", "fp8", "bf16", "fp8"]


def test_gdn_sub_kernels_sum_to_one_layer_per_shape_and_phase(tmp_path):
    base = {"backend": "vllm", "backend_version": "0.24", "op_name": "gdn", "batch_size": 2, "d_model": 2048,
            "d_conv": 4, "num_k_heads": 4, "head_k_dim": 128, "num_v_heads": 8, "head_v_dim": 128,
            "model_name": "Qwen/Qwen3.5-9B"}
    rows = [
        {**base, "kernel_source": "causal_conv1d_fn", "phase": "context", "seq_len": 512, "num_tokens": 1024,
         "latency_ms": 0.01},
        {**base, "kernel_source": "chunk_gated_delta_rule", "phase": "context", "seq_len": 512, "num_tokens": 1024,
         "latency_ms": 0.10},
        {**base, "kernel_source": "causal_conv1d_update", "phase": "generation", "seq_len": 1, "num_tokens": 2,
         "latency_ms": 0.002},
        {**base, "kernel_source": "fused_recurrent_gated_delta_rule", "phase": "generation", "seq_len": 1,
         "num_tokens": 2, "latency_ms": 0.005},
        # a shape with only one of its two sub-kernels is not a whole layer: dropped
        {**base, "kernel_source": "causal_conv1d_fn", "phase": "context", "seq_len": 64, "num_tokens": 128,
         "latency_ms": 0.01},
    ]
    _write(tmp_path / "h100_sxm", "gdn", rows)
    meas = read_measurements(tmp_path)
    pre, dec = meas.family("gdn_prefill"), meas.family("gdn_decode")
    assert len(pre) == 1 and len(dec) == 1
    assert pre["latency_ms"].iloc[0] == pytest.approx(0.11) and dec["latency_ms"].iloc[0] == pytest.approx(0.007)
    assert pre["kernel_source"].iloc[0] == "causal_conv1d_fn+chunk_gated_delta_rule"
    assert (pre["batch"].iloc[0], pre["seq_len"].iloc[0], pre["v_heads"].iloc[0]) == (2, 512, 8)
    assert pre["conv_dim"].iloc[0] == 2 * 4 * 128 + 8 * 128


def test_nvfp4_and_w4a8_dtype_names(tmp_path):
    _write(tmp_path / "b200", "gemm", [
        {"backend": "vllm", "backend_version": "0", "op_name": "gemm", "kernel_source": "k", "gemm_dtype": dt,
         "m": 8, "n": 4096, "k": 4096, "latency_ms": 0.01} for dt in ("nvfp4", "fp8_block", "bfloat16")])
    assert read_measurements(tmp_path).family("gemm")["dtype"].tolist() == ["fp4", "fp8_block", "bf16"]

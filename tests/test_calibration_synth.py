"""Synthetic measurement tables with known parameters, shared by the calibration tests.

Latencies are generated from the base model (:mod:`llmplan.sim.kernel_calibration.physics`) with known
parameters, so a fit must recover them. Tables are small so every test stays fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams, predict_us
from llmplan.hardware_catalog.loader import get_gpu

TRUE = {
    "bf16": BaseParams(floor_us=4.0, wave_us=0.3, eta_c=0.75, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=40.0),
    "fp8": BaseParams(floor_us=9.0, wave_us=0.3, eta_c=0.55, eta_m=0.7, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=40.0),
    "attn": BaseParams(floor_us=8.0, wave_us=1.0, eta_c=0.5, eta_m=0.6, g=0.8, p=2.0, l2_cap=0.5, l2_bw_sm=60.0),
}


def _noise(n: int, rng: np.random.Generator, sigma: float) -> np.ndarray:
    return np.exp(rng.normal(0.0, sigma, n))


def gemm_table(gpu: str, rng: np.random.Generator, sigma: float = 0.01, backend: str = "vllm") -> pd.DataFrame:
    gf = GPUFeatures.from_spec(get_gpu(gpu))
    ms = [1, 8, 32, 128, 512, 2048, 8192]
    nks = [(1024, 1024), (4096, 4096), (8192, 2048), (2048, 8192), (14336, 4096), (4096, 14336), (512, 2048),
           (6144, 4096)]
    rows = []
    for dt in ("bfloat16", "fp8"):
        for n, k in nks:
            for m in ms:
                rows.append({"backend": backend, "backend_version": "0", "op_name": "gemm",
                             "kernel_source": "synthetic", "gemm_dtype": dt, "m": m, "n": n, "k": k})
    df = pd.DataFrame(rows)
    lat = np.zeros(len(df))
    for dt, key in (("bfloat16", "bf16"), ("fp8", "fp8")):
        sel = (df["gemm_dtype"] == dt).to_numpy()
        sub = df[sel].assign(dtype=key)
        lat[sel] = predict_us(TRUE[key], F.frame_phys("gemm", sub, gf)) / 1e3
    df["latency_ms"] = lat * _noise(len(df), rng, sigma)
    return df


def attention_tables(gpu: str, rng: np.random.Generator, sigma: float = 0.01) -> tuple[pd.DataFrame, pd.DataFrame]:
    gf = GPUFeatures.from_spec(get_gpu(gpu))
    heads = [(8, 1, 128), (32, 8, 128), (16, 16, 64), (64, 8, 128), (28, 4, 128), (40, 8, 128)]
    pre, dec = [], []
    for h, kvh, d in heads:
        for b in (1, 4, 16):
            for s in (16, 256, 1024, 4096):
                pre.append({"backend": "vllm", "backend_version": "0", "op_name": "context_attention",
                            "kernel_source": "synthetic", "batch_size": b, "isl": s, "num_heads": h,
                            "num_key_value_heads": kvh, "head_dim": d, "beam_width": 1, "attn_dtype": "bfloat16",
                            "kv_cache_dtype": "bfloat16", "step": 0, "window_size": 0})
            for kv in (15, 255, 4095, 32767):
                dec.append({"backend": "vllm", "backend_version": "0", "op_name": "generation_attention",
                            "kernel_source": "synthetic", "batch_size": b * 8, "isl": 1, "num_heads": h,
                            "num_key_value_heads": kvh, "head_dim": d, "beam_width": 1, "attn_dtype": "bfloat16",
                            "kv_cache_dtype": "bfloat16", "step": kv, "window_size": 0})
    out = []
    for rows, table, fam in ((pre, "context_attention", "attention_prefill"),
                             (dec, "generation_attention", "attention_decode")):
        df = pd.DataFrame(rows)
        from llmplan.calibration.reader import _canonicalise

        canon = _canonicalise(table, df.assign(latency_ms=1.0))
        df["latency_ms"] = predict_us(TRUE["attn"], F.frame_phys(fam, canon, gf)) / 1e3 * _noise(len(df), rng, sigma)
        out.append(df)
    return out[0], out[1]


def nccl_table(rng: np.random.Generator, scale: float = 1.0) -> pd.DataFrame:
    rows = []
    for op in ("all_reduce", "all_gather"):
        for n in (2, 4, 8):
            for e in 2 ** np.arange(8, 29, 2):
                t = (0.008 + 0.002 * n) * scale + 2.0 * e * 2 / 300e9 * 1e3
                rows.append({"nccl_version": "2", "op_name": op, "kernel_source": "NCCL", "nccl_dtype": "half",
                             "num_gpus": n, "message_size_elements": int(e), "latency_ms": t})
    return pd.DataFrame(rows)


def custom_ar_table(rng: np.random.Generator, scale: float = 1.0) -> pd.DataFrame:
    rows = []
    for mode in ("graph", "eager"):
        for n in (2, 4, 8):
            for e in 2 ** np.arange(7, 25, 2):
                t = (0.004 if mode == "graph" else 0.02) * scale + 2.0 * e * 2 / 250e9 * 1e3
                rows.append({"backend": "vllm", "backend_version": "0", "op_name": "all_reduce",
                             "kernel_source": f"vLLM_custom_{mode}", "allreduce_dtype": "bfloat16", "num_gpus": n,
                             "message_size": int(e), "latency_ms": t, "kernel_mode": f"vllm_{mode}"})
    return pd.DataFrame(rows)


def make_measurements_dir(root: Path, gpus: tuple[str, ...] = ("h100_sxm", "a100_sxm"), seed: int = 0) -> Path:
    """A measurement folder in the shared layout with small synthetic tables."""
    rng = np.random.default_rng(seed)
    for i, gpu in enumerate(gpus):
        d = root / gpu
        d.mkdir(parents=True, exist_ok=True)
        gemm_table(gpu, rng).to_csv(d / "gemm.csv.gz", index=False)
        pre, dec = attention_tables(gpu, rng)
        pre.to_csv(d / "context_attention.csv.gz", index=False)
        dec.to_csv(d / "generation_attention.csv", index=False)
        nccl_table(rng, 1.0 + 0.3 * i).to_csv(d / "nccl.csv.gz", index=False)
        custom_ar_table(rng, 1.0 + 0.3 * i).to_csv(d / "custom_allreduce.csv", index=False)
    return root


def test_synthetic_tables_are_positive(tmp_path):
    root = make_measurements_dir(tmp_path, ("h100_sxm",))
    for f in (root / "h100_sxm").iterdir():
        df = pd.read_csv(f)
        assert (df["latency_ms"] > 0).all(), f

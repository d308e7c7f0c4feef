"""Vectorised predictions of measured rows from a calibration (validation and residuals).

The measured tier uses the GPU's own model for the row's engine (falling back to another
engine measured on the same GPU, then to cross-gen for dtype groups it never measured);
the cross-gen tier ignores the GPU's own parameters and pools the other measured GPUs
(:mod:`llmplan.sim.kernel_calibration.crossgen`). Collectives follow :mod:`llmplan.sim.kernel_calibration.collectives`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.collectives import AlphaBeta, a2a_key, custom_key, lookup_alpha_beta, nccl_key
from llmplan.sim.kernel_calibration.crossgen import crossgen_alpha_beta
from llmplan.sim.kernel_calibration.crossgen import crossgen_family
from llmplan.sim.kernel_calibration.family_model import predict_family_frame
from llmplan.sim.kernel_calibration.features import COMPUTE_FAMILIES
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

COLLECTIVE_FAMILIES = ("custom_allreduce", "nccl", "moe_a2a")
TIERS = ("measured", "cross-gen")


def predict_frame(cal: Calibration, family: str, df: pd.DataFrame, gpu: GPUFeatures, tier: str = "measured",
                  spec: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(predicted latency ms, tier used) per row of one GPU's canonical frame. Rows no
    fitted model covers use the specification roofline (tier "spec") when the GPU's
    ``spec`` (a GPUSpec) is given, as the kernel model does; else NaN / "none"."""
    pred = np.full(len(df), np.nan)
    used = np.full(len(df), "none", dtype=object)
    if not len(df):
        return pred, used
    if family in COMPUTE_FAMILIES:
        _predict_compute(cal, family, df, gpu, tier, pred, used)
    elif family in COLLECTIVE_FAMILIES:
        _predict_collective(cal, family, df, gpu, tier, pred, used)
    missing = np.isnan(pred)
    if spec is not None and missing.any() and family != "moe_a2a":

        idx = np.flatnonzero(missing)
        pred[idx] = roofline_predict(family, df.iloc[idx], spec)
        used[idx] = np.where(np.isfinite(pred[idx]), "spec", "none")
    return pred, used


def _predict_compute(cal: Calibration, family: str, df: pd.DataFrame, gpu: GPUFeatures, tier: str,
                     pred: np.ndarray, used: np.ndarray) -> None:
    backends = df["backend"].astype(str).to_numpy()
    for backend in sorted(set(backends)):
        rows = np.flatnonzero(backends == backend)
        sub = df.iloc[rows]
        if tier == "measured" and gpu.key in cal.measured:
            fm = cal.family_model(gpu.key, backend, family)
            if fm is None:   # same GPU, another engine's kernels
                for b in cal.backends(gpu.key):
                    if (fm := cal.family_model(gpu.key, b, family)) is not None:
                        break
            if fm is not None:
                p, ok = predict_family_frame(fm, sub, cal.gpus.get(gpu.key, gpu))
                pred[rows[ok]] = p[ok]
                used[rows[ok]] = "measured"
        missing = rows[np.isnan(pred[rows])]
        if len(missing):
            xg = crossgen_family(cal, family, backend, exclude=gpu.key)
            if xg is not None:
                p, ok = predict_family_frame(xg, df.iloc[missing], gpu)
                pred[missing[ok]] = p[ok]
                used[missing[ok]] = "cross-gen"


def _fabric_bw(gpu: GPUFeatures) -> float:
    return gpu.fabric_bw_gbps


def _predict_collective(cal: Calibration, family: str, df: pd.DataFrame, gpu: GPUFeatures, tier: str,
                        pred: np.ndarray, used: np.ndarray) -> None:
    own = cal.collectives.get(gpu.key) if tier == "measured" else None
    pooled = crossgen_alpha_beta(cal, gpu)
    for i, row in enumerate(df.to_dict("records")):
        n = int(row.get("num_gpus", row.get("ep", 0)))
        res = None
        if own is not None:
            if family == "custom_allreduce":
                res = own.custom_ar.predict_one(custom_key(row["backend"], row["mode"]), n, row["message_bytes"])
                if res is None:
                    for key in sorted(own.custom_ar.curves):
                        if key.endswith("|" + row["mode"]):
                            res = own.custom_ar.predict_one(key, n, row["message_bytes"])
                            break
            elif family == "nccl":
                res = own.nccl.predict_one(nccl_key(row["op"], row["dtype"]), n, row["message_bytes"])
            elif family == "moe_a2a":
                res = own.moe_a2a.predict_one(a2a_key(row), n, float(row["num_tokens"]))
                if res is None:
                    res = _a2a_nearest(own, row, n)
        if res is not None:
            pred[i], used[i] = res[0], "measured"
            continue
        ab: AlphaBeta | None = None
        if family == "custom_allreduce":
            ab = lookup_alpha_beta(pooled, "custom", "all_reduce", "", n, row["mode"])
            op = "all_reduce"
        elif family == "nccl":
            ab = lookup_alpha_beta(pooled, "nccl", row["op"], row["dtype"], n)
            op = row["op"]
        if ab is not None:
            pred[i] = ab.predict_ms(op, row["message_bytes"], n, _fabric_bw(gpu))
            used[i] = "cross-gen"


def _a2a_nearest(own: Any, row: dict[str, Any], n: int) -> tuple[float, bool] | None:
    """An all-to-all configuration never measured: the measured curve of the same DeepEP
    mode whose bytes per token (hidden x topk) are closest, with the token axis scaled by
    the bytes ratio (fixed cost kept, bandwidth part scaled)."""
    import math

    prefix = f"{row['comm_backend']}|{row['phase']}|"
    want = float(row["hidden"]) * float(row["topk"])
    best, best_d = None, math.inf
    for key in own.moe_a2a.curves:
        if not key.startswith(prefix) or not key.endswith(f"|{int(row['sms'])}"):
            continue
        _, _, h, k, _, _ = key.split("|")
        d = abs(math.log(float(h) * float(k) / want))
        if d < best_d:
            best, best_d = key, d
    if best is None:
        return None
    _, _, h, k, _, _ = best.split("|")
    res = own.moe_a2a.predict_one(best, n, float(row["num_tokens"]) * want / (float(h) * float(k)))
    return None if res is None else (res[0], False)


def roofline_predict(family: str, df: pd.DataFrame, spec: Any) -> np.ndarray:
    """The specification-only roofline (sim.kernels) on every row."""
    from llmplan.sim.kernels import Link, RooflineKernelModel

    rm = RooflineKernelModel(spec)
    link = (Link("nvlink", spec.scaleup_bw_gbps, 8.0) if spec.scaleup_bw_gbps > 0
            else Link("pcie", spec.pcie_bw_gbps, 15.0))

    def gemm_dt(dt: str) -> str:
        return "fp8" if dt in ("fp8", "fp8_block") and spec.supports("fp8") else "bf16"

    def moe_dt(dt: str) -> str:
        return gemm_dt(dt) if dt in ("fp8", "fp8_block") else ("bf16" if dt == "bf16" else "int4")

    def call(fn: Any, *args: Any) -> float:
        try:
            return fn(*args).latency_ms
        except KeyError:        # a dtype the GPU lacks: time it in bf16
            args = tuple("bf16" if a in ("fp8", "fp4", "int4") else a for a in args)
            return fn(*args).latency_ms

    out = np.full(len(df), np.nan)
    for i, r in enumerate(df.to_dict("records")):
        if family == "gemm":
            out[i] = call(rm.gemm, r["m"], r["n"], r["k"], gemm_dt(r["dtype"]))
        elif family == "attention_prefill":
            out[i] = call(rm.attention_prefill, r["batch"], r["q_len"], r["kv_len"], r["num_heads"],
                          r["num_kv_heads"], r["head_dim"], r["kv_dtype"])
        elif family == "attention_decode":
            out[i] = call(rm.attention_decode, r["batch"], r["kv_len"], r["num_heads"], r["num_kv_heads"],
                          r["head_dim"], r["kv_dtype"])
        elif family == "moe":
            out[i] = call(rm.moe, r["num_tokens"], r["hidden"], r["inter"], r["topk"], r["num_experts"],
                          r["moe_tp"], r["moe_ep"], moe_dt(r["dtype"]))
        elif family == "mla_prefill":
            out[i] = call(rm.mla_prefill, r["batch"], r["q_len"], r["kv_len"], r["num_heads"], 512, 128, 64,
                          128, r["kv_dtype"])
        elif family == "mla_decode":
            out[i] = call(rm.mla_decode, r["batch"], r["kv_len"], r["num_heads"], 512, 64, r["kv_dtype"])
        elif family in ("custom_allreduce", "nccl"):
            out[i] = rm.collective(r["op"], r["message_bytes"], r["num_gpus"], link).latency_ms
    return out

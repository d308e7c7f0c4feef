"""Vectorised predictions of measured rows from a calibration (validation and residuals).

This is the table form of :class:`llmplan.sim.calibrated.CalibratedKernelModel`: the tier and
the model that answers each row come from :mod:`llmplan.sim.kernel_calibration.tiers`, the
one implementation of that choice, applied to many rows at once. ``tier=None`` gives the
tier users get for the GPU (measured, sibling or cross-gen); ``tier="cross-gen"`` forces the
pooled model of the other measured GPUs (leave-one-GPU-out validation). Rows no fitted
model covers use the specification roofline (tier ``spec``) when the GPU's spec is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration import crossgen_dispatch
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.family_model import predict_family_frame
from llmplan.sim.kernel_calibration.features import COMPUTE_FAMILIES, MOE_GATED_MATRICES, moe_matrices
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.tiers import TierChoice, choose_tier, roofline_dtype, spec_gdn, spec_mla_bmm

COLLECTIVE_FAMILIES = ("custom_allreduce", "nccl", "moe_a2a")
#: values of ``tier``: None (automatic, as users get it) or a forced tier
TIERS = (None, "cross-gen")


def predict_frame(cal: Calibration, family: str, df: pd.DataFrame, gpu: GPUFeatures, tier: str | None = None,
                  spec: Any = None, choice: TierChoice | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(predicted latency ms, tier used) per row of one GPU's canonical frame. ``gpu`` holds
    the GPU's specification figures; ``choice`` (from :func:`choose_tier`) may be passed to
    reuse one. Rows no fitted model covers use the specification roofline (tier "spec")
    when the GPU's ``spec`` (a GPUSpec) is given, as the kernel model does; else NaN / "none"."""
    if tier == "measured":      # the old name of the automatic choice
        tier = None
    if choice is None:
        vendor = str(getattr(spec, "vendor", "")) or None if spec is not None else None
        choice = choose_tier(cal, gpu, vendor=vendor, force=tier)
    pred = np.full(len(df), np.nan)
    used = np.full(len(df), "none", dtype=object)
    if not len(df):
        return pred, used
    if family in COMPUTE_FAMILIES:
        _predict_compute(choice, family, df, pred, used)
    elif family in COLLECTIVE_FAMILIES:
        _predict_collective(choice, family, df, pred, used)
    missing = np.isnan(pred)
    if spec is not None and missing.any() and family != "moe_a2a":
        idx = np.flatnonzero(missing)
        pred[idx] = roofline_predict(family, df.iloc[idx], spec)
        used[idx] = np.where(np.isfinite(pred[idx]), "spec", "none")
    return pred, used


def _predict_compute(choice: TierChoice, family: str, df: pd.DataFrame, pred: np.ndarray, used: np.ndarray) -> None:
    backends = df["backend"].astype(str).to_numpy()
    for backend in sorted(set(backends)):
        rows = np.flatnonzero(backends == backend)
        for cand in choice.candidates(family, backend):
            missing = rows[np.isnan(pred[rows])]
            if not len(missing):
                break
            # the cross-gen pool: a row naming a kernel another engine ran takes that engine's pool
            engines = (crossgen_dispatch.pool_engines(family, backend, df["kernel_source"].to_numpy()[missing])
                       if cand.backend == "pooled" and "kernel_source" in df else np.full(len(missing), backend))
            for eng in sorted(set(engines.tolist())):
                sub = missing[engines == eng]
                c = cand if eng == backend else (choice.pool(family, eng) or cand)
                p, ok = predict_family_frame(c.model, df.iloc[sub], c.features, c.backend)
                pred[sub[ok]] = p[ok]
                used[sub[ok]] = c.tier


def _predict_collective(choice: TierChoice, family: str, df: pd.DataFrame, pred: np.ndarray,
                        used: np.ndarray) -> None:
    src = choice.collectives
    for i, row in enumerate(df.to_dict("records")):
        res = None
        if family == "custom_allreduce":
            n = int(row["num_gpus"])
            res = src.custom_ar(str(row["backend"]), str(row["mode"]), n, float(row["message_bytes"]))
            ab = None if res is not None else src.alpha_beta("custom", "all_reduce", "", n, str(row["mode"]))
            op = "all_reduce"
        elif family == "nccl":
            n = int(row["num_gpus"])
            res = src.nccl(str(row["op"]), str(row["dtype"]), n, float(row["message_bytes"]))
            ab = None if res is not None else src.alpha_beta("nccl", str(row["op"]), str(row["dtype"]), n)
            op = str(row["op"])
        else:
            res, ab, op, n = src.moe_a2a(row), None, "", 0
        if res is not None:
            pred[i], used[i] = res[0], choice.tier
        elif ab is not None:
            pred[i] = ab[0].predict_ms(op, float(row["message_bytes"]), n, choice.gpu.fabric_bw_gbps)
            used[i] = ab[1]


def roofline_predict(family: str, df: pd.DataFrame, spec: Any) -> np.ndarray:
    """The specification-only roofline (sim.kernels) on every row."""
    from llmplan.sim.kernels import Link, RooflineKernelModel

    rm = RooflineKernelModel(spec)
    link = (Link("nvlink", spec.scaleup_bw_gbps, 8.0) if spec.scaleup_bw_gbps > 0
            else Link("pcie", spec.pcie_bw_gbps, 15.0))

    def call(fn: Any, *args: Any) -> float:
        try:
            return fn(*args).latency_ms
        except KeyError:        # a dtype the GPU lacks: time it in bf16
            args = tuple("bf16" if a in ("fp8", "fp4", "int4") else a for a in args)
            return fn(*args).latency_ms

    out = np.full(len(df), np.nan)
    # gated (3 matrices) or plain (2) experts, as the fit reads each row (features.moe_matrices)
    gated = (moe_matrices(df["kernel_source"]) == MOE_GATED_MATRICES if family == "moe" and "kernel_source" in df
             else np.ones(len(df), bool))
    for i, r in enumerate(df.to_dict("records")):
        if family == "gemm":
            out[i] = call(rm.gemm, r["m"], r["n"], r["k"], roofline_dtype(spec, r["dtype"]))
        elif family == "attention_prefill":
            out[i] = call(rm.attention_prefill, r["batch"], r["q_len"], r["kv_len"], r["num_heads"],
                          r["num_kv_heads"], r["head_dim"], r["kv_dtype"], int(r.get("window", 0)))
        elif family == "attention_decode":
            out[i] = call(rm.attention_decode, r["batch"], r["kv_len"], r["num_heads"], r["num_kv_heads"],
                          r["head_dim"], r["kv_dtype"], int(r.get("window", 0)))
        elif family == "moe":
            out[i] = call(rm.moe, r["num_tokens"], r["hidden"], r["inter"], r["topk"], r["num_experts"],
                          r["moe_tp"], r["moe_ep"], roofline_dtype(spec, r["dtype"]), bool(gated[i]))
        elif family == "mla_prefill":
            out[i] = call(rm.mla_prefill, r["batch"], r["q_len"], r["kv_len"], r["num_heads"], 512, 128, 64,
                          128, r["kv_dtype"])
        elif family == "mla_decode":
            out[i] = call(rm.mla_decode, r["batch"], r["kv_len"], r["num_heads"], 512, 64, r["kv_dtype"])
        elif family == "mla_bmm":
            out[i] = spec_mla_bmm(rm, r["num_tokens"], r["num_heads"], r["dtype"]).latency_ms
        elif family in ("gdn_prefill", "gdn_decode"):
            out[i] = spec_gdn(rm, family[4:], r["batch"], r["seq_len"], r["k_heads"], r["head_k_dim"], r["v_heads"],
                              r["head_v_dim"]).latency_ms
        elif family in ("custom_allreduce", "nccl"):
            out[i] = rm.collective(r["op"], r["message_bytes"], r["num_gpus"], link).latency_ms
    return out

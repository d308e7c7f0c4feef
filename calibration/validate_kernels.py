"""Kernel-level validation: predict every measured kernel row of one GPU and score it.

Predictions come from :func:`llmplan.sim.kernel_calibration.predict.predict_frame`, the table
form of the kernel model ``plan`` uses: each row is answered by the tier users get for the GPU
(:mod:`llmplan.sim.kernel_calibration.tiers`), unless ``force_tier="cross-gen"`` asks for the
pooled model of the other measured GPUs (leave-one-GPU-out when scoring a measured GPU).
Modes besides scoring a calibration file as is (in-sample for its own GPUs):

* ``holdout``: refit with every row of one GPU removed, then predict that GPU (the tier it
  then gets: sibling when a GPU with the same silicon remains, else cross-gen);
* ``split random:F:S``: refit the target GPU on a random (1-F) share of its rows and test on
  the rest; ``split grouped:F:S``: hold out whole shape groups (see :mod:`calibration.splits`).

Every family is also scored with the specification-only :class:`sim.kernels.RooflineKernelModel`
on the same rows, and with the stated p90 band of the tier that answered each row (its
coverage: the share of rows inside it). Tables above ``max_rows`` rows per family are
subsampled deterministically for scoring (the report says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from llmplan.errors import UserError
from llmplan.calibration.kernel_bands import in_fitted_range
from llmplan.sim.calibrated import band_of
from llmplan.sim.kernel_calibration.calib_file import Calibration, load_calibration
from llmplan.calibration.fit import FitOptions, Progress, fit_calibration, split_measurements, without_gpu
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.predict import predict_frame, roofline_predict
from llmplan.sim.kernel_calibration.tiers import choose_tier
from llmplan.calibration.reader import Measurements
from llmplan.calibration.splits import Split

FAMILY_ORDER = ("gemm", "attention_prefill", "attention_decode", "moe", "mla_prefill", "mla_decode", "mla_bmm",
                "gdn_prefill", "gdn_decode", "custom_allreduce", "nccl", "moe_a2a")
#: the "collective" row pools custom_allreduce and nccl (the step model's collectives)
#: families and the sub-family column that is reported separately
SUBFAMILY = {"gemm": "dtype", "moe": "dtype", "mla_bmm": "dtype"}


@dataclass
class FamilyScore:
    family: str
    rows: int
    scored: int               # rows with a prediction
    mape: float
    p50: float
    p90: float
    roofline_mape: float
    roofline_p50: float
    tiers: dict[str, int]
    worst: list[tuple[str, float, float]] = field(default_factory=list)  # (shape, measured, predicted)
    band_p90: float = float("nan")     # the stated p90 band of the dominant tier (fraction)
    coverage: float = float("nan")     # share of scored rows whose error lies inside their band


@dataclass
class ValidationResult:
    gpu: str
    mode: str
    scores: list[FamilyScore]
    frame: pd.DataFrame       # one row per scored kernel
    subsampled: dict[str, int] = field(default_factory=dict)   # family -> rows before subsampling
    notes: list[str] = field(default_factory=list)


def describe(family: str, r: dict[str, Any]) -> str:
    b = r.get("backend", "")
    if family == "gemm":
        return f"{b} {r['dtype']} m={r['m']} n={r['n']} k={r['k']}"
    if family == "attention_prefill":
        return (f"{b} b={r['batch']} s={r['q_len']} h={r['num_heads']}/{r['num_kv_heads']} d={r['head_dim']} "
                f"kv={r['kv_dtype']} w={r['window']}")
    if family == "attention_decode":
        return (f"{b} b={r['batch']} kv={r['kv_len']} h={r['num_heads']}/{r['num_kv_heads']} d={r['head_dim']} "
                f"{r['kv_dtype']} w={r['window']}")
    if family == "moe":
        return (f"{b} {r['dtype']} t={r['num_tokens']} h={r['hidden']} i={r['inter']} k={r['topk']} "
                f"e={r['num_experts']} tp={r['moe_tp']} ep={r['moe_ep']} skew={r['skew']}")
    if family in ("mla_prefill", "mla_decode"):
        return f"{b} b={r['batch']} s={r.get('q_len', 1)} kv={r['kv_len']} h={r['num_heads']} {r['kv_dtype']}"
    if family == "mla_bmm":
        return f"{b} {r['dtype']} {r['op']} t={r['num_tokens']} h={r['num_heads']}"
    if family in ("gdn_prefill", "gdn_decode"):
        return (f"{b} b={r['batch']} s={r['seq_len']} hk={r['k_heads']}x{r['head_k_dim']} "
                f"hv={r['v_heads']}x{r['head_v_dim']}")
    if family in ("custom_allreduce", "nccl"):
        return f"{b} {r['op']} n={r['num_gpus']} bytes={int(r['message_bytes'])} {r.get('mode', '')}"
    if family == "moe_a2a":
        return f"{r['comm_backend']} {r['phase']} t={r['num_tokens']} h={r['hidden']} ep={r['ep']}"
    return family


def row_bands(band_cal: Calibration | None, family: str, tiers: np.ndarray, gpu: str | None = None,
              source_gpu: str | None = None, extrapolated: np.ndarray | None = None) -> np.ndarray:
    """The stated p90 band (fraction) of every row: its family in the tier that answered it,
    from ``band_cal``'s residual statistics (what ``plan`` and ``simulate`` print: the
    measured GPU's own figures where stored; ``extrapolated`` rows, outside the fitted shape
    range, get the extrapolated figures where stored, as ``plan``'s extrapolated queries do)."""
    out = np.full(len(tiers), np.nan)
    if band_cal is None or not band_cal.residuals:
        return out
    ext = np.zeros(len(tiers), dtype=bool) if extrapolated is None else np.asarray(extrapolated, dtype=bool)
    for t in np.unique(tiers.astype(str)):
        if t == "none":
            continue
        who = gpu if t == "measured" else (source_gpu if t == "sibling" else None)
        for flag in (False, True):
            m = (tiers.astype(str) == t) & (ext == flag)
            if not m.any():
                continue
            try:
                out[m] = band_of(band_cal, family, t, who, flag).get("p90_ape", np.nan)
            except UserError:
                continue
    return out


def _score(family: str, df: pd.DataFrame, pred: np.ndarray, tiers: np.ndarray, roof: np.ndarray,
           n_worst: int = 3, bands: np.ndarray | None = None) -> FamilyScore:
    y = df["latency_ms"].to_numpy()
    ok = np.isfinite(pred)
    e = np.abs(pred / y - 1.0)
    er = np.abs(roof / y - 1.0)
    okr = ok & np.isfinite(er)
    worst = []
    if ok.any():
        recs = df.to_dict("records")
        for i in np.argsort(-np.where(ok, e, -1))[:n_worst]:
            worst.append((describe(family.split(":")[0], recs[i]), float(y[i]), float(pred[i])))
    tier_counts = {str(t): int(c) for t, c in zip(*np.unique(tiers.astype(str), return_counts=True))}
    nan = float("nan")
    band_p90 = coverage = nan
    if bands is not None:
        okb = ok & np.isfinite(bands)
        if okb.any():
            coverage = float(np.mean(e[okb] <= bands[okb]))
            dominant = max(tier_counts, key=lambda t: tier_counts[t])
            sel = okb & (tiers.astype(str) == dominant)
            band_p90 = float(bands[sel][0]) if sel.any() else float(np.median(bands[okb]))
    return FamilyScore(family, len(df), int(ok.sum()),
                       float(e[ok].mean()) if ok.any() else nan, float(np.median(e[ok])) if ok.any() else nan,
                       float(np.quantile(e[ok], 0.9)) if ok.any() else nan,
                       float(er[okr].mean()) if okr.any() else nan, float(np.median(er[okr])) if okr.any() else nan,
                       tier_counts, worst, band_p90, coverage)


def validate_kernels(meas: Measurements, gpu: str, cal: Calibration | None = None, split: Split | None = None,
                     holdout_gpu: str | None = None, families: list[str] | None = None, max_rows: int = 100_000,
                     opts: FitOptions | None = None, progress: Progress | None = None,
                     roofline: bool = True, force_tier: str | None = None,
                     band_cal: Calibration | None = None) -> ValidationResult:
    """Score predictions of ``gpu``'s measured rows (see the module docstring for modes).

    ``force_tier="cross-gen"`` scores the cross-gen tier even where users would get the
    measured or sibling one; ``band_cal`` (default: the calibration scored, else the shipped
    one) supplies the stated p90 bands whose coverage is reported."""
    opts = opts or FitOptions(residuals=False)
    notes: list[str] = []
    mode = "calibration file (in-sample for its measured GPUs)"
    fams = [f for f in FAMILY_ORDER if f in meas.frames and (not families or f in families)]
    test = Measurements(meas.root, {f: meas.frames[f] for f in fams}, meas.sources, meas.gpu_specs)
    fit_on = test
    if holdout_gpu is not None:
        fit_on = without_gpu(fit_on, holdout_gpu)
        mode = f"holdout {holdout_gpu}: refitted without any {holdout_gpu} row"
    if split is not None:
        target_only = Measurements(meas.root, {f: d[d["gpu"] == gpu] for f, d in fit_on.frames.items()},
                                   meas.sources, {gpu: meas.gpu_specs[gpu]})
        train, test_part = split_measurements(target_only, split)
        fit_on = train
        test = test_part
        mode = f"split {split}: refitted {gpu} on the training share, scored on the held-out share"
    if holdout_gpu is not None or split is not None:
        if not any(len(d) for d in fit_on.frames.values()):
            notes.append("nothing left to fit on")
        cal = fit_calibration(fit_on, opts, progress)
    if cal is None:
        cal = load_calibration(None)
    if band_cal is None:
        band_cal = cal if cal.residuals else load_calibration(None)
    spec = meas.gpu_specs[gpu]
    gf = GPUFeatures.from_spec(spec)
    # the tier users get (llmplan.sim.kernel_calibration.tiers), unless one is forced
    choice = choose_tier(cal, gf, vendor=str(getattr(spec, "vendor", "")) or None, force=force_tier)
    tier = choice.tier
    mode += f"; tier {tier}" + (f" (stand-in {choice.source_gpu})" if tier == "sibling" else "")
    scores, frames, subsampled = [], [], {}
    for fam in fams:
        df = test.frames.get(fam, pd.DataFrame())
        df = df[df["gpu"] == gpu] if len(df) else df
        if not len(df):
            continue
        if len(df) > max_rows:
            subsampled[fam] = len(df)
            df = df.sample(n=max_rows, random_state=0).sort_index()
        df = df.reset_index(drop=True)
        pred, tiers = predict_frame(cal, fam, df, gf, spec=spec, choice=choice)
        roof = roofline_predict(fam, df, spec) if roofline else np.full(len(df), np.nan)
        bands = row_bands(band_cal, fam, tiers, gpu, choice.source_gpu, ~in_fitted_range(cal, fam, df))
        scores.append(_score(fam, df, pred, tiers, roof, bands=bands))
        for col, sub in SUBFAMILY.items():
            if fam == col:
                for dt in sorted(df[sub].unique()):
                    m = (df[sub] == dt).to_numpy()
                    s = _score(f"{fam}:{dt}", df[m], pred[m], tiers[m], roof[m], bands=bands[m])
                    scores.append(s)
        frames.append(df.assign(measured_ms=df["latency_ms"], predicted_ms=pred, tier=tiers, roofline_ms=roof,
                                band_p90=bands))
    coll = [f for f in frames if len(f) and f["family"].iloc[0] in ("custom_allreduce", "nccl")]
    if coll:
        c = pd.concat(coll, ignore_index=True, sort=False)
        scores.append(_score("collective", c, c["predicted_ms"].to_numpy(), c["tier"].to_numpy(),
                             c["roofline_ms"].to_numpy(), n_worst=0,
                             bands=row_bands(band_cal, "collective", c["tier"].to_numpy(), gpu,
                                             choice.source_gpu)))
    if subsampled:
        notes.append("scored a deterministic sample of " + ", ".join(
            f"{max_rows} of {n} {f} rows" for f, n in subsampled.items()))
    if meas.skipped:
        notes.append("skipped measurement folders that name no catalog GPU: " + ", ".join(meas.skipped))
    if holdout_gpu is None and split is None and tier == "measured":
        notes.append("in-sample scores (the calibration was fitted on these rows): band coverage is "
                     "meaningful only with --split or --holdout-gpu")
    if "moe_a2a" in fams and tier == "cross-gen":
        notes.append("moe_a2a was measured on one GPU only: no cross-gen model")
    out = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
    return ValidationResult(gpu, mode, scores, out, subsampled, notes)

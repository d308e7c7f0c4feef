"""Measured-tier error bands of the kernel families with few shape configurations.

    python -m llmplan.calibration.kernel_bands_cli --measurements DIR [--calibration FILE] --out FILE

The measured-tier band of a family (``residuals["measured"]`` of the calibration index: p50/p90
APE per family, per GPU ``family@gpu`` and per MoE dtype ``moe:dtype``) is the error of a fit
on rows it did not see. For GEMM and attention one grouped split (20% of the shape groups,
``FitOptions.residual_split``) holds out hundreds of shape groups, enough for a stable p90. The
families of :data:`BAND_EXTRA_FAMILIES` (MoE expert configurations, MLA
head counts, GDN head configurations) have 5-30 configurations per GPU, so one such split holds
out one to five of them, and the p90 is that of whichever configurations the split happened to
pick (2a3e115 pooled three random splits, seeds 0, 2, 3: some configurations were held out
three times, others never).

Two principles set these bands here:

1. **Every configuration is held out exactly once**: a grouped K-fold cross-validation
   (K = 1 / the residual split's fraction = 5) over the same keyed hash the splits use
   (``splits._unit_hash(seed, "family|group")``): fold k holds out the groups whose hash lies in
   [k/K, (k+1)/K), so fold 0 is the residual split itself (its fit is shared with the other
   families' bands) and folds 1..K-1 are refitted for these families only. The p90 is then the
   p90 over all configurations rather than over a random subset (cross-validation for
   prediction intervals: Barber, Candes, Ramdas, Tibshirani, "Predictive inference with the
   jackknife+", Ann. Statist. 2021, CV+ section; https://arxiv.org/abs/1905.02928).
2. **The band is scored on the rows it is stated for.** ``plan``/``simulate`` flag a query
   outside the fitted shape range of its group as ``extrapolated`` (``GroupModel.outside``)
   and list it apart from the band; a held-out configuration at the edge of a family's range
   (e.g. MLA decode's 128 heads, the largest measured) is such an extrapolation for the fold
   that hides it, and its error (60% p90 against 15% inside the range) is not the error of an
   in-range query. The band (``p90_ape`` ...) is therefore scored on the held-out rows inside
   their answering group's fitted range, and the rows outside it give a band of their own
   (``p90_ape_extrapolated`` ..., read for queries flagged extrapolated): split-conformal
   scores must be exchangeable with the queries they cover (Angelopoulos & Bates, "A gentle
   introduction to conformal prediction", 2021, section 1; https://arxiv.org/abs/2107.07511).

The command refits only what these bands need (the K folds, these families) and rewrites only
their entries of ``residuals["measured"]`` in a copy of the index; the section files are not
rewritten, so ``--out`` must sit beside them. Deterministic: the same inputs give a
byte-identical index.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

Progress = Callable[[str, int, int], None]

#: families with few shape groups per GPU (MoE expert configurations, MLA head counts, GDN
#: head configurations): one 20% grouped split holds out a handful of groups, too few for a
#: stable p90, so their measured-tier bands come from the K-fold below
BAND_EXTRA_FAMILIES = ("moe", "mla_prefill", "mla_decode", "mla_bmm", "gdn_prefill", "gdn_decode")

#: the band statistics' method, recorded in every entry this module writes
METHOD = "grouped {k}-fold of {split} (every configuration held out once), in-range rows"


def n_folds(split: Any) -> int:
    """K of the K-fold: 1 / the residual split's held-out fraction (0.2 -> 5)."""
    return max(2, int(round(1.0 / float(split.frac))))


def fold_mask(family: str, df: pd.DataFrame, split: Any, k: int) -> np.ndarray:
    """Held-out rows of fold ``k`` of a family's frame. Fold 0 is ``split`` itself
    (:func:`llmplan.calibration.splits.held_out_mask`, with its guards for tiny tables);
    fold k >= 1 holds out the groups whose keyed hash lies in [k/K, (k+1)/K)."""
    from llmplan.calibration.splits import _unit_hash, group_ids, held_out_mask

    if k == 0:
        return held_out_mask(family, df, split)
    kk = n_folds(split)
    ids = group_ids(family, df)
    held = {g for g in ids.unique() if k / kk <= _unit_hash(split.seed, f"{family}|{g}") < (k + 1) / kk}
    return ids.isin(held).to_numpy()


def band_families(meas: Any) -> Any:
    """The measurements restricted to the few-configuration families (and ``moe_a2a``,
    whose curves per (hidden, topk, experts) configuration are as few)."""
    from llmplan.calibration.reader import Measurements

    fams = set(BAND_EXTRA_FAMILIES) | {"moe_a2a"}
    return Measurements(meas.root, {f: d for f, d in meas.frames.items() if f in fams}, meas.sources,
                        meas.gpu_specs)


def fold_split(meas: Any, split: Any, k: int) -> tuple[Any, Any]:
    """(train, test) of fold ``k``, family by family."""
    from llmplan.calibration.reader import Measurements

    train, test = {}, {}
    for fam, df in meas.frames.items():
        m = fold_mask(fam, df, split, k)
        train[fam], test[fam] = df[~m].reset_index(drop=True), df[m].reset_index(drop=True)
    return (Measurements(meas.root, train, meas.sources, meas.gpu_specs),
            Measurements(meas.root, test, meas.sources, meas.gpu_specs))


def fit_fold(meas: Any, gpus: dict, opts: Any, k: int, fitters: tuple[Callable, Callable],
             progress: Progress | None = None) -> tuple[Any, Any]:
    """(calibration fitted on fold ``k``'s training rows, its test rows) for the band families;
    ``fitters``: ``calibration.fit``'s (fit_measured, fit_collectives), passed in so that this
    module does not import the fit (which imports it)."""
    from llmplan.calibration.reader import Measurements
    from llmplan.sim.kernel_calibration.calib_file import Calibration

    few = band_families(meas)
    train, test = fold_split(few, opts.residual_split, k)
    kernels = Measurements(train.root, {f: d for f, d in train.frames.items() if f != "moe_a2a"},
                           train.sources, train.gpu_specs)
    fit_measured, fit_collectives = fitters
    sub = (lambda label, i, n: progress(f"bands fold {k}: {label}", i, n)) if progress else None
    cal = Calibration(gpus=gpus, measured=fit_measured(kernels, gpus, opts, sub),
                      collectives=fit_collectives(Measurements(train.root, {"moe_a2a": train.frames["moe_a2a"]}
                                                               if "moe_a2a" in train.frames else {},
                                                               train.sources, train.gpu_specs), gpus))
    return cal, test


def in_fitted_range(cal: Any, family: str, df: pd.DataFrame) -> np.ndarray:
    """Rows inside the fitted shape range of the group that answers them in ``cal`` (their own
    engine's model; ``GroupModel.outside``'s rule, what ``plan`` flags ``extrapolated``).
    Families without ranges (collectives) and rows without a model of their own: True."""
    from llmplan.sim.kernel_calibration.family_model import RANGE_COLUMNS, group_keys

    ok = np.ones(len(df), dtype=bool)
    if family not in RANGE_COLUMNS or not len(df):
        return ok
    keys = group_keys(family, df).to_numpy()
    gpus, backends = df["gpu"].astype(str).to_numpy(), df["backend"].astype(str).to_numpy()
    for gpu, be, key in sorted({(g, b, k) for g, b, k in zip(gpus, backends, keys)}):
        model = cal.family_model(gpu, be, family)
        if model is None:
            continue
        g, _ = model.resolve_group(key)
        if g is None:
            continue
        m = (gpus == gpu) & (backends == be) & (keys == key)
        sub = df[m]
        inside = np.ones(len(sub), dtype=bool)
        for c, (lo, hi) in model.groups[g].ranges.items():
            v = ((sub["kv_len"] - sub["q_len"]) if c == "ctx" else sub[c]).to_numpy(dtype=np.float64)
            inside &= (v >= lo * (1 - 1e-9)) & (v <= hi * (1 + 1e-9))
        ok[m] = inside
    return ok


def range_tests(cal: Any, test: Any) -> tuple[Any, Any]:
    """(``test``'s rows inside ``cal``'s fitted ranges, its rows outside them)."""
    from llmplan.calibration.reader import Measurements

    inside, outside = {}, {}
    for fam, df in test.frames.items():
        m = in_fitted_range(cal, fam, df)
        inside[fam], outside[fam] = df[m].reset_index(drop=True), df[~m].reset_index(drop=True)
    return (Measurements(test.root, inside, test.sources, test.gpu_specs),
            Measurements(test.root, outside, test.sources, test.gpu_specs))


def band_stats(pairs: list[tuple[Any, Any]], split: Any, max_rows: int | None,
               residual_stats: Callable) -> dict[str, dict[str, Any]]:
    """Measured-tier statistics of the band families from the K folds' (calibration, test
    rows) pairs, every entry (``fam``, ``fam@gpu``, ``moe:dtype``): ``p50_ape``/``p90_ape``/
    ``mape``/``rows`` from the rows inside the fold's fitted ranges, and the same figures with
    the suffix ``_extrapolated`` from the rows outside them (the error of a query ``plan``
    flags extrapolated). ``residual_stats``: ``calibration.fit.residual_stats``."""
    split_pairs = [(cal, *range_tests(cal, test)) for cal, test in pairs]
    method = METHOD.format(k=n_folds(split), split=split)
    inside = residual_stats(split_pairs[0][0], split_pairs[0][1], "measured", method, max_rows=max_rows,
                            extra=[(c, i) for c, i, _ in split_pairs[1:]])
    outside = residual_stats(split_pairs[0][0], split_pairs[0][2], "measured", method, max_rows=max_rows,
                             extra=[(c, o) for c, _, o in split_pairs[1:]])
    fams = set(band_families_names())
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(set(inside) | set(outside)):
        if key.split("@", 1)[0].split(":", 1)[0] not in fams:
            continue
        st = dict(inside.get(key, {"rows": 0, "method": method}))
        for k, v in outside.get(key, {}).items():
            if k != "method":
                st[f"{k}_extrapolated"] = v
        out[key] = st
    return out


def band_families_names() -> tuple[str, ...]:
    return (*BAND_EXTRA_FAMILIES, "moe_a2a")


def replace_band_stats(measured: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``measured`` with every entry of the band families replaced by ``new``'s (sorted keys)."""
    fams = set(band_families_names())
    keep = {k: v for k, v in measured.items() if k.split("@", 1)[0].split(":", 1)[0] not in fams}
    return dict(sorted({**keep, **new}.items()))


def fold_pairs(meas: Any, gpus: dict, opts: Any, fitters: tuple[Callable, Callable],
               progress: Progress | None = None, first: tuple[Any, Any] | None = None) -> list[tuple[Any, Any]]:
    """The K folds' (calibration, test rows) of the band families; ``first``: fold 0's pair
    when the caller has already fitted it (``fit_calibration``'s held-out fit)."""
    kk = n_folds(opts.residual_split)
    out = []
    for k in range(kk):
        if k == 0 and first is not None:
            cal, test = first
            out.append((cal, band_families(test)))
        else:
            out.append(fit_fold(meas, gpus, opts, k, fitters, progress))
    return out

"""Measured-tier error bands of the kernel families with few shape configurations.

    python -m llmplan.calibration.kernel_bands --measurements DIR [--calibration FILE] --out FILE

The measured-tier band of a family (``residuals["measured"]`` of the calibration index: p50/p90
APE per family, per GPU ``family@gpu`` and per MoE dtype ``moe:dtype``) is the error of a fit
on rows it did not see. For GEMM and attention one grouped split (20% of the shape groups,
``FitOptions.residual_split``) holds out hundreds of shape groups, enough for a stable p90. The
families of :data:`llmplan.calibration.fit.BAND_EXTRA_FAMILIES` (MoE expert configurations, MLA
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

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from llmplan.errors import UserError

Progress = Callable[[str, int, int], None]

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
    from llmplan.calibration.fit import BAND_EXTRA_FAMILIES
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


def fit_fold(meas: Any, gpus: dict, opts: Any, k: int, progress: Progress | None = None) -> tuple[Any, Any]:
    """(calibration fitted on fold ``k``'s training rows, its test rows) for the band families."""
    from llmplan.calibration.fit import fit_collectives, fit_measured
    from llmplan.calibration.reader import Measurements
    from llmplan.sim.kernel_calibration.calib_file import Calibration

    few = band_families(meas)
    train, test = fold_split(few, opts.residual_split, k)
    kernels = Measurements(train.root, {f: d for f, d in train.frames.items() if f != "moe_a2a"},
                           train.sources, train.gpu_specs)
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


def band_stats(pairs: list[tuple[Any, Any]], split: Any, max_rows: int | None) -> dict[str, dict[str, Any]]:
    """Measured-tier statistics of the band families from the K folds' (calibration, test
    rows) pairs, every entry (``fam``, ``fam@gpu``, ``moe:dtype``): ``p50_ape``/``p90_ape``/
    ``mape``/``rows`` from the rows inside the fold's fitted ranges, and the same figures with
    the suffix ``_extrapolated`` from the rows outside them (the error of a query ``plan``
    flags extrapolated)."""
    from llmplan.calibration.fit import residual_stats

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
    from llmplan.calibration.fit import BAND_EXTRA_FAMILIES

    return (*BAND_EXTRA_FAMILIES, "moe_a2a")


def replace_band_stats(measured: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``measured`` with every entry of the band families replaced by ``new``'s (sorted keys)."""
    fams = set(band_families_names())
    keep = {k: v for k, v in measured.items() if k.split("@", 1)[0].split(":", 1)[0] not in fams}
    return dict(sorted({**keep, **new}.items()))


def fold_pairs(meas: Any, gpus: dict, opts: Any, progress: Progress | None = None,
               first: tuple[Any, Any] | None = None) -> list[tuple[Any, Any]]:
    """The K folds' (calibration, test rows) of the band families; ``first``: fold 0's pair
    when the caller has already fitted it (``fit_calibration``'s held-out fit)."""
    kk = n_folds(opts.residual_split)
    out = []
    for k in range(kk):
        if k == 0 and first is not None:
            cal, test = first
            out.append((cal, band_families(test)))
        else:
            out.append(fit_fold(meas, gpus, opts, k, progress))
    return out


def refreshed_index(index_text: str, meas: Any, opts: Any, progress: Progress | None = None) -> str:
    """The index text with the band families' measured-tier entries recomputed (all else kept)."""
    from llmplan.sim.kernel_calibration.calib_file import _dumps
    from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

    d = json.loads(index_text)
    rows = d.get("provenance", {}).get("options", {}).get("crossgen_rows", opts.crossgen_rows)
    gpus = {k: GPUFeatures.from_spec(s) for k, s in sorted(meas.gpu_specs.items())}
    pairs = fold_pairs(meas, gpus, opts, progress)
    new = band_stats(pairs, opts.residual_split, int(rows) if rows is not None else None)
    res = d.setdefault("residuals", {})
    res["measured"] = replace_band_stats(res.get("measured", {}), new)
    return _dumps(d)


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.fit import FitOptions
    from llmplan.calibration.reader import read_measurements
    from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.kernel_bands",
                                description=__doc__.splitlines()[0])
    p.add_argument("--measurements", required=True)
    p.add_argument("--calibration", default=None, help="calibration index (default: the shipped one)")
    p.add_argument("--out", required=True, help="index file to write, in the calibration's folder")
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    try:
        src = Path(a.calibration) if a.calibration else DEFAULT_PATH
        out = Path(a.out)
        if out.suffix.lower() != ".json":
            raise UserError(f"--out '{out}' is not a .json file", key="out", fix="use a .json file name")
        if out.resolve().parent != src.resolve().parent:
            raise UserError(f"--out '{out}' is not beside the calibration's sections ({src.resolve().parent})",
                            key="out", fix="write the index into the calibration's folder")
        text = src.read_text(encoding="utf-8")
        prov = json.loads(text).get("provenance", {}).get("options", {})
        gpus = sorted({s["gpu"] for s in json.loads(text).get("provenance", {}).get("data", [])}) or None
        meas = read_measurements(a.measurements, gpus=gpus,
                                 tables=("moe", "mla_context", "mla_generation", "mla_bmm", "gdn", "moe_a2a"))
        from llmplan.calibration.splits import parse_split

        opts = FitOptions(workers=a.workers, residual_split=parse_split(prov.get("residual_split", "grouped:0.2:0")))
        text = refreshed_index(text, meas, opts)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    out.write_text(text, encoding="utf-8")
    stats = json.loads(text)["residuals"]["measured"]
    print(f"wrote {out}: measured p90 APE " + ", ".join(
        f"{f} {100 * stats[f]['p90_ape']:.1f}%" for f in band_families_names() if f in stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

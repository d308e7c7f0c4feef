"""Fit the cross-gen tier's pooled GEMM model (:mod:`llmplan.sim.kernel_calibration.crossgen_gemm`).

    python -m llmplan.calibration.fit_crossgen --measurements DIR [--out FILE] [--rows-per-gpu 8000] [--trees 150]

One boosted-tree ensemble per pool of measured GPUs, on ``log(latency / (q t_c + t_m))`` of
their GEMM rows (bf16, fp8, fp8_block, fp4; SGLang, TensorRT-LLM, vLLM), each GPU weighing
the same. Pools: the ones the cross-gen tier uses (every vendor's measured GPUs, all of them)
and, for validation, each measured GPU's leave-one-GPU-out pool (the other GPUs of its
vendor, else all others) with and without its same-silicon twins. Deterministic: rows are
subsampled with a seed derived from the GPU's key; the same input gives a byte-identical file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from llmplan.errors import UserError
from llmplan.sim.kernel_calibration import crossgen_gemm as CG
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.crossgen import same_compute
from llmplan.sim.kernel_calibration.gbt import GBTParams, fit_gbt
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

#: hyper-parameters (those of the leave-one-GPU-out comparison in docs/ACCURACY.md)
PARAMS = GBTParams(n_trees=150, depth=6, learning_rate=0.1, l2=20.0, n_bins=48, subsample=0.8, seed=0)


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little")


def pools(vendors: dict[str, str], feats: dict[str, GPUFeatures]) -> list[tuple[str, ...]]:
    """Every pool of two or more GPUs the tier or its validation asks for (sorted, unique)."""
    gpus = sorted(vendors)
    out: set[tuple[str, ...]] = {tuple(gpus)}
    for v in set(vendors.values()):
        out.add(tuple(g for g in gpus if vendors[g] == v))
    for t in gpus:
        same = [g for g in gpus if g != t and vendors[g] == vendors[t]]
        base = same or [g for g in gpus if g != t]
        out.add(tuple(base))
        out.add(tuple(g for g in base if not same_compute(feats[g], feats[t])))
    return sorted(p for p in out if len(p) >= 2)


def training_rows(df, gpu: str, feat: GPUFeatures, rows_per_gpu: int) -> tuple[np.ndarray, np.ndarray]:
    """(design matrix, log(latency / ideal)) of one GPU's usable GEMM rows (a seeded sample)."""
    df = df[df["dtype"].isin(CG.GROUPS) & df["backend"].isin(CG.BACKENDS)].reset_index(drop=True)
    if len(df) > rows_per_gpu:
        idx = np.sort(np.random.default_rng(_seed(gpu)).choice(len(df), rows_per_gpu, replace=False))
        df = df.iloc[idx].reset_index(drop=True)
    phys = F.frame_phys("gemm", df, feat)
    x = F.feature_matrix(phys)
    fl = np.column_stack([(df["backend"] == b).to_numpy(np.float64) for b in CG.BACKENDS]
                         + [(df["dtype"] == g).to_numpy(np.float64) for g in CG.GROUPS])
    ref = np.maximum(np.asarray(CG.ideal_us(phys), dtype=np.float64), 1e-9)
    y = np.log(df["latency_ms"].to_numpy(np.float64) * 1e3 / ref)
    return np.hstack([x, fl]), y


def fit_models(meas, rows_per_gpu: int = 8000, params: GBTParams = PARAMS) -> dict:
    """The file's content (a plain dict) for the GEMM rows of ``meas``."""
    from llmplan.calibration.fit import ATTRIBUTION

    gemm = meas.family("gemm")
    if not len(gemm):
        raise UserError("no GEMM rows in the measurements", key="measurements",
                        fix="pass a folder with <gpu>/gemm.csv.gz tables")
    feats = {g: GPUFeatures.from_spec(s) for g, s in meas.gpu_specs.items()}
    vendors = {g: str(getattr(meas.gpu_specs[g], "vendor", "")).lower() for g in sorted(set(gemm["gpu"]))}
    data = {g: training_rows(gemm[gemm["gpu"] == g], g, feats[g], rows_per_gpu) for g in vendors}
    models, info = {}, {}
    for pool in pools(vendors, feats):
        xs = [data[g][0] for g in pool]
        ys = [data[g][1] for g in pool]
        w = np.concatenate([np.full(len(y), 1.0 / max(len(y), 1)) for y in ys])
        key = CG.pool_key(pool)
        models[key] = fit_gbt(np.vstack(xs), np.concatenate(ys), list(CG.FEATURE_NAMES), params,
                              weights=w / w.mean()).to_dict()
        info[key] = {"gpus": list(pool), "rows": int(sum(len(y) for y in ys))}
    sources = [{"path": s.path, "gpu": s.gpu, "table": s.table, "rows": s.rows, "sha256": s.sha256}
               for s in sorted(meas.sources, key=lambda s: (s.gpu, s.path)) if s.table == "gemm"]
    return {"format": CG.FORMAT, "version": CG.VERSION, "feature_names": list(CG.FEATURE_NAMES),
            "reference": "q * t_c + t_m (us)", "pools": info, "models": models,
            "provenance": {"tool": "llmplan.calibration.fit_crossgen", "attribution": ATTRIBUTION, "data": sources,
                           "options": {"rows_per_gpu": rows_per_gpu, "n_trees": params.n_trees,
                                       "depth": params.depth, "learning_rate": params.learning_rate,
                                       "l2": params.l2, "subsample": params.subsample}}}


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.reader import read_measurements

    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.fit_crossgen", description=__doc__.splitlines()[0])
    p.add_argument("--measurements", required=True)
    p.add_argument("--out", default=str(CG.DEFAULT_PATH))
    p.add_argument("--rows-per-gpu", type=int, default=8000)
    p.add_argument("--trees", type=int, default=PARAMS.n_trees)
    a = p.parse_args(argv)
    try:
        if a.rows_per_gpu < 100 or a.trees < 1:
            raise UserError("--rows-per-gpu must be >= 100 and --trees >= 1", key="rows-per-gpu",
                            fix="e.g. --rows-per-gpu 8000 --trees 150")
        if Path(a.out).suffix.lower() != ".json":
            raise UserError(f"--out '{a.out}' is not a .json file", key="out", fix="use a .json file name")
        meas = read_measurements(a.measurements, tables=("gemm",))
        d = fit_models(meas, a.rows_per_gpu, replace(PARAMS, n_trees=a.trees))
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    Path(a.out).write_text(json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n",
                           encoding="utf-8")
    print(f"wrote {a.out}: {len(d['models'])} pooled GEMM models ({', '.join(sorted(d['pools']))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

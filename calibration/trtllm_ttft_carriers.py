"""Where an engine's served TTFT error sits on the training half: signed log errors per row group.

The engine fit (:mod:`calibration.engine_fit`) reports one median APE per half. To find which
rows carry the error, this module re-fits the engine on the training half of a bases cache (the
same fit as ``--holdout``: :func:`calibration.engine_fit.fit_engine` after
:func:`~calibration.engine_fit.exclude_regimes` and :func:`~calibration.engine_fit.tag_frontend_rows`)
and tabulates, for the training-half rows, the signed log error ``log(predicted / measured)`` of
mean TTFT (and TPOT) per group of rows: model, GPU, version family, concurrency bucket, prompt and
output length, tensor-parallel size, and the row's source (collection file, sweep, database dump;
:func:`source_kind`). Each group gets its row count, median signed log error, median APE and its
*share* of the summed absolute log error of the half, so the groups that carry the error come first.

``--prefill-ratio`` also divides each row's TTFT by the replay's one-prompt prefill step ``P1``
(:func:`calibration.row_breakdown.breakdown_case`: one whole prompt of ``isl`` tokens, no decodes, the
row's engine terms): the measured TTFT and the replayed TTFT without the per-request terms, in units
of ``P1``, per model, prompt length and TP size (columns: concurrency). A wait the replay misses that
scales with the prefill step shows as a ratio gap constant across TP and prompt length; a per-request
constant shows as a gap that falls with ``P1``.

It reads a bases cache written by ``python -m llmplan.calibration.engine_fit ... --bases-cache F``
and does not check the cache's key: the cache must have been written by the same code and
measurements (a cache of another commit's replay gives that commit's bases). No simulation runs
(seconds). Judging candidates on the training half only is the rule of docs/ACCURACY.md; the
held-out half is never tabulated here.

    python -m llmplan.calibration.trtllm_ttft_carriers --measurements ../shared/measurements \\
        --bases-cache bases.json [--backend trtllm] [--by model,gpu]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from llmplan.calibration.benchmark_clients import collection_file
from llmplan.errors import EXIT_USER_ERROR, UserError

#: concurrency buckets of the flatness table (docs/ACCURACY.md "Flat across batch sizes"), upper bounds
CONCURRENCY_EDGES = (0, 8, 16, 32, 64, 256, 1 << 20)
#: groupings printed by default (one table each)
DEFAULT_GROUPS = ("model", "gpu", "family", "version", "concurrency_bucket", "isl", "osl", "tp", "source",
                  "model,gpu,family")


def concurrency_bucket(n: int) -> str:
    """``"(lo, hi]"`` bucket of a client concurrency (:data:`CONCURRENCY_EDGES`)."""
    for lo, hi in zip(CONCURRENCY_EDGES, CONCURRENCY_EDGES[1:]):
        if lo < n <= hi:
            return f"({lo}, {hi}]"
    raise ValueError(f"concurrency must be >= 1, got {n}")


def source_kind(row: dict[str, Any]) -> str:
    """Where a served row came from: ``collection`` (a per-engine-version collection file,
    aiconfigurator's harness behind Dynamo's front end: :func:`calibration.benchmark_clients.collection_file`),
    ``db-dump`` (the database dump) or ``sweep`` (the other ``source_file=<date>.csv`` sweep files)."""
    if collection_file(row) is not None:
        return "collection"
    src = str(row.get("silicon_data_source") or "")
    return "db-dump" if src.startswith("db-dump") else "sweep"


def carrier_table(frame: pd.DataFrame, by: Sequence[str], metric: str = "ttft") -> pd.DataFrame:
    """Per group of ``by``: rows, median signed log error, median APE and share of the summed
    absolute log error of ``metric`` (``ttft`` or ``tpot``; columns ``predicted_<m>_ms`` and
    ``measured_<m>_ms``), largest share first. Rows without a finite positive measurement are left out."""
    pred, meas = frame[f"predicted_{metric}_ms"].astype(float), frame[f"measured_{metric}_ms"].astype(float)
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0) & (pred > 0)
    f = frame[ok].copy()
    if f.empty:
        return pd.DataFrame(columns=[*by, "rows", "median_log_error", "median_ape", "share"])
    f["_le"] = np.log(f[f"predicted_{metric}_ms"].astype(float) / f[f"measured_{metric}_ms"].astype(float))
    f["_ape"] = (np.exp(f["_le"]) - 1.0).abs()
    total = float(f["_le"].abs().sum())
    g = f.groupby(list(by), observed=True, sort=True)
    out = pd.DataFrame({"rows": g["_le"].size(), "median_log_error": g["_le"].median(),
                        "median_ape": g["_ape"].median(),
                        "share": g["_le"].apply(lambda s: float(s.abs().sum()) / total if total > 0 else 0.0)})
    return out.reset_index().sort_values(["share", *by], ascending=[False, *([True] * len(by))],
                                         kind="mergesort").reset_index(drop=True)


def load_bases(cache: Path, backend: str) -> dict[float, list[Any]]:
    """{desynchronisation: bases of ``backend``} from an engine-fit bases cache (key not checked)."""
    from llmplan.calibration.engine_fit import Basis

    try:
        doc = json.loads(Path(cache).read_text())
        by_j = {float(j): [Basis(**{k: tuple(v) if isinstance(v, list) else v for k, v in b.items()}) for b in bs]
                for j, bs in doc["bases"].items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"cannot read bases cache {cache}: {e}", key="--bases-cache",
                        fix="give a file written by `python -m llmplan.calibration.engine_fit ... --bases-cache F`") from e
    mine = {j: [b for b in bs if b.backend == backend] for j, bs in by_j.items()}
    mine = {j: bs for j, bs in mine.items() if bs}
    if not mine:
        raise UserError(f"no {backend} rows in bases cache {cache}", key="--backend",
                        fix=f"write the cache with `python -m llmplan.calibration.engine_fit ... --backend {backend}` "
                            "(or all engines), or pass the --backend the cache holds")
    return mine


def training_frame(by_j: dict[float, list[Any]], df: pd.DataFrame, backend: str, seed: int = 0) -> pd.DataFrame:
    """The training-half rows of ``backend`` with their predictions under the training-half fit
    (engine-wide and version-family terms, the desynchronisation the fit picks) and their labels."""
    from llmplan.calibration import engine_fit as ef

    kept, _ = ef.exclude_regimes(by_j, df)
    kept = ef.tag_frontend_rows(kept, df)
    fit = ef.fit_engine(backend, kept, ef.EngineParams(0.5, 0.0), seed, False)
    rows = df.to_dict("records")
    out = []
    for b in kept[fit.holdout.osl_jitter]:
        if ef.deployment_half(b.deployment, seed) != 0:
            continue
        p = ef.terms_for(b, fit.holdout, fit.holdout_families)
        ttft, tpot = b.predict(p)
        r = rows[b.index]
        out.append({"index": b.index, "id": r.get("id"), "model": b.model, "gpu": b.gpu, "family": b.family,
                    "version": str(r.get("backend_version") or "") or "-", "concurrency": b.concurrency,
                    "concurrency_bucket": concurrency_bucket(b.concurrency), "isl": b.isl, "osl": b.osl,
                    "tp": int(float(r.get("tp_size") or 1)), "source": source_kind(r),
                    "predicted_ttft_ms": ttft, "measured_ttft_ms": b.measured_ttft_ms,
                    "predicted_tpot_ms": tpot, "measured_tpot_ms": b.measured_tpot_ms,
                    "request_ms": b.request_ms(p)})
    return pd.DataFrame(out)


def prefill_step_ms(df: pd.DataFrame, indices: Iterable[int], profiles: str | None = "default") -> dict[int, float]:
    """{row index: the replay's one-prompt prefill step (ms, incl. the row's host terms)}
    (:func:`calibration.row_breakdown.breakdown_case`, the row mapped as the replay maps it)."""
    from llmplan.calibration.engine_fit import load_engine_overrides
    from llmplan.calibration.row_breakdown import breakdown_case
    from llmplan.calibration.validate_serving import map_row_with_terms

    overrides, _ = load_engine_overrides(profiles)
    rows = df.to_dict("records")
    out = {}
    for i in indices:
        m, _ = map_row_with_terms(rows[i], i, overrides)
        if m.case is not None:
            out[int(i)] = float(breakdown_case(m.case).prefill_ms)
    return out


def prefill_ratio_table(frame: pd.DataFrame, p1: dict[int, float], value: str = "measured") -> pd.DataFrame:
    """Median TTFT in units of the one-prompt prefill step per (model, isl, tp) x concurrency:
    ``value`` ``measured`` (the measured mean TTFT) or ``replay`` (the predicted TTFT less the
    per-request terms, column ``request_ms``)."""
    f = frame.copy()
    f["p1_ms"] = f["index"].map(p1)
    f = f[np.isfinite(f["p1_ms"].astype(float)) & (f["p1_ms"] > 0)]
    num = f["measured_ttft_ms"] if value == "measured" else f["predicted_ttft_ms"] - f["request_ms"]
    f["_ratio"] = num / f["p1_ms"]
    return f.pivot_table(index=["model", "isl", "tp"], columns="concurrency", values="_ratio", aggfunc="median")


def _fmt(t: pd.DataFrame) -> str:
    t = t.copy()
    for c in ("median_log_error", "median_ape", "share"):
        t[c] = t[c].map(lambda x: f"{x:.3f}")
    return t.to_string(index=False)


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.trtllm_ttft_carriers",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", required=True, nargs="+", help="e2e_serving.csv files or folders")
    ap.add_argument("--bases-cache", required=True, help="bases cache written by engine_fit --bases-cache")
    ap.add_argument("--backend", default="trtllm", choices=("trtllm", "vllm", "sglang"))
    ap.add_argument("--seed", type=int, default=0, help="seed of the deployment-grouped split")
    ap.add_argument("--by", action="append", default=None,
                    help=f"comma-separated grouping (repeatable; default: {'; '.join(DEFAULT_GROUPS)})")
    ap.add_argument("--metric", choices=("ttft", "tpot"), default="ttft")
    ap.add_argument("--prefill-ratio", action="store_true",
                    help="also print measured and replayed TTFT in units of the one-prompt prefill step")
    ap.add_argument("--engine-profiles", default="default",
                    help="engine terms of the prefill step of --prefill-ratio ('default', 'none' or a JSON file)")
    ap.add_argument("--rows-out", default=None, help="also write the per-row training-half predictions (CSV)")
    a = ap.parse_args(list(argv) if argv is not None else None)
    from llmplan.calibration.serving_rows import read_serving_files, serving_files

    try:
        paths = serving_files(list(a.measurements))
        df = read_serving_files(paths)
        frame = training_frame(load_bases(Path(a.bases_cache), a.backend), df, a.backend, a.seed)
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    m = a.metric
    ape = (frame[f"predicted_{m}_ms"] / frame[f"measured_{m}_ms"] - 1.0).abs()
    print(f"{a.backend} training half (seed {a.seed}): {len(frame)} rows, median APE of mean {m.upper()} "
          f"{100 * float(np.nanmedian(ape)):.1f}%")
    for spec in a.by or DEFAULT_GROUPS:
        by = [s.strip() for s in spec.split(",") if s.strip()]
        print(f"\nby {', '.join(by)}")
        print(_fmt(carrier_table(frame, by, m)))
    if a.prefill_ratio:
        try:
            p1 = prefill_step_ms(df, frame["index"].tolist(), a.engine_profiles)
        except UserError as e:
            print(e.render(), file=sys.stderr)
            return EXIT_USER_ERROR
        frame["p1_ms"] = frame["index"].map(p1)
        for value in ("measured", "replay"):
            print(f"\n{value} TTFT / one-prompt prefill step (median; columns: concurrency)")
            print(prefill_ratio_table(frame, p1, value).round(2).to_string())
    if a.rows_out:
        frame.to_csv(a.rows_out, index=False)
        print(f"\nwrote {a.rows_out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

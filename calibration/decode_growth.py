"""Where the served TPOT error at high concurrency comes from: decode steps or prompts.

In a closed loop of N clients with fixed prompt (isl) and output (osl) lengths, about N / osl
new prompts enter the engine per decode step, and every running sequence's time per output
token carries them (mixed steps under vLLM's chunked prefill and TensorRT-LLM's in-flight
batching; separate prefill batches under SGLang). So, over the runs of one deployment at one
concurrency that differ only in osl,

    TPOT ~= D + P x N / osl

with ``D`` the decode step at N sequences and ``P`` the time one prompt adds to the steps it
shares with the decodes. Fitting this line to the measured TPOT and, separately, to the
replay's predicted TPOT (``llmplan validate serving --out FILE``) splits the TPOT error of a
(deployment, N) group into its decode part (``D_pred / D_meas``) and its prompt part
(``P_pred / P_meas``). Both lines are fitted the same way, so what the approximation leaves
out (KV lengths that grow with osl, prompts that share a step) cancels in the ratios.

A second check needs no regression: at low concurrency the TTFT of a deployment's runs grows
with the prompt length by about the prefill time per prompt token; :func:`ttft_isl_slopes`
compares the measured and predicted slope over the isl values of one (deployment, N, osl)
group.

Run: ``python -m llmplan.calibration.decode_growth --pred holdout_pred.csv`` (any CSV written by
``llmplan validate serving --out``; rows without a prediction are skipped). Findings:
docs/ACCURACY.md, "Flat across batch sizes (issue 12)".
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from llmplan.calibration.serving_rows import concurrency_of
from llmplan.errors import EXIT_USER_ERROR, UserError

#: columns that, with the concurrency, name a (deployment, N) group of runs differing in osl / isl
GROUP_COLUMNS = ("backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode",
                 "tp_size", "pp_size", "attention_dp_size", "moe_ep_size")
#: concurrency buckets of the flatness table (docs/ACCURACY.md)
BUCKETS = ((1, 1), (2, 4), (5, 16), (17, 64), (65, 256), (257, 1024), (1025, 4096))


@dataclass(frozen=True)
class Line:
    """TPOT = d_ms + p_ms x N / osl fitted to one group (measured or predicted)."""

    d_ms: float
    p_ms: float


def fit_line(x: np.ndarray, y: np.ndarray) -> Line:
    """Least-squares line through (x, y) (at least two distinct x)."""
    a = np.vstack([np.ones_like(x), x]).T
    d, p = np.linalg.lstsq(a, y, rcond=None)[0]
    return Line(float(d), float(p))


def bucket_of(n: int) -> str:
    """The flatness table's concurrency bucket of ``n`` clients."""
    for lo, hi in BUCKETS:
        if lo <= n <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
    return f">{BUCKETS[-1][1]}"


def scored_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Aggregated rows with a measured and a predicted TPOT and TTFT, with ``N`` and string group keys."""
    need = ("predicted_tpot_ms", "predicted_ttft_ms", "silicon_tpot_ms", "silicon_ttft_ms", "isl", "osl", "mode")
    missing = [c for c in need + GROUP_COLUMNS + ("silicon_data_source", "batch_size") if c not in df.columns]
    if missing:
        raise UserError(f"column '{missing[0]}' is missing from the predictions file", key="--pred",
                        fix="give a CSV written by `llmplan validate serving --out FILE`")
    d = df[(df["mode"].astype(str) == "agg")].copy()
    d["N"] = [concurrency_of(r) for r in d.to_dict("records")]   # 0 when unknown: dropped below
    for c in ("predicted_tpot_ms", "predicted_ttft_ms", "silicon_tpot_ms", "silicon_ttft_ms"):
        d[c] = pd.to_numeric(d[c], errors="coerce")
    d = d[(d["predicted_tpot_ms"] > 0) & (d["silicon_tpot_ms"] > 0) & (d["N"] >= 1)].copy()
    for c in GROUP_COLUMNS:  # NaN keys would drop out of groupby
        d[c] = d[c].astype(object).where(d[c].notna(), "-").astype(str)
    return d


def decode_prompt_split(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (deployment, isl, N) group with at least two osl values: the measured and
    predicted lines (``D_meas``, ``P_meas``, ``D_pred``, ``P_pred``) and their ratios."""
    d = scored_rows(df)
    out = []
    for key, g in d.groupby(list(GROUP_COLUMNS) + ["isl", "N"], sort=True):
        g = g.groupby("osl")[["silicon_tpot_ms", "predicted_tpot_ms"]].mean().reset_index()
        if len(g) < 2:
            continue
        x = key[-1] / g["osl"].to_numpy(dtype=float)
        meas = fit_line(x, g["silicon_tpot_ms"].to_numpy(dtype=float))
        pred = fit_line(x, g["predicted_tpot_ms"].to_numpy(dtype=float))
        out.append({**dict(zip(list(GROUP_COLUMNS) + ["isl", "N"], key)), "osl_values": len(g),
                    "D_meas": meas.d_ms, "D_pred": pred.d_ms, "P_meas": meas.p_ms, "P_pred": pred.p_ms})
    r = pd.DataFrame(out)
    if r.empty:
        return r
    r["D_ratio"] = r["D_pred"] / r["D_meas"]
    # a prompt's share is only meaningful where the measured runs show one (P_meas > 0)
    r["P_ratio"] = np.where(r["P_meas"] > 0, r["P_pred"] / r["P_meas"].where(r["P_meas"] > 0), np.nan)
    r["bucket"] = [bucket_of(int(n)) for n in r["N"]]
    return r


def ttft_isl_slopes(df: pd.DataFrame, max_concurrency: int = 8) -> pd.DataFrame:
    """Per (deployment, N <= ``max_concurrency``, osl) group with at least two isl values: the
    slope of mean TTFT over isl, measured and predicted (ms per 1,000 prompt tokens)."""
    d = scored_rows(df)
    d = d[d["N"] <= max_concurrency]
    out = []
    for key, g in d.groupby(list(GROUP_COLUMNS) + ["N", "osl"], sort=True):
        g = g.groupby("isl")[["silicon_ttft_ms", "predicted_ttft_ms"]].mean().reset_index()
        if len(g) < 2:
            continue
        x = g["isl"].to_numpy(dtype=float) / 1000.0
        meas = fit_line(x, g["silicon_ttft_ms"].to_numpy(dtype=float))
        pred = fit_line(x, g["predicted_ttft_ms"].to_numpy(dtype=float))
        out.append({**dict(zip(list(GROUP_COLUMNS) + ["N", "osl"], key)), "isl_values": len(g),
                    "slope_meas": meas.p_ms, "slope_pred": pred.p_ms})
    r = pd.DataFrame(out)
    if not r.empty:
        r["slope_ratio"] = np.where(r["slope_meas"] > 0, r["slope_pred"] / r["slope_meas"].where(r["slope_meas"] > 0),
                                    np.nan)
    return r


def bucket_table(split: pd.DataFrame) -> pd.DataFrame:
    """Median D and P ratios (and group counts) per engine and concurrency bucket."""
    if split.empty:
        return split
    order = {bucket_of(lo): i for i, (lo, _) in enumerate(BUCKETS)}
    t = (split.groupby(["backend", "bucket"])
         .agg(groups=("D_ratio", "size"), D_ratio=("D_ratio", "median"), P_ratio=("P_ratio", "median"))
         .reset_index())
    t["_o"] = t["bucket"].map(order).fillna(len(order))
    return t.sort_values(["backend", "_o"]).drop(columns="_o").reset_index(drop=True)


def _fmt_table(t: pd.DataFrame, cols: Iterable[str]) -> str:
    return t.to_string(index=False, float_format=lambda v: "nan" if math.isnan(v) else f"{v:.3f}",
                       columns=list(cols))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.decode_growth", description=__doc__.split("\n")[0])
    ap.add_argument("--pred", required=True, help="CSV written by `llmplan validate serving --out FILE`")
    ap.add_argument("--out", help="write the per-group split (CSV)")
    ap.add_argument("--ttft-concurrency", type=int, default=8, help="largest N of the TTFT-over-isl check")
    a = ap.parse_args(argv)
    try:
        return _report(a)
    except UserError as e:   # one or two lines, no traceback
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR


def _report(a: argparse.Namespace) -> int:
    try:
        df = pd.read_csv(a.pred)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {a.pred}: {e}", key="--pred") from e
    split = decode_prompt_split(df)
    if split.empty:
        print("no (deployment, N) group has two output lengths with predictions")
        return 0
    print("TPOT = D + P x N / osl per (deployment, isl, N); median predicted / measured:")
    print(_fmt_table(bucket_table(split), ("backend", "bucket", "groups", "D_ratio", "P_ratio")))
    slopes = ttft_isl_slopes(df, a.ttft_concurrency)
    if not slopes.empty:
        s = slopes.groupby("backend").agg(groups=("slope_ratio", "size"), slope_ratio=("slope_ratio", "median"))
        print(f"\nTTFT over isl at N <= {a.ttft_concurrency}: median predicted / measured slope")
        print(_fmt_table(s.reset_index(), ("backend", "groups", "slope_ratio")))
    if a.out:
        split.to_csv(a.out, index=False)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

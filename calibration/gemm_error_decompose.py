"""Where a GEMM validation's error sits, and how much of it the table's own scatter explains.

Reads the per-row file of ``llmplan validate kernels --family gemm --out F.csv`` (measured and
predicted latency of every scored row) and prints, per engine, dtype group, ``kernel_source``,
m bucket and roofline regime (``calibration.crossgen_decompose.regimes``): rows, MAPE %, mean log
error (+ = predicted too slow), the share of the summed absolute error and the **excess** over the
5% target (percentage points of the whole table's MAPE that the group's rows above 5% carry).

With ``--measurements`` it also prints each (engine, dtype) table's **scatter** at m = 2..15, where a
GEMM's time hardly depends on m (one M tile; the weights dominate): the second difference of
log latency over consecutive m of one (n, k), ``d2 = l[m] - (l[m-1] + l[m+1]) / 2``, which for
independent per-row noise of s.d. sigma has s.d. sigma * sqrt(1.5). ``noise_sd`` is that sigma,
``noise_robust`` the same from the median |d2| (normal scale; the two differ when the scatter is
heavy-tailed), and ``noise_ape`` sigma * sqrt(2/pi), the MAPE a perfect model of the shape would
still show against rows with that scatter. Library kernel switches between neighbouring m (e.g.
split-K turned on at m = 5 of one shape) also count here, so it bounds the noise from above.

    python -m llmplan.calibration.gemm_error_decompose --csv F.csv --gpu l40s \\
        [--measurements ../shared/measurements] [--by backend,dtype,m_bucket]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

#: m buckets (upper edges, inclusive)
M_EDGES = (16, 64, 256, 1024, 4096)
M_LABELS = ("1-16", "17-64", "65-256", "257-1024", "1025-4096", ">4096")
TARGET = 0.05
DEFAULT_BY = ("backend,dtype", "backend,dtype,m_bucket", "backend,dtype,kernel_source", "regime")


def m_bucket(m: pd.Series) -> pd.Series:
    return pd.Series(pd.cut(m, [0, *M_EDGES, np.inf], labels=M_LABELS), index=m.index).astype(str)


def prepare(frame: pd.DataFrame, gpu: object | None = None) -> pd.DataFrame:
    """The validation rows with ``ape``, ``log_err``, ``m_bucket`` (and ``regime`` given the GPU)."""
    f = frame.reset_index(drop=True)
    ratio = f["predicted_ms"].to_numpy(np.float64) / f["measured_ms"].to_numpy(np.float64)
    f = f.assign(ape=np.abs(ratio - 1.0), log_err=np.log(ratio), m_bucket=m_bucket(f["m"]))
    if gpu is not None:
        from llmplan.calibration.crossgen_decompose import with_regimes

        f = with_regimes(f, "gemm", gpu)
    return f


def breakdown(f: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``: rows, MAPE %, mean log error, share of the summed error, excess
    (points of the table's MAPE carried by the group's error above :data:`TARGET`)."""
    total, n = float(f["ape"].sum()), len(f)
    g = f.groupby(keys, observed=True, sort=True)
    out = pd.DataFrame({"rows": g.size(), "mape_pct": 100 * g["ape"].mean(), "bias": g["log_err"].mean(),
                        "share": g["ape"].sum() / max(total, 1e-12)})
    out["excess_pts"] = 100 * (out["mape_pct"] / 100 - TARGET).clip(lower=0) * out["rows"] / max(n, 1)
    return out


def table_scatter(table: pd.DataFrame) -> pd.DataFrame:
    """Per (backend, dtype): the m = 2..15 scatter of a measurement table (module docstring)."""
    t = table[(table["m"] >= 1) & (table["m"] <= 16)].sort_values(["backend", "dtype", "n", "k", "m"])
    rows = []
    for (be, dt), s in t.groupby(["backend", "dtype"], sort=True):
        lat = np.log(s["latency_ms"].to_numpy(np.float64))
        m = s["m"].to_numpy()
        nk = s["n"].to_numpy() * 1_000_003 + s["k"].to_numpy()
        ok = (np.diff(m)[:-1] == 1) & (np.diff(m)[1:] == 1) & (nk[1:-1] == nk[:-2]) & (nk[2:] == nk[1:-1])
        d2 = (lat[1:-1] - (lat[:-2] + lat[2:]) / 2.0)[ok]
        if len(d2) < 10:
            continue
        sd = float(np.std(d2)) / math.sqrt(1.5)
        robust = float(np.median(np.abs(d2))) / 0.6745 / math.sqrt(1.5)
        rows.append({"backend": be, "dtype": dt, "triples": len(d2), "noise_sd_pct": 100 * sd,
                     "noise_robust_pct": 100 * robust, "noise_ape_pct": 100 * sd * math.sqrt(2 / math.pi)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.gemm_error_decompose", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True, type=Path, help="per-row file of `llmplan validate kernels --out`")
    ap.add_argument("--gpu", help="catalog GPU of the rows (adds the roofline regime)")
    ap.add_argument("--measurements", help="measurement folder: also print each table's m <= 16 scatter")
    ap.add_argument("--by", action="append", help="comma-separated grouping columns (repeatable)")
    a = ap.parse_args(argv)
    frame = pd.read_csv(a.csv)
    frame = frame[frame["family"] == "gemm"] if "family" in frame else frame
    gpu = None
    if a.gpu:
        from llmplan.hardware_catalog.loader import get_gpu
        from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

        gpu = GPUFeatures.from_spec(get_gpu(a.gpu))
    f = prepare(frame, gpu)
    print(f"GEMM rows {len(f)}: MAPE {100 * f['ape'].mean():.2f}%, mean log error {f['log_err'].mean():+.4f}")
    pd.set_option("display.width", 200)
    for by in a.by or [b for b in DEFAULT_BY if gpu is not None or "regime" not in b]:
        keys = [k for k in by.split(",") if k]
        if all(k in f for k in keys):
            print()
            print(breakdown(f, keys).round(3).to_string())
    if a.measurements:
        from llmplan.calibration.reader import read_measurements

        gkey = a.gpu or str(frame["gpu"].iloc[0])
        meas = read_measurements(a.measurements, gpus=[gkey], tables=("gemm",))
        print()
        print(table_scatter(meas.frames["gemm"]).round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Serving metrics: per-request records, aggregates, SLO checks, goodput.

Definitions follow ``vllm bench serve`` (``vllm/benchmarks/serve.py``):

* TTFT = first token time - arrival.
* TPOT = (e2e - TTFT) / (output_tokens - 1); undefined (NaN, excluded) when 1 token.
* ITL = gap between consecutive tokens of one request. All ITLs go into a weighted
  log-spaced histogram (0.1% relative resolution) instead of being stored one by one.
* e2e = finish - arrival; queue = first scheduled - arrival.

Warm-up and cool-down (:class:`MeasureWindow`): requests are numbered in arrival
order; the first ``max(ceil(warmup_fraction*n), warmup_requests)`` and the last
``ceil(cooldown_fraction*n)`` are simulated but left out of every aggregate (their
tokens still occupy the engine). Defaults: 5% and 5%; closed loop also skips the
first ``concurrency`` requests (the ramp). Throughput is measured over the window from
the first measured arrival to the last measured finish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class SLOThresholds:
    """Latency targets; a request meets the SLO when it meets every target given."""

    ttft_ms: Optional[float] = None   # time to first token, ms
    tpot_ms: Optional[float] = None   # time per output token after the first, ms
    e2e_ms: Optional[float] = None    # end-to-end latency, ms
    percentile: float = 90.0          # the targets must hold at this percentile of requests
    mean: bool = False                # the targets bound the mean over finished requests instead


@dataclass(frozen=True)
class MeasureWindow:
    """Which requests count in the aggregates (see module docstring)."""

    warmup_fraction: float = 0.05
    cooldown_fraction: float = 0.05
    warmup_requests: Optional[int] = None  # at least this many leading requests excluded

    def measured_range(self, n: int) -> tuple[int, int]:
        """Half-open index range ``[lo, hi)`` of measured requests (all when too few)."""
        lo = max(math.ceil(self.warmup_fraction * n), self.warmup_requests or 0)
        hi = n - math.ceil(self.cooldown_fraction * n)
        return (lo, hi) if hi > lo else (0, n)


class LogHistogram:
    """Weighted samples of positive values in log-spaced bins; exact count, sum and max."""

    __slots__ = ("bins", "count", "total", "max")
    #: bins per natural-log unit: relative bin width exp(1/1000) - 1 = 0.1%
    K = 1000.0

    def __init__(self) -> None:
        self.bins: dict[int, float] = {}
        self.count = 0.0
        self.total = 0.0
        self.max = 0.0

    def add(self, x: float, w: float = 1.0) -> None:
        b = int(math.log(x) * 1000.0) if x > 1e-9 else -20723
        bins = self.bins
        bins[b] = bins.get(b, 0.0) + w
        self.count += w
        self.total += x * w
        if x > self.max:
            self.max = x

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def frame(self) -> pd.DataFrame:
        """The histogram as a table: ``itl_ms`` (bin centre) and ``tokens`` (weight), sorted."""
        keys = sorted(self.bins)
        return pd.DataFrame({"itl_ms": [math.exp((k + 0.5) / self.K) for k in keys],
                             "tokens": [self.bins[k] for k in keys]})

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Values at the given percentiles (0-100), bin centres."""
        if not self.count:
            return [math.nan for _ in qs]
        keys = np.array(sorted(self.bins))
        cum = np.cumsum([self.bins[k] for k in keys])
        out = []
        for q in qs:
            i = int(np.searchsorted(cum, q / 100.0 * cum[-1], side="left"))
            i = min(i, len(keys) - 1)
            out.append(min(math.exp((keys[i] + 0.5) / self.K), self.max))
        return out


REQUEST_COLUMNS = ("request_id", "replica", "arrival_ms", "input_tokens", "output_tokens", "first_scheduled_ms",
                   "first_token_ms", "finish_ms", "queue_ms", "ttft_ms", "tpot_ms", "e2e_ms", "preemptions",
                   "cached_prompt_tokens", "measured", "finished")


def requests_frame(seqs: list) -> pd.DataFrame:
    """One row per request (see REQUEST_COLUMNS); times in ms, NaN where not reached."""
    n = len(seqs)
    arr = np.fromiter((s.arrival for s in seqs), float, n)
    fs = np.fromiter((s.first_sched for s in seqs), float, n)
    ft = np.fromiter((s.first_token for s in seqs), float, n)
    fin = np.fromiter((s.finish for s in seqs), float, n)
    out = np.fromiter((s.O for s in seqs), np.int64, n)
    ttft = ft - arr
    e2e = fin - arr
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e2e - ttft) / (out - 1), np.nan)
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64),
        "replica": np.fromiter((s.replica for s in seqs), np.int64, n),
        "arrival_ms": arr,
        "input_tokens": np.fromiter((s.P for s in seqs), np.int64, n),
        "output_tokens": out,
        "first_scheduled_ms": fs,
        "first_token_ms": ft,
        "finish_ms": fin,
        "queue_ms": fs - arr,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": e2e,
        "preemptions": np.fromiter((s.preemptions for s in seqs), np.int64, n),
        "cached_prompt_tokens": np.fromiter((s.cached_tokens for s in seqs), np.int64, n),
        "measured": np.fromiter((s.measured for s in seqs), bool, n),
        "finished": ~np.isnan(fin),
    })


def _stats(x: np.ndarray, name: str, out: dict) -> None:
    x = x[~np.isnan(x)]
    out[f"{name}_mean"] = float(x.mean()) if len(x) else math.nan
    for p, v in zip(PERCENTILES, np.percentile(x, PERCENTILES) if len(x) else [math.nan] * len(PERCENTILES)):
        out[f"{name}_p{p}"] = float(v)


def meets_slo(df: pd.DataFrame, slo: SLOThresholds) -> np.ndarray:
    """Per-request: meets every target given (NaN TPOT of 1-token requests counts as met)."""
    ok = df["finished"].to_numpy().copy()
    for col, lim in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)):
        if lim is not None:
            v = df[col].to_numpy()
            ok &= np.isnan(v) | (v <= lim) if col == "tpot_ms" else (v <= lim)
    return ok


def summarize(df: pd.DataFrame, itl: LogHistogram, slo: Optional[SLOThresholds]) -> dict:
    """Aggregates over measured, finished requests (JSON-serializable; NaN becomes None)."""
    m = df[df["measured"].to_numpy()]
    done = m[m["finished"].to_numpy()]
    out: dict = {"requests": int(len(df)), "measured_requests": int(len(m)), "measured_finished": int(len(done))}
    for col in ("ttft", "tpot", "e2e", "queue"):
        _stats(done[f"{col}_ms"].to_numpy(dtype=float), f"{col}_ms", out)
    out["itl_ms_mean"] = itl.mean()
    for p, v in zip(PERCENTILES, itl.quantiles(PERCENTILES)):
        out[f"itl_ms_p{p}"] = v
    out["itl_ms_max"] = itl.max if itl.count else math.nan
    out["itl_count"] = int(round(itl.count))
    if len(done):
        t0 = float(done["arrival_ms"].min())
        t1 = float(done["finish_ms"].max())
        dur_s = max(t1 - t0, 1e-9) / 1000.0
        out["duration_s"] = dur_s
        out["request_throughput_rps"] = len(done) / dur_s
        out["input_throughput_tps"] = float(done["input_tokens"].sum()) / dur_s
        out["output_throughput_tps"] = float(done["output_tokens"].sum()) / dur_s
    else:
        out["duration_s"] = out["request_throughput_rps"] = math.nan
        out["input_throughput_tps"] = out["output_throughput_tps"] = math.nan
    if slo is not None:
        ok = meets_slo(m, slo)
        out["slo_attainment"] = float(ok.mean()) if len(m) else math.nan
        out["goodput_rps"] = float(ok.sum()) / out["duration_s"] if len(done) else 0.0
        out["slo_met"] = bool(slo_met_at_percentile(m, slo))
    return out


def slo_met_at_percentile(df: pd.DataFrame, slo: SLOThresholds) -> bool:
    """True when, at ``slo.percentile`` (or on the mean, ``slo.mean``), each given latency is within its target.

    Unfinished requests count as infinitely late."""
    if len(df) == 0:
        return False
    fin = df["finished"].to_numpy()
    for col, lim in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms), ("e2e_ms", slo.e2e_ms)):
        if lim is None:
            continue
        v = np.where(fin, df[col].to_numpy(dtype=float), np.inf)
        if col == "tpot_ms":
            v = v[~np.isnan(v)]
            if len(v) == 0:
                continue
        if slo.mean:  # a mean over finished requests (the queue's growth is judged as overload)
            v = v[np.isfinite(v)]
            if len(v) == 0 or float(v.mean()) > lim:
                return False
        elif float(np.percentile(v, slo.percentile, method="higher")) > lim:
            return False
    return True


def json_clean(d: dict) -> dict:
    """Replace NaN/inf by None and numpy scalars by Python ones (strict JSON)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, (np.floating, float)):
            v = float(v)
            out[k] = v if math.isfinite(v) else None
        elif isinstance(v, np.integer):
            out[k] = int(v)
        elif isinstance(v, np.bool_):
            out[k] = bool(v)
        elif isinstance(v, dict):
            out[k] = json_clean(v)
        else:
            out[k] = v
    return out

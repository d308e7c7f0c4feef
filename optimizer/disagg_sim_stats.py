"""What the planner keeps from one simulation of a disaggregated split (``sim/disaggregated.py``)
besides its SLO figures: the sampling spread of each simulated statistic (for P(SLO met),
``optimizer/risk.py``) and each pool's activity (for its power, ``optimizer/disagg_figures.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from llmplan.optimizer.risk import target_log_sd
from llmplan.optimizer.types import SLOTarget


def targets_log_sd(requests: pd.DataFrame, slos: list[SLOTarget]) -> dict[str, float | None]:
    """SLOTarget.key -> log-space sampling spread of the simulated statistic over the measured,
    finished requests (the same estimate as the aggregated finalists'; None below 2 values)."""
    m = requests[requests["measured"].to_numpy() & requests["finished"].to_numpy()]
    out: dict[str, float | None] = {}
    for t in slos:
        sd = target_log_sd(m[f"{t.metric}_ms"].dropna().to_numpy(), t) if len(m) else math.nan
        out[t.key] = round(sd, 6) if math.isfinite(sd) else None
    return out


def pool_activity(res, prefill_workers: int) -> dict[str, dict]:
    """Per pool: ``busy_fraction`` (time its workers' first stage ran a step over the span from
    the first arrival to the last finish, averaged over the workers) and, for decode, ``mean_batch`` (sequences per step, averaged
    over the samples where a step ran). Workers are indexed prefill first, then decode."""
    # the span the requests occupied (first arrival to last finish): the event loop's clock runs
    # on to its deadline events after the last request, which is no serving time
    df = res.requests
    fin = df.loc[df["finished"].to_numpy(), "finish_ms"]
    span = float(fin.max() - df["arrival_ms"].min()) if len(fin) else 0.0
    out: dict[str, dict] = {}
    for pool in ("prefill", "decode"):
        stats = [s for s in res.replica_stats if s.get("pool") == pool]
        busy = (sum(float(s.get("busy_ms", 0.0)) for s in stats) / (len(stats) * span)) if stats and span > 0 else None
        out[pool] = {"workers": len(stats), "busy_fraction": None if busy is None else round(min(1.0, busy), 6)}
    ts = res.timeseries
    if ts is not None and len(ts):
        dec = ts[(ts["replica"] >= prefill_workers) & (ts["batch_size"] > 0)]
        out["decode"]["mean_batch"] = round(float(np.mean(dec["batch_size"])), 3) if len(dec) else None
    else:
        out["decode"]["mean_batch"] = None
    return out

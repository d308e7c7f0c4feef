"""Every SLO target at its own percentile and limit.

A config may set several percentiles of one metric (``ttft_p50_ms=300`` with
``ttft_p99_ms=2000``). Each is checked on its own; where one figure per metric is shown,
it is the *binding* target: the one whose predicted value is closest to (or furthest
beyond) its limit, i.e. the largest value/limit.

A mean target (``slo.ttft_mean_ms``, ``SLOTarget.stat == "mean"``) is judged on the mean over
requests: the analytical screen's mean estimate (``"mean"`` in its percentile maps), the
simulator's mean over finished requests (``sample_value``; ``SLOThresholds.mean`` in the
verification bisection).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from llmplan.optimizer.types import SLOTarget
from llmplan.sim.metrics import SLOThresholds


def target_values(ttft_ms: Mapping, tpot_ms: Mapping, slos: list[SLOTarget]) -> dict[str, float]:
    """SLOTarget.key -> the value at that target's percentile, or the mean for a mean target
    (from percentile -> ms maps that also hold ``"mean"``)."""
    return {s.key: float((ttft_ms if s.metric == "ttft" else tpot_ms).get(s.quantity, math.nan)) for s in slos}


def sample_value(values, s: SLOTarget) -> float:
    """A target's statistic of a sample of per-request latencies (ms; NaN dropped): the mean
    for a mean target, else the percentile (numpy's default linear interpolation)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not len(v):
        return math.nan
    return float(v.mean()) if s.is_mean else float(np.percentile(v, s.percentile))


def ratio(value_ms: float, s: SLOTarget) -> float:
    """value / limit; > 1 misses. NaN counts as a miss (inf)."""
    return value_ms / s.limit_ms if value_ms == value_ms else math.inf


def binding_target(values: Mapping[str, float], slos: list[SLOTarget], metric: str) -> SLOTarget | None:
    """The target of ``metric`` with the largest value/limit (ties: the higher percentile)."""
    mine = [s for s in slos if s.metric == metric and s.key in values]
    if not mine:
        return None
    return max(mine, key=lambda s: (ratio(values[s.key], s), not s.is_mean, s.percentile))


def worst_miss(values: Mapping[str, float], slos: list[SLOTarget]) -> tuple[SLOTarget | None, float]:
    """(target furthest beyond its limit, value/limit) over all targets with a value."""
    have = [s for s in slos if s.key in values]
    if not have:
        return None, math.nan
    s = max(have, key=lambda t: (ratio(values[t.key], t), not t.is_mean, t.percentile))
    return s, ratio(values[s.key], s)


def misses(values: Mapping[str, float], slos: list[SLOTarget]) -> list[SLOTarget]:
    """Targets not met (NaN or above the limit)."""
    return [s for s in slos if s.key in values and not values[s.key] <= s.limit_ms]


def threshold_groups(slos: list[SLOTarget]) -> list[SLOThresholds]:
    """One simulator threshold set per distinct percentile (the simulator checks one
    percentile per set), then one for the mean targets if any (``SLOThresholds.mean``).
    A rate meets the SLOs when it meets every set."""
    out = []
    pct_slos = [s for s in slos if not s.is_mean]
    for pct in sorted({s.percentile for s in pct_slos}):
        at = {s.metric: s.limit_ms for s in pct_slos if s.percentile == pct}
        out.append(SLOThresholds(ttft_ms=at.get("ttft"), tpot_ms=at.get("tpot"), percentile=pct))
    mean = {s.metric: s.limit_ms for s in slos if s.is_mean}
    if mean:
        out.append(SLOThresholds(ttft_ms=mean.get("ttft"), tpot_ms=mean.get("tpot"), mean=True))
    return out


"""Served-latency error bands (issue 9 section 5): p90 bands of mean TTFT and TPOT per engine,
sized and checked on rows the engine terms were not fitted to.

A band is a pair of factors per engine and metric: the measured value lies in
``[predicted x lo, predicted x hi]`` for about 90% of served deployments the fit did not see.
Residuals ``log(measured / predicted)`` are *held-out* residuals: two folds (terms fitted on
deployment half 0, residuals on half 1, and the reverse; :func:`calibration.engine_fit.
grouped_halves`). The band is the central 90% interval of one fold's residuals; its coverage
is measured on the other fold's residuals (both directions, rows pooled;
:func:`calibration.engine_fit.bands_from_fit` builds the folds); where it covers less than
85%, the interval is widened step by step (:data:`LEVELS`); where it covers more than 95%, it
is narrowed (:data:`NARROWER`). The shipped band
(``bands`` in ``sim/data/engine_profiles.json``, read at run time by
:mod:`sim.serving_bands`) is that central interval of both folds' held-out residuals.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: central share the band should cover
LEVEL = 0.90
METRICS = ("ttft", "tpot")


def log_residuals(bases: list[Any], pick: Any) -> dict[str, np.ndarray]:
    """log(measured / predicted) of TTFT and TPOT for ``bases`` under terms ``pick(basis)``."""
    pred = np.array([b.predict(pick(b)) for b in bases]) if bases else np.zeros((0, 2))
    meas = np.array([[b.measured_ttft_ms, b.measured_tpot_ms] for b in bases]) if bases else np.zeros((0, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(meas / pred)
    return {m: r[:, k][np.isfinite(r[:, k])] for k, m in enumerate(METRICS)}


def interval(res: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Central ``level`` interval of residuals as factors (lo, hi) on the prediction."""
    if not len(res):
        return math.nan, math.nan
    a = (1.0 - level) / 2.0
    return float(np.exp(np.quantile(res, a))), float(np.exp(np.quantile(res, 1.0 - a)))


def covered(res: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (res >= math.log(lo)) & (res <= math.log(hi))


#: central shares tried, narrowest first, until the cross-fold coverage reaches TARGET_LOW
LEVELS = (0.90, 0.92, 0.94, 0.96, 0.98)
#: central shares tried, widest first, while the cross-fold coverage exceeds TARGET_HIGH
NARROWER = (0.90, 0.88, 0.86, 0.84, 0.82, 0.80)
#: the coverage a "p90" band must reach on held-out rows (issue 9: 85-95%)
TARGET_LOW, TARGET_HIGH = 0.85, 0.95


def cross_fold_coverage(a: np.ndarray, b: np.ndarray, level: float) -> float:
    """Share of each fold inside the other fold's central ``level`` interval (pooled)."""
    hits = []
    for src, dst in ((a, b), (b, a)):
        if len(src) and len(dst):
            lo, hi = interval(src, level)
            hits.append(covered(dst, lo, hi))
    return float(np.concatenate(hits).mean()) if hits else math.nan


def engine_bands(fold_a: dict[str, np.ndarray], fold_b: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Band per metric from two folds of held-out residuals, with its cross-fold coverage: the
    central 90% interval, widened (:data:`LEVELS`) while one fold's interval covers less than
    :data:`TARGET_LOW` of the other fold's rows (residuals of unseen deployments spread more
    than a same-sample quantile suggests), narrowed (:data:`NARROWER`) while it covers more
    than :data:`TARGET_HIGH`."""
    out = {}
    for m in METRICS:
        a, b = fold_a[m], fold_b[m]
        level, cov = LEVELS[0], cross_fold_coverage(a, b, LEVELS[0])
        steps, off = (LEVELS, lambda c: c < TARGET_LOW) if cov < TARGET_LOW else (NARROWER, lambda c: c > TARGET_HIGH)
        for lv in steps[1:]:
            if not (math.isfinite(cov) and off(cov)):
                break
            level, cov = lv, cross_fold_coverage(a, b, lv)
        both = np.concatenate([a, b])
        lo, hi = interval(both, level)
        out[m] = {"lo": round(lo, 4), "hi": round(hi, 4), "level": level,
                  "cross_fold_coverage": round(cov, 4) if math.isfinite(cov) else None, "rows": int(len(both))}
    return out

"""The served-latency error as a distribution: ``ln(served / predicted)`` ~ Normal(mu, sigma),
fitted to a calibrated served band (:mod:`llmplan.sim.serving_bands`; docs/RISK.md).

A band holds a central share ``level`` of held-out deployments in ``[predicted x lo,
predicted x hi]``; the normal whose central ``level`` interval is ``[ln lo, ln hi]`` has
``mu = (ln lo + ln hi) / 2`` and ``sigma = (ln hi - ln lo) / (2 z)``, ``z = Phi^-1((1 + level) / 2)``.
Used by the planner's probabilities (``optimizer/risk.py``) and their reliability check
(``calibration/risk_reliability.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from llmplan.sim.serving_bands import served_band

_NORMAL = NormalDist()


def normal() -> NormalDist:
    """The standard normal distribution."""
    return _NORMAL


@dataclass(frozen=True)
class ErrorModel:
    """Normal distribution of ``ln(served / predicted)`` for one engine and metric."""

    engine: str
    metric: str     # ttft | tpot
    mu: float       # mean log error (the band's centre)
    sigma: float    # standard deviation of the log error
    source: str     # the band it was fitted to, for the report

    def probability(self, predicted_ms: float, limit_ms: float, sample_log_sd: float = 0.0) -> float:
        """P(served value <= limit) for a predicted value (0 for an unstable / NaN prediction);
        ``sample_log_sd`` (the prediction's own sampling spread in log space) adds in quadrature."""
        if not (predicted_ms > 0 and math.isfinite(predicted_ms)):
            return 0.0
        s = math.hypot(self.sigma, sample_log_sd if math.isfinite(sample_log_sd) else 0.0)
        return _NORMAL.cdf((math.log(limit_ms / predicted_ms) - self.mu) / s)


def from_interval(engine: str, metric: str, lo: float, hi: float, level: float, source: str = "") -> ErrorModel | None:
    """The error model whose central ``level`` interval of factors is ``[lo, hi]`` (None if degenerate)."""
    if not (0 < lo < hi and math.isfinite(hi)) or not 0 < level < 1:
        return None
    z = _NORMAL.inv_cdf(0.5 + level / 2.0)
    a, b = math.log(lo), math.log(hi)
    return ErrorModel(engine, metric, (a + b) / 2.0, (b - a) / (2.0 * z), source)


def error_model(engine: str, metric: str) -> ErrorModel | None:
    """The error model fitted to ``engine``'s served band of ``metric``; None without a band."""
    b = served_band(engine, metric)
    if b is None:
        return None
    return from_interval(engine, metric, b.lo, b.hi, b.level,
                         f"served band x{b.lo:g}-x{b.hi:g} holding {b.level:.0%} of {b.rows} held-out runs")

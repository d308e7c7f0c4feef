"""The served-latency error as a distribution: ``ln(served / predicted)`` ~ Normal(mu, sigma),
fitted to a calibrated served band (:mod:`llmplan.sim.serving_bands`; docs/RISK.md).

A band holds a central share ``level`` of held-out deployments in ``[predicted x lo,
predicted x hi]``; the normal whose central ``level`` interval is ``[ln lo, ln hi]`` has
``mu = (ln lo + ln hi) / 2`` and ``sigma = (ln hi - ln lo) / (2 z)``, ``z = Phi^-1((1 + level) / 2)``.
Used by the planner's probabilities (``optimizer/risk.py``) and their reliability check
(``calibration/risk_reliability.py``).

Where ``sim/data/served_residuals.json`` holds the held-out residual quantiles of the same band
fit (written by ``python -m llmplan.calibration.risk_reliability --write-quantiles``; one set
per sha256 of ``sim/data/engine_profiles.json``, the current file's is used), the error is their
empirical distribution instead (:class:`EmpiricalError`): the lognormal through two band
edges misplaces the median of skewed residuals (docs/ACCURACY.md). After a refit of the
bands the stale file is ignored and the lognormal is used.
"""

from __future__ import annotations

import hashlib
import json
import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

from llmplan.sim.engine_terms import PATH as PROFILES_PATH

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


    #: a normal resolves every probability below 1
    max_probability = 1.0

    def log_quantile(self, p: float) -> float:
        """The p-quantile of ``ln(served / predicted)``."""
        return self.mu + self.sigma * _NORMAL.inv_cdf(p)


def from_interval(engine: str, metric: str, lo: float, hi: float, level: float, source: str = "") -> ErrorModel | None:
    """The error model whose central ``level`` interval of factors is ``[lo, hi]`` (None if degenerate)."""
    if not (0 < lo < hi and math.isfinite(hi)) or not 0 < level < 1:
        return None
    z = _NORMAL.inv_cdf(0.5 + level / 2.0)
    a, b = math.log(lo), math.log(hi)
    return ErrorModel(engine, metric, (a + b) / 2.0, (b - a) / (2.0 * z), source)


#: held-out residual quantiles (see module docstring)
RESIDUALS_PATH = Path(__file__).resolve().parent / "data" / "served_residuals.json"
#: Gauss-Hermite nodes/weights (probabilists', 5 points) to add the sampling spread to an empirical CDF
_GH = ((-2.856970013872806, 0.011257411327720689), (-1.355626179974266, 0.22207592200561264),
       (0.0, 0.5333333333333333), (1.355626179974266, 0.22207592200561264), (2.856970013872806, 0.011257411327720689))


@dataclass(frozen=True)
class EmpiricalError:
    """``ln(served / predicted)`` distributed as held-out residuals: quantiles ``log_residual``
    at probabilities ``p`` (increasing), linear in between, the CDF held at the end
    probabilities beyond (a finite sample says nothing sharper about the tails)."""

    engine: str
    metric: str
    p: tuple[float, ...]
    log_residual: tuple[float, ...]
    source: str

    @property
    def max_probability(self) -> float:
        """The highest probability the sample resolves (the top stored quantile's)."""
        return self.p[-1]

    def cdf(self, x: float) -> float:
        q, p = self.log_residual, self.p
        if x <= q[0]:
            return p[0]
        if x >= q[-1]:
            return p[-1]
        k = bisect_right(q, x) - 1
        while k + 1 < len(q) and q[k + 1] == q[k]:
            k += 1
        return p[k] + (p[k + 1] - p[k]) * (x - q[k]) / (q[k + 1] - q[k]) if q[k + 1] > q[k] else p[k + 1]

    def log_quantile(self, prob: float) -> float:
        p, q = self.p, self.log_residual
        prob = min(max(prob, p[0]), p[-1])
        k = min(bisect_right(p, prob) - 1, len(p) - 2)
        return q[k] + (q[k + 1] - q[k]) * (prob - p[k]) / (p[k + 1] - p[k])

    def probability(self, predicted_ms: float, limit_ms: float, sample_log_sd: float = 0.0) -> float:
        """P(served value <= limit); the prediction's own sampling spread (log space) is added
        by 5-point Gauss-Hermite quadrature over a normal."""
        if not (predicted_ms > 0 and math.isfinite(predicted_ms)):
            return 0.0
        x = math.log(limit_ms / predicted_ms)
        s = sample_log_sd if math.isfinite(sample_log_sd) else 0.0
        if s <= 0:
            return self.cdf(x)
        return sum(w * self.cdf(x - s * z) for z, w in _GH)


@lru_cache(maxsize=4)
def _residuals(path: str, profiles_sha: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    # one residual set per engine-profile file it was computed with (the last few fits); a file
    # without a set for the current one is stale (written for other bands: a refit since)
    return ((doc.get("by_engine_profiles_sha256") or {}).get(profiles_sha) or {}).get("engines") or {}


def _profiles_sha() -> str:
    try:
        return hashlib.sha256(PROFILES_PATH.read_bytes()).hexdigest()
    except OSError:
        return ""


def empirical_error(engine: str, metric: str) -> EmpiricalError | None:
    """The held-out residual distribution of ``engine``/``metric`` when a current file holds it."""
    e = _residuals(str(RESIDUALS_PATH), _profiles_sha()).get(engine, {}).get(metric)
    if not e or len(e.get("p") or []) < 2 or len(e["p"]) != len(e.get("log_residual") or []):
        return None
    return EmpiricalError(engine, metric, tuple(float(x) for x in e["p"]), tuple(float(x) for x in e["log_residual"]),
                          f"{e.get('rows', '?')} held-out residuals of the served band fit (empirical)")


def error_model(engine: str, metric: str) -> ErrorModel | EmpiricalError | None:
    """The error of ``engine``'s served ``metric``: the held-out residuals' empirical
    distribution where current, else the lognormal fitted to the served band; None without a band."""
    if served_band(engine, metric) is None:
        return None
    return empirical_error(engine, metric) or lognormal_error(engine, metric)


def lognormal_error(engine: str, metric: str) -> ErrorModel | None:
    """The lognormal through ``engine``'s served band of ``metric`` (None without a band)."""
    b = served_band(engine, metric)
    if b is None:
        return None
    return from_interval(engine, metric, b.lo, b.hi, b.level,
                         f"served band x{b.lo:g}-x{b.hi:g} holding {b.level:.0%} of {b.rows} held-out runs")

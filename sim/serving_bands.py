"""Served-latency error bands at run time: how far a simulated mean TTFT / TPOT may be from
what the engine serves, per engine, as measured on served deployments the fit did not see.

The bands live in ``sim/data/engine_profiles.json`` (``bands``; written by
``calibration.engine_fit``, sized and checked by ``calibration.serving_bands``). Usage::

    from llmplan.sim.serving_bands import served_band
    b = served_band("vllm", "ttft")          # engine: vllm | sglang | trtllm; metric: ttft | tpot
    lo_ms, hi_ms = b.apply(predicted_ttft_ms)  # the p90 band around a prediction
    b.coverage                                 # share of held-out rows inside the band (cross-fold)

An engine or metric without a fitted band gives ``None`` (say "no served band" rather than
inventing one).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmplan.sim.engine_terms import load


@dataclass(frozen=True)
class ServedBand:
    engine: str
    metric: str          # ttft | tpot
    lo: float            # measured >= predicted x lo ...
    hi: float            # ... and <= predicted x hi for `level` of held-out deployments
    level: float         # nominal central share (0.9)
    coverage: float | None  # measured cross-fold coverage on held-out rows
    rows: int            # held-out rows the band was sized on

    def apply(self, predicted_ms: float) -> tuple[float, float]:
        """(low, high) of the band around one predicted mean, ms."""
        return predicted_ms * self.lo, predicted_ms * self.hi


def served_band(engine: str, metric: str) -> ServedBand | None:
    """The p90 served band of ``metric`` (``ttft`` or ``tpot``) for ``engine``, or None."""
    if metric not in ("ttft", "tpot"):
        raise ValueError(f"metric must be 'ttft' or 'tpot', got {metric!r}")
    b = (load().get("bands") or {}).get(engine, {}).get(metric)
    if not b or b.get("lo") is None or b.get("hi") is None:
        return None
    return ServedBand(engine, metric, float(b["lo"]), float(b["hi"]), float(b.get("level", 0.9)),
                      b.get("cross_fold_coverage"), int(b.get("rows", 0)))


def served_bands(engine: str, simulation: dict | None) -> dict:
    """The served-latency p90 bands of ``engine`` (measured on held-out served runs,
    :func:`served_band`) applied to a simulation summary's mean TTFT/TPOT (``{"ttft_ms": {"mean": ...}, ...}``).
    An engine without a fitted band is reported as such, never invented."""
    out = {}
    for metric in ("ttft", "tpot"):
        b = served_band(engine, metric)
        if b is None:
            out[metric] = None
            continue
        mean = ((simulation or {}).get(f"{metric}_ms") or {}).get("mean")
        lo_hi = b.apply(mean) if mean is not None else None
        out[metric] = {"factor_low": b.lo, "factor_high": b.hi, "level": b.level, "coverage": b.coverage,
                       "rows": b.rows, "simulated_mean_ms": mean,
                       "mean_ms_low": None if lo_hi is None else round(lo_hi[0], 3),
                       "mean_ms_high": None if lo_hi is None else round(lo_hi[1], 3)}
    return out

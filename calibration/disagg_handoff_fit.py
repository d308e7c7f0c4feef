"""The per-engine hand-off fit with the closed loop's feedback (``serving_disagg_rows.fit_handoff``).

The served disaggregated rows are closed loops. Where the prefill pool saturates (e.g. the
attention-DP prefill rows at 8k prompts, TTFT 7-9 s), the loop's throughput is the pool's
capacity, so a per-request delay ``h`` between prefill and decode does not add to the measured
TTFT: the clients spend ``h`` outside the prefill queue, and the queue is shorter by about as
much. The first fit added ``h`` to each row's TTFT simulated with ``h = 0`` (valid for rows whose
pools are far from saturation only), so saturated rows pulled the fit as if they responded to
``h``. Here each training row is replayed at a few hand-off values (:data:`KNOTS_MS`), its
mean TTFT is interpolated linearly between them, and the hand-off minimising the median APE of
the interpolated TTFT against the measured one is chosen (10 ms steps; ties: the smallest).
"""

from __future__ import annotations

from collections.abc import Sequence

#: hand-off values replayed for the fit (ms); beyond the last, linear extrapolation
KNOTS_MS = (0.0, 250.0, 500.0, 750.0, 1000.0, 1500.0, 2000.0, 3000.0)


def interpolate_ttft(knots: Sequence[float], ttft: Sequence[float], h: float) -> float:
    """A row's mean TTFT at hand-off ``h`` from its replays at ``knots`` (piecewise linear)."""
    for j in range(1, len(knots)):
        if h <= knots[j] or j == len(knots) - 1:
            k0, k1 = knots[j - 1], knots[j]
            return ttft[j - 1] + (ttft[j] - ttft[j - 1]) * (h - k0) / (k1 - k0)
    return float(ttft[0])


def best_handoff_closed_loop(measured: Sequence[float], curves: Sequence[Sequence[float]],
                             knots: Sequence[float] = KNOTS_MS, step_ms: float = 10.0) -> float:
    """The hand-off minimising the median APE of each row's interpolated TTFT (``curves[i][j]``:
    row ``i`` replayed at ``knots[j]``) against ``measured[i]``; ties: the smallest."""
    import numpy as np

    m = np.asarray(measured, float)
    best_h, best_err = 0.0, float("inf")
    for h in np.arange(knots[0], knots[-1] + step_ms / 2, step_ms):
        pred = np.array([interpolate_ttft(knots, c, float(h)) for c in curves])
        err = float(np.median(np.abs(pred / m - 1.0)))
        if err < best_err - 1e-12:
            best_h, best_err = float(h), err
    return round(best_h, 1)

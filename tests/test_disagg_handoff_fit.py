"""The closed-loop hand-off fit (calibration/disagg_handoff_fit.py)."""

from __future__ import annotations

import pytest

from llmplan.calibration.disagg_handoff_fit import best_handoff_closed_loop, interpolate_ttft
from llmplan.calibration.serving_disagg_rows import best_handoff

KNOTS = (0.0, 500.0, 1000.0)


def test_interpolation_between_and_beyond_the_knots():
    assert interpolate_ttft(KNOTS, (100.0, 600.0, 1100.0), 250.0) == pytest.approx(350.0)
    assert interpolate_ttft(KNOTS, (100.0, 600.0, 1100.0), 1000.0) == pytest.approx(1100.0)
    assert interpolate_ttft(KNOTS, (100.0, 600.0, 1100.0), 1500.0) == pytest.approx(1600.0)  # last slope


def test_a_saturated_loop_responds_to_the_handoff_by_its_replayed_slope():
    # prefill-bound closed loops: the queue absorbs most of a hand-off, TTFT(h) = base + 0.2 h;
    # the measured TTFT is what the replay gives at h = 500
    base = (2000.0, 3000.0, 4000.0)
    curves = [tuple(b + 0.2 * k for k in KNOTS) for b in base]
    measured = [b + 0.2 * 500.0 for b in base]
    assert best_handoff_closed_loop(measured, curves, KNOTS) == 500.0
    # the additive approximation (TTFT(h) = TTFT(0) + h) reads them as wanting 100 ms
    assert best_handoff([(m, b) for m, b in zip(measured, base)], (0.0, 1000.0, 10.0)) == 100.0

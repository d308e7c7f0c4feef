"""Steady-state window and overload: run length, window choice, offered vs served, overload flag."""

from dataclasses import replace

import numpy as np
import pytest

from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.serving import estimate_capacity_rps, simulate_serving
from llmplan.sim.steady_state import (MAX_REQUESTS, MIN_MEASURED_REQUESTS, ServiceEstimate, assess_window,
                                      estimate_service, plan_run, window_indices)
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec, generate_workload

REPS = [make_replica()] * 2


def _spec(out_tokens: int, n: int = 600, **kw) -> WorkloadSpec:
    return WorkloadSpec(preset=None, input_tokens=LengthSpec(kind="fixed", mean_tokens=256),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=out_tokens), num_requests=n, **kw)


def test_run_length_scales_with_output_length_and_load():
    est = ServiceEstimate(ttft_ms=50.0, tpot_ms=20.0, batch_per_replica=50.0, utilisation=0.5)
    short = plan_run(10.0, est, np.full(100, 100), 0)
    long = plan_run(10.0, est, np.full(100, 1000), 0)
    # warm-up = drain = one lifetime: TTFT + (O - 1) x TPOT
    assert short.warmup_ms == pytest.approx(50 + 99 * 20) and long.drain_ms == pytest.approx(50 + 999 * 20)
    assert long.num_requests > short.num_requests
    busy = plan_run(40.0, est, np.full(100, 1000), 0)
    d = long.drain_ms  # at 40 req/s the window is 2 lifetimes: warm-up + window + drain = 4 D
    assert busy.num_requests > long.num_requests and busy.num_requests == pytest.approx(40 * 4 * d / 1000, abs=2)
    # the window holds at least MIN_MEASURED_REQUESTS arrivals
    assert short.window_ms / 1000 * 10.0 >= MIN_MEASURED_REQUESTS
    assert plan_run(10.0, est, np.full(100, 100), 5000).num_requests == 5000  # never shorter than asked
    assert plan_run(1e5, est, np.full(100, 1000), 10).num_requests == MAX_REQUESTS and \
        plan_run(1e5, est, np.full(100, 1000), 10).capped
    unstable = replace(est, utilisation=3.0)
    # an estimate above capacity is sized like a stable one: the verdict needs a steady window too
    # (the estimate is approximate; the queue limit stops a run that really is overloaded)
    assert plan_run(10.0, unstable, np.full(100, 1000), 700).num_requests == \
        plan_run(10.0, est, np.full(100, 1000), 700).num_requests > 700
    assert plan_run(10.0, est, np.full(100, 1000), 0, warmup_factor=4).warmup_ms == pytest.approx(4 * long.warmup_ms)


def test_window_is_chosen_by_arrival_time():
    a = np.arange(0.0, 10_000.0, 10.0)  # 1000 arrivals, one per 10 ms
    lo, hi = window_indices(a, 2000.0, 3000.0)
    assert a[lo] == 2000.0 and a[hi - 1] == 6990.0
    assert window_indices(a, 6000.0, 6000.0) == (0, 0)  # nothing left


def test_assess_window_separates_stable_from_overloaded():
    a = np.arange(0.0, 100_000.0, 10.0)      # 100 req/s for 100 s
    stable = assess_window(a, a + 500.0, 1000, 9000, 100.0)  # each done 0.5 s later
    assert stable["window_kind"] == "steady" and not stable["overloaded_by_growth"] and stable["stationary"]
    assert stable["served_rate_rps"] == pytest.approx(100.0, rel=0.01)
    assert stable["queue_start"] == stable["queue_end"] == 50  # Little: 100 req/s x 0.5 s
    slow = assess_window(a, np.arange(len(a)) * 20.0 + 500.0, 1000, 9000, 100.0)  # served at 50 req/s
    assert slow["overloaded_by_growth"] and not slow["stationary"]
    assert slow["served_rate_rps"] == pytest.approx(50.0, rel=0.02)
    assert slow["queue_growth_rps"] == pytest.approx(50.0, rel=0.02)
    burst = assess_window(a[:2000] / 1e5, np.full(2000, np.nan), 0, 0, 1e6)  # no steady window
    assert burst["window_kind"] == "arrivals" and burst["overloaded_by_growth"]


def test_estimate_tracks_load():
    lo = estimate_service(REPS, 2.0, 256, 1024)
    hi = estimate_service(REPS, 15.0, 256, 1024)
    assert lo.stable and hi.stable and hi.batch_per_replica > lo.batch_per_replica and hi.tpot_ms > lo.tpot_ms
    assert not estimate_service(REPS, 100.0, 256, 1024).stable


@pytest.mark.parametrize("load, overloaded", [(0.5, False), (3.0, True)])
def test_overload_flag_at_a_stable_and_an_overloaded_rate(load, overloaded):
    cap = estimate_capacity_rps(REPS, 256, 256)
    res = simulate_serving(_spec(256, n=1500, rate_rps=load * cap), REPS, steady_state=True)
    w = res.summary["window"]
    assert res.overloaded is overloaded and res.summary["overloaded"] is overloaded
    assert w["offered_rate_rps"] == pytest.approx(load * cap)
    if overloaded:
        assert w["served_rate_rps"] < 0.6 * w["arrival_rate_in_window_rps"] and w["queue_end"] > w["queue_start"]
    else:
        assert w["window_kind"] == "steady" and w["stationary"]
        assert w["served_rate_rps"] == pytest.approx(w["arrival_rate_in_window_rps"], rel=0.05)
        assert w["requests_measured"] >= MIN_MEASURED_REQUESTS * 0.9


def test_a_million_requests_per_second_is_overloaded():
    res = simulate_serving(_spec(128, n=800, rate_rps=1e6), REPS, steady_state=True)
    w = res.summary["window"]
    assert res.overloaded and w["offered_rate_rps"] == 1e6 and w["queue_end"] > 700


def test_steady_window_matches_a_long_run_where_a_short_one_does_not():
    """Long outputs near capacity: 600 requests end before steady state (TPOT too low)."""
    cap = estimate_capacity_rps(REPS, 256, 1024)
    spec = _spec(1024, n=600, rate_rps=0.9 * cap)
    short = simulate_serving(spec, REPS).summary["tpot_ms_p50"]
    steady = simulate_serving(spec, REPS, steady_state=True)
    long = simulate_serving(replace(spec, num_requests=20000), REPS, window=MeasureWindow(0.4, 0.2))
    ref = long.summary["tpot_ms_p50"]
    assert steady.summary["tpot_ms_p50"] == pytest.approx(ref, rel=0.02)
    assert short < 0.95 * ref
    w = steady.summary["window"]
    assert w["requests_simulated"] > 600 and w["window_start_ms"] >= w["warmup_ms"]
    assert w["window_end_ms"] <= steady.requests["arrival_ms"].max() - w["drain_ms"] + 1e-6


def test_steady_window_throughput_is_the_served_rate():
    cap = estimate_capacity_rps(REPS, 256, 256)
    res = simulate_serving(_spec(256, n=1500, rate_rps=0.6 * cap), REPS, steady_state=True)
    s = res.summary
    assert s["request_throughput_rps"] == pytest.approx(s["window"]["served_rate_rps"])
    assert s["request_throughput_rps"] == pytest.approx(0.6 * cap, rel=0.08)


@pytest.mark.parametrize("load, overloaded", [(0.6, False), (2.0, True)])
def test_bursty_arrivals_are_judged_against_their_own_noise(load, overloaded):
    cap = estimate_capacity_rps(REPS, 256, 256)
    res = simulate_serving(_spec(256, n=2000, rate_rps=load * cap, arrival="gamma", cv=3.0), REPS, steady_state=True)
    w = res.summary["window"]
    assert res.overloaded is overloaded and w["stationary"] is not overloaded
    assert w["arrival_cv"] > 2.0  # measured from the gaps in the window


def test_a_given_workload_is_windowed_by_time_but_never_lengthened():
    cap = estimate_capacity_rps(REPS, 256, 256)
    wl = generate_workload(_spec(256, n=1500, rate_rps=0.5 * cap), np.random.default_rng(3))
    res = simulate_serving(wl, REPS, steady_state=True)  # e.g. a trace: its requests are what they are
    w = res.summary["window"]
    assert len(res.requests) == 1500 and w["requests_simulated"] == w["requests_asked"] == 1500
    arr = res.requests["arrival_ms"].to_numpy()
    measured = res.requests["measured"].to_numpy()
    assert w["window_kind"] == "steady" and arr[measured].min() >= arr[0] + w["warmup_ms"]
    assert arr[measured].max() <= arr[-1] - w["drain_ms"] and not res.overloaded


def test_find_max_rate_can_measure_each_rate_at_steady_state():
    from llmplan.sim.metrics import SLOThresholds
    from llmplan.sim.serving import find_max_rate

    cap = estimate_capacity_rps(REPS[:1], 256, 1024)
    slo = SLOThresholds(tpot_ms=30.0)
    kw = dict(num_requests=300, rel_tol=0.1, max_evaluations=3)
    fixed = find_max_rate(_spec(1024), REPS[:1], slo, 0.5 * cap, 0.8 * cap, **kw)
    steady = find_max_rate(_spec(1024), REPS[:1], slo, 0.5 * cap, 0.8 * cap, steady_state=True, **kw)
    assert all(e["requests"] == 300 for e in fixed.evaluations)
    stable = [e for e in steady.evaluations if not e["overloaded"]]
    assert stable and all(e["requests"] > 300 for e in stable)  # lengthened for 1,024-token outputs
    # above capacity the run is sized the same way (the estimate alone does not decide) and judged overloaded
    above = [e for e in steady.evaluations if e["rate_rps"] > 1.2 * cap]
    assert above and all(e["overloaded"] and e["requests"] > 300 for e in above)

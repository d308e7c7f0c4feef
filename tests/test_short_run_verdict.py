"""A short steady-state run never reports a wrong OVERLOADED verdict: a synthetic run is
lengthened whatever the analytical estimate says (it sizes the run, it does not decide the
verdict), and a given workload too short for a steady window is reported as not judged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import llmplan.sim.serving as serving
from llmplan.cli.simulate_run import window_notes
from llmplan.sim.serving import estimate_capacity_rps, simulate_serving
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec, generate_workload

REPS = [make_replica()]


def _spec(n: int, rate: float) -> WorkloadSpec:
    return WorkloadSpec(preset=None, input_tokens=LengthSpec(kind="fixed", mean_tokens=256),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=512), num_requests=n, rate_rps=rate)


def test_a_pessimistic_estimate_does_not_make_a_short_run_overloaded(monkeypatch):
    rate = 0.6 * estimate_capacity_rps(REPS, 256, 512)
    true_estimate = serving.estimate_service

    def pessimistic(*a):  # the estimate puts this load above capacity (as on B200 gpt-oss-120b: 1.09)
        return replace(true_estimate(*a), utilisation=1.09)

    monkeypatch.setattr(serving, "estimate_service", pessimistic)
    res = simulate_serving(_spec(60, rate), REPS, steady_state=True)
    w = res.summary["window"]
    assert w["estimate"]["utilisation"] == 1.09
    assert w["requests_simulated"] > 60 and w["window_kind"] == "steady"
    assert not res.overloaded and w["stationary"] and not w.get("too_short_to_judge")
    assert abs(w["served_rate_rps"] / w["arrival_rate_in_window_rps"] - 1.0) < 0.05


def test_a_short_given_workload_is_not_judged():
    rate = 0.6 * estimate_capacity_rps(REPS, 256, 512)
    wl = generate_workload(_spec(60, rate), np.random.default_rng(1))  # e.g. a trace: never lengthened
    res = simulate_serving(wl, REPS, steady_state=True)
    w = res.summary["window"]
    assert w["window_kind"] == "arrivals" and w["requests_simulated"] == 60
    # the requests in the system grew over the arrival period (the system was filling) ...
    assert w["queue_end"] - w["queue_start"] > 0.2 * w["arrivals_in_window"]
    # ... which is no evidence of overload: no verdict, said in words
    assert w["too_short_to_judge"] and not res.overloaded and res.summary["overloaded"] is False
    notes = window_notes(w, res, res.summary.get("request_throughput_rps"))
    assert any(n.startswith("TOO SHORT TO JUDGE") for n in notes)
    assert not any("OVERLOADED" in n for n in notes)


def test_a_short_overloaded_synthetic_run_is_still_overloaded():
    rate = 3.0 * estimate_capacity_rps(REPS, 256, 512)
    res = simulate_serving(_spec(60, rate), REPS, steady_state=True)
    w = res.summary["window"]
    assert res.overloaded and not w.get("too_short_to_judge")
    # lengthened for the verdict; when the queue limit stopped that run before its window, the
    # latencies are those of the requests asked (never an empty measured set)
    assert max(w["requests_simulated"], w.get("lengthened_run_requests", 0)) > 60 and w["requests_measured"] > 0


def test_a_run_whose_lengthened_run_hit_the_queue_limit_is_overloaded():
    # 20 requests at 2.5x capacity: the lengthened run hits the queue limit before its window,
    # while the 20 asked requests alone (whose latencies are reported) barely grow the queue
    rate = 2.5 * estimate_capacity_rps(REPS, 256, 512)
    res = simulate_serving(_spec(20, rate), REPS, steady_state=True)
    w = res.summary["window"]
    assert w["lengthened_run_requests"] > 20 and w["stopped_by_queue_limit"]
    assert res.overloaded and res.summary["overloaded"] is True
    notes = window_notes(w, res, res.summary.get("request_throughput_rps"))
    assert any(n.startswith(f"the run lengthened to {w['lengthened_run_requests']} requests") for n in notes)
    assert not any("judged over the arrival period" in n for n in notes)  # judged by the lengthened run

"""A steady-state run's next attempt run beside the current one (sim/serving.py, steady_state.
speculate_next) keeps the attempt, window, verdict and every latency of the one-after-the-other run."""

import json
import sys

import pytest

from llmplan import parallel
from llmplan.sim import serving
from llmplan.sim.serving import estimate_capacity_rps, simulate_serving
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec

REP = make_replica()
FORK = sys.platform.startswith("linux")


def count_beside(monkeypatch, workers: str) -> list:
    """Set the worker count and count the attempts the steady-state loop starts beside itself
    (the returned list grows by one per start)."""
    monkeypatch.setenv(parallel.WORKERS_ENV, workers)
    started: list = []
    real = serving.beside

    def counting(job):
        started.append(1)
        return real(job)

    monkeypatch.setattr(serving, "beside", counting)
    return started


def _run(monkeypatch, workers: str, out_tokens: int, load: float, reps: int = 1):
    started = count_beside(monkeypatch, workers)
    cap = estimate_capacity_rps([REP], 200, out_tokens) * reps
    wl = WorkloadSpec(preset=None, input_tokens=LengthSpec("fixed", 200), output_tokens=LengthSpec("fixed", out_tokens),
                      rate_rps=load * cap, num_requests=200)
    return simulate_serving(wl, [REP] * reps, steady_state=True), len(started)


# (output tokens, load vs the analytical bound): the estimate puts each at or above capacity.
# 40/1.1 is stationary at its first attempt (the attempt beside it is dropped); 100/1.2 needs
# three doublings (two pairs); 40/1.5 is stopped by the queue limit at its third attempt
@pytest.mark.parametrize("out_tokens,load", [(40, 1.1), (100, 1.2), (40, 1.5), (100, 1.0)])
def test_speculated_attempts_keep_the_sequential_answer(monkeypatch, out_tokens, load):
    seq, n_seq = _run(monkeypatch, "1", out_tokens, load)
    par, n_par = _run(monkeypatch, "2", out_tokens, load)
    assert n_seq == 0
    if FORK:
        assert n_par >= 1  # an attempt ran beside
    assert json.dumps(seq.summary, sort_keys=True) == json.dumps(par.summary, sort_keys=True)
    assert seq.requests.equals(par.requests) and seq.timeseries.equals(par.timeseries)
    assert (seq.overloaded, seq.unfinished, seq.stopped_early) == (par.overloaded, par.unfinished, par.stopped_early)
    assert seq.itl_histogram.equals(par.itl_histogram)


def test_the_doubling_cases_above_are_what_they_claim(monkeypatch):
    doublings = {}
    for o, f in [(40, 1.1), (100, 1.2), (40, 1.5)]:
        r, _ = _run(monkeypatch, "1", o, f)
        w = r.summary["window"]
        assert w["estimate"]["utilisation"] >= 1.0
        doublings[(o, f)] = (w["warmup_doublings"], r.stopped_early)
    assert doublings[(40, 1.1)] == (0, False)
    assert doublings[(100, 1.2)] == (3, False)
    assert doublings[(40, 1.5)][1]


def test_a_stable_estimate_runs_nothing_beside(monkeypatch):
    r, n = _run(monkeypatch, "2", 100, 0.9)
    assert r.summary["window"]["estimate"]["utilisation"] < 1.0 and n == 0

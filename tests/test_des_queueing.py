"""The simulator against queueing theory and conservation laws."""

import numpy as np
import pytest

from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec

S_MS = 10.0  # fixed service time of the single-server set-up


def _md1(rho: float, n: int, seed: int):
    """One server (max_num_seqs=1), one token per request, every step S_MS: an M/D/1 queue."""
    rep = make_replica(LinearStepCost.constant(S_MS), kv_capacity_tokens=4096, max_model_len=64, max_num_seqs=1,
                       max_num_batched_tokens=64, enable_prefix_caching=False)
    spec = WorkloadSpec(preset=None, num_requests=n, rate_rps=rho / S_MS * 1000.0,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=16),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=1))
    return simulate_serving(spec, [rep], seed=seed)


@pytest.mark.parametrize("rho", [0.5, 0.75])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho):
    waits = [_md1(rho, 40000, seed).summary["queue_ms_mean"] for seed in (1, 2)]
    wq = rho * S_MS / (2 * (1 - rho))
    assert np.mean(waits) == pytest.approx(wq, rel=0.05)


def test_md1_service_and_littles_law():
    res = _md1(0.7, 30000, 5)
    df = res.requests
    assert np.allclose(df["e2e_ms"] - df["queue_ms"], S_MS)  # TTFT = wait + one step
    assert np.allclose(df["ttft_ms"], df["e2e_ms"])
    # Little: L = lambda * W. L from what Poisson arrivals see (PASTA), W from the records.
    a = df["arrival_ms"].to_numpy()
    f = np.sort(df["finish_ms"].to_numpy())
    in_system = np.arange(len(a)) - np.searchsorted(f, a, side="right")  # arrived before, not yet finished
    lam = (len(a) - 1) / (a[-1] / 1000.0)
    assert in_system.mean() == pytest.approx(lam * df["e2e_ms"].mean() / 1000.0, rel=0.05)


def _chat(rate_rps, n=600, **kw):
    spec = WorkloadSpec(num_requests=n, rate_rps=rate_rps, seed=11)
    return simulate_serving(spec, [make_replica(max_num_seqs=64, **kw)], seed=0)


def test_conservation_all_finish_and_tokens_match():
    res = _chat(6.0)
    df = res.requests
    assert res.unfinished == 0 and not res.overloaded and df["finished"].all()
    assert res.summary["generated_tokens"] == df["output_tokens"].sum()
    assert (df["first_token_ms"] >= df["first_scheduled_ms"]).all()
    assert (df["first_scheduled_ms"] >= df["arrival_ms"]).all()


def test_conservation_when_overloaded_every_request_is_accounted_for():
    res = simulate_serving(WorkloadSpec(num_requests=3000, rate_rps=500.0),
                           [make_replica(max_num_seqs=32)], max_queue=200)
    df = res.requests
    assert res.overloaded and res.unfinished > 0
    assert res.unfinished + int(df["finished"].sum()) == len(df) == 3000
    assert res.summary["unfinished"] == res.unfinished
    assert res.summary["generated_tokens"] == df.loc[df["finished"], "output_tokens"].sum()


def test_more_load_never_lowers_mean_latency():
    e2e = [_chat(r).summary["e2e_ms_mean"] for r in (2.0, 5.0, 8.0, 11.0)]
    assert e2e == sorted(e2e)


def test_faster_decode_never_slows_a_decode_bound_run():
    spec = WorkloadSpec(preset=None, num_requests=400, rate_rps=6.0,
                        input_tokens=LengthSpec(kind="uniform", min_tokens=32, max_tokens=128),
                        output_tokens=LengthSpec(kind="lognormal", mean_tokens=400, cv=0.5))
    out = []
    for per_kv in (8e-5, 4.9e-5, 2e-5):
        cost = LinearStepCost(per_decode_kv_token_ms=per_kv)
        out.append(simulate_serving(spec, [make_replica(cost, max_num_seqs=64)]).summary)
    assert [s["e2e_ms_mean"] for s in out] == sorted([s["e2e_ms_mean"] for s in out], reverse=True)
    assert [s["tpot_ms_mean"] for s in out] == sorted([s["tpot_ms_mean"] for s in out], reverse=True)

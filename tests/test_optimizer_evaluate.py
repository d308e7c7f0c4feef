"""The analytical screen (optimizer/evaluate.py) against queueing results and the simulator.

A linear step-cost model stands in for the kernel model, so the tests isolate what the
screen adds: the decode/prefill mix, Little's law, the prompt queue and the percentiles.
"""

import math

import numpy as np
import pytest

from llmplan.optimizer.evaluate import ReplicaAnalyzer, lognormal_cv2, residual_quantile_ms, wait_quantile_ms
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.metrics import SLOThresholds
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import find_max_rate, simulate_serving
from llmplan.sim.types import EngineProfile, StepShape
from llmplan.sim.workload import LengthSpec, WorkloadSpec


class LinearStep:
    """step = base + per decode sequence + per prompt token (ms); one pipeline stage."""

    pp = 1

    def __init__(self, base_ms=10.0, per_seq_ms=0.03, per_token_ms=0.04):
        self.base, self.seq, self.tok = base_ms, per_seq_ms, per_token_ms

    def stage_time_ms(self, s: StepShape) -> float:
        return self.base + self.seq * s.decode_seqs + self.tok * s.prefill_tokens

    step_time_ms = stage_time_ms


def _lindley_wait(rho: float, service_ms: float, deterministic: bool, n: int = 200_000) -> np.ndarray:
    """Waiting times of a FIFO single-server queue with Poisson arrivals (Lindley recursion)."""
    rng = np.random.default_rng(7)
    gaps = rng.exponential(service_ms / rho, n)
    serv = np.full(n, service_ms) if deterministic else rng.exponential(service_ms, n)
    w = np.zeros(n)
    for i in range(1, n):
        w[i] = max(0.0, w[i - 1] + serv[i - 1] - gaps[i])
    return w[n // 10:]


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_wait_quantile_is_exact_for_mm1(rho):
    w = _lindley_wait(rho, 10.0, deterministic=False)
    for q in (0.9, 0.99):
        assert wait_quantile_ms(rho, 10.0, 1.0, 1.0, q) == pytest.approx(np.quantile(w, q), rel=0.08)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_wait_quantile_md1_kingman_is_close_and_conservative(rho):
    w = _lindley_wait(rho, 10.0, deterministic=True)
    for q in (0.9, 0.99):
        pred, real = wait_quantile_ms(rho, 10.0, 1.0, 0.0, q), np.quantile(w, q)
        assert real * 0.95 <= pred <= real * 1.25


def test_wait_is_zero_below_the_quantile_and_mean_is_kingman():
    assert wait_quantile_ms(0.05, 10.0, 1.0, 1.0, 0.9) == 0.0  # P(W > 0) = rho < 1 - q
    # E[W] = rho * theta = rho S (ca2 + cs2) / (2 (1 - rho)); integrate the quantile function
    qs = np.linspace(0.0005, 0.9995, 2000)
    mean = np.mean([wait_quantile_ms(0.7, 10.0, 1.0, 0.0, q) for q in qs])
    assert mean == pytest.approx(0.7 * 10.0 * 1.0 / (2 * 0.3), rel=0.02)


def test_lognormal_cv2():
    assert lognormal_cv2(100.0, 100.0) == 0.0
    assert lognormal_cv2(1.0 / math.log(2), 1.0) == pytest.approx(1.08, abs=0.01)  # exponential's mean/median
    sigma = 0.8
    assert lognormal_cv2(math.exp(sigma ** 2 / 2), 1.0) == pytest.approx(math.exp(sigma ** 2) - 1)


def _analyzer(rate=1.0, step=None, max_seqs=256, budget=2048, kv=10**7, inp=512, out=128, chunked=True):
    wl = WorkloadStats(rate, inp, out, inp + out, 1.0, inp, inp, inp)
    return ReplicaAnalyzer(step or LinearStep(), wl, max_seqs, budget, kv, chunked)


def test_littles_law_and_the_step_mix():
    an = _analyzer()
    for lam in (2.0, 8.0, 15.0):
        op = an.operating_point(lam, [50.0, 90.0])
        assert op.stable
        # B = lam O tau (Little's law) at the fixed point
        assert op.decode_seqs == pytest.approx(lam * an.O * op.step_ms / 1e3, rel=0.02)
        # mean step = tau_d / (1 - prefill load); prompt tokens per second = lam I
        assert op.prefill_tokens / (op.step_ms / 1e3) == pytest.approx(lam * an.I, rel=0.05)


def test_percentiles_ordered_and_grow_with_load():
    an = _analyzer()
    prev = None
    for lam in (1.0, 5.0, 10.0, 15.0):
        op = an.operating_point(lam, [50.0, 90.0, 99.0])
        assert op.ttft_ms[50] <= op.ttft_ms[90] <= op.ttft_ms[99]
        assert op.tpot_ms[50] <= op.tpot_ms[90] <= op.tpot_ms[99]
        if prev:
            assert op.ttft_ms[90] >= prev.ttft_ms[90] and op.tpot_ms[90] >= prev.tpot_ms[90]
        prev = op


def test_light_load_ttft_is_one_prefill_step_plus_residual():
    step = LinearStep()
    op = _analyzer(step=step).operating_point(1e-6, [50.0, 90.0])
    own = step.stage_time_ms(StepShape(prefill_tokens=512, prefill_seqs=1, decode_seqs=1))
    # the residual of an (almost idle) decode step is uniform on [0, tau_d]: its q-quantile is q tau_d
    tau_d = step.stage_time_ms(StepShape(decode_seqs=1))
    assert op.ttft_ms[50] == pytest.approx(own + 0.5 * tau_d, rel=0.02)
    assert op.ttft_ms[90] == pytest.approx(own + 0.9 * tau_d, rel=0.02)


def test_residual_quantile_mixture():
    # only decode steps: uniform on [0, 10]
    assert residual_quantile_ms(10.0, 40.0, 0.0, 0.9) == pytest.approx(9.0)
    # half the time in 40 ms prefill steps: P(R > t) = 0.5 (1 - t/40) above 10 ms
    assert residual_quantile_ms(10.0, 40.0, 0.5, 0.9) == pytest.approx(40.0 * (1 - 0.1 / 0.5))
    rng = np.random.default_rng(0)
    n = 200_000
    long = rng.random(n) < 0.3
    r = np.where(long, rng.uniform(0, 40.0, n), rng.uniform(0, 10.0, n))
    for q in (0.5, 0.8, 0.95):
        assert residual_quantile_ms(10.0, 40.0, 0.3, q) == pytest.approx(np.quantile(r, q), rel=0.02)


def test_overload_is_unstable():
    an = _analyzer()
    # prompt work alone: lam I tok_ms > 1 s/s is impossible (512 x 0.04 ms = 20.5 ms per request)
    assert not an.operating_point(60.0, [90.0]).stable
    assert "overloaded" in an.meets(an.operating_point(60.0, [90.0]), [SLOTarget("ttft", 90, 1e9)])


def test_capacity_is_the_edge_of_the_slo():
    an = _analyzer()
    slos = [SLOTarget("ttft", 90, 150.0), SLOTarget("tpot", 90, 20.0)]
    cap, binding, at_cap, _ = an.capacity(slos)
    assert cap > 0 and binding
    assert an.meets(an.operating_point(cap, [90.0]), slos) == ""
    assert an.meets(an.operating_point(cap * 1.03, [90.0]), slos) != ""


def test_each_percentile_is_checked_at_its_own_limit():
    """ttft_p50 <= 60 with ttft_p99 <= 400 is not ttft_p99 <= 60: the pair's capacity is the
    smaller of the two single-target capacities, and far above the collapsed target's."""
    an = _analyzer()
    p50, p99 = SLOTarget("ttft", 50, 60.0), SLOTarget("ttft", 99, 400.0)
    both = an.capacity([p50, p99])[0]
    alone = min(an.capacity([p50])[0], an.capacity([p99])[0])
    collapsed = an.capacity([SLOTarget("ttft", 99, 60.0)])[0]
    assert both == pytest.approx(alone, rel=0.02)
    assert collapsed < 0.6 * both


def _des(rate, step, inp=512, out=128, n=1500):
    eng = EngineProfile(max_num_seqs=256, max_num_batched_tokens=2048)
    rep = ReplicaSpec(step, eng, 10**7, 8192)
    spec = WorkloadSpec(preset=None, rate_rps=rate, num_requests=n, seed=3,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=inp),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=out))
    return spec, rep, simulate_serving(spec, [rep], seed=3)


@pytest.mark.parametrize("fraction", [0.3, 0.7])
def test_screen_agrees_with_the_simulator(fraction):
    """Same step costs in both: TPOT p50/p90 within 10%, TTFT p90 within 20%, at 30% and 70%
    of the SLO capacity (fixed lengths, Poisson arrivals)."""
    step = LinearStep()
    an = _analyzer(step=step)
    slos = [SLOTarget("ttft", 90, 150.0), SLOTarget("tpot", 90, 20.0)]
    cap = an.capacity(slos)[0]
    rate = fraction * cap
    op = an.operating_point(rate, [50.0, 90.0])
    _, _, r = _des(rate, step)
    s = r.summary
    assert not r.overloaded
    assert op.tpot_ms[50] == pytest.approx(s["tpot_ms_p50"], rel=0.10)
    assert op.tpot_ms[90] == pytest.approx(s["tpot_ms_p90"], rel=0.10)
    assert op.ttft_ms[90] == pytest.approx(s["ttft_ms_p90"], rel=0.20)


def test_simulated_capacity_near_the_screens():
    step = LinearStep()
    an = _analyzer(step=step)
    slos = [SLOTarget("ttft", 90, 150.0), SLOTarget("tpot", 90, 20.0)]
    cap = an.capacity(slos)[0]
    spec, rep, _ = _des(cap, step, n=10)
    r = find_max_rate(spec, [rep], SLOThresholds(ttft_ms=150.0, tpot_ms=20.0, percentile=90), 0.5 * cap, 1.5 * cap,
                      seed=3, num_requests=1200, rel_tol=0.03)
    assert r.feasible and r.rate_rps == pytest.approx(cap, rel=0.2)


@pytest.mark.parametrize("fraction", [0.3, 0.7])
def test_screen_agrees_with_the_simulator_on_chat_lengths(fraction):
    """Lognormal chat prompts/outputs (the default preset): TPOT p50/p90 within 10%, TTFT p90
    within 20%, at 30% and 70% of the SLO capacity."""
    from dataclasses import replace

    from llmplan.sim.workload import generate_workload

    step = LinearStep()
    spec = WorkloadSpec(preset="chat", rate_rps=1.0, num_requests=2000, seed=3)
    reqs = generate_workload(spec, np.random.default_rng([3, 3])).requests
    ins = np.array([r.input_tokens for r in reqs])
    outs = np.array([r.output_tokens for r in reqs])
    wl = WorkloadStats(1.0, ins.mean(), outs.mean(), int((ins + outs).max()), 1.0, *np.percentile(ins, [50, 90, 99]))
    an = ReplicaAnalyzer(step, wl, 256, 8192, 10**7, True)
    cap = an.capacity([SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 25.0)])[0]
    op = an.operating_point(fraction * cap, [50.0, 90.0])
    rep = ReplicaSpec(step, EngineProfile(max_num_seqs=256, max_num_batched_tokens=8192), 10**7, 32768)
    s = simulate_serving(replace(spec, rate_rps=fraction * cap), [rep], seed=3).summary
    assert op.tpot_ms[50] == pytest.approx(s["tpot_ms_p50"], rel=0.10)
    assert op.tpot_ms[90] == pytest.approx(s["tpot_ms_p90"], rel=0.10)
    assert op.ttft_ms[90] == pytest.approx(s["ttft_ms_p90"], rel=0.20)

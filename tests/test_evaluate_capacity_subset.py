"""ReplicaAnalyzer.capacity judges each bisection point on the targets' own quantities only
(operating_point with a subset of percentiles): the answer equals the bisection that computes
every percentile and the mean at each point."""

import pytest

from llmplan.optimizer.evaluate import BRACKET_HEADROOM, ReplicaAnalyzer
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from tests.test_optimizer_evaluate import LinearStep

SLO_SETS = {
    "p90": [SLOTarget("ttft", 90, 800.0), SLOTarget("tpot", 90, 30.0)],
    "p99+mean": [SLOTarget("ttft", 99, 1500.0), SLOTarget("tpot", 50, 25.0, stat="mean")],
}


def _analyzer(chunked: bool) -> ReplicaAnalyzer:
    wl = WorkloadStats(1.0, 900, 200, 1100, 1.0, 700, 2500, 4000)
    return ReplicaAnalyzer(LinearStep(), wl, 256, 2048, 10**7, chunked)


def _full_bisection(an: ReplicaAnalyzer, slos, iters: int = 22):
    """The bisection with every percentile and the mean computed at each point."""
    pcts = sorted({s.percentile for s in slos} | {50.0, 90.0, 99.0})
    light = an.operating_point(1e-6, pcts)
    full = an.step.stage_time_ms(an._shape(an.max_seqs / an.step.pp, 0))
    lo, hi, best, binding = 0.0, max(1e-3, an.max_seqs / (an.O * full / 1e3) * BRACKET_HEADROOM), light, ""
    for _ in range(iters):
        mid = (lo + hi) / 2.0
        op = an.operating_point(mid, pcts)
        v = an.meets(op, slos)
        if v:
            hi, binding = mid, v
        else:
            lo, best = mid, op
        if hi - lo <= 0.01 * hi:
            break
    return lo, binding, best, light


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("name", sorted(SLO_SETS))
def test_capacity_equals_the_full_bisection(chunked, name):
    slos = SLO_SETS[name]
    got, ref = _analyzer(chunked).capacity(slos), _full_bisection(_analyzer(chunked), slos)
    assert got[0] > 0 and got[:2] == ref[:2]
    assert got[2] == ref[2] and got[3] == ref[3]   # OperatingPoint dataclasses: every field and percentile


@pytest.mark.parametrize("chunked", [True, False])
def test_a_subset_of_quantities_has_the_same_values(chunked):
    an = _analyzer(chunked)
    for lam in (0.5, 3.0, 6.0):
        full = an.operating_point(lam, [50.0, 90.0, 99.0])
        sub = an.operating_point(lam, [90.0], with_mean=False)
        assert sub.ttft_ms == {90.0: full.ttft_ms[90.0]} and sub.tpot_ms == {90.0: full.tpot_ms[90.0]}
        assert (sub.stable, sub.step_ms, sub.utilization, sub.limit) == (full.stable, full.step_ms, full.utilization,
                                                                         full.limit)

"""The ILP on small instances with a known optimum."""

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer.select_ilp import solve
from llmplan.optimizer.types import Candidate, Evaluation
from llmplan.sim.types import Parallelism, Precision


def _ev(gpu: str, tp: int, price: float, cap: float) -> Evaluation:
    c = Candidate(get_gpu(gpu), Parallelism(tp), Precision(), 256, price)
    return Evaluation(c, "ok", capacity_rps=cap)


def test_picks_cheaper_per_capacity_type():
    a = _ev("h100_sxm", 1, 4.0, 10.0)   # $0.40 per rps
    b = _ev("a100_sxm", 1, 2.0, 4.0)    # $0.50 per rps
    sel = solve([a, b], rate_rps=20.0)
    assert sel.feasible
    assert [(x.evaluation.candidate.gpu.key, x.replicas) for x in sel.allocations] == [("h100_sxm", 2)]
    assert sel.total_usd_per_hour == pytest.approx(8.0)


def test_integrality_mixes_types_when_cheaper():
    # rate 14: 2x H100 = $8 (cap 20); 1x H100 + 1x A100 = $6 (cap 14) -> mixed is optimal
    a = _ev("h100_sxm", 1, 4.0, 10.0)
    b = _ev("a100_sxm", 1, 2.0, 4.0)
    sel = solve([a, b], rate_rps=14.0)
    got = sorted((x.evaluation.candidate.gpu.key, x.replicas) for x in sel.allocations)
    assert got == [("a100_sxm", 1), ("h100_sxm", 1)]
    assert sel.total_usd_per_hour == pytest.approx(6.0)


def test_availability_limit_binds():
    a = _ev("h100_sxm", 2, 4.0, 10.0)   # 2 GPUs per replica
    b = _ev("a100_sxm", 1, 3.5, 4.0)    # $0.875 per rps vs H100's $0.80
    sel = solve([a, b], rate_rps=40.0, max_gpus={"h100_sxm": 4})
    reps = {x.evaluation.candidate.gpu.key: x.replicas for x in sel.allocations}
    assert reps == {"h100_sxm": 2, "a100_sxm": 5}  # 20 + 20 >= 40; H100 capped at 4 GPUs
    infeasible = solve([a], rate_rps=30.0, max_gpus={"h100_sxm": 4})
    assert not infeasible.feasible and "availability" in infeasible.binding


def test_no_candidates_is_infeasible():
    bad = _ev("h100_sxm", 1, 4.0, 0.0)
    bad.verdict = "slo"
    sel = solve([bad], rate_rps=1.0)
    assert not sel.feasible


def test_deterministic():
    evs = [_ev("h100_sxm", 1, 4.0, 10.0), _ev("h200_sxm", 1, 4.5, 11.25), _ev("a100_sxm", 1, 2.0, 5.0)]
    r1, r2 = solve(evs, 33.0), solve(evs, 33.0)
    assert [(x.evaluation.candidate.name, x.replicas) for x in r1.allocations] == \
           [(x.evaluation.candidate.name, x.replicas) for x in r2.allocations]

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


def test_alternatives_one_per_gpu_type_then_another_shape_sorted_by_cost():
    from llmplan.optimizer.select_ilp import alternatives

    h100_tp1 = _ev("h100_sxm", 1, 4.0, 10.0)   # $0.40 per rps: chosen
    h100_tp2 = _ev("h100_sxm", 2, 4.4, 18.0)   # $8.8 per replica, $0.49 per rps: another shape of the chosen type
    a100 = _ev("a100_sxm", 1, 2.4, 4.0)        # $0.60 per rps
    evals = [h100_tp1, h100_tp2, a100]
    chosen = solve(evals, rate_rps=20.0)
    assert [(a.evaluation, a.replicas) for a in chosen.allocations] == [(h100_tp1, 2)]
    alts = alternatives(evals, 20.0, chosen, None, 256, 4)
    got = [sorted((a.evaluation.candidate.name, a.replicas) for a in s.allocations) for s in alts]
    # the best plan without the chosen shape (1x tp2 + 1x A100: $11.2) and the A100-only plan ($12);
    # the H100-only plan is the chosen one and is not repeated
    assert got == [sorted([(h100_tp2.candidate.name, 1), (a100.candidate.name, 1)]), [(a100.candidate.name, 5)]]
    assert [s.total_usd_per_hour for s in alts] == sorted(s.total_usd_per_hour for s in alts)
    assert all(s.feasible for s in alts)
    # the chosen plan itself is never an alternative; the limit is respected
    assert all({(a.evaluation.candidate.name, a.replicas) for a in s.allocations} != {(h100_tp1.candidate.name, 2)}
               for s in alts)
    assert len(alternatives(evals, 20.0, chosen, None, 256, 1)) == 1


def test_solve_disagg_prices_units_as_gpus_and_shares_availability():
    from llmplan.optimizer.select_ilp import solve_disagg

    # (name, role, gpu, gpus/worker, $/h per worker, req/s per worker)
    units = [("p_small", "prefill", "h100", 1, 3.0, 2.0), ("p_big", "prefill", "h200", 2, 8.0, 5.0),
             ("d_small", "decode", "h100", 1, 3.0, 4.0), ("d_big", "decode", "h200", 4, 16.0, 20.0)]
    got = solve_disagg(units, 10.0)
    # prefill: 5 x p_small ($15) vs 2 x p_big ($16); decode: 3 x d_small ($9) vs 1 x d_big ($16)
    assert got == {"p_small": 5, "d_small": 3}
    # only 6 H100 GPUs: both pools cannot be H100 -> the cheapest split uses H200 somewhere
    got = solve_disagg(units, 10.0, {"h100": 6})
    h100 = {n: g for n, _, k, g, _, _ in units if k == "h100"}
    assert sum(h100[m] * c for m, c in got.items() if m in h100) <= 6
    assert got == {"p_big": 2, "d_small": 3}
    # one shape per pool by default ($12 of prefill); mixing shapes is cheaper: 1 + 1 workers, $11
    assert solve_disagg(units, 7.0) == {"p_small": 4, "d_small": 2}
    assert solve_disagg(units, 7.0, one_shape_per_role=False) == {"p_small": 1, "p_big": 1, "d_small": 2}
    assert solve_disagg([u for u in units if u[1] == "prefill"], 1.0) is None
    assert solve_disagg(units, 10.0, {"h100": 0, "h200": 5}) is None

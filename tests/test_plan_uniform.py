"""search.uniform=true: one GPU type and one parallel shape for the whole deployment."""

import json

import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.errors import EXIT_OK, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer.planner import SearchSpace, check_space
from llmplan.optimizer.select_ilp import alternatives, solve
from llmplan.optimizer.types import Candidate, Evaluation
from llmplan.sim.types import Parallelism, Precision


def _ev(gpu: str, tp: int, price: float, cap: float) -> Evaluation:
    return Evaluation(Candidate(get_gpu(gpu), Parallelism(tp), Precision(), 256, price), "ok", capacity_rps=cap)


def _shapes(sel):
    return {(a.evaluation.candidate.gpu.key, a.evaluation.candidate.par) for a in sel.allocations}


def test_uniform_uses_one_candidate_and_costs_at_least_the_mix():
    evs = [_ev("h100_sxm", 1, 4.0, 10.0), _ev("a100_sxm", 1, 2.0, 4.0), _ev("h200_sxm", 2, 9.0, 21.0)]
    mixed = solve(evs, rate_rps=14.0)
    assert len(_shapes(mixed)) == 2  # 1x H100 + 1x A100 = $6
    uni = solve(evs, rate_rps=14.0, uniform=True)
    assert uni.feasible and len(uni.allocations) == 1
    assert uni.total_usd_per_hour >= mixed.total_usd_per_hour
    # the cheapest single candidate: 2x H100 $8, 4x A100 $8 (more GPUs), 1x H200 TP2 $9
    a = uni.allocations[0]
    assert (a.evaluation.candidate.gpu.key, a.replicas) == ("h100_sxm", 2)
    assert uni.total_usd_per_hour == pytest.approx(8.0)


def test_uniform_respects_availability_and_alternatives_stay_uniform():
    evs = [_ev("h100_sxm", 1, 4.0, 10.0), _ev("a100_sxm", 1, 2.0, 4.0)]
    uni = solve(evs, rate_rps=14.0, max_gpus={"h100_sxm": 1}, uniform=True)
    assert [(a.evaluation.candidate.gpu.key, a.replicas) for a in uni.allocations] == [("a100_sxm", 4)]
    assert not solve(evs, rate_rps=30.0, max_gpus={"h100_sxm": 1, "a100_sxm": 4}, uniform=True).feasible
    alts = alternatives(evs, 14.0, solve(evs, 14.0, uniform=True), None, 256, 4, uniform=True)
    assert alts and all(len(s.allocations) == 1 for s in alts)


def test_uniform_must_be_a_bool():
    with pytest.raises(UserError) as exc:
        check_space(SearchSpace(uniform="yes"))
    assert exc.value.key == "search.uniform"


def test_plan_with_uniform_writes_one_deployment(tmp_path):
    args = ["model=llama3_1_8b", "gpu.candidates=[h100_sxm,a100_sxm,l40s]", "search=fast", "workload.rate_rps=40",
            "search.uniform=true"]
    assert run_plan(compose("plan", args), tmp_path) == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["uniform"] is True and d["feasible"]
    shapes = {(x["gpu"], x["tp"], x["pp"], x["ep"], x["precision"], x["max_num_seqs"]) for x in d["deployments"]}
    assert len(shapes) == 1
    mixed_dir = tmp_path / "mixed"
    assert run_plan(compose("plan", args[:-1]), mixed_dir) == EXIT_OK
    m = json.loads((mixed_dir / "plan.json").read_text())
    assert m["uniform"] is False
    assert d["total_usd_per_hour"] >= m["total_usd_per_hour"] - 1e-9

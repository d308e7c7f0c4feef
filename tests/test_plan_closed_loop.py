"""Closed-loop target: `plan workload=closed_loop workload.concurrency=N` (optimizer/closed_loop.py)."""

import json
from types import SimpleNamespace

import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.errors import EXIT_OK, ConfigError, UserError
from llmplan.optimizer.closed_loop import MIN_STEP, plan_closed_loop, start_rate
from llmplan.optimizer.types import SLOTarget

SLOS = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]


def test_start_rate_is_users_over_the_slo_latency_plus_think_time():
    # R_slo = 1000 + (101 - 1) x 50 = 6000 ms; 60 users with 4 s think time: 60 / 10 s
    assert start_rate(60, 4000.0, SLOS, 101.0) == pytest.approx(6.0)
    with pytest.raises(UserError) as exc:
        start_rate(8, 0.0, SLOS[:1], 100.0)
    assert exc.value.key == "slo"


class _Res:
    def __init__(self, rate):
        self.selection = SimpleNamespace(feasible=True, total_usd_per_hour=rate, allocations=[])
        self.verification, self.notes, self.rate = {}, [], rate


@pytest.mark.parametrize("passes_at", [1.0, 9.0, 1e9])
def test_rates_rise_until_the_closed_loop_meets_the_slos(passes_at):
    app = SimpleNamespace(workload=SimpleNamespace(concurrency=60, think_time_ms=4000.0))
    planned = []

    def at_rate(rate):
        planned.append(rate)
        return _Res(rate), "model"

    def check(res, model):  # the loop drives 1.1x the planned rate; met once the plan is for >= passes_at
        return {"throughput_rps": 1.1 * res.rate, "met": res.rate >= passes_at, "targets": {}, "pools": []}

    res, _ = plan_closed_loop(app, at_rate, check, SLOS, 101.0)
    cl = res.verification["closed_loop"]
    assert planned[0] == pytest.approx(6.0) and all(b >= a * MIN_STEP * (1 - 1e-9) for a, b in zip(planned, planned[1:]))
    assert [r["rate_rps"] for r in cl["rounds"]] == pytest.approx(planned, rel=1e-4)
    assert cl["met"] is (passes_at < 1e9)
    if cl["met"]:
        assert planned[-1] >= passes_at and (len(planned) == 1 or planned[-2] < passes_at)
    else:
        assert any(n.startswith("WARNING") for n in res.notes)


def test_64_users_get_a_deployment_whose_closed_loop_meets_the_slos(tmp_path):
    # 64 users with no think time stay in step: each prompt waits for its cohort's prefill, about 0.9-1.5 s on an
    # A100 with vLLM's async scheduling (one step later for a prompt arriving mid-step), so the TTFT bound is 2 s
    over = ["model=llama3_1_8b", "workload=closed_loop", "workload.concurrency=64", "gpu.candidates=[h100_sxm,a100_sxm]",
            "search.tp=[1,2]", "search.pp=[1]", "slo.ttft_p90_ms=2000"]
    assert run_plan(compose("plan", over), tmp_path) == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    cl = d["verification"]["closed_loop"]
    assert cl["users"] == 64 and cl["met"] and cl["check"]["met"]
    assert all(t["simulated_ms"] <= t["limit_ms"] for t in cl["check"]["targets"].values())
    assert cl["check"]["throughput_rps"] >= cl["start_rate_rps"] * 0.95
    # the reported percentiles (and P(SLO met)) are the closed loop's
    assert d["deployments"][0]["simulated"]["basis"] == "closed_loop"
    bench = (tmp_path / "deploy").rglob("bench.sh")
    assert any("--max-concurrency 64" in p.read_text() for p in bench)


def test_closed_loop_with_a_fleet_is_refused(tmp_path):
    with pytest.raises(ConfigError) as exc:
        run_plan(compose("plan", ["model=llama3_1_8b", "workload=closed_loop", "fleet.gpus={h100_sxm: 2}"]), tmp_path)
    assert exc.value.key == "workload.arrival"

"""fleet.gpus: the maximum request rate a given fleet sustains within the SLOs (optimizer/fleet.py)."""

import json

import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.resolve import to_app
from llmplan.errors import EXIT_OK, ConfigError, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer.fleet import check_fleet, max_rate
from llmplan.optimizer.types import Candidate, Evaluation
from llmplan.sim.types import Parallelism, Precision

SMALL = ["model=llama3_1_8b", "search.tp=[1,2]", "search.pp=[1]", "search.max_batch=[256]"]


def _ev(gpu: str, tp: int, price: float, cap: float) -> Evaluation:
    return Evaluation(Candidate(get_gpu(gpu), Parallelism(tp), Precision(), 256, price), "ok", capacity_rps=cap)


def test_ilp_fills_the_fleet_with_the_best_capacity_per_gpu():
    # 5 H100: TP2 (12 rps / 2 GPUs) beats TP1 (5 rps) per GPU, but only 2 TP2 fit 5 GPUs: 2x TP2 + 1x TP1 = 29
    evs = [_ev("h100_sxm", 1, 4.0, 5.0), _ev("h100_sxm", 2, 8.0, 12.0), _ev("a100_sxm", 1, 2.0, 3.0)]
    sel, rate = max_rate(evs, {"h100_sxm": 5, "a100_sxm": 2}, max_load=1.0)
    reps = sorted((a.evaluation.candidate.gpu.key, a.evaluation.candidate.par.tp, a.replicas) for a in sel.allocations)
    assert reps == [("a100_sxm", 1, 2), ("h100_sxm", 1, 1), ("h100_sxm", 2, 2)]
    assert rate == pytest.approx(12 * 2 + 5 + 3 * 2)
    assert max_rate(evs, {"h100_sxm": 5}, max_load=0.5)[1] == pytest.approx(0.5 * (12 * 2 + 5))


def test_fleet_too_small_for_any_candidate_is_infeasible():
    sel, rate = max_rate([_ev("h100_sxm", 2, 8.0, 12.0)], {"h100_sxm": 1})
    assert not sel.feasible and rate == 0.0 and "fits the fleet" in sel.binding


def test_bad_fleets_name_the_key():
    with pytest.raises(UserError) as exc:
        check_fleet({"h100_sxm": 0}, ["h100_sxm"])
    assert exc.value.key == "fleet.gpus.h100_sxm"
    with pytest.raises(ConfigError) as exc:
        to_app(compose("plan", SMALL + ["fleet.gpus={h100_sxm: -1}"]))
    assert "fleet.gpus" in str(exc.value.key)


def _fleet(tmp_path, n: int, extra=()):
    out = tmp_path / f"fleet{n}"
    code = run_plan(compose("plan", SMALL + [f"fleet.gpus={{h100_sxm: {n}}}", *extra]), out)
    return code, json.loads((out / "plan.json").read_text())


def test_doubling_the_fleet_doubles_the_rate_and_the_deployment_fits(tmp_path):
    rates = {}
    for n in (2, 4):
        code, d = _fleet(tmp_path, n, ["search.finalists=0"])
        assert code == EXIT_OK and d["feasible"]
        fl = d["fleet"]
        assert fl["gpus"] == {"h100_sxm": n} and fl["max_rate_rps"] > 0
        used = sum(x["replicas"] * x["gpus_per_replica"] for x in d["deployments"])
        assert used <= n and fl["gpus_used"]["h100_sxm"] == used == d["total_gpus"]
        served = sum(0.95 * x["replicas"] * x["capacity_rps_per_replica"] for x in d["deployments"])
        assert fl["max_rate_rps"] == pytest.approx(served, rel=1e-3)
        assert d["workload"]["rate_rps"] == pytest.approx(fl["max_rate_rps"], rel=1e-3)
        rates[n] = fl["max_rate_rps"]
    # the best replica needs at most 2 GPUs: 4 GPUs hold exactly twice what 2 hold
    assert rates[4] == pytest.approx(2 * rates[2], rel=0.02)


def test_fleet_rate_is_checked_by_one_whole_deployment_simulation(tmp_path):
    code, d = _fleet(tmp_path, 2)
    assert code == EXIT_OK
    sim = d["verification"]["deployment_simulation"]
    assert sim["rate_rps"] == pytest.approx(d["fleet"]["max_rate_rps"], rel=1e-3)
    met = not sim["overloaded"] and all(t["met"] for t in sim["targets"].values())
    assert d["fleet"]["simulation_meets_slos"] is met


def test_fleet_with_a_day_profile_is_refused(tmp_path):
    with pytest.raises(UserError) as exc:
        run_plan(compose("plan", SMALL + ["fleet.gpus={h100_sxm: 2}", "day.profile=diurnal_24h"]), tmp_path)
    assert exc.value.key == "fleet.gpus"


def _fleet_result(rate: float):
    from llmplan.optimizer.planner import PlanResult
    from llmplan.optimizer.types import Allocation, Selection, SLOTarget, WorkloadStats

    ev = _ev("h100_sxm", 1, 4.0, rate / 4)
    sel = Selection(True, [Allocation(ev, 4)], 16.0, 4, "Optimal")
    return PlanResult(sel, [ev], [], WorkloadStats(rate, 1000.0, 200.0, 4000), [SLOTarget("ttft", 90, 1000.0)],
                      fleet={"max_rate_rps": rate})


@pytest.mark.parametrize("sustained", [100.0, 83.0, 55.0, 30.0])
def test_settle_rate_reports_a_rate_the_steady_state_simulation_passes(sustained):
    from llmplan.optimizer.fleet import SETTLE_FLOOR, SETTLE_REL_TOL, SETTLE_RUNS, settle_rate

    res, seen = _fleet_result(100.0), []

    def simulate(r) -> bool:  # a deployment that sustains `sustained` req/s in steady state
        seen.append(r.workload.rate_rps)
        ok = r.workload.rate_rps <= sustained + 1e-9
        r.verification["deployment_simulation"] = {"rate_rps": r.workload.rate_rps, "met": ok}
        return ok

    settle_rate(res, simulate)
    fl = res.fleet
    assert len(seen) <= 1 + SETTLE_RUNS and fl["ilp_rate_rps"] == 100.0
    if sustained < 100.0 * SETTLE_FLOOR:  # nothing passes down to the floor: the ILP's rate, marked failing
        assert fl["simulation_meets_slos"] is False and fl["max_rate_rps"] == 100.0
        return
    assert fl["simulation_meets_slos"] is True
    assert sustained * (1 - SETTLE_REL_TOL) - 1e-6 <= fl["max_rate_rps"] <= sustained + 1e-9
    # what is attached is the simulation of the reported rate
    assert res.verification["deployment_simulation"]["rate_rps"] == pytest.approx(fl["max_rate_rps"])
    assert res.workload.rate_rps == pytest.approx(fl["max_rate_rps"])
    assert res.selection.allocations[0].share_rps == pytest.approx(fl["max_rate_rps"] / 4)


def test_eight_gpu_fleet_rate_passes_the_whole_deployment_simulation(tmp_path):
    out = tmp_path / "f8"
    assert run_plan(compose("plan", ["model=llama3_1_8b", "fleet.gpus={h100_sxm: 8}"]), out) == EXIT_OK
    d = json.loads((out / "plan.json").read_text())
    fl, sim = d["fleet"], d["verification"]["deployment_simulation"]
    assert fl["simulation_meets_slos"] is True and sim["met"] and not sim["overloaded"]
    assert sim["rate_rps"] == pytest.approx(fl["max_rate_rps"], rel=1e-3)
    assert fl["max_rate_rps"] <= fl["ilp_rate_rps"] * (1 + 1e-6)
    passing = [r["rate_rps"] for r in fl["steady_state_runs"] if r["met"]]
    failing = [r["rate_rps"] for r in fl["steady_state_runs"] if not r["met"]]
    assert fl["max_rate_rps"] == pytest.approx(max(passing), rel=1e-3)
    assert all(f > fl["max_rate_rps"] for f in failing)


def test_settle_rate_probes_the_capacity_estimate_instead_of_a_midpoint_above_it():
    """A midpoint above the run planner's capacity estimate is replaced by the estimate (x1.0001):
    there a run is not lengthened (no steady state), so the bracket closes with a short run."""
    from llmplan.optimizer.fleet import SETTLE_ESTIMATE_PROBE, SETTLE_REL_TOL, settle_rate

    cap, sustained = 90.0, 88.0
    res, seen = _fleet_result(100.0), []

    def simulate(r) -> bool:
        rate = r.workload.rate_rps
        seen.append(rate)
        ok = rate <= sustained
        r.verification["deployment_simulation"] = {"rate_rps": rate, "met": ok,
                                                   "window": {"estimate": {"utilisation": rate / cap}}}
        return ok

    settle_rate(res, simulate)
    assert seen[:2] == [100.0, pytest.approx(0.95 * cap)]            # the ILP's rate, then 0.95 x the estimate
    assert seen[2] == pytest.approx(SETTLE_ESTIMATE_PROBE * cap)     # not the midpoint 92.75
    fl = res.fleet
    assert fl["simulation_meets_slos"] and fl["max_rate_rps"] == pytest.approx(0.95 * cap)
    failing = min(x["rate_rps"] for x in fl["steady_state_runs"] if not x["met"])
    assert failing - fl["max_rate_rps"] <= SETTLE_REL_TOL * failing   # still bracketed to the tolerance


def test_settled_fleet_rate_passes_the_whole_deployment_simulation(tmp_path):
    """The reported rate is one the attached whole-deployment steady-state simulation passes, and
    a failing run (if any) lies within SETTLE_REL_TOL above it."""
    from llmplan.optimizer.fleet import SETTLE_REL_TOL

    code, d = _fleet(tmp_path, 4)
    fl, sim = d["fleet"], d["verification"]["deployment_simulation"]
    assert code == EXIT_OK and fl["simulation_meets_slos"] is True
    assert sim["met"] is True and not sim["overloaded"] and sim["window"]["stationary"]
    assert sim["rate_rps"] == pytest.approx(fl["max_rate_rps"], rel=1e-3)
    runs = fl["steady_state_runs"]
    assert any(r["met"] and r["rate_rps"] == pytest.approx(fl["max_rate_rps"], rel=1e-6) for r in runs)
    assert all(isinstance(r["warmup_doublings"], int) for r in runs)
    failing = [r["rate_rps"] for r in runs if not r["met"] and r["rate_rps"] > fl["max_rate_rps"]]
    if failing:
        assert min(failing) - fl["max_rate_rps"] <= SETTLE_REL_TOL * min(failing) + 1e-6

"""Independent jobs on forked workers (llmplan/parallel.py) and its users: same answers as
one after the other, whatever the number of workers."""

import os
import sys

import pytest

from llmplan.errors import UserError
from llmplan.optimizer import day_attainment as da
from llmplan import parallel
from llmplan.optimizer.day_plan import DayCandidate, plan_day, profile_from_rates
from llmplan.optimizer.price_tiers import PriceTiers
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.serving import estimate_capacity_rps
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec

FORK = sys.platform.startswith("linux")


def _square(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_results_come_back_in_job_order_from_worker_processes():
    jobs = [lambda x=x: _square(x) for x in range(7)]
    par = parallel.map_jobs(jobs, workers=2)
    seq = parallel.map_jobs(jobs, workers=1)
    assert [v for v, _ in par] == [v for v, _ in seq] == [x * x for x in range(7)]
    assert {p for _, p in seq} == {os.getpid()}
    if FORK:  # the jobs ran in other processes
        assert os.getpid() not in {p for _, p in par}


def test_progress_is_reported_in_this_process_for_every_job():
    seen = []
    parallel.map_jobs([lambda x=x: x for x in range(5)], on_result=lambda d, t: seen.append((d, t)), workers=2)
    assert seen == [(i, 5) for i in range(1, 6)]


def _bad() -> None:
    raise UserError("is wrong", key="some.key", fix="set it right")


def test_a_job_that_raises_raises_the_same_error_here():
    with pytest.raises(UserError) as e:
        parallel.map_jobs([lambda: 1, _bad, lambda: 3], workers=2)
    assert e.value.key == "some.key" and e.value.fix == "set it right"


def test_a_map_inside_a_job_runs_in_that_job():
    def outer(x):
        return parallel.map_jobs([lambda y=y: (x, y, os.getpid()) for y in range(3)], workers=2)

    res = parallel.map_jobs([lambda x=x: outer(x) for x in range(2)], workers=2)
    for x, inner in enumerate(res):
        assert [(a, b) for a, b, _ in inner] == [(x, 0), (x, 1), (x, 2)]
        assert len({p for _, _, p in inner}) == 1  # no pool of its own


def test_workers_from_the_environment(monkeypatch):
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert parallel.worker_count(10) == 1
    monkeypatch.setenv(parallel.WORKERS_ENV, "3")
    assert parallel.worker_count(2) == (2 if FORK else 1)  # never more than the jobs
    monkeypatch.setenv(parallel.WORKERS_ENV, "zero")
    with pytest.raises(ValueError, match=parallel.WORKERS_ENV):
        parallel.worker_count(4)
    monkeypatch.delenv(parallel.WORKERS_ENV)
    assert 1 <= parallel.worker_count(100) <= parallel.DEFAULT_MAX_WORKERS


# ---------------------------------------------------------------- day attainment

REP = make_replica()
WL = WorkloadSpec(preset=None, input_tokens=LengthSpec("fixed", 200), output_tokens=LengthSpec("fixed", 40))
CAP = 0.5 * estimate_capacity_rps([REP], 200, 40)
SLOS = [SLOTarget("ttft", 90, 2000.0), SLOTarget("tpot", 90, 100.0)]


def _attainment(monkeypatch, workers: str):
    monkeypatch.setenv(parallel.WORKERS_ENV, workers)
    tiers = {"g": PriceTiers("g", 1.0, None, 0.6, 0.3)}  # spot: interruptions split intervals into phases
    day = plan_day(profile_from_rates([0.4 * CAP, 1.6 * CAP, 2.4 * CAP, 0.8 * CAP], 3600.0),
                   [DayCandidate("c", "g", 1, CAP, 1.0)], tiers, scale_up_s=600.0, max_load=0.8)
    return da.day_attainment(day, lambda name: REP, WL, SLOS,
                             da.AttainmentSettings(requests_per_phase=100, lead="reactive"))


def test_day_attainment_is_the_same_with_one_or_two_workers(monkeypatch):
    one, two = _attainment(monkeypatch, "1"), _attainment(monkeypatch, "2")
    assert one == two
    assert one["simulations"] == one["day"]["simulations"] + one["static"]["simulations"] >= 3


def test_phases_simulated_ahead_are_those_the_schedules_meet_and_counted_where_first_met():
    tiers = {"g": PriceTiers("g", 1.0, None, 0.6, 0.3)}
    prof = profile_from_rates([0.4 * CAP, 1.6 * CAP, 0.8 * CAP], 3600.0)
    serving = {("c", "spot"): (1, 2, 1), ("c", "on_demand"): (0, 1, 1)}
    static = {k: (max(v),) * 3 for k, v in serving.items()}
    s = da.AttainmentSettings(requests_per_phase=100, lead="reactive")
    common = ({"c": "g"}, tiers, 600.0, True)
    keys = da.phase_keys(prof, [serving, static], *common, s)
    assert len(keys) == len(set(keys)) >= 3

    def walk(precomputed):
        cache, sims = {}, []
        for sched in (serving, static):
            a = da.simulate_schedule("x", prof, sched, *common, lambda n: REP, WL, SLOS, s, cache, None, precomputed)
            sims.append(a.simulations)
        return cache, sims

    seq_cache, seq_sims = walk(None)
    ahead = da.simulate_phases(keys, lambda n: REP, WL, SLOS, s)
    par_cache, par_sims = walk(dict(ahead))
    assert list(seq_cache) == list(par_cache) and set(keys) == set(seq_cache)  # the same phases, met in the same order
    assert par_sims == seq_sims
    for k in keys:
        a, b = seq_cache[k], par_cache[k]
        assert (a.overloaded, a.served_rps, a.held) == (b.overloaded, b.served_rps, b.held)
        assert all((a.values_ms[m] == b.values_ms[m]).sum() == (a.values_ms[m] == a.values_ms[m]).sum()
                   for m in a.values_ms)


def test_the_commands_refuse_a_bad_worker_count(monkeypatch, capsys):
    from llmplan.cli.main import main

    monkeypatch.setenv(parallel.WORKERS_ENV, "-1")
    assert main(["plan", "--help"]) == 2
    err = capsys.readouterr().err
    assert parallel.WORKERS_ENV in err and "integer >= 1" in err and "Traceback" not in err


def test_no_workers_where_ray_is_loaded(monkeypatch):
    import types

    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert parallel.worker_count(8) == 1 and not parallel.can_fork_beside()
    with parallel.beside(lambda: 1) as later:
        assert later is None


def test_busy_cores_are_read_from_the_runnable_count(tmp_path, monkeypatch):
    f = tmp_path / "loadavg"
    f.write_text("4.10 3.00 2.00 3/200 1234\n")  # 3 runnable: this process and 2 others
    assert parallel.busy_elsewhere(path=str(f)) == 2
    f.write_text("0.10 0.10 0.10 1/200 1234\n")
    assert parallel.busy_elsewhere(path=str(f)) == 0
    assert parallel.busy_elsewhere(path=str(tmp_path / "missing")) == 0
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel, "busy_elsewhere", lambda: parallel.available_cpus())  # every core taken
    assert parallel.worker_count(8) == 1 and not parallel.can_fork_beside()
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")  # asked for: the load is not consulted
    assert parallel.worker_count(8) == (2 if FORK else 1)


def test_whatif_plans_side_by_side_write_the_same_file(tmp_path, monkeypatch):
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.whatif_cmd import run_whatif

    overrides = ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0",
                 "whatif.gpu_scale={h100_sxm: {hbm_bw_gbps: 2.0}}"]
    texts = []
    for workers in ("1", "2"):
        monkeypatch.setenv(parallel.WORKERS_ENV, workers)
        run_whatif(compose("whatif", overrides), tmp_path / workers)
        texts.append((tmp_path / workers / "whatif.json").read_text())
    assert texts[0] == texts[1]
    assert '"baseline"' in texts[0] and '"whatif"' in texts[0]

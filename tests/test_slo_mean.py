"""SLOs on the mean: `slo.ttft_mean_ms` / `slo.tpot_mean_ms` (optimizer/slo_check.py, docs/PARETO.md).

Checked: the keys parse and are range-checked (exit 2, "did you mean" for typos); slo_check judges
a mean target on the mean (analytical map, simulated sample, simulator threshold set); the screen's
mean estimate sets the capacity of a mean target; a mean target binds a plan; a mean-only plan; risk
on the mean (standard error of the mean, tightened limits keep the statistic); the other paths
(disaggregated option, co-location, day attainment, closed loop, what-if SLO sweep) judge the mean.
"""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from test_cli_bad_inputs import FAST, _assert_clear, _run

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.resolve import resolve_slos, to_app
from llmplan.errors import EXIT_OK
from llmplan.optimizer import slo_check
from llmplan.optimizer.risk import allocation_probabilities, sample_log_sd, target_log_sd, tightened_slos
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.metrics import SLOThresholds, slo_met_at_percentile

MEAN_TPOT = SLOTarget("tpot", 50.0, 20.0, stat="mean")
MEAN_TTFT = SLOTarget("ttft", 50.0, 400.0, stat="mean")
P90_TTFT = SLOTarget("ttft", 90.0, 1000.0)


def test_mean_keys_resolve_to_mean_targets():
    app = to_app(compose("plan", ["slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null", "slo.ttft_mean_ms=400",
                                  "slo.tpot_mean_ms=20"]))
    slos = resolve_slos(app)
    assert [(s.key, s.is_mean, s.limit_ms) for s in slos] == [("ttft_mean", True, 400.0), ("tpot_mean", True, 20.0)]
    assert slos[0].label == "TTFT mean <= 400 ms"
    # beside the default p90 targets
    both = resolve_slos(to_app(compose("plan", ["slo.tpot_mean_ms=20"])))
    assert {s.key for s in both} == {"ttft_p90", "tpot_p90", "tpot_mean"}


@pytest.mark.parametrize("argv,key,needle", [
    (["plan", "slo.ttft_mean_ms=-5"], "slo.ttft_mean_ms", "> 0"),
    (["plan", "slo.tpot_mean_ms=0"], "slo.tpot_mean_ms", "> 0"),
    (["plan", "slo.tpot_mean_ms=fast"], "slo.tpot_mean_ms", None),
    (["plan", "slo.ttft_maen_ms=500"], "slo.ttft_maen_ms", "did you mean ttft_mean_ms"),
])
def test_bad_mean_values_exit_2_naming_the_key(argv, key, needle, capsys, tmp_path):
    code, out, err = _run([argv[0], *FAST, f"hydra.run.dir={tmp_path / 'out'}", *argv[1:]], capsys)
    _assert_clear(code, out, err, key, needle)


def test_slo_check_judges_a_mean_target_on_the_mean():
    sample = np.array([10.0, 10.0, 10.0, 10.0, 50.0])    # mean 18, median 10, p90 34
    assert slo_check.sample_value(sample, MEAN_TPOT) == pytest.approx(18.0)
    assert slo_check.sample_value(sample, SLOTarget("tpot", 50.0, 20.0)) == pytest.approx(10.0)
    assert slo_check.sample_value(np.array([np.nan, 4.0, 8.0]), MEAN_TPOT) == pytest.approx(6.0)
    assert math.isnan(slo_check.sample_value(np.array([np.nan]), MEAN_TPOT))
    # from the analytical maps: "mean" is read, not the percentile 50 the target carries
    vals = slo_check.target_values({50.0: 100.0, 90.0: 300.0, "mean": 150.0}, {50.0: 9.0, "mean": 21.0},
                                   [MEAN_TTFT, MEAN_TPOT, P90_TTFT])
    assert vals == {"ttft_mean": 150.0, "tpot_mean": 21.0, "ttft_p90": 300.0}
    assert slo_check.misses(vals, [MEAN_TTFT, MEAN_TPOT, P90_TTFT]) == [MEAN_TPOT]   # 21 > 20
    assert slo_check.ratio(vals["tpot_mean"], MEAN_TPOT) == pytest.approx(21.0 / 20.0)
    assert slo_check.binding_target(vals, [MEAN_TTFT, P90_TTFT], "ttft") == MEAN_TTFT  # 150/400 > 300/1000


def test_threshold_groups_add_one_mean_set():
    groups = slo_check.threshold_groups([P90_TTFT, MEAN_TPOT, MEAN_TTFT])
    assert [(g.percentile, g.mean, g.ttft_ms, g.tpot_ms) for g in groups] == [
        (90.0, False, 1000.0, None), (90.0, True, 400.0, 20.0)]
    assert [g.mean for g in slo_check.threshold_groups([P90_TTFT])] == [False]


def test_simulator_mean_check():
    df = pd.DataFrame({"finished": [True] * 5, "ttft_ms": [100.0, 100.0, 100.0, 100.0, 600.0],
                       "tpot_ms": [10.0] * 5, "e2e_ms": [1.0] * 5})
    # mean TTFT 200: within 250, not within 150; the p90 (600) is not what is judged
    assert slo_met_at_percentile(df, SLOThresholds(ttft_ms=250.0, mean=True))
    assert not slo_met_at_percentile(df, SLOThresholds(ttft_ms=150.0, mean=True))
    assert not slo_met_at_percentile(df, SLOThresholds(ttft_ms=250.0, percentile=90.0))


def _analyzer():
    from llmplan.cli.plan_cmd import plan_from_app

    app = to_app(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", "workload.rate_rps=5",
                                  "search.tp=[1]", "search.precision=[fp8]", "search.max_batch=[256]",
                                  "output.progress=false"]))
    res, _ = plan_from_app(app, Console(file=io.StringIO()), show_progress=False)
    ev = next(e for e in res.evaluations if e.verdict == "ok" and e.analyzer is not None)
    return ev.analyzer


def test_screen_mean_estimate_and_capacity():
    an = _analyzer()
    lo, hi = an.operating_point(1.0, [50.0]), an.operating_point(6.0, [50.0])
    for op in (lo, hi):
        assert op.ttft_ms["mean"] >= op.ttft_ms[50.0] * 0.99   # residual and wait skew right
        assert op.tpot_ms["mean"] > 0
    assert hi.ttft_ms["mean"] > lo.ttft_ms["mean"] and hi.tpot_ms["mean"] > lo.tpot_ms["mean"]
    limit = an.operating_point(4.0, [50.0]).tpot_ms["mean"]
    cap, binding, at_cap, _ = an.capacity([SLOTarget("tpot", 50.0, limit, stat="mean")])
    assert cap == pytest.approx(4.0, rel=0.05)
    assert binding == f"TPOT mean <= {limit:g} ms"
    assert at_cap.tpot_ms["mean"] <= limit


def _plan(tmp_path, extra):
    over = ["model=llama3_1_8b", "search.finalists=0", "workload.rate_rps=10", "output.progress=false"] + extra
    code = run_plan(compose("plan", over), tmp_path, Console(file=io.StringIO(), width=100))
    return code, json.loads((tmp_path / "plan.json").read_text())


def test_a_mean_target_binds_and_a_mean_only_plan(tmp_path):
    code0, base = _plan(tmp_path / "p90", [])
    code1, bound = _plan(tmp_path / "mean", ["slo.tpot_mean_ms=12"])
    code2, only = _plan(tmp_path / "only", ["slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null", "slo.tpot_mean_ms=12"])
    assert code0 == code1 == code2 == EXIT_OK
    d0, d1, d2 = base["deployments"][0], bound["deployments"][0], only["deployments"][0]
    assert d0["targets"]["tpot_p90"]["analytical_ms"] > 12.0      # the p90 plan's pick misses a 12 ms mean
    assert (d1["gpu"], d1["tp"], d1["replicas"]) != (d0["gpu"], d0["tp"], d0["replicas"])
    assert bound["total_usd_per_hour"] > base["total_usd_per_hour"]
    assert d1["tpot_target"] == "tpot_mean" and d1["targets"]["tpot_mean"]["analytical_ms"] <= 12.0
    assert {"metric": "tpot", "percentile": None, "stat": "mean", "limit_ms": 12.0} in bound["slo"]
    assert only["slo"] == [{"metric": "tpot", "percentile": None, "stat": "mean", "limit_ms": 12.0}]
    assert set(d2["targets"]) == {"tpot_mean"} and d2["targets"]["tpot_mean"]["analytical_ms"] <= 12.0
    assert 0.0 < d2["targets"]["tpot_mean"]["probability"] <= 1.0


def test_risk_on_the_mean():
    rng = np.random.default_rng(0)
    v = rng.lognormal(3.0, 0.5, 4000)
    sd = target_log_sd(v, MEAN_TPOT)
    assert sd == pytest.approx(v.std(ddof=1) / (math.sqrt(len(v)) * v.mean()))
    assert target_log_sd(v, SLOTarget("tpot", 90.0, 20.0)) == sample_log_sd(v, 90.0)
    # tightened limits keep the statistic (a mean target must not become a p50 one)
    t = tightened_slos([MEAN_TPOT, P90_TTFT], "vllm", 0.8)
    assert t[0].is_mean and t[0].key == "tpot_mean" and t[0].limit_ms < MEAN_TPOT.limit_ms
    # P(met) falls as the predicted mean nears the limit
    p = [allocation_probabilities({"tpot_mean": x}, {}, [MEAN_TPOT], "vllm")["tpot_mean"] for x in (10.0, 18.0, 25.0)]
    assert p[0] > p[1] > p[2]


def test_disaggregated_option_sizes_a_mean_ttft_on_the_md1_mean_wait():
    from llmplan.optimizer.disagg_candidates import _limits, prefill_capacity

    lim, pct = _limits([MEAN_TTFT, SLOTarget("tpot", 90.0, 50.0)], "ttft")
    assert lim == 400.0 and pct == pytest.approx(100.0 * (1.0 - math.exp(-1.0)))
    rate, ttft = prefill_capacity(100.0, 0.0, 400.0, pct)
    rho = rate * 100.0 / 1000.0
    assert ttft == pytest.approx(100.0 + rho * 100.0 / (2.0 * (1.0 - rho)))   # Pollaczek-Khinchine mean
    assert ttft <= 400.0 + 1e-9


def test_colocation_judges_the_mean():
    from types import SimpleNamespace

    from llmplan.optimizer.colocation_plan import judge

    df = pd.DataFrame({"measured": [True] * 4, "finished": [True] * 4, "ttft_ms": [100.0, 100.0, 100.0, 500.0],
                       "tpot_ms": [10.0] * 4})
    out = judge(SimpleNamespace(requests=df, overloaded=False), [SLOTarget("ttft", 50.0, 250.0, stat="mean")])
    assert out["TTFT mean <= 250 ms"] == pytest.approx(200.0) and out["met"]
    out = judge(SimpleNamespace(requests=df, overloaded=False), [SLOTarget("ttft", 50.0, 150.0, stat="mean")])
    assert not out["met"]     # the median (100) would have passed


def test_whatif_slo_sweep_scales_mean_targets():
    from llmplan.cli.whatif_scenario import scenario

    app = to_app(compose("whatif", ["slo.tpot_mean_ms=20", "whatif.slo_scale=0.5"]))
    new = scenario(app)
    assert new.slo.tpot_mean_ms == pytest.approx(10.0) and new.slo.tpot_p90_ms == pytest.approx(25.0)


def test_closed_loop_bound_uses_mean_limits():
    from llmplan.optimizer.closed_loop import slo_latency_ms

    # a mean target bounds the mean latency directly: R = 400 + (101 - 1) x 20
    assert slo_latency_ms([MEAN_TTFT, MEAN_TPOT], 101.0) == pytest.approx(2400.0)


def test_verified_mean_only_plan_reports_simulated_means(tmp_path):
    """With finalists simulated: the bisection checks the mean (SLOThresholds.mean) and the
    whole-deployment simulation reports the simulated mean against the limit."""
    over = ["model=llama3_1_8b", "gpu=h100_sxm", "workload.rate_rps=10", "output.progress=false",
            "slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null", "slo.ttft_mean_ms=300", "slo.tpot_mean_ms=12"]
    assert run_plan(compose("plan", over), tmp_path, Console(file=io.StringIO(), width=100)) == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    sim = d["verification"]["deployment_simulation"]
    assert set(sim["targets"]) == {"TTFT mean <= 300 ms", "TPOT mean <= 12 ms"}
    # the judged figure is the simulated mean over requests (the summary's mean), not a percentile
    assert sim["targets"]["TPOT mean <= 12 ms"]["simulated_ms"] == pytest.approx(sim["tpot_ms"]["mean"], rel=0.02)
    assert sim["targets"]["TPOT mean <= 12 ms"]["met"] == (sim["targets"]["TPOT mean <= 12 ms"]["simulated_ms"] <= 12)
    pool = d["deployments"][0]
    assert pool["targets"]["tpot_mean"]["simulated_ms"] is not None


def test_closed_loop_judges_mean_targets_in_its_closed_loop_simulation(tmp_path):
    over = ["model=llama3_1_8b", "workload=closed_loop", "workload.concurrency=32", "output.progress=false",
            "slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null", "slo.ttft_mean_ms=400", "slo.tpot_mean_ms=20"]
    assert run_plan(compose("plan", over), tmp_path, Console(file=io.StringIO(), width=100)) == EXIT_OK
    check = json.loads((tmp_path / "plan.json").read_text())["verification"]["closed_loop"]["check"]
    assert set(check["targets"]) == {"ttft_mean", "tpot_mean"}
    for t in check["targets"].values():
        assert t["met"] == (t["simulated_ms"] <= t["limit_ms"])


def test_html_report_draws_a_mean_target():
    from llmplan.optimizer.html_report import _slo_stat, latency_figure

    mean = {"metric": "tpot", "percentile": None, "stat": "mean", "limit_ms": 20.0}
    assert _slo_stat(mean) == "mean" and _slo_stat({"metric": "tpot", "percentile": 90.0}) == "p90"
    png = latency_figure({"tpot_ms": [10.0, 12.0, 30.0]}, [mean])
    assert png[:4] == b"\x89PNG"


@pytest.mark.parametrize("fraction", [0.3, 0.7])
def test_screen_mean_agrees_with_the_simulators_mean(fraction):
    """Same step costs in both (tests/test_optimizer_evaluate.py's linear step, fixed lengths,
    Poisson arrivals): mean TPOT within 5%, mean TTFT within 10%, at 30% and 70% of the p90
    SLO capacity (measured: TTFT +4%/+7%, TPOT -1%/-1%)."""
    from test_optimizer_evaluate import LinearStep, _analyzer, _des

    step = LinearStep()
    an = _analyzer(step=step)
    cap = an.capacity([SLOTarget("ttft", 90, 150.0), SLOTarget("tpot", 90, 20.0)])[0]
    op = an.operating_point(fraction * cap, [50.0])
    _, _, r = _des(fraction * cap, step)
    s = r.summary
    assert not r.overloaded
    assert op.tpot_ms["mean"] == pytest.approx(s["tpot_ms_mean"], rel=0.05)
    assert op.ttft_ms["mean"] == pytest.approx(s["ttft_ms_mean"], rel=0.10)
    assert op.ttft_ms["mean"] > op.ttft_ms[50.0] and s["ttft_ms_mean"] > s["ttft_ms_p50"]


def test_day_attainment_holds_a_mean_target_on_the_mean():
    """One interval of the day's simulation: a limit between the simulated median and mean TTFT
    holds as a p50 target and not as a mean target (the same seeded run)."""
    from test_day_attainment import CAP, REP, WL

    from llmplan.optimizer import day_attainment as da

    def run(slos):
        return da.run_phase((("c", 1),), 0.8 * CAP, lambda name: REP, WL, slos, 300, 0)

    probe = run([SLOTarget("ttft", 50.0, 1e9)])
    fin = probe.finished
    v = probe.values_ms["ttft"][fin]
    med, mean = float(np.median(v)), float(v.mean())
    assert mean > med * 1.01
    limit = 0.5 * (med + mean)
    assert run([SLOTarget("ttft", 50.0, limit)]).held
    assert not run([SLOTarget("ttft", 50.0, limit, stat="mean")]).held
    assert run([SLOTarget("ttft", 50.0, mean * 1.001, stat="mean")]).held


def test_fleet_max_rate_under_mean_targets(tmp_path):
    over = ["model=llama3_1_8b", "fleet.gpus={h100_sxm: 1}", "output.progress=false",
            "slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null", "slo.ttft_mean_ms=400", "slo.tpot_mean_ms=15"]
    assert run_plan(compose("plan", over), tmp_path, Console(file=io.StringIO(), width=100)) == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    sim = d["verification"]["deployment_simulation"]
    assert set(sim["targets"]) == {"TTFT mean <= 400 ms", "TPOT mean <= 15 ms"}
    assert d["fleet"]["max_rate_rps"] > 0
    assert d["fleet"]["simulation_meets_slos"] and all(t["met"] for t in sim["targets"].values())
    # judged on the mean: at the settled rate the mean is within 15 ms (the p90 need not be)
    assert sim["targets"]["TPOT mean <= 15 ms"]["simulated_ms"] == pytest.approx(sim["tpot_ms"]["mean"], rel=0.02)
    assert sim["tpot_ms"]["mean"] <= 15.0

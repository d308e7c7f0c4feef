"""Probability of meeting an SLO (optimizer/risk.py), headroom (optimizer/headroom.py) and
search.confidence (docs/RISK.md)."""

import json
import math

import numpy as np
import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.resolve import to_app
from llmplan.errors import EXIT_OK, ConfigError, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer import risk
from llmplan.optimizer.headroom import headroom, limited_by
from llmplan.optimizer.types import Allocation, Candidate, Evaluation, Selection, SLOTarget
from llmplan.sim import served_error
from llmplan.sim.serving_bands import served_band
from llmplan.sim.types import Parallelism, Precision


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("metric", ["ttft", "tpot"])
def test_lognormal_puts_the_band_edges_at_its_central_share(engine, metric):
    b, err = served_band(engine, metric), served_error.lognormal_error(engine, metric)
    # measured <= predicted x hi for (1 + level) / 2 of deployments, <= predicted x lo for (1 - level) / 2
    assert err.probability(100.0, 100.0 * b.hi) == pytest.approx((1 + b.level) / 2, abs=1e-9)
    assert err.probability(100.0, 100.0 * b.lo) == pytest.approx((1 - b.level) / 2, abs=1e-9)
    assert err.probability(math.inf, 1e9) == 0.0 and err.probability(float("nan"), 1e9) == 0.0


@pytest.mark.parametrize("kind", ["lognormal", "empirical"])
def test_sampling_spread_lowers_a_high_probability_and_raises_a_low_one(kind):
    err = served_error.lognormal_error("vllm", "tpot") if kind == "lognormal" else _empirical()
    hi, lo = err.probability(20.0, 40.0), err.probability(40.0, 20.0)
    assert err.probability(20.0, 40.0, 0.3) < hi and err.probability(40.0, 20.0, 0.3) > lo


def _empirical():
    return served_error.EmpiricalError("vllm", "tpot", (0.05, 0.5, 0.95), (-0.5, 0.1, 0.3), "test")


def test_empirical_error_interpolates_its_quantiles_and_holds_the_tails():
    e = _empirical()
    for p, q in zip(e.p, e.log_residual):  # the stored points
        assert e.cdf(q) == pytest.approx(p) and e.log_quantile(p) == pytest.approx(q)
    assert e.cdf(-0.2) == pytest.approx(0.05 + 0.45 * 0.3 / 0.6)       # linear in between
    assert e.cdf(-9.0) == 0.05 and e.cdf(9.0) == 0.95                  # no sharper tails than the sample
    assert e.probability(100.0, 100.0 * math.exp(0.1)) == pytest.approx(0.5)


def test_confidence_beyond_what_the_residuals_resolve_is_refused(monkeypatch):
    monkeypatch.setattr(risk, "error_model", lambda engine, metric: _empirical())
    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
    assert risk.tightened_slos(slos, "vllm", 0.8)[1].limit_ms == pytest.approx(50.0 / math.exp(_empirical().log_quantile(
        math.sqrt(0.8))))
    with pytest.raises(UserError) as exc:
        risk.tightened_slos(slos, "vllm", 0.95)  # each metric at 0.975 > 0.95, the top stored quantile
    assert exc.value.key == "search.confidence" and "0.902" in exc.value.fix


def test_residual_file_is_used_only_for_the_bands_it_belongs_to(monkeypatch, tmp_path):
    def write(sha: str):
        path = tmp_path / f"{sha[:8]}.json"
        path.write_text(json.dumps({"by_engine_profiles_sha256": {sha: {"engines": {"vllm": {"tpot": {
            "p": [0.05, 0.5, 0.95], "log_residual": [-0.5, 0.1, 0.3], "rows": 40}}}}}}))
        monkeypatch.setattr(served_error, "RESIDUALS_PATH", path)

    write(served_error._profiles_sha())
    err = risk.error_model("vllm", "tpot")
    assert isinstance(err, served_error.EmpiricalError) and err.log_quantile(0.5) == pytest.approx(0.1)
    assert isinstance(risk.error_model("vllm", "ttft"), served_error.ErrorModel)  # not in the file: the band
    write("0" * 64)  # written for other bands (a refit since): ignored
    assert isinstance(risk.error_model("vllm", "tpot"), served_error.ErrorModel)


def test_sample_log_sd_matches_the_spread_of_simulated_percentiles():
    rng = np.random.default_rng(1)
    n, sigma = 800, 0.6
    draws = rng.lognormal(0.0, sigma, size=(300, n))
    true_sd = float(np.std(np.log(np.percentile(draws, 90, axis=1))))
    est = float(np.mean([risk.sample_log_sd(d, 90) for d in draws[:50]]))
    assert est == pytest.approx(true_sd, rel=0.25)
    assert math.isnan(risk.sample_log_sd(np.array([5.0]), 90))


def test_tightened_limits_give_the_confidence_for_every_slo():
    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("ttft", 99, 3000.0), SLOTarget("tpot", 90, 50.0)]
    tight = risk.tightened_slos(slos, "vllm", 0.9)
    level = risk.metric_level(0.9, slos)
    assert level == pytest.approx(math.sqrt(0.9))  # two metrics
    for s, t in zip(slos, tight):
        assert t.limit_ms < s.limit_ms and t.key == s.key
        # a prediction at the tightened limit meets the real one with exactly the per-metric level
        assert risk.error_model("vllm", s.metric).probability(t.limit_ms, s.limit_ms) == pytest.approx(level, abs=1e-9)
    probs = risk.allocation_probabilities({t.key: t.limit_ms for t in tight}, {}, slos, "vllm")
    assert risk.every_slo([probs], slos) == pytest.approx(0.9)


def test_every_slo_takes_the_lowest_per_metric_and_multiplies_metrics():
    slos = [SLOTarget("ttft", 90, 1.0), SLOTarget("tpot", 90, 1.0)]
    pools = [{"ttft_p90": 0.9, "tpot_p90": 0.8}, {"ttft_p90": 0.6, "tpot_p90": 0.95}]
    assert risk.every_slo(pools, slos) == pytest.approx(0.6 * 0.8)
    assert risk.every_slo([{"ttft_p90": None, "tpot_p90": 0.8}], slos) is None


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True, "high"])
def test_bad_confidence_names_the_key(bad):
    with pytest.raises(UserError) as exc:
        risk.check_confidence(bad)
    assert exc.value.key == "search.confidence" and "0.9" in exc.value.fix
    assert risk.check_confidence(None) is None and risk.check_confidence(0.8) == 0.8


def test_engine_without_a_band_refuses_confidence(monkeypatch):
    monkeypatch.setattr(risk, "error_model", lambda engine, metric: None)
    with pytest.raises(UserError) as exc:
        risk.tightened_slos([SLOTarget("ttft", 90, 1000.0)], "other", 0.9)
    assert exc.value.key == "search.confidence"


def _alloc(binding: str, cap: float = 4.0, share: float = 3.0) -> Allocation:
    c = Candidate(get_gpu("h100_sxm"), Parallelism(1), Precision(), 64, 4.0)
    return Allocation(Evaluation(c, "ok", capacity_rps=cap, binding=binding), 2, share_rps=share)


def test_headroom_and_what_limits_capacity():
    assert [limited_by(b) for b in ("overloaded (KV cache)", "overloaded (max_num_seqs)", "overloaded (prefill load)",
                                    "TTFT p90 <= 1000 ms", "")] == ["kv_memory", "batch_cap", "compute", "slo", "compute"]
    h = headroom(_alloc("overloaded (KV cache)"))
    assert h["utilisation"] == pytest.approx(0.75) and h["headroom_pct"] == pytest.approx(25.0)
    assert h["limited_by"] == "kv_memory" and h["capacity_basis"] == "analytical"


def test_selection_risk_uses_simulated_percentiles_with_their_spread():
    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
    a = _alloc("")
    a.analytical = {"ttft_p90": 100.0, "tpot_p90": 60.0}
    a.simulated = {"targets": {"ttft_p90": 400.0, "tpot_p90": 30.0}, "log_sd": {"tpot_p90": 0.05}}
    rk = risk.selection_risk(Selection(True, [a], 8.0, 2, "Optimal"), slos, "vllm")
    pool = rk["pools"][0]
    assert pool["basis"] == "simulated"
    tpot = risk.error_model("vllm", "tpot")
    assert pool["probability"]["tpot_p90"] == pytest.approx(tpot.probability(30.0, 50.0, 0.05), abs=1e-9)
    assert rk["every_slo_probability"] == pytest.approx(pool["probability"]["ttft_p90"] * pool["probability"]["tpot_p90"],
                                                        abs=1e-4)


SMALL = ["model=llama3_1_8b", "gpu.candidates=[h100_sxm]", "search.tp=[1,2]", "search.pp=[1]",
         "search.max_batch=[64,256]", "search.precision=[fp8]", "workload.rate_rps=20"]


def test_confidence_plans_a_deployment_at_least_as_costly_and_likelier_to_meet(tmp_path):
    out0, out1 = tmp_path / "point", tmp_path / "conf"
    assert run_plan(compose("plan", SMALL + ["search.finalists=1"]), out0) == EXIT_OK
    assert run_plan(compose("plan", SMALL + ["search.finalists=1", "search.confidence=0.95"]), out1) == EXIT_OK
    d0, d1 = (json.loads((o / "plan.json").read_text()) for o in (out0, out1))
    assert d0["confidence"] is None and d1["confidence"]["level"] == 0.95
    assert d1["total_usd_per_hour"] >= d0["total_usd_per_hour"]
    assert d1["every_slo_probability"] >= 0.95 - 0.02  # the sampling spread may cost a little (noted)
    assert d1["every_slo_probability"] >= d0["every_slo_probability"]
    for s in d1["slo"]:  # reported against the user's limits; planned against tighter ones
        key = f"{s['metric']}_p{s['percentile']:g}"
        assert d1["confidence"]["planned_limits_ms"][key] < s["limit_ms"] == d1["confidence"]["slo_limits_ms"][key]
    dep = d1["deployments"][0]
    assert all(0.0 <= t["probability"] <= 1.0 for t in dep["targets"].values())
    assert dep["headroom"]["limited_by"] in ("kv_memory", "batch_cap", "compute", "slo")


def test_confidence_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError) as exc:
        to_app(compose("plan", SMALL + ["search.confidence=1.0"]))
    assert exc.value.key == "search.confidence"


def test_console_lines_show_probabilities_and_headroom_from_the_plan_dict():
    import io

    from rich.console import Console

    from llmplan.optimizer import report
    from llmplan.optimizer.planner import PlanResult
    from llmplan.optimizer.types import WorkloadStats

    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
    a = _alloc("overloaded (max_num_seqs)")
    a.analytical = {"ttft_p90": 300.0, "tpot_p90": 40.0}
    res = PlanResult(Selection(True, [a], 8.0, 2, "Optimal"), [a.evaluation], [], WorkloadStats(6.0, 1000.0, 200.0, 4000),
                     slos)
    d = report.plan_dict(res, {"model": "m", "engine": "vllm"})
    p = d["deployments"][0]["targets"]["tpot_p90"]["probability"]
    assert p == pytest.approx(risk.error_model("vllm", "tpot").probability(40.0, 50.0), abs=1e-4)
    buf = io.StringIO()
    report.render(res, d, Console(file=buf, width=100, no_color=True), None)
    text = buf.getvalue()
    assert f"tpot_p90 {p:.2f}" in text and f"P(every SLO met) = {d['every_slo_probability']:.2f}" in text
    assert "Headroom h100_sxm tp1/pp1/ep1: 3/4 req/s per replica, 25% free; limited by batch_cap" in text

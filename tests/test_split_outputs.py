"""A chosen disaggregated split in every block of the plan: P(SLO met), energy, pareto rows,
simulation statistics, confidence and the day block (optimizer/split_summary.py, risk.split_risk,
energy.split_energy, pareto.split_row, disagg_sim_stats, day_outputs)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from llmplan.optimizer import pareto, risk
from llmplan.optimizer.disagg_sim_stats import pool_activity, targets_log_sd
from llmplan.optimizer.energy import split_energy
from llmplan.optimizer.types import SLOTarget, WorkloadStats

SLOS = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
WL = WorkloadStats(rate_rps=20.0, mean_input_tokens=1000, mean_output_tokens=250, max_request_tokens=4000)


def _pool(role: str, workers: int, power_w: float | None, **kw) -> dict:
    p = {"role": role, "gpu": "h100_sxm", "workers": workers, "gpus_per_worker": 2, "gpus": 2 * workers, "tp": 2,
         "pp": 1, "ep": 1, "precision": "fp8", "kv_cache_dtype": "fp8", "max_num_seqs": 256,
         "usd_per_hour": 7.98 * workers, "capacity_rps_per_worker": 8.0,
         "power": {"role": role, "gpu": "h100_sxm", "workers": workers, "gpus": 2 * workers, "tdp_w": 700.0,
                   "power_w_per_gpu": None if power_w is None else power_w / (2 * workers), "power_w": power_w,
                   "note": "" if power_w is not None else "h100_sxm: no TDP"}}
    p.update(kw)
    return p


def _split(ttft_ms: float = 700.0, tpot_ms: float = 36.0, sd: float = 0.01, overloaded: bool = False) -> dict:
    return {"xpyd": "3P1D", "total_usd_per_hour": 31.92, "total_gpus": 8, "speculation": None,
            "pools": [_pool("prefill", 3, 1400.0, ttft_ms=900.0), _pool("decode", 1, 600.0, tpot_ms=38.0)],
            "simulated": {"targets": {"ttft_p90": {"limit_ms": 1000.0, "simulated_ms": ttft_ms},
                                      "tpot_p90": {"limit_ms": 50.0, "simulated_ms": tpot_ms}},
                          "log_sd": {"ttft_p90": sd, "tpot_p90": sd}, "overloaded": overloaded,
                          "slo_met": not overloaded and ttft_ms <= 1000 and tpot_ms <= 50}}


def test_split_probability_is_a_probability_and_monotone_in_the_limit():
    ps = []
    for limit in (600.0, 800.0, 1000.0, 1500.0, 3000.0):
        slos = [SLOTarget("ttft", 90, limit), SLOTarget("tpot", 90, 50.0)]
        rk = risk.split_risk(_split(), slos, "vllm")
        p = rk["pools"][0]["probability"]["ttft_p90"]
        assert 0.0 <= p <= 1.0 and rk["pools"][0]["basis"] == "simulated"
        ps.append(p)
    assert ps == sorted(ps) and ps[0] < ps[-1]  # a looser TTFT limit is met at least as often
    # every SLO: the product of the metrics (independent errors), so below each metric's probability
    rk = risk.split_risk(_split(), SLOS, "vllm")
    per = rk["pools"][0]["probability"]
    assert rk["every_slo_probability"] == pytest.approx(per["ttft_p90"] * per["tpot_p90"], abs=1e-3)
    assert "aggregated served residuals" in rk["residuals"]


def test_split_probability_falls_with_the_sampling_spread_and_is_zero_when_overloaded():
    # a prediction under the limit: more sampling noise can only lower the chance of meeting it
    # when the prediction sits well inside the served error's bulk
    tight = risk.split_risk(_split(sd=0.0), SLOS, "vllm")["every_slo_probability"]
    noisy = risk.split_risk(_split(sd=0.3), SLOS, "vllm")["every_slo_probability"]
    assert 0.0 < noisy < tight < 1.0
    over = risk.split_risk(_split(overloaded=True), SLOS, "vllm")
    assert over["every_slo_probability"] == 0.0


def test_split_probability_analytical_when_not_simulated():
    dis = _split()
    dis["simulated"] = None
    rk = risk.split_risk(dis, SLOS, "vllm")
    assert rk["pools"][0]["basis"] == "analytical"
    # the screen's figures: prefill TTFT 900 ms is closer to its limit than the simulated 700 ms
    sim = risk.split_risk(_split(), SLOS, "vllm")
    assert rk["pools"][0]["probability"]["ttft_p90"] < sim["pools"][0]["probability"]["ttft_p90"]


def test_split_energy_is_the_sum_of_its_pools():
    e = split_energy(_split(), WL, pue=1.25, usd_per_kwh=0.1)
    assert e["gpu_power_w"] == pytest.approx(1400.0 + 600.0)
    assert e["facility_power_w"] == pytest.approx(2000.0 * 1.25)
    assert e["joules_per_output_token"] == pytest.approx(2000.0 * 1.25 / (20.0 * 250), rel=1e-3)
    assert e["electricity_usd_per_hour"] == pytest.approx(2.5 * 0.1)
    assert [p["role"] for p in e["pools"]] == ["prefill", "decode"]
    # one pool without a power figure: no totals, and the reason is stated
    dis = _split()
    dis["pools"][1] = _pool("decode", 1, None)
    e = split_energy(dis, WL)
    assert e["gpu_power_w"] is None and e["unknown"]


def test_targets_log_sd_and_pool_activity_from_a_simulation():
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"ttft_ms": rng.lognormal(6.5, 0.3, n), "tpot_ms": rng.lognormal(3.5, 0.1, n),
                       "measured": True, "finished": True, "arrival_ms": np.linspace(0, 9000, n),
                       "finish_ms": np.linspace(1000, 10000, n)})
    sd = targets_log_sd(df, SLOS)
    assert 0 < sd["tpot_p90"] < sd["ttft_p90"] < 0.2  # wider distribution, wider spread of its p90
    half = targets_log_sd(df.iloc[: n // 4], SLOS)
    assert half["ttft_p90"] > sd["ttft_p90"]  # fewer requests, a noisier percentile
    stats = [{"pool": "prefill", "busy_ms": 5000.0}, {"pool": "prefill", "busy_ms": 3000.0},
             {"pool": "decode", "busy_ms": 9000.0}]
    ts = pd.DataFrame({"replica": [0, 1, 2, 2, 2], "batch_size": [1, 1, 100, 140, 0]})
    res = SimpleNamespace(requests=df, replica_stats=stats, timeseries=ts, summary={"sim_time_ms": 1e9})
    act = pool_activity(res, prefill_workers=2)
    # over the span of the requests (0 to 10 s), not the event loop's clock
    assert act["prefill"]["busy_fraction"] == pytest.approx(0.4) and act["decode"]["busy_fraction"] == pytest.approx(0.9)
    assert act["decode"]["mean_batch"] == pytest.approx(120.0)  # decode worker's samples that ran a step


def make(tp: int, verdict: str, cap: float, ttft: float, tpot: float):
    """A candidate without a replica model (as tests/test_pareto.py): latency at capacity."""
    from llmplan.hardware_catalog import get_gpu
    from llmplan.optimizer.types import Candidate, Evaluation
    from llmplan.sim.types import Parallelism, Precision

    c = Candidate(get_gpu("h100_sxm"), Parallelism(tp, 1, 1), Precision("bf16", "bf16"), 256, 3.0)
    return Evaluation(c, verdict, capacity_rps=cap, ttft_ms=ttft, tpot_ms=tpot)


def test_split_row_on_the_frontier_or_dominated():
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    evals = [make(1, "ok", 1.0, 200.0, 45.0), make(2, "ok", 2.5, 150.0, 30.0)]
    df = pareto.candidate_metrics(evals, wl, SLOS, 1.0, 0)
    cheapest = float(df["usd_per_hour"].min())
    good = _split(ttft_ms=100.0, tpot_ms=20.0)
    good["total_usd_per_hour"] = cheapest / 2  # cheaper and faster than every aggregated option
    bad = _split(ttft_ms=900.0, tpot_ms=49.0)
    bad["total_usd_per_hour"] = cheapest * 10
    rows = [pareto.split_row(good, wl, SLOS, chosen=True), pareto.split_row(bad, wl, SLOS)]
    rows[1]["candidate"] = "bad"
    both = pd.concat([df, pd.DataFrame(rows, columns=pareto.COLUMNS)], ignore_index=True)
    front = pareto.pareto_front(both, pareto.FRONTIERS["usd_per_hour_vs_ttft"])
    assert "3P1D" in set(front["candidate"]) and "bad" not in set(front["candidate"])
    assert rows[0]["mode"] == "disagg" and rows[0]["ttft_ms"] == 100.0 and rows[0]["latency_basis"] == "split_simulated"
    assert rows[0]["joules_per_output_token"] == pytest.approx(2000.0 / (5.0 * 200))


def test_confidence_judges_the_chosen_split():
    from llmplan.optimizer.types import Selection

    planned = risk.tightened_slos(SLOS, "vllm", 0.8)
    res = SimpleNamespace(slos=planned, confidence=None, notes=[], chosen_mode="disagg", disaggregated=_split(),
                          selection=Selection(False, [], 0.0, 0, "infeasible"))
    risk.finish_confidence(res, SLOS, planned, 0.8, "vllm")
    assert res.confidence["judged"] == "disaggregated"
    assert res.confidence["every_slo_probability"] == risk.split_risk(_split(), SLOS, "vllm")["every_slo_probability"]


def test_plan_day_block_says_it_plans_the_aggregated_alternative(tmp_path):
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization",
                                   "workload.rate_rps=10", "slo.tpot_p90_ms=12", "slo.ttft_p90_ms=3000",
                                   "day.profile=diurnal_24h", "day.attainment.enabled=false"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert rc == 0 and d["mode"] == "disagg"
    assert d["day"]["describes"] == "the aggregated alternative" and d["day"]["mode"] == "aggregated"
    assert any("plans the aggregated alternative" in a for a in d["day"]["assumptions"])
    # the pareto block reports where the split stands on the frontiers
    assert d["pareto"]["split_options"] and set(d["pareto"]["split_on_frontiers"]) <= set(d["pareto"]["frontiers"])
    back = pd.read_csv(tmp_path / "pareto.csv")
    assert (back["mode"] == "disagg").any() == bool(d["pareto"]["split_on_frontiers"])
    assert not math.isnan(d["every_slo_probability"])


def test_chosen_split_report_renders_in_headless_chromium(tmp_path):
    """`plan report.html=true` choosing a 1P1D split: the rendered page's answer, energy and
    aggregated-alternative tables carry plan.json's split figures; no console errors."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    browser = next((b for b in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if b), None)
    browser = browser or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if browser is None:
        pytest.skip("no chromium binary (apt-get install -y chromium)")
    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization",
                                   "workload.rate_rps=10", "slo.tpot_p90_ms=12", "slo.ttft_p90_ms=3000",
                                   "report.html=true"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert rc == 0 and d["mode"] == "disagg"
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                          "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          (tmp_path / "report.html").as_uri()], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and ":CONSOLE" not in run.stderr, run.stderr[-2000:]
    dom = run.stdout
    answer = dom[dom.index('id="answer"'):dom.index('id="aggregated"')]
    assert f"${d['total_usd_per_hour']:.2f}/h" in answer and f"{100 * d['every_slo_probability']:.1f} %" in answer
    assert "prefill 1x h100_sxm" in answer and "decode 1x h100_sxm" in answer
    for dep in d["deployments"]:  # each pool's headroom row
        assert f"{dep['headroom']['headroom_pct']:.0f} %" in answer
    energy = dom[dom.index('id="energy"'):]
    assert "chosen split" in energy and f"{d['energy']['joules_per_output_token']:.3f} J" in energy
    agg = dom[dom.index('id="aggregated"'):dom.index('id="alternatives"')]
    assert f"${d['aggregated']['total_usd_per_hour']:.2f}/h" in agg


def test_plan_confidence_judges_the_chosen_split_against_the_users_limits(tmp_path):
    """search.confidence with the split chosen: plan.json's confidence judges the split (its
    probability is the top-level one) and keeps the aggregated one beside it."""
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization",
                                   "workload.rate_rps=10", "slo.tpot_p90_ms=12", "slo.ttft_p90_ms=3000",
                                   "search.confidence=0.5"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert rc == 0 and d["mode"] == "disagg"
    conf = d["confidence"]
    assert conf["judged"] == "disaggregated" and conf["every_slo_probability"] == d["every_slo_probability"]
    assert conf["aggregated_every_slo_probability"] == d["aggregated"]["every_slo_probability"]
    # tightened limits planned, the user's limits judged
    assert all(conf["planned_limits_ms"][k] < conf["slo_limits_ms"][k] for k in conf["slo_limits_ms"])
    assert {k: t["limit_ms"] for k, t in d["deployments"][0]["targets"].items()} == conf["slo_limits_ms"]
    # the mode table states each mode's probability beside its cost
    rows = {r["mode"]: r for r in d["mode_selection"]}
    assert rows["disagg"]["every_slo_probability"] == d["every_slo_probability"]
    assert rows["agg"]["every_slo_probability"] == d["aggregated"]["every_slo_probability"]


def test_split_probability_is_reported_when_the_split_is_not_chosen(tmp_path):
    """Chat at 20 req/s on H100 (the aggregated deployment is chosen): plan.json's disaggregated
    block still states the split's P(SLO met), and the top level stays the aggregated selection."""
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload.rate_rps=20",
                                   "slo.tpot_p90_ms=50"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert rc == 0 and d["mode"] == "agg" and "aggregated" not in d
    assert d["disaggregated"] is not None  # a split exists (2 GPUs), dearer than the 1-GPU aggregated answer
    rk = d["disaggregated"]["risk"]
    p = rk["every_slo_probability"]
    assert 0.0 <= p <= 1.0 and "aggregated served residuals" in rk["residuals"]
    assert d["deployments"][0].get("mode") == "aggregated"


def test_unsimulated_split_states_its_screen_figures_per_target():
    # search.finalists=0: no simulation, so each target carries the screen's figure as analytical_ms
    # (the prefill pool's TTFT, the decode pool's TPOT), never an empty prediction
    from llmplan.optimizer.split_summary import split_deployments

    dis = _split()
    dis["simulated"] = None
    for dep in split_deployments(dis, SLOS, WL.rate_rps, {}):
        assert dep["targets"]["ttft_p90"]["analytical_ms"] == 900.0
        assert dep["targets"]["tpot_p90"]["analytical_ms"] == 38.0
        assert dep["targets"]["ttft_p90"]["simulated_ms"] is None
    sim = split_deployments(_split(), SLOS, WL.rate_rps, {})[0]["targets"]["ttft_p90"]
    assert sim["simulated_ms"] == 700.0 and sim["analytical_ms"] is None

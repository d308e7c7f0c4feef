"""`plan` writes energy, launch artifacts, the Pareto frontier, the KV budget, monthly cost,
a day of traffic and report.html (llmplan/cli/plan_outputs.py)."""

from __future__ import annotations

import csv
import json

import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import plan_from_app, run_plan
from llmplan.cli.resolve import to_app
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, ConfigError
from llmplan.optimizer import pareto
from llmplan.optimizer.types import SLOTarget
from llmplan.optimizer.day_plan import SHIPPED_PROFILES
from llmplan.progress import make_console

SMALL = ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast"]


def _plan(tmp_path, extra=()):
    code = run_plan(compose("plan", SMALL + list(extra)), tmp_path)
    return code, json.loads((tmp_path / "plan.json").read_text())


def test_default_style_plan_writes_every_output(tmp_path):
    code, d = _plan(tmp_path, ["report.html=true"])
    assert code == EXIT_OK and d["feasible"]
    # monthly cost = hourly x 730 h
    assert d["hours_per_month"] == 730.0
    assert d["total_usd_per_month"] == pytest.approx(d["total_usd_per_hour"] * 730.0, abs=0.01)
    # energy: GPU power within idle..TDP of the fleet, J/token = W / tokens/s
    e = d["energy"]
    gpus = sum(p["gpus"] for p in e["pools"])
    assert gpus == d["total_gpus"]
    tdp = e["pools"][0]["tdp_w"]
    assert 0 < e["gpu_power_w"] <= tdp * gpus
    assert e["joules_per_output_token"] == pytest.approx(e["gpu_power_w"] / e["output_tokens_per_s"], rel=1e-3)
    # launch artifacts: one directory per pool, the engine's command with the planned TP
    dep = d["deploy"]
    assert len(dep["pools"]) == len(d["deployments"])
    for pool, dd in zip(dep["pools"], d["deployments"]):
        for rel in pool["files"]:
            assert (tmp_path / rel).is_file(), rel
        launch = (tmp_path / pool["files"][0]).read_text()
        assert "vllm serve" in launch and f"--tensor-parallel-size {dd['tp']}" in launch
        assert str(tmp_path) not in launch  # no absolute machine paths
    assert json.loads((tmp_path / "deploy" / "deploy.json").read_text())["pools"] == dep["pools"]
    # pareto.csv: rows of the frontiers, each frontier non-dominated on its objectives
    rows = list(csv.DictReader((tmp_path / "pareto.csv").open()))
    assert rows and d["pareto"]["rows"] == len(rows)
    front = [r for r in rows if r["frontier"] == "usd_per_hour_vs_ttft"]
    for a in front:
        assert not any(float(b["usd_per_hour"]) <= float(a["usd_per_hour"]) and float(b["ttft_ms"]) < float(a["ttft_ms"])
                       and float(b["usd_per_hour"]) < float(a["usd_per_hour"]) for b in front)
    # KV budget of the chosen pool agrees with the deployment's KV capacity
    kv = d["kv_budget"][0]
    assert kv["kv_capacity_tokens_per_replica"] == d["deployments"][0]["kv_capacity_tokens"]
    assert kv["lines"][0].startswith("KV cache per replica")
    # report.html: self-contained, with the answer's cost and the embedded frontier plot
    html = (tmp_path / "report.html").read_text()
    assert f"{d['total_usd_per_hour']:.2f}" in html
    assert "data:image/png;base64," in html and "<script src=" not in html
    assert (tmp_path / "pareto.png").is_file()
    for section in ("answer", "frontier", "energy", "artifacts"):
        assert f"<section id='{section}'" in html
    assert "vllm serve" in html  # the launch command is in the page


def test_default_plan_draws_no_png_without_the_flag(tmp_path):
    code, d = _plan(tmp_path)
    assert code == EXIT_OK
    assert (tmp_path / "pareto.csv").is_file() and d["energy"]["gpu_power_w"] > 0 and d["deploy"]["pools"]
    assert not (tmp_path / "pareto.png").exists() and not (tmp_path / "report.html").exists()


def test_pue_scales_facility_power_and_electricity_cost(tmp_path):
    code, d = _plan(tmp_path, ["energy.pue=1.5", "energy.usd_per_kwh=0.2"])
    e = d["energy"]
    assert code == EXIT_OK
    assert e["facility_power_w"] == pytest.approx(1.5 * e["gpu_power_w"], rel=1e-3)
    assert e["electricity_usd_per_hour"] == pytest.approx(e["facility_power_w"] / 1000 * 0.2, rel=1e-3)
    assert e["total_usd_per_hour_with_electricity"] == pytest.approx(
        d["total_usd_per_hour"] + e["electricity_usd_per_hour"], abs=1e-3)


@pytest.mark.parametrize("bad", ["0.9", "-1"])
def test_pue_below_one_is_a_config_error(tmp_path, bad):
    with pytest.raises(ConfigError) as exc:
        run_plan(compose("plan", SMALL + [f"energy.pue={bad}"]), tmp_path)
    assert exc.value.key == "energy.pue"


def test_pareto_checks_every_target_at_its_own_percentile():
    app = to_app(compose("plan", SMALL))
    res, _ = plan_from_app(app, make_console(), show_progress=False)
    base = pareto.candidate_metrics(res.evaluations, res.workload, res.slos)
    assert len(base) and base["meets_slo"].all()
    # an extra p99 TTFT target of 1 ms: every row misses it, whatever the first TTFT percentile says
    strict = res.slos + [SLOTarget("ttft", 99.0, 1.0)]
    df = pareto.candidate_metrics(res.evaluations, res.workload, strict)
    assert len(df) and not df["meets_slo"].any()


def _ok_precisions(path) -> set[str]:
    return {r["precision"] for r in csv.DictReader((path / "candidates.csv").open()) if r["verdict"] == "ok"}


@pytest.mark.parametrize("model, gpu, ckpt", [("gpt_oss_120b", "h100_sxm", "fp4"), ("kimi_k2_5", "b200", "int4")])
def test_quantized_checkpoint_is_planned_in_its_own_precision(tmp_path, model, gpu, ckpt):
    code, d = _plan(tmp_path, [f"model={model}", f"gpu={gpu}"])
    assert code == EXIT_OK
    assert {x["precision"].split()[0] for x in d["deployments"]} == {ckpt}
    assert {p.split()[0] for p in _ok_precisions(tmp_path)} == {ckpt}


def test_asking_a_checkpoint_for_another_precision_prints_the_note(tmp_path, capsys):
    code, d = _plan(tmp_path, ["model=gpt_oss_120b", "search.precision=[fp8]"])
    assert code == EXIT_OK
    assert {x["precision"].split()[0] for x in d["deployments"]} == {"fp4"}
    note = next(n for n in d["notes"] if "search.precision" in n)
    assert "openai/gpt-oss-120b" in note and "mxfp4" in note
    assert "search.precision=[fp8]" in " ".join(capsys.readouterr().out.split())  # printed as text, not markup


def test_bf16_checkpoint_keeps_the_requested_precisions(tmp_path):
    code, _ = _plan(tmp_path)
    assert code == EXIT_OK
    assert {p.split()[0] for p in _ok_precisions(tmp_path)} == {"bf16", "fp8"}


def test_day_profile_plans_replicas_per_interval(tmp_path):
    tiers = "day.price_tiers={h100_sxm: {reserved_usd_per_gpu_hour: 2.6, spot_usd_per_gpu_hour: 2.0, spot_interruption_rate: 0.05}}"
    code, d = _plan(tmp_path, ["day.profile=diurnal_24h", "day.scale_up_s=600", tiers])
    assert code == EXIT_OK
    profile = list(csv.DictReader((SHIPPED_PROFILES / "diurnal_24h.csv").open()))
    rows = list(csv.DictReader((tmp_path / "day.csv").open()))
    assert len(rows) == len(profile) == d["day"]["intervals"] == 24
    for p, r in zip(profile, rows):
        assert float(r["rate_rps"]) == float(p["rate_rps"])
        assert float(r["capacity_rps"]) >= float(r["rate_rps"]) - 1e-6
        assert int(r["gpus_running"]) >= 1  # day.min_replicas=1
    day = d["day"]
    assert day["cost_usd"] == pytest.approx(sum(float(r["cost_usd"]) for r in rows), rel=1e-4)
    assert day["cost_usd"] <= day["static_peak_cost_usd"] + 1e-6
    assert day["peak_rps"] == max(float(p["rate_rps"]) for p in profile)
    assert day["saving_usd"] > 0  # the trough needs fewer replicas than the peak


def test_day_profile_goes_into_the_report(tmp_path):
    code, d = _plan(tmp_path, ["day.profile=diurnal_24h", "report.html=true"])
    assert code == EXIT_OK and (tmp_path / "day.png").is_file()
    assert "<section id='day'" in (tmp_path / "report.html").read_text()


def test_day_that_cannot_be_served_exits_3(tmp_path, capsys):
    prof = tmp_path / "spike.csv"
    prof.write_text("t_start_s,rate_rps\n0,5\n3600,5000\n")
    code = run_plan(compose("plan", SMALL + [f"day.profile={prof}", "gpu.max_gpus={h100_sxm: 2}"]), tmp_path)
    assert code == EXIT_INFEASIBLE
    assert "infeasible" in json.loads((tmp_path / "plan.json").read_text())["day"]
    assert "No day plan" in capsys.readouterr().out


def test_missing_profile_names_the_key(tmp_path):
    from llmplan.errors import UserError

    with pytest.raises(UserError) as exc:
        run_plan(compose("plan", SMALL + [f"day.profile={tmp_path / 'nope.csv'}"]), tmp_path)
    assert exc.value.key == "day.profile"


def test_checkpoint_no_gpu_can_serve_is_refused(tmp_path):
    from llmplan.errors import UserError

    with pytest.raises(UserError) as exc:
        run_plan(compose("plan", ["model=nvidia/Llama-3.1-8B-Instruct-FP8", "gpu=a100_sxm", "search=fast"]), tmp_path)
    assert exc.value.key == "gpu.candidates" and "fp8" in str(exc.value)


def test_fp8_checkpoint_drops_bf16_with_a_note(tmp_path):
    code, d = _plan(tmp_path, ["model=nvidia/Llama-3.1-8B-Instruct-FP8"])
    assert code == EXIT_OK
    assert {p.split()[0] for p in _ok_precisions(tmp_path)} == {"fp8"}
    assert any("bf16 left out" in n for n in d["notes"])

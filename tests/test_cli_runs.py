"""End-to-end CLI runs: output contracts, determinism, multirun summary."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from llmplan.cli import main
from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.simulate_cmd import run_simulate


def test_default_plan_contract(tmp_path):
    code = run_plan(compose("plan", ["search.finalists=2", "search.verify_requests=300"]), tmp_path)
    assert code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["feasible"] is True
    assert plan["total_usd_per_hour"] > 0 and plan["total_gpus"] >= 1
    for d in plan["deployments"]:
        for k in ("gpu", "replicas", "gpus_per_replica", "tp", "pp", "ep", "precision", "usd_per_hour", "ttft_ms", "tpot_ms"):
            assert k in d
        assert d["gpu"] in ("h100_sxm", "h200_sxm", "a100_sxm", "l40s")
        assert d["simulated"]["ttft_ms"] > 0  # the chosen deployment was simulated
    assert sum(d["usd_per_hour"] for d in plan["deployments"]) == pytest.approx(plan["total_usd_per_hour"], rel=1e-3)
    assert plan["verification"]["finalists"]
    cands = pd.read_csv(tmp_path / "candidates.csv")
    assert {"verdict", "reason", "capacity_rps"} <= set(cands.columns)
    assert set(cands["verdict"]) <= {"ok", "memory", "parallelism", "precision", "slo"}
    assert (cands["verdict"] == "memory").any()  # 70B does not fit everywhere


def test_plan_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        run_plan(compose("plan", ["model=llama3_1_8b", "search.finalists=1", "search.verify_requests=300"]), d)
    assert (a / "plan.json").read_bytes() == (b / "plan.json").read_bytes()
    assert (a / "candidates.csv").read_bytes() == (b / "candidates.csv").read_bytes()


def test_simulate_contract_and_determinism(tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        code = run_simulate(compose("simulate", ["model=llama3_1_8b", "gpu=h100_sxm", "workload.num_requests=400"]), out)
        assert code == 0
        outs.append(out)
    s = json.loads((outs[0] / "summary.json").read_text())
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(s[k]) >= {"mean", "p50", "p90", "p99"}
        assert s[k]["p50"] <= s[k]["p90"] <= s[k]["p99"]
    assert s["output_tokens_per_s"] > 0 and s["requests_per_s"] > 0
    assert s["deployment"]["gpu"] == "h100_sxm" and s["deployment"]["tp"] == 1
    assert s["step_breakdown"]["decode"]["ops"]
    req = pd.read_csv(outs[0] / "requests.csv")
    # at least the 400 asked; the steady-state window may lengthen the run (and says so)
    assert len(req) == s["window"]["requests_simulated"] >= 400
    assert {"ttft_ms", "tpot_ms", "e2e_ms", "preemptions"} <= set(req.columns)
    for f in ("summary.json", "requests.csv"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes()


@pytest.mark.parametrize("workload", ["closed_loop", "bursty_chat"])
def test_simulate_other_workloads(tmp_path, workload):
    code = run_simulate(compose("simulate", ["model=llama3_1_8b", "gpu=h100_sxm", f"workload={workload}",
                                             "workload.num_requests=300"] +
                                ([] if workload == "closed_loop" else ["workload.rate_rps=5"])), tmp_path)
    assert code == 0
    assert json.loads((tmp_path / "summary.json").read_text())["requests_per_s"] > 0


def test_whatif_more_bandwidth_never_costs_more(tmp_path):
    from llmplan.cli.whatif_cmd import run_whatif
    run_whatif(compose("whatif", ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0",
                                  "whatif.gpu_scale={h100_sxm: {hbm_bw_gbps: 2.0}}"]), tmp_path)
    d = json.loads((tmp_path / "whatif.json").read_text())
    assert d["whatif"]["total_usd_per_hour"] <= d["baseline"]["total_usd_per_hour"]
    cap0 = d["baseline"]["deployments"][0]["capacity_rps_per_replica"]
    assert d["whatif"]["deployments"][0]["capacity_rps_per_replica"] >= cap0


def test_single_run_output_layout(tmp_path, capsys):
    """`llmplan plan` through Hydra's run_job: plan.json next to Hydra's record of the run."""
    out = tmp_path / "run"
    assert main(["plan", "model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", f"hydra.run.dir={out}"]) == 0
    assert json.loads((out / "plan.json").read_text())["model"] == "llama3_1_8b"
    saved = (out / ".hydra" / "config.yaml").read_text()
    assert "name: llama3_1_8b" in saved and "candidates:\n  - h100_sxm" in saved
    assert (out / ".hydra" / "overrides.yaml").is_file()


def test_catalog_gpus_lists_twelve(capsys):
    assert main(["catalog", "gpus"]) == 0
    out = capsys.readouterr().out
    for key in ("a100_40gb_sxm", "a100_sxm", "h100_sxm", "h100_pcie", "h200_sxm", "b200", "gb200", "l40s", "l4",
                "a10g", "mi300x", "mi325x"):
        assert key in out


def test_catalog_models_lists_keys_and_hf_ids(capsys):
    from llmplan.model_catalog.loader import list_models

    assert main(["catalog", "models"]) == 0
    out = capsys.readouterr().out
    models = list_models()
    assert len(models) >= 20
    for m in models:
        assert m.key in out and m.hf_id in out


def test_multirun_writes_each_job_and_a_summary(tmp_path):
    """An HF id and a catalog key in one sweep; each job in its own folder, all in summary.csv."""
    r = subprocess.run([sys.executable, "-m", "llmplan.cli", "plan", "-m", "model=meta-llama/Llama-3.1-8B,qwen3_8b",
                        "search.finalists=0", f"hydra.sweep.dir={tmp_path}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert sorted(summary["model"]) == ["llama3_1_8b", "qwen3_8b"]
    assert list(summary["status"]) == ["ok", "ok"]
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert dirs == ["0_model=meta-llama_Llama-3.1-8B", "1_model=qwen3_8b"]
    for d in dirs:
        assert (tmp_path / d / "plan.json").is_file() and (tmp_path / d / ".hydra" / "config.yaml").is_file()

"""Sweeps (-m): every job is checked like a single run, runs through Hydra's launcher, and
appears in summary.csv with its status; a sweep with a failed job exits non-zero."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from llmplan.cli import main
from llmplan.cli.hydra_app import sweep_exit_code
from llmplan.cli.overrides import expand
from llmplan.cli.sweep_summary import SweptJob, job_row
from llmplan.errors import ConfigError

FAST = ["search.finalists=0"]


def _llmplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmplan.cli", *args], capture_output=True, text=True)


def test_a_failed_job_is_listed_and_the_sweep_exits_non_zero(tmp_path):
    r = _llmplan("plan", "-m", "model=llama3_1_8b", "gpu=h100_sxm", "workload.rate_rps=10,-5", *FAST,
                 f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert len(summary) == 2  # the failed job is not dropped
    ok = summary[summary["swept"] == "workload.rate_rps=10"].iloc[0]
    bad = summary[summary["swept"] == "workload.rate_rps=-5"].iloc[0]
    assert ok["status"] == "ok" and ok["total_usd_per_hour"] > 0
    assert bad["status"] == "bad input" and bad["exit_code"] == 2
    assert "workload.rate_rps" in bad["reason"] and "-5" in bad["reason"]
    assert "workload.rate_rps=-5" in r.stderr  # the failure is also printed, naming the job


def test_an_unknown_model_in_a_sweep_is_the_single_run_error(capsys, tmp_path):
    code = main(["plan", "-m", "model=llama3_1_8b,no_such_model", *FAST, f"hydra.sweep.dir={tmp_path / 's'}"])
    err = capsys.readouterr().err
    single = main(["plan", "model=no_such_model", *FAST, f"hydra.run.dir={tmp_path / 'r'}"])
    err_single = capsys.readouterr().err
    assert code == single == 2
    assert err == err_single  # the same two lines
    assert len(err.strip().splitlines()) == 2 and "did you mean" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()  # nothing ran


def test_a_type_error_in_one_sweep_value_names_the_job(capsys, tmp_path):
    code = main(["plan", "-m", "search.finalists=0,abc", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: search.finalists: expects an integer, got abc")
    assert "sweep job 1" in err and len(err.strip().splitlines()) == 2


def test_hf_ids_and_sweep_functions_expand_into_checked_jobs():
    jobs = expand(["model=meta-llama/Llama-3.1-8B,qwen3_8b", "workload.rate_rps=range(5,15,5)",
                   "gpu.usd_per_hour={h100_sxm: 2.5}"], multirun=True)
    assert len(jobs) == 4
    assert [j.swept for j in jobs][0] == ("model=meta-llama/Llama-3.1-8B", "workload.rate_rps=5")
    hf = jobs[0].hydra
    assert "model.name='meta-llama/Llama-3.1-8B'" in hf and "model.config_path=null" in hf
    assert "model=qwen3_8b" in jobs[2].hydra  # a catalog option with a YAML file stays a group choice
    assert all("++gpu.usd_per_hour={h100_sxm: 2.5}" in j.hydra for j in jobs)


def test_a_sweep_needs_dash_m():
    with pytest.raises(ConfigError) as e:
        expand(["model=llama3_1_8b,qwen3_8b"], multirun=False)
    assert e.value.key == "model" and "-m" in e.value.fix


def test_job_row_without_output_keeps_status_and_reason(tmp_path):
    row = job_row(SweptJob(3, "workload.rate_rps=-5", "workload.rate_rps=-5", tmp_path, 2, "workload.rate_rps: must be > 0"))
    assert row["status"] == "bad input" and row["reason"] == "workload.rate_rps: must be > 0" and row["job"] == 3


@pytest.mark.parametrize("codes,expected", [([0, 0], 0), ([0, 3], 3), ([3, 2, 0], 2), ([1, 3], 1), ([2, 1], 2), ([], 0)])
def test_sweep_exit_code(codes, expected):
    assert sweep_exit_code(codes) == expected


def test_an_infeasible_job_gives_the_binding_constraint_as_reason(tmp_path):
    import json

    (tmp_path / "plan.json").write_text(json.dumps({"model": "m", "feasible": False, "deployments": [],
                                                    "binding_constraint": "TPOT p90 <= 0.5 ms"}))
    row = job_row(SweptJob(0, "slo.tpot_p90_ms=0.5", "slo.tpot_p90_ms=0.5", tmp_path, 3))
    assert row["status"] == "infeasible" and row["reason"] == "TPOT p90 <= 0.5 ms" and row["feasible"] is False


def _summary() -> pd.DataFrame:
    rows = []
    for m, base in (("small", 1.0), ("big", 4.0)):
        for g, f in (("g1", 1.0), ("g2", 1.5)):
            for r in (2, 10, 50):
                ok = not (m == "big" and g == "g1" and r == 50)
                rows.append({"job": len(rows), "swept": f"model={m} gpu={g} workload.rate_rps={r}",
                             "status": "ok" if ok else "infeasible",
                             "total_usd_per_hour": base * f * r if ok else float("nan")})
    return pd.DataFrame(rows)


def test_swept_keys_become_columns_and_the_pivot_keeps_failed_jobs():
    from llmplan.cli.sweep_summary import pivot, swept_columns

    df = swept_columns(_summary())
    assert df["swept:workload.rate_rps"].tolist()[:3] == [2, 10, 50] and df["swept:gpu"].iloc[3] == "g2"
    t = pivot(_summary(), ["model", "gpu"], "workload.rate_rps")
    assert t.shape == (4, 3) and list(t.columns) == [2, 10, 50]
    assert t.loc[("big", "g1"), 50] == "infeasible" and t.loc[("big", "g2"), 10] == "60.00"
    assert t.loc[("small", "g1"), 2] == "2.00"


def test_sweep_plot_draws_a_panel_per_model(tmp_path):
    from llmplan.cli.sweep_summary import plot

    png = plot(_summary(), tmp_path / "s.png", "model", "gpu", "workload.rate_rps", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_offline_plan_jobs_carry_their_throughput(tmp_path):
    import json

    (tmp_path / "plan.json").write_text(json.dumps({"mode": "offline_throughput", "model": "m", "feasible": True,
                                                    "tokens_per_s": 51240.0, "target_tokens_per_s": 50000.0,
                                                    "total_usd_per_hour": 27.93, "deployments": [
                                                        {"replicas": 7, "gpu": "h100_sxm", "tp": 1, "pp": 1, "ep": 1,
                                                         "precision": "fp8"}]}))
    row = job_row(SweptJob(0, "target.tokens_per_s=50000", "target.tokens_per_s=50000", tmp_path, 0))
    assert row["tokens_per_s"] == 51240.0 and row["deployment"] == "7x h100_sxm tp1 pp1 ep1 fp8"


def test_example_sweep_definition_has_100_scenarios_and_builds_one_multirun(tmp_path):
    import importlib.util
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"
    spec = importlib.util.spec_from_file_location("sweep_example", root / "sweep_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sweep = yaml.safe_load((root / "sweep_models_gpus_rates.yaml").read_text())
    argv = mod.argv_for(sweep, tmp_path, "ray_local")
    jobs = expand(argv[argv.index("plan") + 2:], multirun=True)  # after `plan -m`
    assert len(jobs) == 100  # every job checked like a single run (unknown models or GPUs would raise)
    assert "hydra/launcher=ray_local" in argv and argv[3] == "plan"

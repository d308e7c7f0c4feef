"""Every bad-input case: exit code 2, one or two lines naming the key and a fix, no traceback."""

import json
import subprocess
import sys

import pytest

from llmplan.cli import main

FAST = ["search.finalists=0"]


def _run(argv, capsys, tmp_path):
    argv = argv + [f"hydra.run.dir={tmp_path}"] if argv and argv[0] in ("plan", "simulate", "whatif") else argv
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv,needle", [
    (["plan", "model=llama3_1_7b"], "did you mean"),
    (["plan", "gpu=h100_smx"], "did you mean h100_sxm"),
    (["plan", "search.tp=[3]"], "does not divide the 64 attention heads"),
    (["plan", "model=qwen3_8b", "search.ep=[2]"], "expert parallelism on dense model"),
    (["plan", "workload.rate_rps=-1"], "workload.rate_rps"),
    (["plan", "workload.rate_rps=0"], "workload.rate_rps"),
    (["plan", "slo.ttft_p90_ms=0"], "slo.ttft_p90_ms"),
    (["plan", "slo.tpot_p90_ms=-3"], "slo.tpot_p90_ms"),
    (["plan", "slo.ttft_p90_ms=null", "slo.tpot_p90_ms=null"], "no SLO target"),
    (["plan", "slo.tpot_p90_msec=50"], "slo.tpot_p90_msec"),
    (["plan", "gpu.usd_per_hour={h100_sxm: cheap}"], "gpu.usd_per_hour.h100_sxm"),
    (["plan", "gpu.max_gpus={h100_sxm: 0, h200_sxm: 0, a100_sxm: 0, l40s: 0}"], "availability 0"),
    (["plan", "engine.max_num_batched_tokens=8"], "smaller than one KV block"),
    (["simulate", "model=qwen3_8b", "deployment.ep=2"], "expert parallelism"),
    (["simulate", "model=llama3_1_70b", "deployment.tp=3"], "does not divide"),
    (["simulate", "model=llama3_1_405b", "gpu=l4", "deployment.tp=1"], "does not fit"),
    (["catalog", "tpus"], "catalog"),
    (["frobnicate"], "unknown command"),
])
def test_bad_input_exits_2_with_a_clear_message(argv, needle, capsys, tmp_path):
    code, out, err = _run(argv + FAST, capsys, tmp_path)
    assert code == 2, (out, err)
    assert needle in err
    assert "Traceback" not in err + out
    assert 1 <= len([ln for ln in err.splitlines() if ln.strip()]) <= 3


def test_config_json_missing_field(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 1024, "num_attention_heads": 16, "vocab_size": 1000}))
    code, _, err = _run(["plan", f"model.config_path={bad}"] + FAST, capsys, tmp_path / "o")
    assert code == 2 and "num_hidden_layers" in err and str(bad) in err


def test_yaml_that_does_not_parse(tmp_path, capsys):
    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "mine.yaml").write_text("arrival: [poisson\n")
    code, _, err = _run(["plan", "--config-dir", str(tmp_path), "workload=mine"] + FAST, capsys, tmp_path / "o")
    assert code == 2 and "mine.yaml" in err and "line" in err


def test_infeasible_slo_is_not_a_bug(capsys, tmp_path):
    code, out, err = _run(["plan", "slo.tpot_p90_ms=0.5"] + FAST, capsys, tmp_path)
    assert code == 3
    assert "No deployment meets the targets" in out and "TPOT" in out
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["feasible"] is False and plan["deployments"] == []
    assert "Traceback" not in err


def test_installed_binary_prints_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "llmplan.cli", "plan", "model=nope_model"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "model" in r.stderr

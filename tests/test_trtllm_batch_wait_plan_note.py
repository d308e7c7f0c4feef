"""plan and simulate say that TensorRT-LLM batch waiting is simulated only (sim/trtllm_batch_wait.py:
the analytical model has none): plan's screen and a plan without simulated finalists leave it out,
simulate's analytical figures too; an attention-DP deployment (which does not wait) and the
default engine say nothing."""

import json

from simulate_cli_helpers import run_cli

WAIT = ["engine=trtllm", "engine.batch_wait_timeout_iters=20", "engine.batch_wait_max_tokens_ratio=0.9"]


def _notes(command, argv, capsys, out, name):
    code, _, _ = run_cli([command, *argv], capsys, out)
    assert code == 0
    return [n for n in json.loads((out / name).read_text())["notes"] if "batch waiting" in n]


def test_plan_says_the_screen_leaves_batch_waiting_out(capsys, tmp_path):
    [note] = _notes("plan", ["search.finalists=0", *WAIT], capsys, tmp_path / "wait", "plan.json")
    assert "simulated only" in note and "analytical screen" in note and "search.finalists=0" in note
    assert _notes("plan", ["search.finalists=0", "engine=trtllm"], capsys, tmp_path / "off", "plan.json") == []


def test_simulate_says_its_analytical_figures_leave_batch_waiting_out(capsys, tmp_path):
    small = ["workload.num_requests=200"]
    [note] = _notes("simulate", [*small, *WAIT], capsys, tmp_path / "wait", "summary.json")
    assert "simulated only" in note and "analytical figures" in note and "batch_wait_timeout_iters 20" in note
    assert _notes("simulate", [*small, "engine=trtllm"], capsys, tmp_path / "off", "summary.json") == []
    # attention DP: TensorRT-LLM does not wait (PyExecutor._schedule), nor does the replay
    dp = ["model=qwen3_30b_a3b", "deployment.tp=2", "deployment.dp=2", "deployment.ep=2"]
    assert _notes("simulate", [*small, *WAIT, *dp], capsys, tmp_path / "dp", "summary.json") == []

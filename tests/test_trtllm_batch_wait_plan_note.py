"""A plan with TensorRT-LLM batch waiting says that its analytical screen leaves the waiting out
(only the simulator models it, sim/trtllm_batch_wait.py), and that a plan without simulated
finalists leaves it out entirely; the default plan says nothing."""

import json

from simulate_cli_helpers import run_cli

WAIT = ["engine=trtllm", "engine.batch_wait_timeout_iters=20", "engine.batch_wait_max_tokens_ratio=0.9"]


def _notes(argv, capsys, out):
    code, _, _ = run_cli(["plan", "search.finalists=0", *argv], capsys, out)
    assert code == 0
    return [n for n in json.loads((out / "plan.json").read_text())["notes"] if "batch waiting" in n]


def test_plan_says_the_screen_leaves_batch_waiting_out(capsys, tmp_path):
    [note] = _notes(WAIT, capsys, tmp_path / "wait")
    assert "analytical screen" in note and "search.finalists=0" in note
    assert _notes(["engine=trtllm"], capsys, tmp_path / "off") == []

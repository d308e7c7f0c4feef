"""`plan` and `simulate` answer the question asked: user lengths kept, context checked,
overload reported with offered vs served rate, bad trace files refused cleanly."""

import json

import pandas as pd
import pytest

from simulate_cli_helpers import run_cli

SMALL = ["model=llama3_1_8b", "gpu=h100_sxm"]
FIXED = ["workload.input_tokens.kind=fixed", "workload.output_tokens.kind=fixed"]


def _run(argv, capsys, tmp_path):
    return run_cli(argv, capsys, tmp_path)


def test_plan_uses_the_lengths_asked_for(tmp_path, capsys):
    code, _, err = _run(["plan", *SMALL, *FIXED, "workload.input_tokens.mean_tokens=16000",
                         "workload.output_tokens.mean_tokens=4000", "search.finalists=0"], capsys, tmp_path)
    assert code in (0, 3), err
    wl = json.loads((tmp_path / "plan.json").read_text())["workload"]
    assert wl["mean_input_tokens"] == 16000 and wl["mean_output_tokens"] == 4000
    assert wl["max_request_tokens"] == 20000


def test_simulate_uses_the_lengths_asked_for(tmp_path, capsys):
    code, _, err = _run(["simulate", *SMALL, *FIXED, "workload.input_tokens.mean_tokens=9000",
                         "workload.output_tokens.mean_tokens=3000", "workload.num_requests=60",
                         "workload.rate_rps=0.5"], capsys, tmp_path)
    assert code == 0, err
    df = pd.read_csv(tmp_path / "requests.csv")
    assert set(df["input_tokens"]) == {9000} and set(df["output_tokens"]) == {3000}


@pytest.mark.parametrize("cmd", ["plan", "simulate"])
def test_a_prompt_beyond_the_context_is_exit_2(tmp_path, capsys, cmd):
    code, out, err = _run([cmd, *SMALL, "workload.input_tokens.kind=fixed", "workload.input_tokens.mean_tokens=200000",
                           "search.finalists=0"], capsys, tmp_path)
    text = out + err
    assert code == 2 and "context" in text and "131072" in text and "Traceback" not in text


def test_simulate_flags_overload_and_prints_offered_vs_served(tmp_path, capsys):
    code, out, err = _run(["simulate", *SMALL, "workload.rate_rps=1e6", "workload.num_requests=500"], capsys, tmp_path)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["overloaded"] is True and s["offered_rate_rps"] == 1e6
    w = s["window"]
    assert w["offered_rate_rps"] == 1e6 and w["queue_end"] > w["queue_start"]
    assert "OVERLOADED" in out and "offered 1e+06 req/s" in out


def test_simulate_at_a_light_load_is_stable_and_reports_its_window(tmp_path, capsys):
    code, out, err = _run(["simulate", *SMALL, "workload.rate_rps=2", "workload.num_requests=300"], capsys, tmp_path)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    w = s["window"]
    assert s["overloaded"] is False and w["window_kind"] == "steady" and w["stationary"]
    assert w["window_start_ms"] >= w["warmup_ms"] > 0 and w["requests_measured"] == s["measured_requests"]
    assert w["served_rate_rps"] == pytest.approx(2.0, rel=0.15)
    assert w["requests_simulated"] > 300  # lengthened for the window, and said so
    assert any("too short for a steady-state window" in n for n in s["notes"])
    assert "served" in out and "stable" in out


@pytest.mark.parametrize("content", [b"", b"\x89PNG\r\n\x1a\n\x00\x00binary"])
def test_empty_or_binary_trace_is_exit_2_without_traceback(tmp_path, capsys, content):
    f = tmp_path / "trace.csv"
    f.write_bytes(content)
    code, out, err = _run(["simulate", *SMALL, "workload=azure_trace", f"workload.trace_path={f}"], capsys,
                          tmp_path / "out")
    text = out + err
    assert code == 2 and "workload.trace_path" in text and "Traceback" not in text
    assert len([ln for ln in text.splitlines() if ln.strip()]) <= 2


def test_simulate_can_keep_the_exact_request_count(tmp_path, capsys):
    code, _, err = _run(["simulate", *SMALL, "workload.rate_rps=2", "workload.num_requests=300",
                         "workload.steady_state=false"], capsys, tmp_path)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert len(pd.read_csv(tmp_path / "requests.csv")) == 300 and s["window"] is None
    assert s["measured_requests"] == 300 - 15 - 15  # the first and last 5%

"""The engine terms' fitted range is checked where users get predictions (issue 12: "warn when a
row lies outside the range of the terms' fit"): `validate serving`, `plan` and `simulate` share
one comparison (sim.engine_terms.outside_range)."""

import json

import pandas as pd

from llmplan.sim import engine_terms
from simulate_cli_helpers import run_cli


def _profile(tmp_path, rng):
    f = tmp_path / "profiles.json"
    f.write_text(json.dumps({"engines": {"vllm": {"host_overhead_ms": 1.0, "fitted_range": rng}}}))
    return str(f)


def test_fitted_range_read_from_the_profile_file(tmp_path):
    path = _profile(tmp_path, {"concurrency": [4, 144], "isl": [1000, 8192]})
    assert engine_terms.fitted_range("vllm", path) == {"concurrency": (4.0, 144.0), "isl": (1000.0, 8192.0)}
    assert engine_terms.fitted_range("sglang", path) == {}


def test_outside_range_names_each_value_and_its_interval():
    rng = {"concurrency": (4.0, 144.0), "isl": (1000.0, 8192.0), "osl": (100.0, 8192.0)}
    assert engine_terms.outside_range(rng, {"concurrency": 64, "isl": 1000, "osl": 8192}) == []
    bad = engine_terms.outside_range(rng, {"concurrency": 600.4, "isl": 948.2, "osl": 500})
    assert bad == ["concurrency 600 not in [4, 144]", "isl 948 not in [1000, 8192]"]
    # a missing or non-numeric value is skipped, not a failure
    assert engine_terms.outside_range(rng, {"concurrency": None, "isl": "n/a"}) == []


def test_operating_point_is_littles_law_and_mean_lengths():
    done = pd.DataFrame({"e2e_ms": [1000.0, 3000.0], "input_tokens": [100, 300], "output_tokens": [10, 30]})
    pt = engine_terms.operating_point(5.0, done)
    assert pt == {"concurrency": 10.0, "isl": 200.0, "osl": 20.0}  # 5 req/s x 2 s mean


def test_fit_range_note(tmp_path):
    path = _profile(tmp_path, {"concurrency": [4, 144]})
    assert engine_terms.fit_range_note("vllm", {"concurrency": 100.0}, path) == ""
    note = engine_terms.fit_range_note("vllm", {"concurrency": 2048.0}, path)
    assert "vllm engine terms" in note and "concurrency 2048 not in [4, 144]" in note
    assert engine_terms.fit_range_note("trtllm", {"concurrency": 2048.0}, path) == ""  # no range, no note


def test_simulate_says_when_the_operating_point_is_outside_the_fit(capsys, tmp_path):
    lo, hi = engine_terms.fitted_range("vllm")["concurrency"]
    # far above capacity: the replica runs its whole batch limit, well beyond the fitted concurrency
    code, out, _ = run_cli(["simulate", "workload.num_requests=400", "workload.rate_rps=40"], capsys, tmp_path)
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    notes = [n for n in summary["notes"] if "engine terms were fitted on" in n]
    assert len(notes) == 1 and f"not in [{lo:.0f}, {hi:.0f}]" in notes[0]
    assert "engine terms were fitted on" in out


def test_decode_operating_point_counts_the_decode_phase_only():
    done = pd.DataFrame({"kv_arrival_ms": [100.0, 500.0], "finish_ms": [1100.0, 3500.0],
                         "input_tokens": [1000, 3000], "output_tokens": [100, 300]})
    pt = engine_terms.operating_point(4.0, done, decode_only=True)
    assert pt == {"concurrency": 8.0, "isl": 2000.0, "osl": 200.0}  # 4 req/s x 2 s mean decode phase


def test_planned_split_says_when_its_decode_pool_is_outside_the_fit(tmp_path, capsys):
    """The default plan chooses a split whose decode worker runs more sequences than the vLLM rows
    the terms were fitted on: plan.json's split carries the note and the console prints it."""
    lo, hi = engine_terms.fitted_range("vllm")["concurrency"]
    code, out, _ = run_cli(["plan"], capsys, tmp_path)
    assert code == 0
    d = json.loads((tmp_path / "plan.json").read_text())
    dis = d["disaggregated"]
    assert d["mode"] == "disagg" and "concurrency" in dis["simulated"]["outside_fit"]
    assert f"not in [{lo:.0f}, {hi:.0f}]" in dis["simulated"]["outside_fit"]
    assert dis["notes"].count(f"decode pool: {dis['simulated']['outside_fit']}") == 1
    assert "decode pool: outside the served rows" in out

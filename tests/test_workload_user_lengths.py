"""Lengths the user asks for are the lengths simulated: a preset's caps never bind them."""

import gzip

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.sim.traces import read_trace
from llmplan.sim.workload import LengthSpec, WorkloadSpec, generate_workload, presets, resolve_lengths


def _lengths(**kw):
    wl = generate_workload(WorkloadSpec(rate_rps=1.0, num_requests=300, **kw), np.random.default_rng(0))
    return (np.array([r.input_tokens for r in wl.requests]), np.array([r.output_tokens for r in wl.requests]))


def test_fixed_lengths_above_the_preset_caps_are_kept():
    chat = presets()["chat"]
    assert chat["input_tokens"]["max_tokens"] < 16000 and chat["output_tokens"]["max_tokens"] < 4000
    ins, outs = _lengths(input_tokens=LengthSpec(kind="fixed", mean_tokens=16000),
                         output_tokens=LengthSpec(kind="fixed", mean_tokens=4000))
    assert set(ins) == {16000} and set(outs) == {4000}


def test_a_changed_distribution_drops_the_preset_caps_but_keeps_the_users():
    ls_in, _ = resolve_lengths(WorkloadSpec(input_tokens=LengthSpec(mean_tokens=20000)))
    assert ls_in.kind == "lognormal" and ls_in.max_tokens is None and ls_in.min_tokens is None
    ins, _ = _lengths(input_tokens=LengthSpec(mean_tokens=20000))
    assert ins.max() > presets()["chat"]["input_tokens"]["max_tokens"]
    assert abs(ins.mean() - 20000) / 20000 < 0.15
    ins, _ = _lengths(input_tokens=LengthSpec(mean_tokens=20000, max_tokens=30000))
    assert ins.max() == 30000  # the user's own cap binds
    # the untouched preset keeps its caps (they are part of its distribution)
    ls_in, ls_out = resolve_lengths(WorkloadSpec())
    assert ls_in.max_tokens == presets()["chat"]["input_tokens"]["max_tokens"]
    assert ls_out.max_tokens == presets()["chat"]["output_tokens"]["max_tokens"]


def test_a_fixed_length_outside_the_users_caps_is_refused():
    with pytest.raises(UserError, match="above max_tokens") as e:
        _lengths(input_tokens=LengthSpec(kind="fixed", mean_tokens=16000, max_tokens=8192))
    assert e.value.key == "workload.input_tokens.max_tokens"
    with pytest.raises(UserError, match="below min_tokens"):
        _lengths(output_tokens=LengthSpec(kind="fixed", mean_tokens=10, min_tokens=20))


def _png(p):
    p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)


@pytest.mark.parametrize("name, make, needle", [
    ("empty.csv", lambda p: p.write_text(""), "is empty"),
    ("blank.jsonl", lambda p: p.write_text("\n  \n"), "is empty"),
    ("image.png", _png, "PNG image"),
    ("trace.csv", _png, "PNG image"),
    ("noise.csv.gz", lambda p: p.write_bytes(gzip.compress(bytes(range(256)) * 20)), "binary data"),
    ("fake.csv.gz", lambda p: p.write_bytes(b"this is not gzip data at all"), "cannot read trace"),
    ("latin1.csv", lambda p: p.write_bytes("arrival_ms,input_tokens,output_tokens\n0,1,1\n\xe9\xe8".encode("latin-1")),
     "not UTF-8"),
])
def test_empty_and_binary_traces_are_one_clear_error(tmp_path, name, make, needle):
    p = tmp_path / name
    make(p)
    with pytest.raises(UserError, match=needle) as e:
        read_trace(str(p))
    assert e.value.key == "workload.trace_path"
    with pytest.raises(UserError, match=needle):  # the same through the workload
        generate_workload(WorkloadSpec(preset=None, arrival="trace", trace_path=str(p)), np.random.default_rng(0))


def test_a_directory_is_not_a_trace(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        read_trace(str(tmp_path))


def test_binary_empirical_length_file_is_refused(tmp_path):
    p = tmp_path / "lengths.csv"
    _png(p)
    with pytest.raises(UserError, match="PNG image") as e:
        generate_workload(WorkloadSpec(rate_rps=1.0, num_requests=5,
                                       input_tokens=LengthSpec(kind="empirical", path=str(p))),
                          np.random.default_rng(0))
    assert e.value.key == "workload.input_tokens.path"

"""Trace readers: Azure CSV, Mooncake JSONL, generic CSV/JSONL; clear errors for bad files."""

import json

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.sim.traces import detect_format, read_trace
from llmplan.sim.workload import DATA_DIR, WorkloadSpec, generate_workload


@pytest.mark.parametrize("name, fmt, block", [
    ("azure_conv_sample.csv", "azure", 16),
    ("mooncake_sample.jsonl", "mooncake", 512),
    ("generic_sample.csv", "csv", 16),
    ("generic_sample.jsonl", "jsonl", 16),
])
def test_shipped_samples_load_in_auto_mode(name, fmt, block):
    assert detect_format(DATA_DIR / name) == fmt
    wl = read_trace(name)  # relative names are found in sim/data/
    t = np.array([r.arrival_ms for r in wl.requests])
    assert t[0] == 0 and np.all(np.diff(t) >= 0) and len(wl.requests) >= 100
    assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in wl.requests)
    assert wl.prefix_block_tokens == block
    if fmt != "azure":
        assert sum(bool(r.hash_ids) for r in wl.requests) == len(wl.requests)


def test_azure_timestamps_are_datetimes_in_ms(tmp_path):
    f = tmp_path / "az.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,100,10\n"
                 "2023-11-16 18:15:47.1805900,200,0\n"
                 "2023-11-16 18:15:46.9805900,300,30\n")
    wl = read_trace(str(f), "auto")
    assert [r.arrival_ms for r in wl.requests] == pytest.approx([0.0, 300.0, 500.0])
    assert [r.input_tokens for r in wl.requests] == [100, 300, 200]
    assert wl.requests[2].output_tokens == 1  # zero generated tokens raised to one


def test_mooncake_keys_and_first_n_rows(tmp_path):
    f = tmp_path / "mc.jsonl"
    rows = [{"timestamp": 1000 * i, "input_length": 600 + i, "output_length": 5, "hash_ids": [0, 1 + i]}
            for i in range(10)]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    wl = read_trace(str(f), num_requests=4)
    assert len(wl.requests) == 4 and wl.requests[3].arrival_ms == 3000 and wl.requests[1].hash_ids == (0, 2)


def test_rate_rescales_trace_times():
    wl = generate_workload(WorkloadSpec(arrival="trace", trace_path="mooncake_sample.jsonl", rate_rps=10.0,
                                        num_requests=0), np.random.default_rng(0))
    n = len(wl.requests)
    assert (n - 1) / (wl.requests[-1].arrival_ms / 1000) == pytest.approx(10.0)


def test_missing_column_names_the_column_and_the_file(tmp_path):
    f = tmp_path / "bad_azure.csv"
    f.write_text("TIMESTAMP,ContxtTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n")
    with pytest.raises(UserError) as e:
        read_trace(str(f))
    msg = e.value.render()
    assert "ContextTokens" in msg and str(f) in msg and "ContxtTokens" in msg  # suggestion names what is there
    g = tmp_path / "bad.jsonl"
    g.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_len": 3}) + "\n")
    with pytest.raises(UserError, match="output_length") as e:
        read_trace(str(g))
    assert str(g) in str(e.value)


def test_other_bad_traces(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_trace(str(tmp_path / "nope.csv"))
    f = tmp_path / "neg.csv"
    f.write_text("arrival_ms,input_tokens,output_tokens\n0,10,5\n5,-3,5\n")
    with pytest.raises(UserError, match="row 2"):
        read_trace(str(f))
    g = tmp_path / "broken.jsonl"
    g.write_text('{"arrival_ms": 0, "input_tokens": 3, "output_tokens": 1}\n{oops\n')
    with pytest.raises(UserError, match=":2"):
        read_trace(str(g), "jsonl")
    with pytest.raises(UserError, match="trace format"):
        read_trace(str(f), "parquet")

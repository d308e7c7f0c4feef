"""Offline mode: all requests at time 0, the engines' own batch limits, throughput over the run."""

import json

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.sim.offline import offline_batch_limits, trtllm_bench_limits
from llmplan.sim.serving import DEFAULT_MAX_QUEUE, estimate_capacity_rps, simulate_serving
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec, generate_workload
from simulate_cli_helpers import run_cli

REPS = [make_replica()] * 2


@pytest.mark.parametrize("kv, isl, osl, pp, expect", [
    (100_000, 1000, 1000, 1, (64, 2048)),        # 50 fit: batch at least 64, tokens at least 2048
    (2_000_000, 128, 128, 1, (4096, 8192)),      # batch capped at 4096; 4096 x 2 tokens
    (600_000, 500, 1500, 2, (160, 2048)),        # 300 fit over 2 stages: 150 -> multiple of 32
    (1_000_000, 2000, 200, 1, (512, 5120)),      # 454.5 -> multiple of 128; 5000 tokens -> of 512
    (4_000_000, 1000, 100, 1, (3840, 32768)),    # 3636 -> multiple of 256; tokens capped at 32768
])
def test_trtllm_bench_heuristic(kv, isl, osl, pp, expect):
    assert trtllm_bench_limits(kv, isl, osl, pp) == expect


def test_vllm_and_sglang_offline_defaults():
    big = offline_batch_limits("vllm", 500_000, 1000, 200, 79.6, "h100_sxm", 131072)
    assert (big.max_num_seqs, big.max_num_batched_tokens) == (1024, 16384)
    a100 = offline_batch_limits("vllm", 500_000, 1000, 200, 79.6, "a100_sxm", 131072)
    small = offline_batch_limits("vllm", 100_000, 1000, 200, 22.0, "l4", 131072)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (small.max_num_seqs, small.max_num_batched_tokens) \
        == (256, 8192)
    sg = offline_batch_limits("sglang", 500_000, 1000, 200, 79.6, "h100_sxm", 131072)
    assert (sg.max_num_seqs, sg.max_num_batched_tokens) == (2048, 8192)   # 1953 -> at least 2048
    sg = offline_batch_limits("sglang", 2_000_000, 1000, 200, 178.0, "b200", 131072)
    assert (sg.max_num_seqs, sg.max_num_batched_tokens) == (4096, 16384)  # 7812 -> at most 4096
    assert offline_batch_limits("sglang", 100_000, 1, 1, 22.0, "l4", 131072).max_num_batched_tokens == 2048
    # 35-60 GiB (L40S 44.99 GiB, A100 40GB): 4,096, the same rule the KV budget uses
    assert offline_batch_limits("sglang", 100_000, 1, 1, 44.99, "l40s", 131072).max_num_batched_tokens == 4096
    assert "trtllm-bench" in offline_batch_limits("trtllm", 100_000, 1000, 1000, 79.6, "h100_sxm", 131072).source


def test_offline_workload_queues_everything_at_zero_and_refuses_nonsense():
    wl = generate_workload(WorkloadSpec(arrival="offline", num_requests=50), np.random.default_rng(0))
    assert wl.offline and all(r.arrival_ms == 0.0 for r in wl.requests) and len(wl.requests) == 50
    with pytest.raises(UserError, match="at least one request"):
        generate_workload(WorkloadSpec(arrival="offline", num_requests=0), np.random.default_rng(0))
    with pytest.raises(UserError, match="rate_rps") as e:
        generate_workload(WorkloadSpec(arrival="offline", rate_rps=5.0), np.random.default_rng(0))
    assert e.value.key == "workload.rate_rps"


def test_offline_run_reports_throughput_over_the_makespan():
    n = DEFAULT_MAX_QUEUE + 1000  # more than the serving overload guard allows in the queue
    spec = WorkloadSpec(preset=None, arrival="offline", num_requests=n,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=64),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=16))
    res = simulate_serving(spec, REPS)
    s = res.summary
    assert s["offline"] and not res.overloaded and res.unfinished == 0 and s["measured_requests"] == n
    makespan_s = res.requests["finish_ms"].max() / 1000
    assert s["makespan_s"] == pytest.approx(makespan_s)
    assert s["request_throughput_rps"] == pytest.approx(n / makespan_s)
    assert s["output_throughput_tps"] == pytest.approx(16 * n / makespan_s)
    assert s["total_throughput_tps"] == pytest.approx(80 * n / makespan_s)
    # a full queue is the most the replicas can do: above an open-loop run at 80% of capacity
    cap = estimate_capacity_rps(REPS, 64, 16)
    served = simulate_serving(WorkloadSpec(**{**spec.__dict__, "arrival": "poisson", "rate_rps": 0.8 * cap,
                                              "num_requests": 2000}), REPS, steady_state=True)
    assert s["request_throughput_rps"] > served.summary["request_throughput_rps"]


def _run(argv, capsys, tmp_path):
    code, out, err = run_cli(argv, capsys, tmp_path)
    return code, out + err


@pytest.mark.parametrize("engine, source", [("vllm", "vLLM offline"), ("trtllm", "trtllm-bench"),
                                            ("sglang", "SGLang defaults")])
def test_simulate_offline_uses_the_engines_limits(tmp_path, capsys, engine, source):
    code, text = _run(["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", f"engine={engine}",
                       "workload.num_requests=300"], capsys, tmp_path)
    assert code == 0, text
    s = json.loads((tmp_path / "summary.json").read_text())
    off = s["offline"]
    assert source in off["source"] and off["makespan_s"] > 0 and s["overloaded"] is False
    assert off["requests_per_s"] == pytest.approx(300 / off["makespan_s"])
    assert "queued at time 0" in text and f"max_num_seqs={off['max_num_seqs']}" in text


def test_simulate_offline_can_keep_the_configured_limits(tmp_path, capsys):
    code, text = _run(["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "workload=offline",
                       "workload.offline_engine_limits=false", "engine.max_num_seqs=64",
                       "workload.num_requests=200"], capsys, tmp_path)
    assert code == 0, text
    off = json.loads((tmp_path / "summary.json").read_text())["offline"]
    assert off["max_num_seqs"] == 64 and "offline_engine_limits=false" in off["source"]


@pytest.mark.parametrize("extra, key", [(["workload.num_requests=0"], "workload.num_requests"),
                                        (["workload.rate_rps=5"], "workload.rate_rps")])
def test_simulate_offline_bad_input_is_exit_2(tmp_path, capsys, extra, key):
    code, text = _run(["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", *extra], capsys, tmp_path)
    assert code == 2 and key in text and "Traceback" not in text

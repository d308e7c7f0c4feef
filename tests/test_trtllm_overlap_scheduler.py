"""TensorRT-LLM's overlap scheduler (sim/trtllm_scheduling.py): a request arriving while a step is
in flight skips the step already scheduled; an idle engine takes it at once; other engines unchanged."""

import pytest

import llmplan.sim.replica as replica_mod
import llmplan.sim.trtllm_scheduling as trtllm_scheduling
from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.trtllm_scheduling import first_schedulable_step, overlap_scheduler
from llmplan.sim.workload import LengthSpec, Request, WorkloadSpec

#: 10 ms per step plus 0.1 ms per prompt token, nothing else
COST = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0.1,
                      per_attn_pair_ms=0)
ENGINE = dict(chunked_prefill=True, whole_prompts=True, max_num_batched_tokens=16384, max_num_seqs=64)


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setattr(replica_mod, "DEBUG_CHECKS", True)


def _ttfts(name, reqs):
    res = simulate_serving(reqs, [make_replica(COST, name=name, **ENGINE)], window=MeasureWindow(0, 0))
    return res.requests["ttft_ms"].tolist(), res


def test_only_trtllm_overlaps():
    assert overlap_scheduler("trtllm")
    assert not overlap_scheduler("vllm") and not overlap_scheduler("sglang")
    assert first_schedulable_step(7) == 9


def test_arrival_during_a_step_skips_the_step_already_scheduled(checked):
    # request 0: prefill step 0-11 ms, then 10 ms decode steps ending at 21, 31, ..., 101, 111, ...
    # request 1 arrives at 105 ms, during the decode step 101-111
    reqs = [Request(0.0, 10, 50), Request(105.0, 1000, 2)]
    sync, _ = _ttfts("vllm", reqs)
    over, _ = _ttfts("trtllm", reqs)
    # synchronous: joins the step planned at 111 ms: a 10 + 100 ms mixed step -> first token at 221
    assert sync[1] == pytest.approx(221 - 105)
    # overlap: the 111-121 step was scheduled during 101-111, so it joins the step at 121
    assert over[1] == pytest.approx(231 - 105)
    assert over[0] == sync[0] == pytest.approx(11)


def test_idle_engine_takes_a_request_at_once(checked):
    reqs = [Request(0.0, 10, 3), Request(500.0, 1000, 3)]   # request 0 is long done at 500 ms
    sync, _ = _ttfts("vllm", reqs)
    over, _ = _ttfts("trtllm", reqs)
    assert over == pytest.approx(sync)
    assert over[1] == pytest.approx(10 + 100)


def _closed_loop(name, monkeypatch=None, fast_forward=True):
    if monkeypatch is not None:
        monkeypatch.setattr(replica_mod, "FAST_FORWARD", fast_forward)
    spec = WorkloadSpec(preset=None, arrival="closed_loop", concurrency=8, num_requests=80,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=512),
                        output_tokens=LengthSpec(kind="uniform", min_tokens=60, max_tokens=70), seed=3)
    return simulate_serving(spec, [make_replica(COST, name=name, **ENGINE)], window=MeasureWindow(0, 0))


def test_closed_loop_prompts_wait_about_one_step_more(checked, monkeypatch):
    over = _closed_loop("trtllm")
    monkeypatch.setattr(trtllm_scheduling, "OVERLAP_SCHEDULER_ENGINES", frozenset())
    sync = _closed_loop("trtllm")
    assert over.unfinished == 0 and sync.unfinished == 0
    d = over.summary["ttft_ms_mean"] - sync.summary["ttft_ms_mean"]
    # one more step per re-sent request: between a decode step (10 ms) and a mixed one (61 ms)
    assert 10 * 0.8 <= d <= 61 * 1.2, d
    assert over.summary["ttft_ms_mean"] > sync.summary["ttft_ms_mean"]


def test_fast_forward_gives_the_same_schedule(monkeypatch):
    fast = _closed_loop("trtllm", monkeypatch, True)
    slow = _closed_loop("trtllm", monkeypatch, False)
    assert fast.requests["ttft_ms"].tolist() == pytest.approx(slow.requests["ttft_ms"].tolist())
    assert fast.requests["e2e_ms"].tolist() == pytest.approx(slow.requests["e2e_ms"].tolist())


def test_disaggregated_context_servers_do_not_overlap(monkeypatch):
    """TensorRT-LLM's disaggregated examples disable the overlap scheduler on context servers
    ("not yet supported in disaggregated context server architectures"): the prefill pool of a
    disaggregated run schedules as before; the decode pool admits transferred requests itself."""
    from llmplan.sim.disaggregated import DisaggSpec, FixedTransfer, PoolSpec, simulate_disaggregated

    rep = make_replica(COST, name="trtllm", **ENGINE)
    s = DisaggSpec(PoolSpec(1, rep), PoolSpec(1, rep), FixedTransfer(5.0), "decode")
    reqs = [Request(float(10 * i), 512, 20) for i in range(12)]   # arrivals while the prefill worker is busy
    on = simulate_disaggregated(reqs, s).requests
    monkeypatch.setattr(trtllm_scheduling, "OVERLAP_SCHEDULER_ENGINES", frozenset())
    off = simulate_disaggregated(reqs, s).requests
    assert on["ttft_ms"].tolist() == pytest.approx(off["ttft_ms"].tolist())
    assert on["e2e_ms"].tolist() == pytest.approx(off["e2e_ms"].tolist())
    # while an aggregated replica with the same arrivals schedules them differently: the second
    # request, arriving during the first prompt's step, waits one step more
    monkeypatch.setattr(trtllm_scheduling, "OVERLAP_SCHEDULER_ENGINES", frozenset({"trtllm"}))
    agg_on, _ = _ttfts("trtllm", reqs)
    monkeypatch.setattr(trtllm_scheduling, "OVERLAP_SCHEDULER_ENGINES", frozenset())
    agg_off, _ = _ttfts("trtllm", reqs)
    assert agg_on[1] == pytest.approx(agg_off[1] + 10.0)

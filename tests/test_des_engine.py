"""Engine behaviour: batching policies, preemption, prefix caching, routing, pipeline stages."""

import numpy as np
import pytest

import llmplan.sim.replica as replica_mod
from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.workload import LengthSpec, Request, WorkloadSpec


@pytest.fixture
def checked(monkeypatch):
    """Recompute every scheduler aggregate from the sequences at every step."""
    monkeypatch.setattr(replica_mod, "DEBUG_CHECKS", True)


def _summ(spec, **engine):
    return simulate_serving(spec, [make_replica(**engine)]).summary


def test_chunked_prefill_protects_decodes_prefill_first_protects_ttft():
    spec = WorkloadSpec(preset="summarization", num_requests=300, rate_rps=1.5,
                        output_tokens=LengthSpec(mean_tokens=200))
    chunked = _summ(spec, max_num_seqs=64, chunked_prefill=True, max_num_batched_tokens=2048)
    first = _summ(spec, max_num_seqs=64, chunked_prefill=False, max_num_batched_tokens=16384)
    # v0 prefill-first: decodes stall behind whole prompts -> long inter-token gaps
    assert chunked["itl_ms_p99"] < first["itl_ms_p99"] and chunked["itl_ms_max"] < first["itl_ms_max"] / 4
    # ... while prompts get the whole step -> shorter time to first token
    assert first["ttft_ms_p50"] < chunked["ttft_ms_p50"]


def test_prefill_first_steps_never_mix_prefill_and_decode(checked):
    # one long decode running; a second request's prefill pauses it for exactly one step
    cost = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0.1,
                          per_attn_pair_ms=0)
    reqs = [Request(0.0, 10, 50), Request(105.0, 1000, 2)]
    res = simulate_serving(reqs, [make_replica(cost, chunked_prefill=False, max_num_batched_tokens=16384)],
                           window=MeasureWindow(0, 0))
    df = res.requests
    # request 0: prefill 0-11 ms, decode steps end at 21, 31, ...; request 1 arrives at 105 mid-step,
    # waits until 111, then a 110 ms prefill-only step
    assert df.loc[1, "ttft_ms"] == pytest.approx(6 + 110)
    assert df.loc[0, "e2e_ms"] == pytest.approx(11 + 49 * 10 + 110)  # its decode stalled by that one step
    chunked = simulate_serving(reqs, [make_replica(cost, max_num_batched_tokens=256)], window=MeasureWindow(0, 0))
    # chunked: the 1000-token prompt rides along in 4 chunks of <= 255 tokens with the decode
    assert chunked.requests.loc[1, "ttft_ms"] > df.loc[1, "ttft_ms"]


def test_tiny_kv_cache_preempts_and_still_finishes_everything(checked):
    spec = WorkloadSpec(num_requests=300, rate_rps=8.0)
    res = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64)])
    assert res.summary["preemptions"] > 5 and res.requests["preemptions"].sum() == res.summary["preemptions"]
    assert res.unfinished == 0 and res.summary["kv_peak_util"] <= 1.0
    big = simulate_serving(spec, [make_replica(kv_capacity_tokens=400000, max_num_seqs=64)])
    assert big.summary["preemptions"] == 0


def test_watermark_holds_back_admission():
    spec = WorkloadSpec(num_requests=200, rate_rps=8.0)
    low = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64, watermark=0.0)])
    high = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64, watermark=0.3)])
    assert high.summary["preemptions"] < low.summary["preemptions"]
    assert high.summary["kv_peak_util"] <= 1.0


def test_prefix_caching_hits_on_shared_prompts(checked):
    spec = WorkloadSpec(num_requests=300, rate_rps=4.0, shared_prefix_tokens=768, num_shared_prefixes=2)
    on = simulate_serving(spec, [make_replica()])
    off = simulate_serving(spec, [make_replica(enable_prefix_caching=False)])
    assert on.summary["prefix_hit_rate"] > 0.3 and off.summary["prefix_hit_rate"] == 0.0
    assert on.summary["ttft_ms_mean"] < off.summary["ttft_ms_mean"]
    assert (on.requests["cached_prompt_tokens"] % 64 == 0).all()  # whole 64-token units
    assert (on.requests["cached_prompt_tokens"] < on.requests["input_tokens"]).all()
    unshared = simulate_serving(WorkloadSpec(num_requests=300, rate_rps=4.0), [make_replica()])
    assert unshared.summary["prefix_hit_rate"] == 0.0


def test_trace_hash_ids_give_hits_and_lru_evicts_under_pressure(checked):
    spec = WorkloadSpec(arrival="trace", trace_path="mooncake_sample.jsonl", num_requests=0, rate_rps=2.0)
    big = simulate_serving(spec, [make_replica(kv_capacity_tokens=400000)])
    small = simulate_serving(spec, [make_replica(kv_capacity_tokens=20000)])
    assert big.summary["prefix_hit_rate"] > 0.2
    assert small.summary["prefix_hit_rate"] < big.summary["prefix_hit_rate"]
    assert small.replica_stats[0]["prefix_evictions"] > 0


def test_prefix_aware_routing_beats_round_robin_on_hit_rate():
    # 16 system prompts of 2048 tokens: more than one replica's cache holds, a quarter fits
    spec = WorkloadSpec(num_requests=600, rate_rps=12.0, shared_prefix_tokens=2048, num_shared_prefixes=16)
    reps = [make_replica(kv_capacity_tokens=20000, max_num_seqs=32)] * 4
    rates = {r: simulate_serving(spec, reps, router=r).summary["prefix_hit_rate"]
             for r in ("round_robin", "least_outstanding", "prefix_aware")}
    assert rates["prefix_aware"] > rates["round_robin"] + 0.15
    assert rates["prefix_aware"] > rates["least_outstanding"]


def test_routers_spread_load():
    spec = WorkloadSpec(num_requests=400, rate_rps=20.0)
    for router in ("round_robin", "least_outstanding"):
        df = simulate_serving(spec, [make_replica()] * 4, router=router).requests
        counts = np.bincount(df["replica"], minlength=4)
        assert counts.min() > 70, (router, counts)
    with pytest.raises(UserError) as e:
        simulate_serving(spec, [make_replica()], router="round_robbin")
    assert "did you mean round_robin" in e.value.render()


def test_pipeline_parallel_microbatches_and_bubbles(checked):
    cost = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0,
                          per_attn_pair_ms=0, pp=2, stage_base_ms=1.0)  # stage 6 ms, step 12 ms
    one = simulate_serving(WorkloadSpec(preset=None, arrival="closed_loop", concurrency=1, num_requests=20,
                                        input_tokens=LengthSpec(kind="fixed", mean_tokens=32),
                                        output_tokens=LengthSpec(kind="fixed", mean_tokens=50)),
                           [make_replica(cost)])
    # a lone request waits for the whole pipeline each token: the other stage idles (bubble)
    assert one.summary["tpot_ms_mean"] == pytest.approx(12.0)
    two = simulate_serving(WorkloadSpec(preset=None, arrival="closed_loop", concurrency=2, num_requests=40,
                                        input_tokens=LengthSpec(kind="fixed", mean_tokens=32),
                                        output_tokens=LengthSpec(kind="fixed", mean_tokens=50)),
                           [make_replica(cost)])
    # two micro-batches fill the pipeline: same TPOT, twice the throughput
    assert two.summary["tpot_ms_mean"] == pytest.approx(12.0)
    assert two.summary["output_throughput_tps"] == pytest.approx(2 * one.summary["output_throughput_tps"], rel=0.05)


def test_fast_forward_is_exact(monkeypatch):
    spec = WorkloadSpec(num_requests=250, rate_rps=5.0, shared_prefix_tokens=512, num_shared_prefixes=3)
    reps = [make_replica(kv_capacity_tokens=30000, max_num_seqs=48)] * 2
    fast = simulate_serving(spec, reps, router="prefix_aware")
    monkeypatch.setattr(replica_mod, "FAST_FORWARD", False)
    slow = simulate_serving(spec, reps, router="prefix_aware")
    assert fast.summary["events"] < slow.summary["events"]
    assert fast.requests.equals(slow.requests)
    for k in ("itl_ms_mean", "itl_ms_p99", "itl_count", "preemptions", "prefix_hit_rate", "steps"):
        assert fast.summary[k] == pytest.approx(slow.summary[k], rel=1e-12), k


def test_same_seed_gives_byte_identical_csv(tmp_path):
    spec = WorkloadSpec(num_requests=300, arrival="gamma", cv=2.0, rate_rps=6.0, shared_prefix_tokens=256)
    paths = []
    for k in range(2):
        res = simulate_serving(spec, [make_replica(kv_capacity_tokens=30000)] * 2, router="prefix_aware", seed=4)
        paths.append(res.write_requests(tmp_path / f"r{k}.csv"))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    other = simulate_serving(spec, [make_replica(kv_capacity_tokens=30000)] * 2, router="prefix_aware", seed=5)
    assert not other.requests.equals(res.requests)


def test_bad_engine_and_request_inputs():
    spec = WorkloadSpec(num_requests=10, rate_rps=1.0)
    with pytest.raises(UserError, match="smaller than one KV block") as e:
        simulate_serving(spec, [make_replica(max_num_batched_tokens=8, block_size=16, max_num_seqs=4)])
    assert e.value.key == "replicas[0].engine.max_num_batched_tokens"
    with pytest.raises(UserError, match="max_num_seqs"):
        simulate_serving(spec, [make_replica(max_num_batched_tokens=128, max_num_seqs=256)])
    with pytest.raises(UserError, match="chunked"):
        simulate_serving(spec, [make_replica(chunked_prefill=False, max_num_batched_tokens=4096)])
    with pytest.raises(InfeasibleDeployment):
        simulate_serving(spec, [make_replica(kv_capacity_tokens=8)])
    with pytest.raises(InfeasibleDeployment, match="KV"):
        simulate_serving([Request(0.0, 5000, 100)], [make_replica(kv_capacity_tokens=4096)])
    with pytest.raises(UserError, match="max_model_len 2048") as e:
        simulate_serving([Request(0.0, 100, 10), Request(1.0, 2000, 100)], [make_replica(max_model_len=2048)])
    assert "request 1" in str(e.value)
    with pytest.raises(UserError):
        simulate_serving(spec, [])


def test_trace_longer_than_context_is_rejected():
    spec = WorkloadSpec(arrival="trace", trace_path="azure_conv_sample.csv", num_requests=0)
    with pytest.raises(UserError, match="max_model_len") as e:
        simulate_serving(spec, [make_replica(max_model_len=2048)])
    assert e.value.fix


def test_whole_prompts_wait_for_room_instead_of_splitting(checked):
    """TensorRT-LLM in-flight batching without chunked context: a prompt joins a step next to
    the decodes only whole; with chunking it is split over steps at once."""
    cost = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0.01,
                          per_attn_pair_ms=0)
    reqs = [Request(0.0, 100, 400), Request(5.0, 900, 2)]
    whole = simulate_serving(reqs, [make_replica(cost, max_num_batched_tokens=1000, max_model_len=1000,
                                                 whole_prompts=True)],
                             window=MeasureWindow(0, 0))
    split = simulate_serving(reqs, [make_replica(cost, max_num_batched_tokens=512)], window=MeasureWindow(0, 0))
    # whole: 900 prompt tokens + 1 decode fit in 1000, so the prompt runs in one step next to the decode
    assert whole.requests.loc[1, "ttft_ms"] == pytest.approx(6 + 10 + 9)
    # chunked with a 512 budget: 511 + 389 tokens over two steps
    assert split.requests.loc[1, "ttft_ms"] > whole.requests.loc[1, "ttft_ms"]
    three = [Request(0.0, 100, 400)] * 3 + [Request(5.0, 898, 2)]
    tight = simulate_serving(three, [make_replica(cost, max_num_batched_tokens=900, max_model_len=900,
                                                  whole_prompts=True)], window=MeasureWindow(0, 0))
    # 898 prompt tokens + 3 decodes do not fit in 900: the prompt waits until the decodes finish
    assert tight.requests.loc[3, "ttft_ms"] > tight.requests.loc[0, "e2e_ms"] - 5.0


def test_whole_prompts_need_a_budget_covering_the_longest_request():
    spec = WorkloadSpec(num_requests=10, rate_rps=1.0)
    with pytest.raises(UserError, match="max_model_len"):
        simulate_serving(spec, [make_replica(max_num_batched_tokens=4096, max_model_len=8192, whole_prompts=True)])


def test_preempted_requests_reuse_their_cached_blocks(checked):
    """Prefix caching on: a preempted request's full blocks stay cached (evictable) and are
    reused when it is admitted again (its only 'prefix hits' in a workload without shared
    prompts); off: it recomputes everything."""
    spec = WorkloadSpec(num_requests=300, rate_rps=8.0)
    on = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64)])
    off = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64,
                                               enable_prefix_caching=False)])
    assert on.summary["preemptions"] > 5 and off.summary["preemptions"] > 5
    assert on.summary["prefix_hit_rate"] > 0.0 and off.summary["prefix_hit_rate"] == 0.0
    assert on.unfinished == 0 and on.summary["kv_peak_util"] <= 1.0


def test_parked_blocks_are_evicted_tail_first_and_reused_up_to_what_is_left():
    from llmplan.sim.kv_cache import KVBlockPool

    pool = KVBlockPool(total_blocks=10, block_size=16)
    pool.allocate(6)
    pool.park(("preempted", 1), 6)          # 6 private blocks kept cached
    assert (pool.used, pool.evictable, pool.free) == (0, 6, 10)
    pool.allocate(7)                        # needs 3 of them: the group loses its tail
    assert pool.parked(("preempted", 1)) == 3 and pool.evictable == 3 and pool.used == 7
    pool.unpark(("preempted", 1), 2)        # re-admitted: reuses 2, the 3rd is dropped
    assert pool.parked(("preempted", 1)) == 0 and (pool.used, pool.evictable) == (9, 0)
    off = KVBlockPool(total_blocks=10, block_size=16, prefix_caching=False)
    off.allocate(4)
    off.park(("preempted", 2), 4)           # without prefix caching the blocks are simply freed
    assert (off.used, off.evictable, off.parked(("preempted", 2))) == (0, 0, 0)


def test_trtllm_guaranteed_no_evict_queues_instead_of_preempting(checked):
    """TensorRT-LLM's default capacity scheduler reserves each admitted request's whole sequence:
    with a KV cache too small for every request at once it never preempts, it queues; vLLM
    admits more and preempts."""
    spec = WorkloadSpec(num_requests=300, rate_rps=8.0)
    trt = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64, name="trtllm")])
    vllm = simulate_serving(spec, [make_replica(kv_capacity_tokens=24000, max_num_seqs=64, name="vllm")])
    assert trt.summary["preemptions"] == 0 and vllm.summary["preemptions"] > 5
    assert trt.unfinished == 0 and trt.summary["kv_peak_util"] <= 1.0
    whole = (trt.requests["input_tokens"] + trt.requests["output_tokens"]).max()
    assert whole <= 24000   # every request fits alone, so the queue always drains


def test_no_evict_reserves_only_what_the_engine_generates():
    """A disaggregated prefill worker (output length 1 on that engine) reserves prompt + 1 token."""
    from llmplan.sim.scheduler import EngineState, Seq
    from llmplan.sim.types import EngineProfile

    eng = EngineState(0, EngineProfile(name="trtllm", block_size=16), 100, 16, 8)
    seq = Seq(0, Request(0.0, 100, 500), True)
    assert eng._whole_blocks(seq) == -(-600 // 16)
    seq.O = 1
    assert eng._whole_blocks(seq) == -(-101 // 16)


def test_no_evict_reserves_in_the_pool_units_under_speculation():
    """Under speculative decoding the KV pool and ``seq.O`` are in verify steps (sim.spec_decode): the
    whole-sequence reservation counts steps, not tokens (tokens over-reserved ~1/tokens-per-step)."""
    from llmplan.sim.scheduler import EngineState, Seq
    from llmplan.sim.types import EngineProfile

    eng = EngineState(0, EngineProfile(name="trtllm", block_size=16), 100, 16, 8)
    seq = Seq(0, Request(0.0, 100, 500), True)
    seq.O = 160                                   # 500 tokens in 160 verify steps
    assert eng._whole_blocks(seq) == -(-600 // 16)   # a plain replica: tokens
    eng.step_space = True
    assert eng._whole_blocks(seq) == -(-260 // 16)   # step space: prompt + steps

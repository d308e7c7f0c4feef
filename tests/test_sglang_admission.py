"""SGLang's admission and retraction rule (sim/sglang_admission.py, hooks in sim/scheduler.py):
reserved output tokens x new_token_ratio, its decay and reset, retraction order and ratio."""

from __future__ import annotations

import pytest

from llmplan.sim import sglang_admission as sa
from llmplan.sim.requests import Request
from llmplan.sim.scheduler import DECODE, WAITING, EngineState, Seq
from llmplan.sim.types import EngineProfile


def _engine(name: str = "sglang", budget: int = 16384, radix_cache: bool = True) -> EngineProfile:
    # the requests carry no prefix keys: the cache never hits; off = --disable-radix-cache
    return EngineProfile(name=name, kernel_backend=name, chunked_prefill=False, max_num_batched_tokens=budget,
                         max_num_seqs=256, enable_prefix_caching=radix_cache, watermark=0.0)


def _state(engine: EngineProfile, blocks: int) -> EngineState:
    return EngineState(0, engine, blocks, engine.block_size, engine.max_num_seqs)


def _submit(st: EngineState, reqs: list[tuple[int, int]], first: int = 0) -> list[Seq]:
    seqs = [Seq(first + i, Request(0.0, p, o), True) for i, (p, o) in enumerate(reqs)]
    st.waiting.extend(seqs)
    return seqs


def _step(st: EngineState, t: float) -> list:
    assert st.plan(t)
    done = st.complete(t + 1.0, [])
    st.check_invariants()
    return done


# ---------------------------------------------------------------- arithmetic

def test_new_token_ratio_starts_at_0_7_and_decays_linearly_to_0_098_over_600_decode_batches():
    r = sa.NewTokenRatio()
    assert r.init == pytest.approx(0.7) and r.min == pytest.approx(0.098)
    assert r.decay == pytest.approx((0.7 - 0.098) / 600)
    r.step()
    assert r.value == pytest.approx(0.7 - 0.602 / 600)
    r.step(299)
    assert r.value == pytest.approx(0.7 - 0.301)
    r.step(1000)
    assert r.value == pytest.approx(0.098)   # floored at min
    r.reset()
    assert r.value == pytest.approx(0.7)
    # --schedule-conservativeness scales init (capped at 1); DP attention multiplies it by 0.3
    assert sa.NewTokenRatio(conservativeness=2.0).init == 1.0
    assert sa.NewTokenRatio(dp_attention=True).init == pytest.approx(0.21)


def test_retraction_sets_the_ratio_from_the_requests_kept():
    # (decoded + 20 x requests) / (sum max_new_tokens + 1), at most 1
    assert sa.retract_ratio(300, 2, 2000) == pytest.approx(340 / 2001)
    assert sa.retract_ratio(5000, 3, 1000) == 1.0
    r = sa.NewTokenRatio()
    r.retracted(300, 2, 2000)
    assert r.value == pytest.approx(340 / 2001)


def test_reserved_output_is_clipped_at_4096_and_the_admission_test_is_strict():
    assert sa.clipped_output_tokens(10_000, 100) == 4096
    assert sa.clipped_output_tokens(1000, 100) == 900
    assert sa.clipped_output_tokens(10, 20) == 0
    assert sa.admits(1000, 3000, 0, 4001)
    assert not sa.admits(1000, 3000, 0, 4000)   # total_tokens >= rem_total_tokens -> NO_TOKEN


def test_remaining_outputs_aggregate_matches_the_clipped_sum_across_the_clip():
    ro = sa.RemainingOutputs()
    ends = {1: 10_000, 2: 3_000, 3: 5_000}
    for k, e in ends.items():
        ro.add(k, e, 0)
    for c in (0, 500, 903, 904, 2_999, 3_000, 5_000, 7_000):
        assert ro.total(c) == sum(min(e - c, 4096) for e in ends.values()), c
        for k in [k for k, e in ends.items() if e == c]:   # a request leaves when its output is done
            ro.remove(k, c)
            del ends[k]
    assert ro.total(7_000) == 3_000 and len(ro) == 1
    ro.remove(1, 7_000)
    ro.add(4, 20_000, 7_000)   # joins with 13,000 left: counts 4,096 until counter 15,904
    assert ro.total(7_000) == ro.total(15_904) == 4096 and ro.total(16_000) == 4000


# ---------------------------------------------------------------- behaviour

def test_admits_fewer_than_vllm_style_when_outputs_are_long():
    # 1,000 blocks x 16 = 16,000 tokens; 1,000-token prompts with 3,000-token outputs
    reqs = [(1000, 3000)] * 20
    vllm = _state(_engine("vllm"), 1000)
    _submit(vllm, reqs)
    assert vllm.plan(0.0)
    assert len(vllm.plan_chunks) == 15        # prompt blocks only: 15 x 63 blocks fit
    st = _state(_engine(), 1000)
    _submit(st, reqs)
    assert st.plan(0.0)
    # the 1st alone; 2nd: 1000 + 3000 < 937 x 16 - 3000; 3rd: < 874 x 16 - 6000 = 7,984;
    # 4th: 4000 >= 811 x 16 - 9000 = 3,976 -> NO_TOKEN, batch full
    assert len(st.plan_chunks) == 3
    assert st.sg.full and st.sg.no_token_stops == 1
    st.complete(1.0, [])
    # no prefill while the batch is full, although the ratio decays every decode batch
    for t in range(2, 50):
        _step(st, float(t))
        assert len(st.running) == 3 and len(st.waiting) == 17
    assert st.sg.ratio.value == pytest.approx(0.7 - 48 * st.sg.ratio.decay)


def test_running_requests_reserve_their_remaining_output_times_the_ratio():
    st = _state(_engine(), 1000)
    (a,) = _submit(st, [(1000, 3000)])
    _step(st, 0.0)
    assert a.state == DECODE
    # 2,999 tokens left x 0.7 reserved; 937 blocks free
    assert st.sg.reserved_tokens(st.counter) == pytest.approx(2999 * 0.7)
    # a request needing 1000 + 3000 tokens: 4000 < 14,992 - 2,099.3 -> admitted
    _submit(st, [(1000, 3000)], first=1)
    assert st.plan(1.0) and [s.idx for s, _, _ in st.plan_chunks] == [1]


def test_retraction_takes_the_fewest_generated_then_longest_prompt_to_the_end_of_the_queue():
    st = _state(_engine(), 60)   # 960 tokens
    st.sg.ratio.value = st.sg.ratio.min = 0.0   # admit on the prompt + own output only
    st.sg.ratio.decay = 0.0
    (a,) = _submit(st, [(160, 200)])
    _step(st, 0.0)
    _step(st, 1.0)   # a decodes once
    (b,) = _submit(st, [(320, 200)], first=1)
    _step(st, 2.0)   # prefill-only batches: b and c join decoding at the same counter
    (c,) = _submit(st, [(160, 200)], first=2)
    _step(st, 3.0)
    assert [s.state for s in (a, b, c)] == [DECODE] * 3
    t = 4.0
    while not st.sg.retractions:
        _step(st, t)
        t += 1.0
    # b and c have generated the same tokens, one fewer than a; b has the longer prompt
    assert st.sg.retractions == 1 and b.preemptions == 1 and b.state == WAITING
    assert a.preemptions == c.preemptions == 0
    # (the step planned with the retraction has completed: one decode more than at the retraction)
    g = {s.idx: s.g + (st.counter - s.c0) - 1 for s in (a, c)}
    assert g[0] == g[2] + 1 and g[2] == b.g
    assert st.sg.ratio.value == pytest.approx((g[0] + g[2] + 20 * 2) / (400 + 1))
    assert st.sg.full is False
    # b waits at the end of the queue and recomputes prompt + generated tokens
    (d,) = _submit(st, [(16, 1)], first=3)
    assert list(st.waiting) == [b, d] and b.target == 320 + b.g
    while st.running or st.waiting:
        _step(st, t)
        t += 1.0
    assert all(s.g == s.O for s in (a, b, c, d))
    assert st.preemptions == st.sg.retractions


def test_the_ratio_goes_back_to_init_when_the_engine_idles():
    st = _state(_engine(), 1000)
    _submit(st, [(100, 5)])
    t = 0.0
    while st.running or st.waiting:
        assert st.sg.ratio.value == pytest.approx(0.7 - st.counter * st.sg.ratio.decay)
        _step(st, t)
        t += 1.0
    assert st.counter == 4
    assert st.sg.ratio.value == pytest.approx(0.7)


def test_the_ratio_is_at_init_when_a_request_reaches_an_idle_engine():
    # the replica plans only an engine with work (sim.replica._try_launch): the reset must not wait
    # for a plan() of an empty engine, which never comes
    st = _state(_engine(), 1000)
    _submit(st, [(100, 5)])
    t = 0.0
    while st.running or st.waiting:
        _step(st, t)
        t += 1.0
    _submit(st, [(100, 5)], first=1)
    assert st.plan(t)
    assert st.sg.ratio.value == pytest.approx(0.7)


def test_the_ratio_is_not_reset_when_waiting_requests_take_over_from_finished_ones():
    # the last running request finishes while another waits: SGLang builds the next prefill batch at
    # once (no idle loop), so the ratio keeps its decayed value
    st = _state(_engine(), 1000)
    _submit(st, [(100, 5)])
    _step(st, 0.0)
    _submit(st, [(100, 5)], first=1)
    st.sg.full = True   # as after a NO_TOKEN
    t = 1.0
    while st.counter < 4:
        _step(st, t)
        t += 1.0
    assert not st.running and len(st.waiting) == 1
    assert st.sg.ratio.value == pytest.approx(0.7 - 4 * st.sg.ratio.decay)


def test_only_sglang_prefill_first_profiles_use_the_rule():
    assert sa.uses_sglang_admission(_engine())
    assert not sa.uses_sglang_admission(_engine("vllm"))
    assert not sa.uses_sglang_admission(EngineProfile(name="sglang", chunked_prefill=True))   # mixed chunk
    assert _state(_engine("vllm"), 100).sg is None


# ---------------------------------------------------------------- whole replica (DES)

def _offline(monkeypatch, fast_forward: bool, name: str = "sglang"):
    import llmplan.sim.replica as replica_mod
    from llmplan.sim.metrics import MeasureWindow
    from llmplan.sim.serving import simulate_serving
    from llmplan.sim.testing_costs import LinearStepCost, make_replica
    from llmplan.sim.workload import LengthSpec, WorkloadSpec

    monkeypatch.setattr(replica_mod, "FAST_FORWARD", fast_forward)
    cost = LinearStepCost(base_ms=10, per_seq_ms=0.01, per_decode_kv_token_ms=0, per_prefill_token_ms=0.01,
                          per_attn_pair_ms=0)
    spec = WorkloadSpec(preset=None, arrival="offline", num_requests=120,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=500),
                        output_tokens=LengthSpec(kind="uniform", min_tokens=200, max_tokens=1500), seed=2)
    rep = make_replica(cost, kv_capacity_tokens=40_000, max_model_len=4096, name=name, kernel_backend=name,
                       chunked_prefill=False, max_num_batched_tokens=4096, max_num_seqs=256)
    res = simulate_serving(spec, [rep], window=MeasureWindow(0, 0))
    assert res.unfinished == 0
    return res


def test_offline_run_retracts_under_pressure_and_fast_forward_changes_nothing(monkeypatch):
    fast = _offline(monkeypatch, True)
    slow = _offline(monkeypatch, False)
    assert fast.requests.equals(slow.requests)
    assert fast.summary["preemptions"] == slow.summary["preemptions"] > 0   # retractions
    # vLLM-style admission (same prefill-first engine otherwise) admits on prompt blocks only and
    # preempts 15 x as often; SGLang's reserve runs smaller batches: more steps, lower throughput
    v = _offline(monkeypatch, True, name="vllm")
    assert (fast.summary["preemptions"], v.summary["preemptions"]) == (6, 90)
    assert (fast.summary["steps"], v.summary["steps"]) == (3831, 3571)
    assert fast.summary["output_throughput_tps"] == pytest.approx(2659.24, rel=1e-5)
    assert v.summary["output_throughput_tps"] == pytest.approx(2809.30, rel=1e-5)


# ---------------------------------------------------------------- radix cache off + ignore_eos

def test_ignore_eos_check_walks_the_requests_by_tokens_left():
    # two running requests: 100 and 300 tokens left, holding 1,000 and 2,000 tokens; the new one
    # needs 500 more after its 1,000-token prompt
    states = [(100, 1000), (300, 2000), (500, 1000)]
    # 1,600 free after the prompt: 1600 - 100 x 3 = 1300 > 3; + 1000 - 300 x 2 = 2000 > 2;
    # + 2000 - 500 = 3100 > 1 -> admitted
    assert sa.ignore_eos_admits(states, 2600, 1000)
    # 290 free after the prompt: 290 - 300 = -10 <= 3 -> NO_TOKEN
    assert not sa.ignore_eos_admits(states, 1290, 1000)
    # the boundary is strict: min_free must exceed 1 token per request still running
    assert not sa.ignore_eos_admits([(10, 0)], 11, 0)
    assert sa.ignore_eos_admits([(10, 0)], 12, 0)
    # finished-looking states (no tokens left) do not count
    assert sa.ignore_eos_admits([(0, 10**6), (10, 0)], 12, 0)


def test_without_the_radix_cache_admission_guarantees_no_retraction():
    st = _state(_engine(radix_cache=False), 1000)   # 16,000 tokens
    assert st.sg.ignore_eos
    _submit(st, [(1000, 3000)] * 20)
    assert st.plan(0.0)
    # requests of 4,000 tokens each: the fourth would need 4 x 4,000 = 16,000 > 16,000 - 4 x 1
    assert len(st.plan_chunks) == 3 and st.sg.full
    st.complete(1.0, [])
    t = 1.0
    while st.running or st.waiting:
        _step(st, t)
        t += 1.0
    assert st.preemptions == 0 and st.sg.retractions == 0


def test_a_chunked_prompt_continues_with_its_own_uncomputed_tokens_counted_free():
    # SGLang allocates a chunked prompt per chunk (add_chunked_req: min(rem_chunk_tokens,
    # rem_total_tokens)); the simulator took the whole prompt's blocks at admission, so the tokens
    # not yet computed are free in SGLang's view. 64-token chunks; the running request's reserve
    # leaves 135 tokens: the 128-token prompt (+2 output) is admitted, its first chunk takes 64.
    st = _state(_engine(budget=64), 1000)
    _submit(st, [(16, 3000)])
    _step(st, 0.0)
    free0 = st.pool.free * st.B
    st.sg.ratio.value = (free0 - 135) / st.sg.outputs.total(st.counter)
    st.sg.ratio.decay = 0.0
    (c,) = _submit(st, [(128, 2)], first=1)
    assert st.plan(1.0) and [(s.idx, n) for s, n, _ in st.plan_chunks] == [(1, 64)]
    st.complete(2.0, [])
    # SGLang: rem_total_tokens = free + 64 uncomputed - reserve = 135 - 128 + 64 = 71 (whole blocks
    # here) >= the 64 left -> the whole remaining prompt; counting only the blocks left free gave 7
    assert st.plan(2.0) and [(s.idx, n, k) for s, n, k in st.plan_chunks] == [(1, 64, 64)]
    st.complete(3.0, [])
    st.check_invariants()
    assert c.state == DECODE

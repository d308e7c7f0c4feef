"""Disaggregated prefill/decode simulation (sim/disaggregated.py): timing of one request,
TTFT conventions, transfer contention, queueing, decode KV admission, heterogeneous pools,
bad input, determinism. Expected times come from the step model itself (StepShape)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.sim.disaggregated import DisaggSpec, FixedTransfer, PoolSpec, simulate_disaggregated
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.types import StepShape
from llmplan.sim.workload import Request, WorkloadSpec

# decode steps independent of KV length, so one decode step has one duration per batch size
COST = LinearStepCost(base_ms=7.0, per_seq_ms=0.02, per_decode_kv_token_ms=0.0, per_prefill_token_ms=0.03,
                      per_attn_pair_ms=1e-6)


def prefill_ms(cost, p: int) -> float:
    return cost.step_time_ms(StepShape.build([(p, 0)]))


def decode_ms(cost, batch: int) -> float:
    return cost.step_time_ms(StepShape(0, 0, 0.0, 0, batch, 0))


def spec(p_workers=1, d_workers=1, transfer=0.0, first="decode", p_rep=None, d_rep=None) -> DisaggSpec:
    p_rep = p_rep or make_replica(COST)
    d_rep = d_rep or make_replica(COST)
    return DisaggSpec(PoolSpec(p_workers, p_rep), PoolSpec(d_workers, d_rep), FixedTransfer(transfer), first)


def one(req: Request, s: DisaggSpec):
    res = simulate_disaggregated([req], s)
    assert not res.overloaded
    return res.requests.iloc[0]


def test_idle_single_request_ttft_is_prefill_and_tpot_is_decode_step():
    r = one(Request(0.0, 1000, 11), spec())
    assert r["ttft_ms"] == pytest.approx(prefill_ms(COST, 1000))
    assert r["tpot_ms"] == pytest.approx(decode_ms(COST, 1))
    assert r["e2e_ms"] == pytest.approx(prefill_ms(COST, 1000) + 10 * decode_ms(COST, 1))
    assert r["queue_ms"] == 0.0 and r["transfer_ms"] == 0.0


def test_prompt_longer_than_token_budget_is_chunked_on_the_prefill_worker():
    p_rep = make_replica(COST, max_num_batched_tokens=512)
    r = one(Request(0.0, 1000, 2), spec(p_rep=p_rep))
    expect = COST.step_time_ms(StepShape.build([(512, 0)])) + COST.step_time_ms(StepShape.build([(488, 512)]))
    assert r["ttft_ms"] == pytest.approx(expect)


def test_transfer_adds_to_ttft_by_default_and_to_tpot_with_prefill_convention():
    base = one(Request(0.0, 1000, 11), spec())
    dec = one(Request(0.0, 1000, 11), spec(transfer=20.0))
    assert dec["ttft_ms"] == pytest.approx(base["ttft_ms"] + 20.0)
    assert dec["tpot_ms"] == pytest.approx(base["tpot_ms"])
    assert dec["kv_arrival_ms"] - dec["prefill_done_ms"] == pytest.approx(20.0)
    pre = one(Request(0.0, 1000, 11), spec(transfer=20.0, first="prefill"))
    assert pre["ttft_ms"] == pytest.approx(base["ttft_ms"])
    assert pre["tpot_ms"] == pytest.approx(base["tpot_ms"] + 20.0 / 10)  # 20 ms spread over 10 gaps
    assert pre["e2e_ms"] == pytest.approx(dec["e2e_ms"])


def test_one_token_request_finishes_at_prefill_without_transfer():
    r = one(Request(0.0, 800, 1), spec(transfer=50.0))
    assert r["finished"] and r["e2e_ms"] == pytest.approx(prefill_ms(COST, 800))
    assert np.isnan(r["transfer_ms"])


def test_transfers_into_one_decode_worker_are_served_one_after_the_other():
    # two prefill workers finish together; both KV transfers need the one decode worker's NICs
    res = simulate_disaggregated([Request(0.0, 1000, 5), Request(0.0, 1000, 5)], spec(p_workers=2, transfer=50.0))
    df = res.requests
    assert sorted(df["prefill_worker"]) == [0, 1]
    assert df["prefill_done_ms"].iloc[0] == pytest.approx(df["prefill_done_ms"].iloc[1])
    arrivals = sorted(df["kv_arrival_ms"] - df["prefill_done_ms"])
    assert arrivals == pytest.approx([50.0, 100.0])
    # with two decode workers the receivers differ, and the two senders are separate: no wait
    res2 = simulate_disaggregated([Request(0.0, 1000, 5), Request(0.0, 1000, 5)],
                                  spec(p_workers=2, d_workers=2, transfer=50.0))
    d2 = res2.requests
    assert sorted(d2["replica"]) == [2, 3]
    assert list(d2["kv_arrival_ms"] - d2["prefill_done_ms"]) == pytest.approx([50.0, 50.0])


def test_queueing_at_the_prefill_pool():
    # one prompt per prefill step (budget = prompt), constant 10 ms steps: the k-th waits k steps
    p_rep = make_replica(LinearStepCost.constant(10.0), max_num_batched_tokens=1024, max_num_seqs=16)
    reqs = [Request(0.0, 1024, 2) for _ in range(6)]
    df = simulate_disaggregated(reqs, spec(p_rep=p_rep), window=None).requests
    assert sorted(df["prefill_done_ms"]) == pytest.approx([10.0, 20, 30, 40, 50, 60])
    assert sorted(df["ttft_ms"]) == pytest.approx([10.0, 20, 30, 40, 50, 60])
    # two prefill workers halve the queue
    df2 = simulate_disaggregated(reqs, spec(p_workers=2, p_rep=p_rep)).requests
    assert sorted(df2["prefill_done_ms"]) == pytest.approx([10.0, 10, 20, 20, 30, 30])


def test_decode_kv_capacity_limits_admission():
    # decode KV holds 64 blocks of 16 tokens = 1024 tokens: one 600 + 100 request at a time;
    # KV transfers take 10 ms
    d_rep = make_replica(COST, kv_capacity_tokens=1024, watermark=0.0)
    reqs = [Request(0.0, 600, 100), Request(0.0, 600, 100)]
    s = spec(p_workers=2, d_rep=d_rep, transfer=10.0)
    # default (engines): the decode worker reserves the KV first, the transfer starts when it has room
    df = simulate_disaggregated(reqs, s).requests.sort_values("first_token_ms")
    a, b = df.iloc[0], df.iloc[1]
    assert a["prefill_done_ms"] == pytest.approx(b["prefill_done_ms"])
    assert a["ttft_ms"] == pytest.approx(prefill_ms(COST, 600) + 10.0)
    assert b["transfer_start_ms"] == pytest.approx(a["finish_ms"])
    assert b["first_token_ms"] == pytest.approx(a["finish_ms"] + 10.0)
    assert b["tpot_ms"] == pytest.approx(decode_ms(COST, 1))
    # transfer first: both KVs arrive at once, the second waits on the decode worker for room
    df2 = simulate_disaggregated(reqs, replace(s, reserve_decode_kv=False)).requests.sort_values("first_token_ms")
    a2, b2 = df2.iloc[0], df2.iloc[1]
    assert b2["kv_arrival_ms"] == pytest.approx(a2["kv_arrival_ms"] + 10.0)   # one receiving NIC set: FIFO
    assert b2["kv_arrival_ms"] < a2["finish_ms"]
    assert b2["first_token_ms"] == pytest.approx(a2["finish_ms"])
    # with room for both, they decode together
    roomy = simulate_disaggregated(reqs, spec(p_workers=2, d_workers=1, transfer=10.0)).requests
    assert list(roomy["kv_arrival_ms"]) == pytest.approx([a["first_token_ms"], a["first_token_ms"] + 10.0])
    # the second joins the running batch at the next step boundary (within one decode step)
    wait = roomy["first_token_ms"].iloc[1] - roomy["kv_arrival_ms"].iloc[1]
    assert 0.0 <= wait <= decode_ms(COST, 1)
    assert roomy["e2e_ms"].max() < b["e2e_ms"]


def test_decode_max_num_seqs_limits_admission():
    d_rep = make_replica(COST, max_num_seqs=1, max_num_batched_tokens=1024)
    reqs = [Request(0.0, 500, 20), Request(0.0, 500, 20)]
    df = simulate_disaggregated(reqs, spec(p_workers=2, d_rep=d_rep)).requests.sort_values("first_token_ms")
    assert df.iloc[1]["first_token_ms"] == pytest.approx(df.iloc[0]["finish_ms"])


def test_request_larger_than_decode_kv_is_refused():
    d_rep = make_replica(COST, kv_capacity_tokens=512, watermark=0.0)
    with pytest.raises(InfeasibleDeployment) as e:
        simulate_disaggregated([Request(0.0, 600, 10)], spec(d_rep=d_rep))
    assert e.value.key == "decode.kv_capacity_tokens"


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_pool_size_zero_is_a_user_error_naming_the_key(pool):
    s = spec()
    bad = replace(s, **{pool: replace(getattr(s, pool), workers=0)})
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 5)], bad)
    assert e.value.key == f"{pool}.workers"


def test_unknown_first_token_convention_is_refused():
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 5)], spec(first="client"))
    assert e.value.key == "first_token_at"


def test_deterministic_for_a_seed_and_metrics_like_the_aggregated_simulator():
    wl = WorkloadSpec(preset="chat", num_requests=300, rate_rps=8.0, seed=1)
    s = spec(p_workers=1, d_workers=2, transfer=3.0)
    a = simulate_disaggregated(wl, s, seed=5)
    b = simulate_disaggregated(wl, s, seed=5)
    c = simulate_disaggregated(wl, s, seed=6)
    assert a.requests.equals(b.requests) and a.summary == b.summary
    assert not a.requests["arrival_ms"].equals(c.requests["arrival_ms"])
    assert not a.overloaded and a.summary["measured_requests"] == 300 - 15 - 15  # 5% warm-up, 5% cool-down
    assert a.summary["kv_transfers"] == int((a.requests["output_tokens"] > 1).sum())
    assert a.summary["ttft_ms_p90"] >= a.summary["ttft_ms_p50"] > 0
    assert a.summary["itl_count"] > 0


def test_closed_loop_keeps_concurrency_clients():
    wl = WorkloadSpec(preset="chat", arrival="closed_loop", concurrency=4, num_requests=40, seed=0)
    res = simulate_disaggregated(wl, spec(d_workers=2))
    df = res.requests
    assert df["finished"].all() and not res.overloaded
    # never more than 4 requests in the system: at each arrival, at most 3 others unfinished
    arr, fin = df["arrival_ms"].to_numpy(), df["finish_ms"].to_numpy()
    assert max(int(((arr < t) & (fin > t)).sum()) for t in arr) <= 3


def test_heterogeneous_pools_prefill_h100_decode_h200():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog import load_model
    from llmplan.sim.deployment import Deployment
    from llmplan.sim.disagg_build import disagg_from_deployments
    from llmplan.sim.kv_transfer import request_kv_payload, transfer_ms
    from llmplan.sim.types import EngineProfile, Parallelism, Precision

    m = load_model("llama3_1_8b")
    pre = Deployment(m, get_gpu("h100_sxm"), Parallelism(), Precision(), EngineProfile())
    dec = Deployment(m, get_gpu("h200_sxm"), Parallelism(), Precision(), EngineProfile())
    s = disagg_from_deployments(pre, dec, 1, 1, 4096, calibration="spec")
    assert s.transfer.link.kind == "network"   # different GPU types never share a scale-up domain
    assert s.decode.replica.kv_capacity_tokens > s.prefill.replica.kv_capacity_tokens  # 141 GB vs 80 GB
    r = one(Request(0.0, 2000, 3), s)
    xfer = transfer_ms(request_kv_payload(m, "bf16", 2000), s.transfer.link)
    assert r["transfer_ms"] == pytest.approx(xfer)
    # the prefill step: the aggregated step model's time less its eager launch, which runs under the
    # 2000-token step's device work (sim/disagg_launch.py)
    from llmplan.sim.disaggregated import prefill_replica

    shape = StepShape.build([(2000, 0)])
    additive = s.prefill.replica.cost_model.step_time_ms(shape)
    launch = s.prefill.replica.cost_model.engine.eager_step_ms_per_layer * m.num_layers
    assert launch > 0
    assert r["prefill_done_ms"] == pytest.approx(prefill_replica(s).cost_model.step_time_ms(shape))
    assert r["prefill_done_ms"] == pytest.approx(additive - launch)
    r_add = one(Request(0.0, 2000, 3), replace(s, context_launch="additive"))
    assert r_add["prefill_done_ms"] == pytest.approx(additive)
    # plus the engine's per-request TTFT (front end, tokenisation: sim.engine_terms), once, as aggregated
    from llmplan.sim.engine_terms import cost_model_request_ttft_ms

    front = cost_model_request_ttft_ms(s.decode.replica.cost_model, 2000)
    assert front > 0
    assert r["ttft_ms"] == pytest.approx(r["prefill_done_ms"] + xfer + front)
    d1 = s.decode.replica.cost_model.step_time_ms(StepShape(0, 0, 0.0, 0, 1, 2001))
    d2 = s.decode.replica.cost_model.step_time_ms(StepShape(0, 0, 0.0, 0, 1, 2002))
    assert r["tpot_ms"] == pytest.approx((d1 + d2) / 2)
    with pytest.raises(UserError) as e:
        disagg_from_deployments(pre, dec, 1, 0, 4096, calibration="spec")
    assert e.value.key == "decode.workers"


def test_rate_picked_from_the_slower_pool_and_steady_state_window():
    # one prefill worker for four decode workers: the prefill pool limits the rate
    s = spec(p_workers=1, d_workers=4)
    wl = WorkloadSpec(preset="chat", num_requests=200, seed=0)
    res = simulate_disaggregated(wl, s, steady_state=True)
    from llmplan.sim.disaggregated import estimate_disagg_capacity_rps
    from llmplan.sim.workload import mean_lengths

    cap = estimate_disagg_capacity_rps(s, *mean_lengths(wl))
    assert res.summary["offered_rate_rps"] == pytest.approx(0.8 * cap)
    assert estimate_disagg_capacity_rps(spec(p_workers=2, d_workers=4), *mean_lengths(wl)) == pytest.approx(2 * cap)
    w = res.summary["window"]
    assert w["window_kind"] == "steady" and w["requests_measured"] > 0
    assert res.summary["mode"] == "disaggregated"


def test_prefill_worker_holds_kv_until_the_transfer_ends():
    # prefill KV of 64 blocks (1024 tokens) holds one 600-token prompt; transfers take 100 ms
    p_rep = make_replica(COST, kv_capacity_tokens=1024, watermark=0.0)
    reqs = [Request(0.0, 600, 3), Request(0.0, 600, 3)]
    t1 = prefill_ms(COST, 600)
    held = simulate_disaggregated(reqs, spec(p_rep=p_rep, d_workers=2, transfer=100.0)).requests
    assert sorted(held["prefill_done_ms"]) == pytest.approx([t1, t1 + 100.0 + t1])
    freed = simulate_disaggregated(reqs, replace(spec(p_rep=p_rep, d_workers=2, transfer=100.0),
                                                 hold_prefill_kv=False)).requests
    assert sorted(freed["prefill_done_ms"]) == pytest.approx([t1, 2 * t1])


def test_pipeline_parallel_workers_finish_every_request():
    pp2 = LinearStepCost(base_ms=7.0, per_seq_ms=0.02, per_decode_kv_token_ms=0.0, per_prefill_token_ms=0.03, pp=2)
    s = spec(p_rep=make_replica(pp2), d_rep=make_replica(pp2), transfer=2.0)
    wl = WorkloadSpec(preset="chat", num_requests=120, rate_rps=4.0, seed=3)
    res = simulate_disaggregated(wl, s)
    assert res.requests["finished"].all() and not res.overloaded
    df = res.requests
    assert (df["ttft_ms"] >= df["prefill_done_ms"] - df["arrival_ms"] + 2.0 - 1e-9).all()


def test_overload_is_flagged_and_stops_the_run():
    wl = WorkloadSpec(preset="chat", num_requests=3000, rate_rps=500.0, seed=0)
    res = simulate_disaggregated(wl, spec(), max_queue=50)
    assert res.overloaded and res.stopped_early and res.unfinished > 0
    assert res.summary["overloaded"] is True


def test_layerwise_transfer_hides_all_but_the_tail():
    from llmplan.model_catalog import load_model
    from llmplan.sim.disaggregated import KVLinkTransfer
    from llmplan.sim.kv_transfer import PoolLink, exposed_transfer_ms, request_kv_payload, transfer_ms

    m = load_model("llama3_1_8b")
    link = PoolLink("network", 50.0, 50.0, 25.0)
    payload = lambda p: request_kv_payload(m, "bf16", p)  # noqa: E731
    whole = KVLinkTransfer(payload, link)
    layered = KVLinkTransfer(payload, link, layerwise=True)
    pre = prefill_ms(COST, 2000)
    assert whole.duration_ms(2000, pre) == pytest.approx(transfer_ms(payload(2000), link))
    assert layered.duration_ms(2000, pre) == pytest.approx(exposed_transfer_ms(payload(2000), link, pre, True))
    assert layered.duration_ms(2000, pre) < whole.duration_ms(2000, pre)
    d_lay = simulate_disaggregated([Request(0.0, 2000, 3)], replace(spec(), transfer=layered)).requests.iloc[0]
    assert d_lay["transfer_ms"] == pytest.approx(layered.duration_ms(2000, pre))


def test_summary_describes_the_pools_and_the_link():
    import json

    s = replace(spec(p_workers=2, d_workers=3, transfer=4.0), prefill=replace(spec().prefill, workers=2,
                                                                                gpus_per_worker=4, tp=4))
    res = simulate_disaggregated([Request(0.0, 100, 3)], s)
    d = res.summary["deployment"]
    assert d["mode"] == "disaggregated" and d["total_gpus"] == 2 * 4 + 3 * 1
    assert d["prefill"]["workers"] == 2 and d["decode"]["workers"] == 3 and d["prefill"]["tp"] == 4
    assert d["kv_transfer"] == {"model": "fixed", "transfer_ms": 4.0}
    json.dumps(res.summary)  # strict JSON


def test_handoff_delay_adds_exactly_to_ttft_and_not_to_tpot():
    base = one(Request(0.0, 1000, 11), spec(transfer=5.0))
    late = one(Request(0.0, 1000, 11), replace(spec(transfer=5.0), handoff_ms=250.0))
    assert late["ttft_ms"] == pytest.approx(base["ttft_ms"] + 250.0)
    assert late["tpot_ms"] == pytest.approx(base["tpot_ms"])
    assert late["kv_arrival_ms"] == pytest.approx(base["kv_arrival_ms"])   # the delay is after the KV arrived


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True])
def test_bad_handoff_is_a_user_error(bad):
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 4)], replace(spec(), handoff_ms=bad))
    assert e.value.key == "handoff_ms"


def test_decode_worker_with_a_free_batch_slot_is_preferred_over_more_free_kv():
    # A (short) -> worker 0, B (long prompt) -> worker 1, C (short) -> worker 0 (more free KV):
    # worker 0 is then full (2 slots) although it has more free KV than worker 1. D must go to
    # worker 1, which has a free slot, instead of waiting for worker 0's batch to drain
    d_rep = make_replica(COST, max_num_seqs=2)
    s = spec(p_workers=4, d_workers=2, d_rep=d_rep)
    reqs = [Request(0.0, 100, 500), Request(10.0, 6000, 500), Request(500.0, 100, 500), Request(1000.0, 100, 500)]
    r = simulate_disaggregated(reqs, s).requests
    assert list(r["replica"]) == [4, 5, 4, 5]
    assert r["first_token_ms"].iloc[3] - r["kv_arrival_ms"].iloc[3] <= decode_ms(COST, 2) + 1e-9


def test_handoff_before_decode_delays_the_transfer_and_frees_the_decode_slot():
    # same TTFT for one idle request, but the KV moves after the delay (Dynamo/TensorRT-LLM order)
    base = one(Request(0.0, 1000, 11), replace(spec(transfer=5.0), handoff_ms=250.0))
    first = one(Request(0.0, 1000, 11), replace(spec(transfer=5.0), handoff_ms=250.0, handoff_at="before_decode"))
    assert first["ttft_ms"] == pytest.approx(base["ttft_ms"])
    assert first["tpot_ms"] == pytest.approx(base["tpot_ms"])
    assert first["kv_arrival_ms"] - first["prefill_done_ms"] == pytest.approx(255.0)
    assert base["kv_arrival_ms"] - base["prefill_done_ms"] == pytest.approx(5.0)
    # a decode worker with one slot and two requests prefilled together: by default the second waits
    # for the first to finish and then for its own hand-off (the delay holds no slot before the KV
    # moves, so it is paid after the wait); with the hand-off first both delays run concurrently,
    # before the slot is reserved, and the second request finishes 250 ms earlier
    d_rep = make_replica(COST, max_num_seqs=1)
    reqs = [Request(0.0, 100, 4), Request(0.0, 100, 4)]
    after = simulate_disaggregated(reqs, replace(spec(p_workers=2, d_rep=d_rep), handoff_ms=250.0)).requests
    before = simulate_disaggregated(reqs, replace(spec(p_workers=2, d_rep=d_rep), handoff_ms=250.0,
                                                  handoff_at="before_decode")).requests
    # default: the second request's slot opens when the first finishes, then it waits the hand-off again
    assert after["e2e_ms"].max() - before["e2e_ms"].max() == pytest.approx(250.0)


def test_round_robin_routing_ignores_load():
    # A (3 chunks of 1024 tokens, 10 ms each) -> prefill worker 0 until 30 ms, B (1 chunk) -> worker 1
    # until 10 ms; C arrives at 15 ms: least-loaded sends it to the idle worker 1 (done at 25 ms),
    # round-robin (Dynamo's frontend default) to worker 0, where it waits for A (done at 40 ms)
    p_rep = make_replica(LinearStepCost.constant(10.0), max_num_batched_tokens=1024, max_num_seqs=1)
    reqs = [Request(0.0, 3072, 2), Request(0.0, 1024, 2), Request(15.0, 1024, 2)]
    ll = simulate_disaggregated(reqs, spec(p_workers=2, d_workers=2, p_rep=p_rep), window=None).requests
    rr = simulate_disaggregated(reqs, replace(spec(p_workers=2, d_workers=2, p_rep=p_rep), routing="round_robin"),
                                window=None).requests
    assert list(ll["prefill_worker"]) == [0, 1, 1]
    assert list(rr["prefill_worker"]) == [0, 1, 0]
    assert ll["prefill_done_ms"].iloc[2] == pytest.approx(25.0)
    assert rr["prefill_done_ms"].iloc[2] == pytest.approx(40.0)
    # decode workers are cycled too, in the order the prefills end (B, A, C)
    assert list(rr.sort_values("prefill_done_ms")["replica"]) == [2, 3, 2]


@pytest.mark.parametrize("key,bad", [("routing", "random"), ("handoff_at", "never")])
def test_unknown_routing_or_handoff_point_is_refused(key, bad):
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 4)], replace(spec(), **{key: bad}))
    assert e.value.key == key


def test_context_launch_runs_under_long_device_steps_and_bounds_short_ones():
    from llmplan.sim.disagg_launch import LaunchUnderDevice
    from llmplan.sim.types import OpTime, StepTiming

    class Eager:   # a stand-in step model: device time 0.01 ms per token + 2 ms host, 4 layers eager
        pp = 1
        layers_per_stage = 4

        class engine:   # noqa: N801 - the attribute the step model carries
            eager_step_ms_per_layer = 0.5

        def eager_layers(self, shape, layers=None):
            return 4 if shape.prefill_seqs else 0

        def step_time_ms(self, shape):
            return 0.01 * shape.prefill_tokens + 2.0 + self.engine.eager_step_ms_per_layer * self.eager_layers(shape)

        stage_time_ms = step_time_ms

        def breakdown(self, shape):
            return StepTiming(self.step_time_ms(shape), self.stage_time_ms(shape), (OpTime("host", "host", 2.0, "host"),))

    w = LaunchUnderDevice(Eager())
    long, short = StepShape.build([(1000, 0)]), StepShape.build([(10, 0)])
    assert Eager().step_time_ms(long) == pytest.approx(14.0)
    assert w.step_time_ms(long) == pytest.approx(12.0)        # the 2 ms launch is hidden under 12 ms
    assert w.stage_time_ms(long) == pytest.approx(12.0)
    # its breakdown states its own step and stage times (not the wrapped model's 14 ms), the operators kept
    assert (w.breakdown(long).latency_ms, w.breakdown(long).stage_ms) == (pytest.approx(12.0), pytest.approx(12.0))
    assert w.breakdown(long).ops == Eager().breakdown(long).ops
    assert w.step_time_ms(short) == pytest.approx(2.1)        # 2.1 ms of device + host > 2.0 ms of launch
    assert LaunchUnderDevice(Eager()).launch_ms(StepShape(0, 0, 0.0, 0, 4, 400)) == 0.0   # graphed decode step
    # a launch longer than the rest of the step bounds it
    Eager.engine.eager_step_ms_per_layer = 1.0
    assert w.step_time_ms(short) == pytest.approx(4.0)
    Eager.engine.eager_step_ms_per_layer = 0.5


def test_unknown_context_launch_is_refused():
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 4)], replace(spec(), context_launch="later"))
    assert e.value.key == "context_launch"


def _front_end_deployments(r0=100.0, r1=0.02):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog import load_model
    from llmplan.sim.deployment import Deployment
    from llmplan.sim.types import EngineProfile, Parallelism, Precision

    m = load_model("llama3_1_8b")
    eng = EngineProfile(ttft_per_request_ms=r0, ttft_per_prompt_token_ms=r1)
    return (Deployment(m, get_gpu("h200_sxm"), Parallelism(), Precision(), eng),
            Deployment(m, get_gpu("h200_sxm"), Parallelism(), Precision(), eng))


def test_request_terms_request_charges_the_constant_once_and_no_prompt_term():
    from llmplan.sim.disagg_build import disagg_from_deployments

    pre, dec = _front_end_deployments()
    s = disagg_from_deployments(pre, dec, 1, 1, 4096, calibration="spec", request_terms="prompt")
    assert s.request_terms == "prompt"
    r_prompt = one(Request(0.0, 2000, 3), s)
    r_request = one(Request(0.0, 2000, 3), replace(s, request_terms="request"))
    # the schedule is the same; only the per-request TTFT added after it differs: r0 + r1 P vs r0
    assert r_request["prefill_done_ms"] == pytest.approx(r_prompt["prefill_done_ms"])
    assert r_prompt["ttft_ms"] - r_request["ttft_ms"] == pytest.approx(0.02 * 2000)
    assert r_prompt["e2e_ms"] - r_request["e2e_ms"] == pytest.approx(0.02 * 2000)
    assert r_request["tpot_ms"] == pytest.approx(r_prompt["tpot_ms"])
    pre0, dec0 = _front_end_deployments(0.0, 0.0)
    base = one(Request(0.0, 2000, 3), disagg_from_deployments(pre0, dec0, 1, 1, 4096, calibration="spec",
                                                              request_terms="request"))
    assert base["prefill_done_ms"] == pytest.approx(r_request["prefill_done_ms"])
    assert r_request["ttft_ms"] - base["ttft_ms"] == pytest.approx(100.0)   # the constant, once


def test_request_terms_follow_the_fitted_handoff_file(tmp_path, monkeypatch):
    import json

    from llmplan.sim import disagg_handoff
    from llmplan.sim.disagg_build import disagg_from_deployments

    f = tmp_path / "h.json"
    f.write_text(json.dumps({"engines": {"trtllm": {"handoff_ms": 430.0, "request_terms": "request"},
                                         "sglang": {"handoff_ms": 570.0, "request_terms": "mixed"}},
                             "pooled_handoff_ms": 500.0}))
    assert disagg_handoff.request_terms("trtllm", f) == "request"
    assert disagg_handoff.request_terms("sglang", f) == "prompt"    # rows of both front ends: the engine's own
    assert disagg_handoff.request_terms("vllm", f) == "prompt"      # not fitted
    monkeypatch.setattr(disagg_handoff, "HANDOFF_FILE", f)
    monkeypatch.setattr(disagg_handoff.request_terms, "__defaults__", (f,))
    pre, dec = _front_end_deployments()
    dec_trt = replace(dec, engine=replace(dec.engine, name="trtllm"))
    assert disagg_from_deployments(pre, dec_trt, 1, 1, 4096, calibration="spec").request_terms == "request"
    assert disagg_from_deployments(pre, dec, 1, 1, 4096, calibration="spec").request_terms == "prompt"


def test_unknown_request_terms_are_refused():
    with pytest.raises(UserError) as e:
        simulate_disaggregated([Request(0.0, 100, 4)], replace(spec(), request_terms="twice"))
    assert e.value.key == "request_terms"


def test_planner_screen_charges_the_front_end_in_the_fitted_form(monkeypatch):
    # optimizer/disagg_candidates._prefill_picks: a hand-off fitted in the "request" form is screened with the
    # per-request constant only, as verify_option simulates it (sim.disagg_build.disagg_from_deployments)
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.disagg_candidates import best_disagg
    from llmplan.optimizer.planner import SearchSpace, screen
    from llmplan.optimizer.types import SLOTarget, WorkloadStats
    from llmplan.sim import disagg_handoff
    from llmplan.sim.types import EngineProfile

    model = load_model("llama3_1_8b")
    wl = WorkloadStats(rate_rps=8.0, mean_input_tokens=800.0, mean_output_tokens=100.0, max_request_tokens=1100)
    slos = [SLOTarget("ttft", 90, 1e9), SLOTarget("tpot", 90, 40.0)]
    eng = EngineProfile(name="vllm", ttft_per_request_ms=100.0, ttft_per_prompt_token_ms=0.05)
    evals, _ = screen(model, [(get_gpu("h100_sxm"), 3.0)], eng, wl, slos,
                      SearchSpace(tp=[1], pp=[1], ep=[1], precision=["bf16"], max_batch=[64], finalists=0), "spec")
    ttft = {}
    for form in ("prompt", "request"):
        monkeypatch.setattr(disagg_handoff, "request_terms", lambda _b, path=None, f=form: f)
        ttft[form] = best_disagg(evals, wl, slos, model, "vllm").prefill.latency_ms
    assert ttft["prompt"] - ttft["request"] == pytest.approx(0.05 * 800)

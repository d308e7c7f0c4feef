"""Property-based checks over random small workloads and engine configurations."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmplan.sim.replica as replica_mod
from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.workload import Request


@st.composite
def scenarios(draw):
    block = draw(st.sampled_from([1, 4, 16]))
    chunked = draw(st.booleans())
    max_seqs = draw(st.integers(1, 12))
    budget = draw(st.sampled_from([16, 64, 256])) if chunked else 512
    max_len = 512
    n = draw(st.integers(1, 40))
    ids_block = draw(st.sampled_from([4, 16, 32]))
    n_prefixes = draw(st.integers(1, 3))
    reqs, t = [], 0.0
    for _ in range(n):
        t += draw(st.floats(0.0, 40.0))
        p = draw(st.integers(1, 300))
        o = draw(st.integers(1, min(100, max_len - p)))
        shared = draw(st.integers(0, 8))
        which = draw(st.integers(0, n_prefixes - 1))
        ids = tuple(1000 * which + k for k in range(min(shared, p // ids_block)))
        reqs.append(Request(t, p, o, ids))
    longest = max(r.input_tokens + r.output_tokens for r in reqs)
    pp = draw(st.sampled_from([1, 1, 2]))
    budget = max(budget, max_seqs * pp, block)
    watermark = draw(st.sampled_from([0.0, 0.01, 0.1]))
    # KV from "just enough for the longest request" (lots of preemption) to plenty
    per_engine = -(-longest // block) + 1
    per_engine = int(per_engine / (1 - watermark)) + 2
    kv_blocks = per_engine * draw(st.sampled_from([1, 2, 8]))
    cost = LinearStepCost(base_ms=draw(st.floats(0.5, 10.0)), per_seq_ms=draw(st.sampled_from([0.0, 0.05])),
                          per_prefill_token_ms=draw(st.sampled_from([0.0, 0.02])), pp=pp, stage_base_ms=0.1)
    rep = make_replica(cost, kv_capacity_tokens=kv_blocks * block * pp, max_model_len=max_len, block_size=block,
                       max_num_seqs=max_seqs * pp, max_num_batched_tokens=budget, chunked_prefill=chunked,
                       enable_prefix_caching=draw(st.booleans()), watermark=watermark)
    replicas = [rep] * draw(st.integers(1, 3))
    router = draw(st.sampled_from(["round_robin", "least_outstanding", "prefix_aware"]))
    return reqs, replicas, router, ids_block


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_configurations_are_consistent(scenario):
    reqs, replicas, router, ids_block = scenario
    from llmplan.sim.workload import Workload

    wl = Workload(reqs, prefix_block_tokens=ids_block)
    old = replica_mod.DEBUG_CHECKS
    replica_mod.DEBUG_CHECKS = True  # every step: KV blocks <= capacity, refcounts, aggregates
    try:
        res = simulate_serving(wl, replicas, router=router, window=MeasureWindow(0, 0))
    finally:
        replica_mod.DEBUG_CHECKS = old
    df, s = res.requests, res.summary
    assert res.unfinished == 0 and not res.overloaded and df["finished"].all()
    for col in ("queue_ms", "ttft_ms", "e2e_ms"):
        assert (df[col] >= 0).all(), col
    assert (df["queue_ms"] <= df["ttft_ms"] + 1e-9).all()
    assert (df["ttft_ms"] <= df["e2e_ms"] + 1e-9).all()
    assert (df["tpot_ms"].isna() == (df["output_tokens"] == 1)).all()
    assert s["generated_tokens"] == df["output_tokens"].sum()
    assert s["kv_peak_util"] <= 1.0 + 1e-12
    assert (df["cached_prompt_tokens"] < df["input_tokens"]).all()
    # every inter-token gap is accounted for exactly once
    assert s["itl_count"] == int((df["output_tokens"] - 1).sum())
    if s["itl_count"]:
        total = float((df["e2e_ms"] - df["ttft_ms"]).sum())
        assert np.isclose(s["itl_ms_mean"] * s["itl_count"], total, rtol=1e-9)
    assert (df["replica"] >= 0).all() and (df["replica"] < len(replicas)).all()

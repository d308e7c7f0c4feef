"""A disaggregated steady-state run whose next attempt runs beside the current one (sim/serving.py
_simulate_steady with sim.disaggregated's runner, steady_state.speculate_next): the same answer as
one attempt after the other. The disaggregated runner takes no ``progress`` argument, so the
attempt run beside must not be handed one."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from llmplan.sim.disaggregated import (DisaggSpec, FixedTransfer, PoolSpec, estimate_disagg_capacity_rps,
                                       simulate_disaggregated)
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.workload import WorkloadSpec, mean_lengths
from test_speed_steady_speculation import count_beside

COST = LinearStepCost(base_ms=7.0, per_seq_ms=0.02, per_decode_kv_token_ms=0.0, per_prefill_token_ms=0.03,
                      per_attn_pair_ms=1e-6)
FORK = sys.platform.startswith("linux")


def _run(monkeypatch, workers: str):
    started = count_beside(monkeypatch, workers)
    # four prefill workers feed one decode worker: the decode pool (which sizes the warm-up) is
    # the bottleneck, loaded 5% above its estimated capacity, so the next attempt is speculated
    s = DisaggSpec(PoolSpec(4, make_replica(COST)), PoolSpec(1, make_replica(COST)), FixedTransfer(0.0), "decode")
    wl = WorkloadSpec(preset="chat", num_requests=200, seed=0)
    wl = replace(wl, rate_rps=1.05 * estimate_disagg_capacity_rps(s, *mean_lengths(wl)))
    return simulate_disaggregated(wl, s, steady_state=True), len(started)


def test_disaggregated_attempt_beside_keeps_the_sequential_answer(monkeypatch):
    seq, n_seq = _run(monkeypatch, "1")
    par, n_par = _run(monkeypatch, "2")
    assert n_seq == 0
    if FORK:
        assert n_par >= 1   # an attempt ran beside
    assert seq.summary["window"]["warmup_doublings"] >= 1   # a later attempt was kept
    assert json.dumps(seq.summary, sort_keys=True) == json.dumps(par.summary, sort_keys=True)
    assert seq.requests.equals(par.requests)

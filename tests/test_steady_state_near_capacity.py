"""near_capacity: a near-capacity run of several replicas starts at the doubled warm-up it would
have reached anyway (sim/steady_state.first_warmup_doublings; used by the fleet's rate settling)."""

from dataclasses import replace

import pandas as pd
import pytest

from llmplan.sim.serving import estimate_capacity_rps, simulate_serving
from llmplan.sim.steady_state import (MAX_WARMUP_DOUBLINGS, NEAR_CAPACITY_UTILISATION, ServiceEstimate,
                                      first_warmup_doublings)
from llmplan.sim.testing_costs import make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec

REPS4 = [make_replica()] * 4


def _spec(rate_rps: float) -> WorkloadSpec:
    return WorkloadSpec(preset=None, input_tokens=LengthSpec(kind="fixed", mean_tokens=256),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=256), num_requests=600, rate_rps=rate_rps)


def test_first_attempt_doublings_only_for_a_near_capacity_stable_multi_replica_run():
    busy = ServiceEstimate(50.0, 20.0, 100.0, NEAR_CAPACITY_UTILISATION)
    assert first_warmup_doublings(busy, True, 4) == 1
    assert first_warmup_doublings(busy, False, 4) == 0                      # not asked
    assert first_warmup_doublings(busy, True, 1) == 0                       # one replica
    assert first_warmup_doublings(replace(busy, utilisation=0.89), True, 4) == 0
    assert first_warmup_doublings(replace(busy, utilisation=1.0), True, 4) == 0  # unstable: not extended
    # what an earlier run of the deployment needed, capped at MAX_WARMUP_DOUBLINGS; never for an unstable run
    assert first_warmup_doublings(busy, False, 1, at_least=2) == 2
    assert first_warmup_doublings(busy, True, 4, at_least=9) == MAX_WARMUP_DOUBLINGS
    assert first_warmup_doublings(replace(busy, utilisation=1.2), True, 4, at_least=2) == 0


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.summary == b.summary and a.overloaded == b.overloaded


def test_near_capacity_start_is_the_run_the_doubling_makes():
    cap = estimate_capacity_rps(REPS4, 256, 256)
    plain = simulate_serving(_spec(0.95 * cap), REPS4, steady_state=True)
    w = plain.summary["window"]
    assert w["estimate"]["utilisation"] >= NEAR_CAPACITY_UTILISATION and w["warmup_doublings"] >= 1
    _same(simulate_serving(_spec(0.95 * cap), REPS4, steady_state=True, near_capacity=True), plain)
    # the doublings a run needed, passed on: the same run again
    _same(simulate_serving(_spec(0.95 * cap), REPS4, steady_state=True, min_warmup_doublings=w["warmup_doublings"]),
          plain)


@pytest.mark.parametrize("reps, load", [(REPS4, 0.85), (REPS4[:1], 0.97)])
def test_near_capacity_changes_nothing_below_the_threshold_or_for_one_replica(reps, load):
    cap = estimate_capacity_rps(reps, 256, 256)
    plain = simulate_serving(_spec(load * cap), reps, steady_state=True)
    _same(simulate_serving(_spec(load * cap), reps, steady_state=True, near_capacity=True), plain)


def test_fleet_settling_records_each_run_as_it_goes():
    """settle_rate lists the earlier runs (with their warm-up doublings) while the next one runs:
    verify.simulate_selection starts a run with what an earlier run at a rate as low or lower needed."""
    from tests.test_plan_fleet import _fleet_result
    from llmplan.optimizer.fleet import settle_rate

    res, seen = _fleet_result(100.0), []

    def simulate(r) -> bool:  # sustains 80 req/s; stable runs needed 2 doublings
        seen.append([dict(x) for x in r.fleet["steady_state_runs"]])
        ok = r.workload.rate_rps <= 80.0
        r.verification["deployment_simulation"] = {"rate_rps": r.workload.rate_rps, "met": ok,
                                                   "window": {"warmup_doublings": 2 if ok else 0}}
        return ok

    settle_rate(res, simulate)
    runs = res.fleet["steady_state_runs"]
    assert seen[0] == [] and all(seen[i] == runs[:i] for i in range(len(seen)))
    assert [x["warmup_doublings"] for x in runs] == [2 if x["met"] else 0 for x in runs]
    assert list(res.fleet).index("ilp_rate_rps") < list(res.fleet).index("steady_state_runs")

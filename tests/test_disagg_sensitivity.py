"""TTFT sensitivity of a disaggregated replay to its prefill step and hand-off
(calibration/disagg_sensitivity.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration.disagg_sensitivity import (COLUMNS, ScaledSteps, replay_ttft_ms, sensitivity,
                                                    sensitivity_case, with_prefill_scaled)
from llmplan.calibration.serving_disagg_rows import disagg_spec, map_disagg_row
from llmplan.calibration.serving_rows import SimOptions, engine_profiles
from llmplan.sim.types import StepShape

from tests.test_serving_disagg_rows import row

ENGINES = engine_profiles()
OPTS = SimOptions(calibration="spec", waves=3, min_requests=12)


def _case(**kw):
    return map_disagg_row(row(**kw), 0, ENGINES).case


def test_scaled_steps_scale_step_and_stage_times_only():
    spec = disagg_spec(_case(), OPTS)
    cm = spec.prefill.replica.cost_model
    shape = StepShape.build([(1000, 0)], [])
    s = ScaledSteps(cm, 1.5)
    assert s.step_time_ms(shape) == pytest.approx(1.5 * cm.step_time_ms(shape))
    assert s.stage_time_ms(shape) == pytest.approx(1.5 * cm.stage_time_ms(shape))
    assert s.pp == cm.pp
    assert s.request_ttft_ms(1000) == cm.request_ttft_ms(1000)   # the front end is not a step
    with pytest.raises(ValueError):
        ScaledSteps(cm, 0.0)
    import copy
    assert copy.copy(s).step_time_ms(shape) == pytest.approx(s.step_time_ms(shape))   # no __getattr__ recursion


def test_only_the_prefill_pool_is_scaled():
    spec = disagg_spec(_case(), OPTS)
    assert with_prefill_scaled(spec, 1.0) is spec
    s = with_prefill_scaled(spec, 2.0)
    shape = StepShape.build([(1000, 0)], [])
    assert s.prefill.replica.cost_model.step_time_ms(shape) == pytest.approx(
        2.0 * spec.prefill.replica.cost_model.step_time_ms(shape))
    assert s.decode is spec.decode and s.transfer is spec.transfer and s.handoff_ms == spec.handoff_ms


def test_a_longer_prefill_step_lengthens_the_replayed_ttft():
    c = _case()
    t1 = replay_ttft_ms(c, OPTS)
    t2 = replay_ttft_ms(c, OPTS, prefill_factor=2.0)
    assert t2 > t1


def test_single_client_adds_the_handoff_once_and_responds_less_than_one_to_one():
    # one client, nothing queues: the hand-off adds to the TTFT one for one, and a prefill step
    # longer by x lengthens the TTFT by less than x (front end, transfer and hand-off do not scale)
    s = sensitivity_case(_case(silicon_data_source="x; silicon_concurrency=1"), OPTS, handoff_ms=200.0)
    assert set(COLUMNS) == set(s)
    assert s["handoff_slope"] == pytest.approx(1.0, abs=1e-6)
    assert 0.0 < s["prefill_elasticity"] < 1.0
    assert s["step_accuracy_for_15pct"] == pytest.approx(0.15 / s["prefill_elasticity"])


def test_a_queue_bound_prefill_pool_amplifies_the_step_error():
    # 64 clients on one batch-1 prefill worker of 8k prompts and a wide decode pool: the prefill
    # pool is the bottleneck, so the TTFT moves by more than the step's relative change (Little's
    # law: TTFT = N / rate - (osl - 1) x TPOT, a difference of two large terms when the decode is
    # long), and a hand-off is mostly absorbed by the queue
    free = sensitivity_case(_case(silicon_data_source="x; silicon_concurrency=1", isl=8000, osl=1000), OPTS)
    bound = sensitivity_case(_case(silicon_data_source="x; silicon_concurrency=64", isl=8000, osl=1000,
                                   decode_batch_size=32), OPTS)
    assert free["prefill_elasticity"] < 1.0 and free["handoff_slope"] == pytest.approx(1.0, abs=1e-6)
    assert bound["prefill_elasticity"] > 1.5
    assert bound["step_accuracy_for_15pct"] < 0.10
    assert bound["handoff_slope"] < 0.5


def test_frame_counts_a_repeated_measurement_once():
    df = pd.DataFrame([row(id="a", silicon_data_source="x; silicon_concurrency=1"),
                       row(id="b", silicon_data_source="x; silicon_concurrency=1"),
                       row(id="c", mode="agg")])
    f = sensitivity(df, {}, 0, OPTS, handoffs={"vllm": 0.0})
    assert list(f["id"]) == ["a"]
    assert set(COLUMNS) <= set(f.columns) and f["half"].iloc[0] in ("train", "held_out")
    assert f["ttft_ratio"].iloc[0] == pytest.approx(f["simulated_ttft_ms"].iloc[0] / 300.0, rel=1e-3)
    with pytest.raises(ValueError):
        sensitivity_case(_case(), OPTS, delta=0.0)


def test_a_replay_that_does_not_finish_gives_nan_not_an_unbounded_accuracy(monkeypatch):
    # an overloaded replay (NaN TTFT) must not read as "any prefill step accuracy will do" (inf)
    from llmplan.calibration import disagg_sensitivity as ds
    ttft = {1.0: 100.0, 0.95: float("nan"), 1.05: 110.0}
    monkeypatch.setattr(ds, "replay_ttft_ms", lambda case, opts, wrap=None, handoff_ms=0.0, prefill_factor=1.0:
                        ttft[prefill_factor] + (handoff_ms if prefill_factor == 1.0 else 0.0))
    s = ds.sensitivity_case(None, None)
    assert math.isnan(s["prefill_elasticity"]) and math.isnan(s["step_accuracy_for_15pct"])
    assert s["handoff_slope"] == pytest.approx(1.0)
    # a TTFT that does not move with the step: no accuracy needed
    ttft[0.95] = ttft[1.05] = 100.0
    s = ds.sensitivity_case(None, None)
    assert s["prefill_elasticity"] == 0.0 and s["step_accuracy_for_15pct"] == math.inf

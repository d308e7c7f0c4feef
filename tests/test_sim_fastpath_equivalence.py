"""The simulator's fast paths give bit-identical numbers to the plain ones.

``AnalyticalStepModel.decode_step_ms`` (a decode-only step without a StepShape), the cached
(stage, comm) pair of decode-only steps, the last-shape memo of mixed steps and the replica's
use of them must not change any float: compared with ``==``, never approx.
"""

import random

import pandas as pd

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.colocation import StretchedCost
from llmplan.sim.events import EventLoop
from llmplan.sim.metrics import LogHistogram
from llmplan.sim.replica import Replica, ReplicaSpec
from llmplan.sim.serving import simulate_serving
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape
from llmplan.sim.workload import WorkloadSpec


def _step(par=Parallelism()):
    m, g = load_model("llama3_1_8b"), get_gpu("h100_sxm")
    step, mem = build(Deployment(m, g, par, Precision(), EngineProfile()), calibration="spec", min_kv_tokens=4096)
    return step, mem


def _plain_stage_ms(step, shape):
    """stage_time_ms as computed before the caches: straight from _stage_and_comm."""
    stage, comm = step._stage_and_comm(shape)
    return step._with_host(stage + (comm / max(1, step.pp - 1) if step.pp > 1 else 0.0), shape,
                           step.layers_per_stage)   # an eager stage launches its own layers only


def _plain_step_ms(step, shape):
    stage, comm = step._stage_and_comm(shape)
    return step._with_host(stage * step.pp + comm, shape)


def _shapes(seed=3, n=400):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d = rng.randint(0, 200)
        kv = d * rng.randint(1, 6000)
        if rng.random() < 0.5 and d:
            out.append(StepShape(0, 0, 0.0, 0, d, kv))
        else:
            chunks = [(rng.randint(1, 2048), rng.randint(0, 4000)) for _ in range(rng.randint(1, 3))]
            out.append(StepShape.build(chunks, [kv // d] * d if d else []))
    return out


def test_decode_step_ms_equals_step_time_ms_whatever_the_cache_order():
    warm, _ = _step()
    cold, _ = _step()
    shapes = [s for s in _shapes() if not s.prefill_seqs]
    for s in shapes:  # warm fills its caches through step_time_ms, cold through decode_step_ms
        warm.step_time_ms(s)
    for s in reversed(shapes):
        assert cold.decode_step_ms(s.decode_seqs, s.decode_kv_tokens) == warm.step_time_ms(s)
        assert warm.decode_step_ms(s.decode_seqs, s.decode_kv_tokens) == _plain_step_ms(warm, s)


def test_cached_stage_and_step_times_equal_the_uncached_formula_with_pipeline_stages():
    step, _ = _step(Parallelism(pp=2))
    assert step.pp == 2
    shapes = _shapes(seed=5)
    for s in shapes + shapes[::-1]:
        assert step.step_time_ms(s) == _plain_step_ms(step, s)
        assert step.stage_time_ms(s) == _plain_stage_ms(step, s)
        assert step.stage_time_ms(s) == _plain_stage_ms(step, s)  # the last-shape memo hit


def _run(cost, mem, pp_tokens):
    spec = ReplicaSpec(cost, EngineProfile(), pp_tokens, 16384)
    return simulate_serving(WorkloadSpec(num_requests=600, rate_rps=40.0), [spec, spec], seed=7)


def test_replica_fast_path_gives_the_same_requests_and_summary():
    for par in (Parallelism(), Parallelism(pp=2)):
        fast, mem = _step(par)
        plain, _ = _step(par)
        plain = StretchedCost(plain, 1.0)  # no decode_step_ms of its own: the plain StepShape path
        kv = 300_000
        a = _run(fast, mem, kv)
        b = _run(plain, mem, kv)
        assert a.replica_stats[0]["launches"] > 100
        pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
        assert a.summary == b.summary
        pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)


def test_wrappers_that_delegate_attributes_keep_their_own_decode_step_time():
    """A wrapper (colocation's StretchedCost) delegates unknown attributes to its base model;
    the replica must still time decode steps through the wrapper, not the base's fast path."""
    step, _ = _step()
    for cost, factor in ((step, 1.0), (StretchedCost(step, 2.0), 2.0)):
        rep = Replica(0, ReplicaSpec(cost, EngineProfile(), 300_000, 16384), EventLoop(), LogHistogram(),
                      lambda s: None, 16, 1000.0)
        for n, kv in ((1, 900), (8, 8000), (64, 70_000)):
            plain = step.step_time_ms(StepShape(0, 0, 0.0, 0, n, kv))
            assert rep._decode_step_time(n, kv) == cost.step_time_ms(StepShape(0, 0, 0.0, 0, n, kv)) == plain * factor

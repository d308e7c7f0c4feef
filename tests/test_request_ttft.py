"""Per-request TTFT terms (sim/engine_terms.py): outside the steps, added to TTFT and end-to-end
latency alike, fitted exactly from the same simulated coefficients as the host terms."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_rows as sr
from llmplan.sim import engine_terms
from llmplan.sim.types import EngineProfile, StepShape

SPEC = sr.SimOptions(calibration="spec")


def _case(isl: int = 512, osl: int = 24, n: int = 8, backend: str = "trtllm") -> sr.ServingCase:
    row = {"id": "r", "silicon_data_source": f"silicon_concurrency={n}", "backend": backend,
           "backend_version": "1.0.0", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
           "precision": math.nan, "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": math.nan,
           "moe_quant_mode": math.nan, "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
           "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 60.0, "silicon_tpot_ms": 8.0}
    return sr.map_row(row, 0, sr.engine_profiles()).case


def _with(case: sr.ServingCase, **terms: float) -> sr.ServingCase:
    return replace(case, dep=replace(case.dep, engine=replace(case.dep.engine, **terms)))


def test_request_ttft_is_a_constant_plus_a_per_prompt_token_term():
    e = EngineProfile(ttft_per_request_ms=12.0, ttft_per_prompt_token_ms=0.002)
    assert engine_terms.request_ttft_ms(e, 0) == pytest.approx(12.0)
    assert engine_terms.request_ttft_ms(e, 8192) == pytest.approx(12.0 + 0.002 * 8192)
    # they are fitted terms of the profile file like the host terms
    assert set(engine_terms.REQUEST_FIELDS) <= set(engine_terms.FIELDS)


@pytest.mark.parametrize("n", [1, 8])
def test_simulated_ttft_moves_by_the_term_and_tpot_does_not(n):
    case = _case(n=n)
    a = sr.simulate_case(_with(case, ttft_per_request_ms=0.0, ttft_per_prompt_token_ms=0.0), SPEC)
    b = sr.simulate_case(_with(case, ttft_per_request_ms=20.0, ttft_per_prompt_token_ms=0.01), SPEC)
    assert b.ttft_ms - a.ttft_ms == pytest.approx(20.0 + 0.01 * case.isl, rel=1e-9)
    assert b.tpot_ms == pytest.approx(a.tpot_ms, rel=1e-12)


def test_request_terms_never_change_a_step_from_batch_1_to_4096():
    """They act once per request, not per step or per sequence: the step at any batch is the
    same with or without them (no growth outside the fitted range)."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel
    from llmplan.sim.types import Parallelism, Precision

    gpu = get_gpu("h100_sxm")
    host = dict(host_overhead_ms=0.5, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.05)
    plain = EngineProfile(**host, ttft_per_request_ms=0.0, ttft_per_prompt_token_ms=0.0)
    with_req = EngineProfile(**host, ttft_per_request_ms=40.0, ttft_per_prompt_token_ms=0.01)
    steps = [AnalyticalStepModel(load_model("llama3_1_8b"), gpu, Parallelism(1), Precision(), e,
                                 RooflineKernelModel(gpu)) for e in (plain, with_req)]
    for n in (1, 4, 64, 512, 4096):
        shape = StepShape.build([], [1000] * n)
        assert steps[1].step_time_ms(shape) == steps[0].step_time_ms(shape)


def test_basis_predicts_the_direct_simulation_with_request_terms():
    case = _case(isl=1024, osl=16, n=4)
    b = ef.basis_for(case, SPEC, (0.0,))
    p = ef.EngineParams(1.5, 0.0, 0.0, 1.0, 0.0, 25.0, 0.004)
    direct = sr.simulate_case(_with(case, host_overhead_ms=1.5, host_overhead_per_seq_ms=0.0,
                                    host_overlap_per_seq_ms=0.0, ttft_per_request_ms=25.0,
                                    ttft_per_prompt_token_ms=0.004, eager_step_ms_per_layer=0.0), SPEC)
    assert b.predict(p) == pytest.approx((direct.ttft_ms, direct.tpot_ms), rel=1e-9)


def _synthetic(truth: ef.EngineParams) -> list[ef.Basis]:
    out = []
    for i, (isl, osl, n) in enumerate([(256, 32, 4), (1024, 16, 8), (512, 64, 16), (128, 32, 1), (2048, 16, 4),
                                       (4096, 16, 2), (8192, 8, 1), (512, 24, 32)]):
        b = replace(ef.basis_for(_case(isl, osl, n), SPEC, (0.0,)), index=i)
        t, p = b.predict(truth)
        out.append(replace(b, measured_ttft_ms=t, measured_tpot_ms=p))
    return out


def test_fit_recovers_known_request_terms_and_none_stays_zero():
    truth = ef.EngineParams(1.2, 0.0, 0.0, 1.0, 0.0, 30.0, 0.005)
    bases = _synthetic(truth)
    got = ef.fit_params(bases, ef.EngineParams(0.5), request="constant+prompt")
    assert got.ttft_per_request_ms == pytest.approx(30.0, rel=0.02)
    assert got.ttft_per_prompt_token_ms == pytest.approx(0.005, rel=0.02)
    assert got.host_overhead_ms == pytest.approx(1.2, rel=0.02)
    assert ef.score(bases, got).ttft_median < 1e-3
    # without the terms the fit cannot explain the TTFT offset, and keeps them at 0 (the eager-step
    # term is held at 0 here: every TTFT holds its own eager prefill step, so it could stand in
    # for part of a per-request constant)
    none = ef.fit_params(bases, ef.EngineParams(0.5), request="none", eager=False)
    assert none.ttft_per_request_ms == 0.0 and none.ttft_per_prompt_token_ms == 0.0
    assert ef.score(bases, none).ttft_median > 0.05
    # a constant only: no per-token term
    const = ef.fit_params(bases, ef.EngineParams(0.5), request="constant")
    assert const.ttft_per_prompt_token_ms == 0.0 and const.ttft_per_request_ms > 0.0


def test_fit_keeps_request_terms_non_negative():
    """Data that would want a negative per-request time (predicted TTFT too long) leave the
    terms at their physical floor, 0."""
    bases = _synthetic(ef.EngineParams(1.0))
    bases = [replace(b, measured_ttft_ms=0.7 * b.measured_ttft_ms) for b in bases]
    got = ef.fit_params(bases, ef.EngineParams(0.5), request="constant+prompt")
    assert got.ttft_per_request_ms >= 0.0 and got.ttft_per_prompt_token_ms >= 0.0
    assert got.ttft_per_request_ms < 1e-6 and got.ttft_per_prompt_token_ms < 1e-8


def test_unknown_request_form_is_a_user_error():
    from llmplan.errors import UserError

    with pytest.raises(UserError, match="per-request TTFT"):
        ef.fit_params(_synthetic(ef.EngineParams(1.0))[:2], ef.EngineParams(0.5), request="quadratic")


def test_the_planners_screen_adds_the_same_request_terms_as_the_simulator():
    """optimizer.evaluate's analytical screen and the DES report the same per-request term."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.evaluate import ReplicaAnalyzer
    from llmplan.optimizer.types import WorkloadStats
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel
    from llmplan.sim.types import Parallelism, Precision

    gpu = get_gpu("h100_sxm")
    inp, out = 1024, 128
    wl = WorkloadStats(2.0, inp, out, inp + out, 1.0, inp, inp, inp)
    ops = []
    for req in ((0.0, 0.0), (30.0, 0.005)):
        e = EngineProfile(host_overhead_ms=0.5, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0,
                          ttft_per_request_ms=req[0], ttft_per_prompt_token_ms=req[1])
        step = AnalyticalStepModel(load_model("llama3_1_8b"), gpu, Parallelism(1), Precision(), e, RooflineKernelModel(gpu))
        ops.append(ReplicaAnalyzer(step, wl, 256, 8192, 10**7, True).operating_point(2.0, [50.0, 90.0]))
    added = 30.0 + 0.005 * inp
    for q in (50.0, 90.0, "mean"):
        assert ops[1].ttft_ms[q] - ops[0].ttft_ms[q] == pytest.approx(added, rel=1e-9)
        assert ops[1].tpot_ms[q] == ops[0].tpot_ms[q]


def test_the_simulation_summary_states_the_request_terms_it_added():
    case = _case(isl=512, osl=16, n=2)
    from llmplan.calibration.serving_rows import benchmark_workload, step_model
    from llmplan.sim.replica import ReplicaSpec
    from llmplan.sim.serving import simulate_serving

    eng = replace(case.dep.engine, ttft_per_request_ms=12.0, ttft_per_prompt_token_ms=0.002)
    step = step_model(_with(case, ttft_per_request_ms=12.0, ttft_per_prompt_token_ms=0.002), "spec")
    assert step.engine.ttft_per_request_ms == 12.0
    wl, _ = benchmark_workload(512, 16, 2, SPEC)
    res = simulate_serving(wl, [ReplicaSpec(step, eng, 10**6, 8192)])
    assert res.summary["ttft_request_terms"] == {"per_request_ms": 12.0, "per_prompt_token_ms": 0.002}

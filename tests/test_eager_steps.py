"""Eager steps (sim/cuda_graphs.eager_step) and the fitted eager-step term: which steps launch
their kernels from the host, that the term is a constant per such step (never per sequence), and
that the engine fit's coefficients reproduce the direct simulation and recover a known term."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_rows as sr
from llmplan.sim.cuda_graphs import SGLANG_MAX_BS, TRTLLM_MAX_CAPTURE, VLLM_MAX_CAPTURE, eager_step
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

SPEC = sr.SimOptions(calibration="spec")


@pytest.mark.parametrize("engine,tokens,decode_only,expected", [
    ("trtllm", 64, True, False), ("trtllm", TRTLLM_MAX_CAPTURE, True, False),
    ("trtllm", TRTLLM_MAX_CAPTURE + 1, True, True),      # above the default captured maximum
    ("trtllm", 65, False, True),                         # graphs for generation-only batches only
    ("sglang", SGLANG_MAX_BS, True, False), ("sglang", SGLANG_MAX_BS + 8, True, True),
    ("sglang", 40, False, True),                         # prefill / mixed batches run without graphs
    ("vllm", 40, False, False),                          # piecewise graphs for mixed steps
    ("vllm", VLLM_MAX_CAPTURE, True, False), ("vllm", VLLM_MAX_CAPTURE + 1, False, True),
    ("trtllm", 0, False, False), ("other", 4, False, False),
])
def test_eager_step_follows_each_engines_default(engine, tokens, decode_only, expected):
    assert eager_step(engine, 256, tokens, decode_only) is expected


def test_vllm_eager_threshold_follows_its_capture_cap():
    # max capture size min(2 x max_num_seqs, 512): a 40-token step is eager with max_num_seqs 16
    assert eager_step("vllm", 16, 40, True) and not eager_step("vllm", 16, 32, True)


def _step(name: str, eager_ms: float):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel

    gpu = get_gpu("h100_sxm")
    e = EngineProfile(name=name, host_overhead_ms=0.3, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.02,
                      eager_step_ms_per_layer=eager_ms)
    return AnalyticalStepModel(load_model("llama3_1_8b"), gpu, Parallelism(1), Precision(), e, RooflineKernelModel(gpu))


@pytest.mark.parametrize("name", ["trtllm", "sglang", "vllm"])
def test_eager_term_is_a_constant_per_eager_step_from_1_to_4096_sequences(name):
    with_e, without = _step(name, 0.2), _step(name, 0.0)
    layers = with_e.model.num_layers
    for n in (1, 8, 64, 128, 129, 256, 512, 1024, 4096):
        for prompt in (0, 1024):
            shape = StepShape.build([(prompt, 0)] if prompt else [], [1000] * n)
            added = with_e.step_time_ms(shape) - without.step_time_ms(shape)
            expect = 0.2 * layers if eager_step(name, 256, shape.tokens, not prompt) else 0.0
            assert added == pytest.approx(expect, abs=1e-9), (n, prompt)
            # shown in the breakdown's host time
            host = [o for o in with_e.breakdown(shape).ops if o.family == "host"][0].latency_ms
            assert host - [o for o in without.breakdown(shape).ops if o.family == "host"][0].latency_ms \
                == pytest.approx(expect, abs=1e-9)
    # a TensorRT-LLM prompt step pays it, a captured decode step does not
    assert with_e.eager_layers(StepShape.build([(512, 0)], [1000] * 8)) == layers
    assert with_e.eager_layers(StepShape.build([], [1000] * 8)) == 0


def _case(isl: int, osl: int, n: int) -> sr.ServingCase:
    row = {"id": "r", "silicon_data_source": f"silicon_concurrency={n}", "backend": "trtllm",
           "backend_version": "1.0.0", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
           "precision": math.nan, "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": math.nan,
           "moe_quant_mode": math.nan, "batch_size": n, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
           "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 60.0, "silicon_tpot_ms": 8.0}
    return sr.map_row(row, 0, sr.engine_profiles(ef.SCHEDULER)).case


def test_basis_predicts_the_direct_simulation_with_the_eager_term():
    case = _case(isl=512, osl=24, n=8)
    opts = replace(SPEC, osl_jitter=0.25)   # desynchronised clients: prompts join others' decode steps
    b = ef.basis_for(case, opts, (0.0,))
    assert b.eager[0] > 0 and b.eager[1] > 0   # TTFT holds its own prompt step, TPOT the others'
    p = ef.EngineParams(0.8, 0.0, 0.0, 1.0, 0.0, 20.0, 0.0, 0.15)
    e = replace(case.dep.engine, host_overhead_ms=0.8, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0,
                ttft_per_request_ms=20.0, ttft_per_prompt_token_ms=0.0, eager_step_ms_per_layer=0.15)
    direct = sr.simulate_case(replace(case, dep=replace(case.dep, engine=e)), opts)
    assert b.predict(p) == pytest.approx((direct.ttft_ms, direct.tpot_ms), rel=1e-9)


def test_fit_recovers_a_known_eager_term():
    truth = ef.EngineParams(0.6, 0.0, 0.0, 1.0, 0.0, 25.0, 0.0, 0.12)
    shapes = [(256, 32, 4), (1024, 16, 8), (512, 64, 16), (128, 32, 1), (2048, 16, 4), (512, 24, 32), (1024, 8, 16)]
    sim = [ef.basis_for(_case(*s), SPEC, (0.0,)) for s in shapes]
    bases = [replace(b, index=i, measured_ttft_ms=b.predict(truth)[0], measured_tpot_ms=b.predict(truth)[1])
             for i, b in enumerate(sim)]
    got = ef.fit_params(bases, ef.EngineParams(0.3), request="constant")
    assert got.eager_step_ms_per_layer == pytest.approx(0.12, rel=0.02)
    assert got.host_overhead_ms == pytest.approx(0.6, rel=0.02)
    assert got.ttft_per_request_ms == pytest.approx(25.0, rel=0.02)
    # held at the start's value when not fitted
    assert ef.fit_params(bases, ef.EngineParams(0.3), request="constant", eager=False).eager_step_ms_per_layer == 0.0


def test_the_term_travels_from_the_fit_to_the_runtime(tmp_path):
    """engine_fit writes it with the other terms, validate reads it back, the runtime profile takes it."""
    import json

    from llmplan.sim import engine_terms

    p = ef.EngineParams(0.5, 0.0, 0.05, 1.0, 0.02, 80.0, 0.0, 0.27)
    terms = ef._terms(p)
    assert terms["eager_step_ms_per_layer"] == 0.27 and "eager_step_ms_per_layer" in ef.NUMERIC_KEYS
    assert ef.NO_HOST["eager_step_ms_per_layer"] == 0.0
    f = tmp_path / "profiles.json"
    f.write_text(json.dumps({"engines": {"trtllm": terms}}))
    vals, _ = engine_terms.fitted_terms("trtllm", str(f))
    assert vals["eager_step_ms_per_layer"] == 0.27
    over, _ = ef.load_engine_overrides(str(f))
    assert over["trtllm"]["eager_step_ms_per_layer"] == 0.27


def test_attention_dp_step_is_eager_when_its_busiest_rank_is():
    """vLLM DP8 (DeepSeek-V3): one 2,048-token prompt is computed whole by one rank, above vLLM's
    512-token capture maximum, so the step launches eagerly although tokens / dp = 256 would fit."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel

    gpu = get_gpu("h200_sxm")
    e = EngineProfile(name="vllm", max_num_seqs=256, eager_step_ms_per_layer=0.2)
    sm = AnalyticalStepModel(load_model("deepseek-ai/DeepSeek-V3"), gpu, Parallelism(tp=1, dp=8, ep=8),
                             Precision(weights="fp8", kv_cache="fp8"), e, RooflineKernelModel(gpu))
    assert sm.eager_layers(StepShape.build([(2048, 0)], [])) == sm.model.num_layers
    # eight 256-token prompts, one per rank: each rank's step is captured
    assert sm.eager_layers(StepShape.build([(256, 0)] * 8, [])) == 0


def test_speculative_verify_and_draft_steps_pay_no_eager_launch():
    """A verify step (k + 1 tokens per sequence) is captured like a decode step, and draft forwards
    run inside it (TensorRT-LLM's one-model speculation launches the drafting loop as one CUDA graph):
    with TensorRT-LLM, whose prompt steps are eager, the verify of 8 x 4 tokens costs the same with and
    without the eager term, and the draft profile carries none."""
    from llmplan.sim.speculative import _multi_query_uniform_ms, _no_host

    with_e, without = _step("trtllm", 0.4), _step("trtllm", 0.0)
    assert _multi_query_uniform_ms(with_e, 8, 4, 2048.0) == pytest.approx(
        _multi_query_uniform_ms(without, 8, 4, 2048.0), rel=1e-12)
    # above the captured maximum (129 x 4 tokens > 128) the verify step is eager like a decode batch
    assert _multi_query_uniform_ms(with_e, 129, 4, 2048.0) == pytest.approx(
        _multi_query_uniform_ms(without, 129, 4, 2048.0) + 0.4 * with_e.model.num_layers, rel=1e-9)
    assert _no_host(with_e.engine).eager_step_ms_per_layer == 0.0

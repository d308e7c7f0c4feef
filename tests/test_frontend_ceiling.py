"""The front end's per-token ceiling (sim/frontend_ceiling.py): arithmetic, the step model's floor,
and closed-loop throughput that is flat in TP when front-end bound and unchanged when GPU bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.sim import frontend_ceiling as fc
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

BARE = dict(host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0,
            eager_step_ms_per_layer=0.0, ttft_per_request_ms=0.0, ttft_per_prompt_token_ms=0.0)


def _step(engine: EngineProfile, tp: int = 1, model: str = "llama3_1_8b", gpu: str = "h200_sxm") -> AnalyticalStepModel:
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel

    g = get_gpu(gpu)
    return AnalyticalStepModel(load_model(model), g, Parallelism(tp), Precision(), engine, RooflineKernelModel(g))


def test_arithmetic():
    assert fc.delivered_tokens(500, 12) == 512
    assert fc.frontend_floor_ms(0.05, 512) == pytest.approx(25.6)
    assert fc.frontend_floor_ms(0.0, 512) == 0.0
    assert fc.ceiling_tokens_per_s(0.05) == pytest.approx(20000.0)
    assert fc.ceiling_tokens_per_s(0.0) == float("inf")
    # the one validation of the setting (llmplan.cli.resolve.check_engine; CLI cases in test_cli_bad_inputs.py)
    assert fc.frontend_problem(EngineProfile(frontend="dynamo", frontend_per_token_ms=0.05)) is None
    assert fc.frontend_problem(EngineProfile(frontend="nginx"))[:2] == ("frontend", "unknown front end 'nginx'")


def test_the_engines_own_front_end_applies_no_per_token_time():
    # the default profile: no ceiling, whatever value the field holds
    assert EngineProfile().frontend == "engine"
    assert fc.frontend_per_token_ms(EngineProfile(frontend_per_token_ms=0.05)) == 0.0
    assert fc.frontend_per_token_ms(EngineProfile(frontend="dynamo", frontend_per_token_ms=0.05)) == 0.05
    assert fc.frontend_per_token_ms(EngineProfile(frontend="dynamo", frontend_per_token_ms=0.0)) == 0.0


def test_the_front_end_floors_a_step_and_never_adds_to_a_longer_one():
    bare = _step(EngineProfile(name="sglang", kernel_backend="sglang", **BARE))
    e = EngineProfile(name="sglang", kernel_backend="sglang", frontend="dynamo", frontend_per_token_ms=0.1,
                      **{**BARE, "host_overhead_ms": 0.5})
    s = _step(e)
    small, big = StepShape.build([], [1000] * 4), StepShape.build([], [1000] * 4096)
    # 4 tokens x 0.1 ms hide behind the GPU step: only the non-overlapped host time adds
    assert s.step_time_ms(small) == pytest.approx(bare.step_time_ms(small) + 0.5)
    # 4,096 tokens: the step is the front end's 409.6 ms, longer than the device step, never their sum
    dev = bare.step_time_ms(big)
    assert dev < 0.1 * 4096
    assert s.step_time_ms(big) == pytest.approx(0.1 * 4096 + 0.5)
    # a prefill chunk streams its request's first token: counted like a decode sequence
    mixed = StepShape.build([(1000, 0)] * 2, [1000] * 4094)
    assert s.step_time_ms(mixed) == pytest.approx(max(bare.step_time_ms(mixed), 0.1 * 4096) + 0.5)
    # the same value on the engine's own front end changes nothing
    assert _step(replace(e, frontend="engine")).step_time_ms(big) == pytest.approx(dev + 0.5)


def test_decode_rate_is_flat_in_tp_when_front_end_bound_and_unchanged_when_gpu_bound():
    """Llama-3.1-8B on H200, 512 sequences at 1k context: the device step falls with TP; behind a
    front end of 0.05 ms per token every TP size's step is 25.6 ms (20k tokens/s); with 0.001 ms per
    token (0.5 ms per step, below every device step) the steps are the device's."""
    big = StepShape.build([], [1000] * 512)
    dev = {tp: _step(EngineProfile(name="sglang", kernel_backend="sglang", **BARE), tp).step_time_ms(big)
           for tp in (2, 4, 8)}
    assert dev[2] > dev[4] > dev[8] > 0.5
    fe = {tp: _step(EngineProfile(name="sglang", kernel_backend="sglang", frontend="dynamo",
                                  frontend_per_token_ms=0.05, **BARE), tp).step_time_ms(big) for tp in (2, 4, 8)}
    assert all(dev[tp] < 25.6 for tp in dev)
    assert fe == {2: pytest.approx(25.6), 4: pytest.approx(25.6), 8: pytest.approx(25.6)}
    assert {tp: 512 / fe[tp] * 1000 for tp in fe} == {tp: pytest.approx(20000.0) for tp in fe}
    slow = {tp: _step(EngineProfile(name="sglang", kernel_backend="sglang", frontend="dynamo",
                                    frontend_per_token_ms=0.001, **BARE), tp).step_time_ms(big) for tp in (2, 4, 8)}
    assert slow == dev


def _generator_row(tp: int, n: int = 512, isl: int = 200, osl: int = 300) -> dict:
    return {"source_file": "h200_sxm/e2e_serving.csv", "id": f"t{tp}",
            "silicon_data_source": ("source_file=/u/aic/data/h200_sxm/sglang/0.5.6.post2/"
                                    f"meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency={n}"),
            "backend": "sglang", "backend_version": "0.5.6.post2", "model_path": "meta-llama/Llama-3.1-8B-Instruct",
            "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": isl, "osl": osl,
            "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block", "batch_size": float(n),
            "tp_size": float(tp), "pp_size": 1.0, "moe_tp_size": 1.0, "moe_ep_size": 1.0,
            "silicon_ttft_ms": 1000.0, "silicon_tpot_ms": 25.0}


def _closed_loop_rate(tp: int, per_token_ms: float) -> float:
    """Delivered output tokens/s of a closed loop of 512 clients, 200 / 300 tokens (Little's law over the
    DES means; SGLang 0.5.6.post2 generator row: mixed chunks, a graph for every batch)."""
    from llmplan.calibration.engine_fit import NO_HOST, SCHEDULER
    from llmplan.calibration.serving_rows import SimOptions, engine_profiles, map_row, simulate_case

    m = map_row(_generator_row(tp), 0, engine_profiles({"sglang": {**NO_HOST, **SCHEDULER["sglang"],
                                                                   "frontend_per_token_ms": per_token_ms}}))
    assert m.case is not None and m.case.dep.engine.frontend == "dynamo"
    p = simulate_case(m.case, SimOptions(calibration="spec"))
    return 512 * 300 / ((p.ttft_ms + 299 * p.tpot_ms) / 1000.0)


def test_closed_loop_throughput_is_flat_in_tp_behind_the_front_end():
    free = {tp: _closed_loop_rate(tp, 0.0) for tp in (2, 8)}
    bound = {tp: _closed_loop_rate(tp, 0.06) for tp in (2, 8)}
    # the GPU alone (spec roofline): 40.9k tokens/s at TP 2, 73.7k at TP 8
    assert free[8] > 1.5 * free[2]
    # behind 0.06 ms per token both deliver the front end's 16.7k tokens/s (Little's law over the
    # DES means, within 1%), whatever the TP size
    assert bound[8] == pytest.approx(bound[2], rel=0.01)
    assert bound[2] == pytest.approx(1000 / 0.06, rel=0.01)
    # a front end far faster than the GPU leaves the run as it was
    assert _closed_loop_rate(2, 0.001) == pytest.approx(free[2], rel=1e-9)


def test_the_note_states_the_ceiling_only_where_it_applies():
    assert fc.frontend_note(EngineProfile(name="sglang")) == ""
    assert fc.frontend_note(EngineProfile(name="sglang", frontend="dynamo", frontend_per_token_ms=0.0)) == ""
    note = fc.frontend_note(EngineProfile(name="sglang", frontend="dynamo", frontend_per_token_ms=0.05))
    assert note.startswith("engine.frontend=dynamo:") and "0.05 ms per streamed token" in note
    assert "at most 20,000 output tokens/s" in note


def test_simulate_says_the_front_end_ceiling_is_on(tmp_path, capsys):
    """`llmplan simulate engine.frontend=dynamo`: summary.json's notes and the printed output state the
    ceiling, and a run whose steps it floors delivers no more than it (offline, 512 requests at TP 8)."""
    import json

    from simulate_cli_helpers import run_cli

    argv = ["simulate", "engine=sglang", "model=llama3_1_8b", "gpu=h200_sxm", "deployment.tp=8", "workload=offline",
            "workload.num_requests=512", "workload.input_tokens.kind=fixed", "workload.output_tokens.kind=fixed",
            "workload.input_tokens.mean_tokens=200", "workload.output_tokens.mean_tokens=300",
            "engine.frontend=dynamo", "engine.frontend_per_token_ms=0.1"]
    code, out, err = run_cli(argv, capsys, tmp_path)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [n for n in s["notes"] if n.startswith("engine.frontend=dynamo:") and "at most 10,000 output" in n]
    assert "engine.frontend=dynamo" in out
    assert s["output_tokens_per_s"] <= 10000.0 * 1.001


@pytest.mark.parametrize("extra", [["+colocate=llama2_7b_13b"],
                                   ["engine=trtllm", "model=llama3_1_8b", "gpu=h200_sxm", "deployment.mode=disagg",
                                    "deployment.tp=1", "workload.num_requests=100"]])
def test_colocated_and_disaggregated_runs_say_it_too(extra, tmp_path, capsys):
    import json

    from simulate_cli_helpers import run_cli

    code, _, err = run_cli(["simulate", *extra, "engine.frontend=dynamo", "engine.frontend_per_token_ms=0.05"],
                           capsys, tmp_path)
    assert code == 0, err
    notes = json.loads((tmp_path / "summary.json").read_text())["notes"]
    assert [n for n in notes if n.startswith("engine.frontend=dynamo:") and "at most 20,000 output" in n]

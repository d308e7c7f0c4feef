"""Disaggregated candidates of the planner (optimizer/disagg_candidates.py): the M/D/1 prefill
capacity, the decode batch within TPOT, pool sizing and pricing as GPUs, and plan.json's block."""

from __future__ import annotations

import math

import pytest

from llmplan.optimizer.disagg_candidates import best_disagg, decode_capacity, prefill_capacity, prefill_ms
from llmplan.optimizer.types import SLOTarget, WorkloadStats


def test_prefill_capacity_meets_the_percentile_target_exactly_below_95_percent_load():
    cap, ttft = prefill_capacity(100.0, 50.0, 1000.0, 90.0)
    rho = cap * 100.0 / 1000.0
    k = math.log(10.0)
    assert ttft == pytest.approx(1000.0)
    assert ttft == pytest.approx(150.0 + k * rho * 100.0 / (2 * (1 - rho)))
    assert 0 < rho < 0.95


def test_prefill_capacity_zero_when_prompt_and_overhead_miss_the_target():
    assert prefill_capacity(900.0, 200.0, 1000.0, 90.0)[0] == 0.0
    # a tighter percentile gives less capacity
    assert prefill_capacity(100.0, 0.0, 1000.0, 99.0)[0] < prefill_capacity(100.0, 0.0, 1000.0, 90.0)[0]


class _Step:
    def step_time_ms(self, shape):
        return 10.0 + 0.1 * shape.decode_seqs + 0.03 * shape.prefill_tokens


class _An:
    def __init__(self, seqs=256, kv=1_000_000):
        self.step, self.I, self.O, self.budget, self.max_seqs, self.kv_cap = _Step(), 1000.0, 200.0, 8192, seqs, kv


class _Ev:
    def __init__(self, an):
        self.analyzer = an


def test_decode_capacity_is_the_largest_batch_within_tpot():
    cap, tpot, b = decode_capacity(_Ev(_An()), 20.0)
    assert b == 100 and tpot == pytest.approx(20.0)
    assert cap == pytest.approx(1000.0 * 100 / (200.0 * 20.0))
    # KV for only 10 requests of 1200 tokens (95% usable) caps the batch
    assert decode_capacity(_Ev(_An(kv=12_700)), 20.0)[2] == 10
    assert decode_capacity(_Ev(_An()), 5.0)[0] == 0.0


@pytest.fixture(scope="module")
def planned_20rps():
    """One plan of llama3_1_8b at 20 req/s on H100s, shared by the tests that read its disaggregated block."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import SearchSpace, plan
    from llmplan.sim.types import EngineProfile

    model = load_model("llama3_1_8b")
    gpus = [(get_gpu("h100_sxm"), get_gpu("h100_sxm").usd_per_hour)]
    wl = WorkloadStats(rate_rps=20.0, mean_input_tokens=1000.0, mean_output_tokens=200.0, max_request_tokens=1400)
    slos = [SLOTarget("ttft", 90, 3000.0), SLOTarget("tpot", 90, 40.0)]
    space = SearchSpace(tp=[1, 2], pp=[1], ep=[1], precision=["bf16"], max_batch=[64], finalists=0)
    res = plan(model, gpus, EngineProfile(name="vllm"), wl, slos, space, {}, "spec")
    return model, gpus, wl, slos, space, res


def test_planner_states_a_disaggregated_option_priced_as_its_gpus(planned_20rps):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.optimizer.planner import plan
    from llmplan.sim.types import EngineProfile

    model, gpus, wl, slos, space, res = planned_20rps
    d = res.disaggregated
    assert d is not None and d["mode"] == "disaggregated" and d["speculation"] is None
    pre, dec = d["pools"]
    assert (pre["role"], dec["role"]) == ("prefill", "decode")
    price = get_gpu("h100_sxm").usd_per_hour
    assert d["total_usd_per_hour"] == pytest.approx(price * (pre["gpus"] + dec["gpus"]), rel=1e-6)
    assert pre["workers"] * pre["capacity_rps_per_worker"] * 0.95 >= 20.0
    assert dec["workers"] * dec["capacity_rps_per_worker"] * 0.95 >= 20.0
    assert dec["tpot_ms"] <= 40.0 and pre["ttft_ms"] <= 3000.0 + 1e-6
    assert d["cheaper_than_aggregated"] == (d["total_usd_per_hour"] < res.selection.total_usd_per_hour)
    # availability is respected: too few GPUs for both pools -> no option
    res2 = plan(model, gpus, EngineProfile(name="vllm"), wl, slos, space, {"h100_sxm": 1}, "spec")
    assert res2.disaggregated is None


def test_no_option_when_tpot_unreachable():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import SearchSpace, screen

    model = load_model("llama3_1_8b")
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=500.0, mean_output_tokens=100.0, max_request_tokens=700)
    slos = [SLOTarget("ttft", 90, 2000.0), SLOTarget("tpot", 90, 0.01)]
    from llmplan.sim.types import EngineProfile

    evals, _ = screen(model, [(get_gpu("h100_sxm"), 3.0)], EngineProfile(), wl, slos,
                      SearchSpace(tp=[1], pp=[1], ep=[1], precision=["bf16"], max_batch=[64], finalists=0), "spec")
    assert best_disagg(evals, wl, slos, model, "vllm") is None


def screened_option(rate_rps: float, input_tokens: float, output_tokens: float, ttft_ms: float, tpot_ms: float):
    """(model, workload, SLOs, the cheapest split) of Llama-3.1-8B on H100 TP1 bf16 (spec roofline)."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import SearchSpace, screen
    from llmplan.sim.types import EngineProfile

    model = load_model("llama3_1_8b")
    wl = WorkloadStats(rate_rps=rate_rps, mean_input_tokens=input_tokens, mean_output_tokens=output_tokens,
                       max_request_tokens=int(input_tokens + output_tokens) + 200)
    slos = [SLOTarget("ttft", 90, ttft_ms), SLOTarget("tpot", 90, tpot_ms)]
    evals, _ = screen(model, [(get_gpu("h100_sxm"), 3.0)], EngineProfile(name="vllm"), wl, slos,
                      SearchSpace(tp=[1], pp=[1], ep=[1], precision=["bf16"], max_batch=[64], finalists=0), "spec")
    return model, wl, slos, best_disagg(evals, wl, slos, model, "vllm")


def test_verify_option_simulates_the_pools_and_reports_every_target():
    from llmplan.optimizer.disagg_candidates import verify_option
    from llmplan.sim.types import EngineProfile

    model, wl, slos, opt = screened_option(8.0, 800.0, 100.0, 2500.0, 40.0)
    sim = verify_option(opt, model, EngineProfile(name="vllm"), wl, slos, "spec", 200)
    assert set(sim["targets"]) == {"ttft_p90", "tpot_p90"}
    assert sim["slo_met"] == all(t["simulated_ms"] <= t["limit_ms"] for t in sim["targets"].values())
    # the simulated TTFT includes the fitted hand-off, which the screen also counted
    assert sim["targets"]["ttft_p90"]["simulated_ms"] >= opt.handoff_ms
    assert sim["kv_transfer_ms_mean"] > 0


def test_option_is_recommended_exactly_when_the_mode_selection_chooses_it(planned_20rps):
    res = planned_20rps[-1]
    d = res.disaggregated
    # not simulated (finalists=0): chosen when strictly cheaper (ties go to aggregated)
    assert d["simulated"] is None and d["recommended"] == d["cheaper_than_aggregated"]
    assert d["recommended"] == (res.chosen_mode == "disagg") == d["chosen"]
    noted = any("chosen deployment is disaggregated" in n for n in res.notes)
    assert noted == d["recommended"]


def test_prefill_screen_times_prompts_as_the_disaggregated_simulator_does():
    """The screen's prompt time is the prefill pool's step under the simulator's default context-launch
    rule (sim/disagg_launch.py): a TensorRT-LLM prompt step is eager, and its launch runs under the
    device work instead of adding to it, as in ``simulate_disaggregated``'s prefill workers."""
    from types import SimpleNamespace

    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.disagg_launch import LaunchUnderDevice
    from llmplan.sim.disaggregated import DisaggSpec
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.step_model import AnalyticalStepModel
    from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

    g = get_gpu("h200_sxm")
    engine = EngineProfile(name="trtllm", kernel_backend="trtllm", host_overhead_ms=0.5, host_overhead_per_seq_ms=0.0,
                           host_overlap_per_seq_ms=0.0, eager_step_ms_per_layer=0.2, ttft_per_request_ms=0.0,
                           ttft_per_prompt_token_ms=0.0)
    step = AnalyticalStepModel(load_model("llama3_1_8b"), g, Parallelism(1), Precision(), engine, RooflineKernelModel(g))
    ev = SimpleNamespace(analyzer=SimpleNamespace(step=step, I=3000.0, budget=2048))
    shapes = [StepShape.build([(2048, 0)], []), StepShape.build([(952, 2048)], [])]
    launch = 0.2 * 32
    additive = sum(step.step_time_ms(s) for s in shapes)
    assert step.eager_layers(shapes[0]) == 32 and step.step_time_ms(shapes[0]) > 2 * launch
    assert DisaggSpec.__dataclass_fields__["context_launch"].default == "under_device"
    assert prefill_ms(ev) == pytest.approx(sum(LaunchUnderDevice(step).step_time_ms(s) for s in shapes))
    assert prefill_ms(ev) == pytest.approx(additive - 2 * launch)


def test_prefill_pool_power_uses_the_step_the_simulator_runs():
    """plan.json's prefill-pool power: the utilisation of the prompt step as the DES times it (launch
    under the device work), so a shorter step with the same work is a busier GPU."""
    from types import SimpleNamespace

    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.disagg_figures import pool_power
    from llmplan.sim.disagg_launch import LaunchUnderDevice
    from llmplan.sim.kernels import RooflineKernelModel
    from llmplan.sim.power import step_utilization
    from llmplan.sim.step_model import AnalyticalStepModel
    from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

    g = get_gpu("h200_sxm")
    engine = EngineProfile(name="trtllm", kernel_backend="trtllm", host_overhead_ms=0.5, host_overhead_per_seq_ms=0.0,
                           host_overlap_per_seq_ms=0.0, eager_step_ms_per_layer=0.2, ttft_per_request_ms=0.0,
                           ttft_per_prompt_token_ms=0.0)
    step = AnalyticalStepModel(load_model("llama3_1_8b"), g, Parallelism(1), Precision(), engine, RooflineKernelModel(g))
    cand = SimpleNamespace(gpu=g, gpus_per_replica=1, prec=Precision())
    pick = SimpleNamespace(role="prefill", workers=1, evaluation=SimpleNamespace(
        candidate=cand, analyzer=SimpleNamespace(step=step, I=2000.0, O=100.0, budget=8192)))
    p = pool_power(pick, 1.0, {"busy_fraction": 1.0})
    shape = StepShape.build([(2000, 0)], [])
    hidden = step_utilization(LaunchUnderDevice(step).breakdown(shape), g, "bf16")
    additive = step_utilization(step.breakdown(shape), g, "bf16")
    assert p["utilization_compute"] == pytest.approx(hidden.compute, abs=1e-4)
    assert hidden.compute > additive.compute * 1.05

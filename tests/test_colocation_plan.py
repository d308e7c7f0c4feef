"""`plan` for co-located models (optimizer/colocation_plan.py): a shared pool wins for small
models at low load, dedicated pools when the models' steps would stretch past their SLOs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.optimizer.colocation_plan import PlanModel, plan_colocated
from llmplan.optimizer.planner import SearchSpace
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import LengthSpec, WorkloadSpec

A100 = get_gpu("a100_sxm")
SPACE = SearchSpace(tp=[1], pp=[1], ep=[1], precision=["bf16"], max_batch=[64], verify_requests=150, finalists=0)


def _model(key: str, rate: float, tpot_ms: float) -> PlanModel:
    wl = WorkloadSpec(preset=None, rate_rps=rate, num_requests=150, steady_state=False,
                      input_tokens=LengthSpec(kind="fixed", mean_tokens=512),
                      output_tokens=LengthSpec(kind="fixed", mean_tokens=128))
    stats = WorkloadStats(rate_rps=rate, mean_input_tokens=512, mean_output_tokens=128, max_request_tokens=640,
                          arrival_cv=1.0)
    return PlanModel(key, load_model(key), wl, [SLOTarget("ttft", 90, 2000.0), SLOTarget("tpot", 90, tpot_ms)], stats)


def _plan(models):
    return plan_colocated(models, [(A100, A100.usd_per_hour)], EngineProfile(name="vllm"), SPACE, {}, "spec", 0)


def test_low_load_small_models_share_one_gpu():
    res = _plan([_model("llama2_7b", 0.5, 100.0), _model("llama2_13b", 0.3, 100.0)])
    assert res.choice == "shared" and res.shared.gpus == 1 and res.dedicated.gpus == 2
    assert res.shared.usd_per_hour == pytest.approx(A100.usd_per_hour)
    assert all(v["met"] and v["step_stretch"] > 1.0 for v in res.shared.simulated.values())
    d = res.as_dict()
    assert d["mode"] == "colocated" and d["shared"]["pools"][0]["models"] == ["llama2_7b", "llama2_13b"]


def test_tight_tpot_keeps_the_models_apart():
    # a TPOT target each model meets alone on an A100 but not with its steps time-shared (~2x)
    res = _plan([_model("llama2_7b", 2.0, 22.0), _model("llama2_13b", 1.0, 35.0)])
    assert res.dedicated.feasible
    assert res.choice == "dedicated" and not res.shared.feasible

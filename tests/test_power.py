"""Power model (sim/power.py) and deployment energy (optimizer/energy.py), hand-computed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.hardware_catalog.loader import get_gpu, load_catalog
from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.sim.power import (PowerModel, Utilization, duty_cycle_power_w, energy_cost, gpu_power_w,
                               step_utilization, tdp_w)
from llmplan.sim.types import OpTime, StepTiming


def _gpu(**kw) -> GPUSpec:
    base = dict(key="toy", name="toy", vendor="nvidia", aliases=(), dense_tflops={"bf16": 1000.0}, hbm_gb=80,
                hbm_bw_gbps=2000.0, l2_mb=50, sm_count=100, scaleup_bw_gbps=450, scaleup_domain_size=8, pcie_gen=5,
                pcie_bw_gbps=64, scaleout_bw_gbps=50, tdp_w=500.0, usd_per_hour=1.0, price_source="test")
    return GPUSpec(**(base | kw))


def test_power_linear_in_activity_with_idle_floor():
    # idle 10% of 700 = 70 W; activity = 1.0 x 0.5 + 0.45 x 0.4 = 0.68 -> 70 + 630 x 0.68
    assert gpu_power_w(Utilization(0.5, 0.4), 700.0) == pytest.approx(498.4)
    assert gpu_power_w(Utilization(0.0, 0.0), 700.0) == pytest.approx(70.0)


def test_power_capped_at_tdp():
    assert gpu_power_w(Utilization(0.9, 0.9), 700.0) == pytest.approx(700.0)


def test_custom_coefficients():
    m = PowerModel(idle_fraction=0.2, compute_weight=0.5, memory_weight=1.0)
    # idle 100 W of 500; activity = 0.5 x 0.2 + 1.0 x 0.3 = 0.4 -> 100 + 400 x 0.4 = 260
    assert gpu_power_w(Utilization(0.2, 0.3), 500.0, m) == pytest.approx(260.0)


@pytest.mark.parametrize("bad", [dict(idle_fraction=1.5), dict(memory_weight=-0.1), dict(compute_weight=math.nan)])
def test_power_model_rejects_bad_coefficients(bad):
    with pytest.raises(ValueError):
        PowerModel(**bad)


def test_step_utilization_per_gpu_with_pipeline():
    # pp=2: breakdown sums both stages, so one GPU does half: 2e12 FLOP and 10 GB in 10 ms
    ops = (OpTime("a", "gemm", 5.0, "compute", flops=3e12, bytes=5e9), OpTime("b", "memory", 5.0, "memory", flops=1e12, bytes=15e9),
           OpTime("ar", "comm", 1.0, "comm", bytes=8e9))   # link bytes: not HBM traffic
    u = step_utilization(StepTiming(latency_ms=20.0, stage_ms=10.0, ops=ops), _gpu(), "bf16", pp=2)
    assert u.compute == pytest.approx(2e12 / (0.010 * 1000e12))   # 0.2
    assert u.memory == pytest.approx(10e9 / (0.010 * 2000e9))     # 0.5


def test_duty_cycle():
    assert duty_cycle_power_w(400.0, 70.0, 0.25) == pytest.approx(0.25 * 400 + 0.75 * 70)
    assert duty_cycle_power_w(400.0, 70.0, 3.0) == pytest.approx(400.0)


def test_energy_cost_with_pue_and_price():
    e = energy_cost(1000.0, 500.0, pue=1.2, usd_per_kwh=0.10)
    assert e.facility_power_w == pytest.approx(1200.0)
    assert e.joules_per_output_token == pytest.approx(2.4)
    assert e.kwh_per_hour == pytest.approx(1.2)
    assert e.usd_per_hour == pytest.approx(0.12)
    assert energy_cost(1000.0, 500.0).usd_per_hour is None
    with pytest.raises(ValueError):
        energy_cost(1000.0, 500.0, pue=0.9)


def test_unknown_tdp_is_never_guessed():
    assert tdp_w(_gpu()) == 500.0
    assert tdp_w(_gpu(unknown=("tdp_w",))) is None
    assert tdp_w(_gpu(tdp_w=0.0)) is None


def test_catalog_tdp_comes_from_the_catalog():
    for g in load_catalog().values():
        assert tdp_w(g) is None or tdp_w(g) == g.tdp_w > 0


# ---------------------------------------------------------------- deployment energy

@pytest.fixture(scope="module")
def evaluated():
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import evaluate_candidates
    from llmplan.optimizer.types import Candidate, SLOTarget, WorkloadStats
    from llmplan.sim.types import EngineProfile, Parallelism, Precision

    model = load_model("llama3_1_8b")
    gpu = get_gpu("h100_sxm")
    wl = WorkloadStats(rate_rps=4.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
    cand = Candidate(gpu, Parallelism(1, 1, 1), Precision("bf16", "bf16"), 256, 2.0)
    [ev] = evaluate_candidates(model, [cand], EngineProfile(), wl, slos, "spec")
    assert ev.verdict == "ok" and ev.capacity_rps > 0
    return ev, wl


def _alloc(ev, share, replicas=2):
    from llmplan.optimizer.types import Allocation

    return Allocation(ev, replicas, share_rps=share)


def test_pool_power_between_idle_and_tdp_and_rises_with_load(evaluated):
    from llmplan.optimizer.energy import pool_power

    ev, wl = evaluated
    lo = pool_power(_alloc(ev, 0.2 * ev.capacity_rps), wl)
    hi = pool_power(_alloc(ev, 0.9 * ev.capacity_rps), wl)
    for p in (lo, hi):
        assert 2 * 70.0 <= p.power_w <= 2 * 700.0
        assert 0 < p.utilization.memory <= 1 and 0 < p.utilization.compute <= 1
    assert hi.power_w > lo.power_w
    assert hi.output_tokens_per_s == pytest.approx(2 * 0.9 * ev.capacity_rps * 200)


def test_selection_energy_totals_and_unknown(evaluated):
    from llmplan.optimizer.energy import selection_energy
    from llmplan.optimizer.types import Allocation, Evaluation, Selection

    ev, wl = evaluated
    a = _alloc(ev, 0.5 * ev.capacity_rps)
    sel = Selection(True, [a], total_usd_per_hour=4.0, total_gpus=2, status="ok")
    d = selection_energy(sel, wl, pue=1.5, usd_per_kwh=0.2)
    tok_s = 2 * 0.5 * ev.capacity_rps * 200
    assert d["facility_power_w"] == pytest.approx(d["gpu_power_w"] * 1.5, rel=1e-3)
    assert d["joules_per_output_token"] == pytest.approx(d["gpu_power_w"] * 1.5 / tok_s, rel=1e-3)
    assert d["electricity_usd_per_hour"] == pytest.approx(d["facility_power_w"] / 1000 * 0.2, rel=1e-3)
    assert d["total_usd_per_hour_with_electricity"] == pytest.approx(4.0 + d["electricity_usd_per_hour"], abs=1e-4)
    # a GPU without a TDP figure: energy unknown, said so, no total
    cand = replace(ev.candidate, gpu=replace(ev.candidate.gpu, unknown=("tdp_w",)))
    ev2 = Evaluation(cand, "ok", capacity_rps=ev.capacity_rps, analyzer=ev.analyzer)
    d2 = selection_energy(Selection(True, [Allocation(ev2, 1, share_rps=1.0)], 2.0, 1, "ok"), wl)
    assert d2["joules_per_output_token"] is None and "no TDP" in d2["unknown"][0]

"""Planner decisions: finalists, the sim/analytical correction, per-target SLO checks,
infeasibility diagnosis, search-space checks."""

import math
from dataclasses import replace

import pytest

from llmplan.errors import UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer.infeasible import diagnose
from llmplan.optimizer.planner import SearchSpace, check_space, correct_unverified
from llmplan.optimizer.slo_check import binding_target, misses, target_values, threshold_groups, worst_miss
from llmplan.optimizer.types import Candidate, Evaluation, SLOTarget
from llmplan.optimizer.verify import pick_finalists
from llmplan.sim.types import Parallelism, Precision


def _ev(gpu="h200_sxm", tp=8, pp=1, ep=1, mb=256, price=4.5, cap=1.0, verdict="ok", prec="fp8") -> Evaluation:
    c = Candidate(get_gpu(gpu), Parallelism(tp, pp, ep), Precision(prec, "fp8"), mb, price)
    return Evaluation(c, verdict, capacity_rps=cap)


def test_finalists_cover_shapes_before_batch_caps():
    """DeepSeek-V3 on H200: the cheapest shape at two batch caps must not crowd out other
    shapes, and an expert-parallel shape is simulated even when the screen ranks it last."""
    a64 = _ev(ep=1, mb=64, cap=1.00)
    a256 = _ev(ep=1, mb=256, cap=0.99)
    pp2 = _ev(tp=4, pp=2, mb=256, cap=0.95)
    ep8 = _ev(ep=8, mb=256, cap=0.90)
    picked = pick_finalists([a256, ep8, pp2, a64], 3)
    assert [e.candidate.name for e in picked] == [a64.candidate.name, ep8.candidate.name, pp2.candidate.name]
    # with room left, the remaining batch cap fills in
    assert pick_finalists([a256, ep8, pp2, a64], 4)[-1] is a256
    # dense models (ep = 1 everywhere): shapes in cost order
    assert [e.candidate.name for e in pick_finalists([a256, pp2, a64], 2)] == [a64.candidate.name, pp2.candidate.name]


def test_finalists_take_each_gpu_type_first():
    h = [_ev(mb=m, cap=1.0) for m in (64, 256)]
    other = _ev(gpu="h100_sxm", tp=8, price=4.0, cap=0.3)  # much worse $/rps, still simulated
    picked = pick_finalists(h + [other], 2)
    assert {e.candidate.gpu.key for e in picked} == {"h200_sxm", "h100_sxm"}
    assert pick_finalists(h + [other], 0) == []
    assert all(e.verdict == "ok" for e in pick_finalists(h + [_ev(verdict="slo", cap=0.0)], 5))


def test_correct_unverified_uses_median_ratio_per_gpu_then_overall():
    v1, v2, v3 = _ev(mb=64, cap=10.0), _ev(mb=128, cap=10.0), _ev(mb=192, cap=10.0)
    v1.sim_capacity_rps, v2.sim_capacity_rps, v3.sim_capacity_rps = 8.0, 9.0, 5.0
    same_gpu = _ev(mb=256, cap=4.0)
    other_gpu = _ev(gpu="h100_sxm", cap=4.0)
    used = correct_unverified([v1, v2, v3, same_gpu, other_gpu])
    assert used == {"h200_sxm": 0.8, "overall": 0.8}
    assert same_gpu.adjusted_capacity_rps == pytest.approx(3.2)
    assert other_gpu.adjusted_capacity_rps == pytest.approx(3.2)  # no H100 verified: overall median
    assert v1.adjusted_capacity_rps is None and v1.effective_capacity_rps == 8.0
    assert correct_unverified([_ev()]) == {}


P50, P99 = SLOTarget("ttft", 50, 300.0), SLOTarget("ttft", 99, 2000.0)
TPOT = SLOTarget("tpot", 90, 50.0)


def test_each_percentile_keeps_its_own_limit_in_the_simulator():
    groups = threshold_groups([P50, P99, TPOT])
    assert [(g.percentile, g.ttft_ms, g.tpot_ms) for g in groups] == [(50, 300.0, None), (90, None, 50.0), (99, 2000.0, None)]


def test_per_target_values_and_binding():
    values = target_values({50: 250.0, 99: 1900.0}, {90: 30.0}, [P50, P99, TPOT])
    assert values == {"ttft_p50": 250.0, "ttft_p99": 1900.0, "tpot_p90": 30.0}
    assert binding_target(values, [P50, P99, TPOT], "ttft") == P99          # 0.95 of its limit vs 0.83
    assert misses(values, [P50, P99, TPOT]) == []
    values["ttft_p50"] = 400.0
    assert misses(values, [P50, P99, TPOT]) == [P50]                      # p50 fails at 300, p99 still holds
    t, r = worst_miss(values, [P50, P99, TPOT])
    assert t == P50 and r == pytest.approx(400 / 300)
    assert misses({"ttft_p50": math.nan}, [P50]) == [P50]


def test_diagnosis_names_memory_and_the_closest_candidate():
    a = _ev(tp=1, verdict="memory")
    a.memory_shortfall_gb, a.reason = 40.0, "weights exceed"
    b = _ev(tp=4, verdict="memory")
    b.memory_shortfall_gb, b.reason = 2.5, "KV cache too small"
    bad = _ev(tp=3, verdict="parallelism")
    d = diagnose([a, b, bad], [P50], 10.0, {}, 256, 0.95)
    assert d.cause == "memory" and d.closest["candidate"] == b.candidate.name
    assert "2.5 GB" in d.message


def test_diagnosis_names_the_slo_and_by_how_much():
    near, far = _ev(tp=8, verdict="slo", cap=0.0), _ev(tp=4, verdict="slo", cap=0.0)
    near.light, far.light = {"ttft_p50": 330.0}, {"ttft_p50": 900.0}
    mem = _ev(tp=1, verdict="memory")
    d = diagnose([far, near, mem], [P50], 10.0, {}, 256, 0.95)
    assert d.cause == "slo" and d.closest["candidate"] == near.candidate.name
    assert d.closest["miss_fraction"] == pytest.approx(0.1)


def test_diagnosis_availability_and_replicas():
    ok = _ev(tp=2, cap=2.0)
    d = diagnose([ok], [P50], 10.0, {"h200_sxm": 4}, 256, 1.0)
    assert d.cause == "availability" and d.closest["replicas_needed"] == 5 and d.closest["gpus_short"] == 6
    d = diagnose([ok], [P50], 10.0, {}, 3, 1.0)
    assert d.cause == "replicas" and d.closest["replicas_needed"] == 5
    d = diagnose([_ev(tp=3, verdict="precision")], [P50], 1.0, {}, 3, 1.0)
    assert d.cause == "precision"


SPACE = SearchSpace(tp=[1], pp=[1], ep=[1], precision=["bf16"], max_batch=[64])


@pytest.mark.parametrize("change,key", [({"finalists": -1}, "search.finalists"), ({"tp": [0]}, "search.tp"),
                                        ({"max_batch": []}, "search.max_batch"), ({"max_replicas": 0}, "search.max_replicas"),
                                        ({"max_load": 1.5}, "search.max_load"), ({"alternatives": -2}, "search.alternatives"),
                                        ({"precision": []}, "search.precision"), ({"verify_requests": 10}, "search.verify_requests")])
def test_search_space_is_checked(change, key):
    with pytest.raises(UserError) as e:
        check_space(replace(SPACE, **change))
    assert e.value.key == key
    check_space(SPACE)


def test_fp4_without_fp4_tensor_cores_is_labelled_weight_only():
    h100 = Candidate(get_gpu("h100_sxm"), Parallelism(1), Precision("fp4", "fp8"), 64, 4.0)
    b200 = Candidate(get_gpu("b200"), Parallelism(1), Precision("fp4", "fp8"), 64, 4.0)
    assert h100.weight_only and h100.precision_label == "fp4 (w4a16)"
    assert not b200.weight_only and b200.precision_label == "fp4"
    assert Candidate(get_gpu("h100_sxm"), Parallelism(1), Precision("fp8", "fp8"), 64, 4.0).precision_label == "fp8"


def test_diagnosis_when_only_the_simulator_rejects():
    passed = _ev(tp=8, cap=2.0)
    passed.sim_capacity_rps = 0.0
    passed.notes.append("simulation: the p90 targets are missed even at 0.5 req/s")
    d = diagnose([passed, _ev(tp=1, verdict="memory")], [P50], 10.0, {}, 256, 0.95)
    assert d.cause == "slo" and d.closest == {"candidate": passed.candidate.name, "analytical_capacity_rps": 2.0,
                                              "simulated_capacity_rps": 0.0}
    assert "simulator" in d.message and "0.5 req/s" in d.message


def test_plan_refuses_inputs_that_would_change_the_question():
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import plan
    from llmplan.optimizer.types import WorkloadStats
    from llmplan.sim.types import EngineProfile

    model, gpu = load_model("llama3_1_8b"), get_gpu("h100_sxm")
    wl = WorkloadStats(1.0, 100.0, 50.0, 150)
    cases = [({"wl": replace(wl, rate_rps=0.0)}, "workload.rate_rps"), ({"slos": []}, "slo"), ({"gpus": []}, "gpu"),
             ({"max_gpus": {"h100_sxm": -1}}, "gpu.max_gpus.h100_sxm"), ({"space": replace(SPACE, finalists=-1)}, "search.finalists")]
    for change, key in cases:
        args = {"model": model, "gpus": [(gpu, 4.0)], "engine": EngineProfile(), "wl": wl, "slos": [P50], "space": SPACE,
                "max_gpus": {}, "calibration": "spec"} | change
        with pytest.raises(UserError) as e:
            plan(**args)
        assert e.value.key == key

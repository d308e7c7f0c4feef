"""What `plan` reports: simulated figures as the headline, the binding target per metric,
wide error bands flagged, honest precision labels, the real cause of infeasibility."""

import io
import json

from rich.console import Console

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer import report
from llmplan.optimizer.planner import PlanResult
from llmplan.optimizer.types import Allocation, Candidate, Evaluation, Selection, SLOTarget, WorkloadStats
from llmplan.sim.types import Parallelism, Precision

SLOS = [SLOTarget("ttft", 50, 300.0), SLOTarget("ttft", 99, 2000.0), SLOTarget("tpot", 90, 50.0)]
WL = WorkloadStats(10.0, 1000.0, 250.0, 4000)


def _result(gpu="h100_sxm", prec="fp4", band_pct=20.0, simulated=True) -> PlanResult:
    c = Candidate(get_gpu(gpu), Parallelism(1), Precision(prec, "fp8"), 64, 4.0)
    ev = Evaluation(c, "ok", capacity_rps=3.0, sim_capacity_rps=2.5)
    a = Allocation(ev, 4, share_rps=2.5, ttft_ms=180.0, tpot_ms=30.0,
                   analytical={"ttft_p50": 180.0, "ttft_p99": 900.0, "tpot_p90": 30.0},
                   bands={"tpot": {"p50_pct": 5.0, "p90_pct": band_pct, "tier": "cross-gen", "extrapolated": []}})
    if simulated:  # simulated: p99 is the binding TTFT target (1900/2000 > 200/300)
        a.simulated = {"targets": {"ttft_p50": 200.0, "ttft_p99": 1900.0, "tpot_p90": 41.0}, "requests": 900,
                       "ttft_ms": 1900.0, "tpot_ms": 41.0}
    sel = Selection(True, [a], 16.0, 4, "Optimal")
    return PlanResult(sel, [ev], [], WL, SLOS)


def test_simulated_figure_is_the_headline_for_the_binding_target():
    res = _result()
    d = report.plan_dict(res, {})["deployments"][0]
    assert d["ttft_target"] == "ttft_p99" and d["ttft_ms"] == 1900.0 and d["analytical_ttft_ms"] == 900.0
    assert d["tpot_ms"] == 41.0 and d["analytical_tpot_ms"] == 30.0
    assert d["latency_source"] == {"ttft": "simulated", "tpot": "simulated"}
    assert d["targets"]["ttft_p50"] == {"limit_ms": 300.0, "analytical_ms": 180.0, "simulated_ms": 200.0,
                                        "probability": None}  # no engine in the context: no served band
    unsimulated = report.plan_dict(_result(simulated=False), {})["deployments"][0]
    assert unsimulated["latency_source"]["ttft"] == "analytical" and unsimulated["ttft_target"] == "ttft_p50"
    assert unsimulated["ttft_ms"] == 180.0


def _render(res) -> str:
    buf = io.StringIO()
    d = report.plan_dict(res, {"model": "m"})
    report.render(res, d, Console(file=buf, width=250, no_color=True), None)
    return buf.getvalue()


def test_table_shows_simulated_then_analytical_and_labels_weight_only():
    text = _render(_result())
    row = next(line for line in text.splitlines() if "p99: 1900" in line)  # the simulated figure heads the row
    assert "41.0" in row and "900" not in row.replace("1900", "")
    assert "analytical TTFT p99 900 ms" in text and "TPOT p90 30.0 ms" in text  # the analytical ones, under it
    assert "fp4 (w4a16)" in text and "weight-only" in text
    assert "Low confidence" not in text


def test_wide_error_band_is_flagged_in_headline_and_json():
    res = _result(band_pct=86.0)
    band = report.plan_dict(res, {})["error_band"]
    assert band["wide"] and band["max_p90_pct"] == 86.0 and band["tier"] == "cross-gen"
    assert "Low confidence" in _render(res) and "±86%" in _render(res)
    assert not report.plan_dict(_result(band_pct=30.0), {})["error_band"]["wide"]


def test_candidates_csv_labels_precision_honestly():
    res = _result(gpu="h100_sxm")
    row = report.candidates_frame(res.evaluations).iloc[0]
    assert row["precision"] == "fp4 (w4a16)" and bool(row["weight_only"])
    row = report.candidates_frame(_result(gpu="b200").evaluations).iloc[0]
    assert row["precision"] == "fp4" and not bool(row["weight_only"])


def test_model_that_fits_nowhere_says_memory_and_exits_3(tmp_path):
    code = run_plan(compose("plan", ["model=llama3_1_70b", "gpu=l40s", "search.tp=[1]", "search.pp=[1]",
                                     "search.precision=[bf16]"]), tmp_path)
    assert code == EXIT_INFEASIBLE
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["infeasible"]["cause"] == "memory" and d["binding_constraint"].startswith("memory")
    assert d["infeasible"]["closest"]["shortfall_gb_per_gpu"] > 0


def test_impossible_slo_names_target_and_closest(tmp_path):
    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "slo.tpot_p90_ms=1", "search.finalists=0"]),
                    tmp_path)
    assert code == EXIT_INFEASIBLE
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["infeasible"]["cause"] == "slo" and d["infeasible"]["closest"]["target"] == "tpot_p90"
    assert d["infeasible"]["closest"]["miss_fraction"] > 1


def test_several_percentiles_of_one_metric_end_to_end(tmp_path):
    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "slo.ttft_p50_ms=300", "slo.ttft_p99_ms=2000",
                                     "search.finalists=1", "search.verify_requests=300"]), tmp_path)
    assert code == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    targets = d["deployments"][0]["targets"]
    assert targets["ttft_p50"]["limit_ms"] == 300 and targets["ttft_p99"]["limit_ms"] == 2000
    sims = d["verification"]["deployment_simulation"]["targets"]
    assert "TTFT p50 <= 300 ms" in sims and "TTFT p99 <= 2000 ms" in sims
    dep = d["deployments"][0]
    assert dep["latency_source"]["ttft"] == "simulated"
    assert dep["ttft_ms"] == targets[dep["ttft_target"]]["simulated_ms"]


def test_too_few_replicas_names_the_limit_not_a_latency(tmp_path):
    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "workload.rate_rps=1000", "search.max_replicas=2",
                                     "search.finalists=0", "search.tp=[1]", "search.pp=[1]"]), tmp_path)
    assert code == EXIT_INFEASIBLE
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["infeasible"]["cause"] == "replicas" and d["infeasible"]["closest"]["replicas_needed"] > 2
    assert "search.max_replicas=2" in d["binding_constraint"]


def test_unstable_analytical_estimate_never_heads_a_simulated_figure():
    """The old table printed `inf (sim 25)`: the simulated figure leads, the analytical one is secondary."""
    res = _result()
    a = res.selection.allocations[0]
    a.analytical = {"ttft_p50": float("inf"), "ttft_p99": float("inf"), "tpot_p90": float("inf")}
    a.ttft_ms = a.tpot_ms = float("inf")
    text = _render(res)
    assert "p99: 1900" in text and "41.0" in text
    assert "analytical TTFT p99 unstable, TPOT p90 unstable" in text
    assert "inf" not in text
    d = report.plan_dict(res, {})["deployments"][0]
    assert d["ttft_ms"] == 1900.0 and d["analytical_ttft_ms"] is None


def test_a_missed_whole_deployment_simulation_is_a_warning():
    res = _result()
    res.notes.append("WARNING: the whole-deployment simulation misses at the planned rate: TTFT p99 <= 2000 ms: 2100 ms")
    text = _render(res)
    assert "warning: the whole-deployment simulation misses" in text and "note: WARNING" not in text

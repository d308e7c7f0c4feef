"""Pareto frontiers over candidates (optimizer/pareto.py) on small tables with a known answer."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.optimizer import pareto
from llmplan.optimizer.types import Candidate, Evaluation, SLOTarget, WorkloadStats
from llmplan.sim.types import Parallelism, Precision

MIN2 = (("cost", "min"), ("ttft", "min"))


def _table(rows):
    return pd.DataFrame(rows, columns=["candidate", "cost", "ttft"])


def test_known_frontier_and_order():
    df = _table([("D", 2.5, 250), ("C", 3.0, 100), ("A", 1.0, 300), ("E", 1.0, 400), ("B", 2.0, 200), ("F", 4.0, 100)])
    f = pareto.pareto_front(df, MIN2, name_col="candidate")
    assert list(f["candidate"]) == ["A", "B", "C"]   # D by B, E by A (same cost, slower), F by C


def test_maximised_objectives():
    df = pd.DataFrame({"candidate": list("abcd"), "per_gpu": [100, 80, 60, 90], "per_user": [10, 20, 30, 15]})
    f = pareto.pareto_front(df, (("per_gpu", "max"), ("per_user", "max")), name_col="candidate")
    assert list(f["candidate"]) == ["a", "d", "b", "c"]
    df.loc[3, "per_user"] = 9   # now d (90, 9) is dominated by a (100, 10)
    assert "d" not in set(pareto.pareto_front(df, (("per_gpu", "max"), ("per_user", "max")))["candidate"])


def test_ties_kept_and_sorted_by_name_nan_dropped():
    df = _table([("z", 1.0, 100), ("y", 1.0, 100), ("n", math.nan, 10)])
    assert list(pareto.pareto_front(df, MIN2, name_col="candidate")["candidate"]) == ["y", "z"]


def test_bad_sense_and_empty():
    with pytest.raises(ValueError):
        pareto.pareto_front(_table([("a", 1, 1)]), (("cost", "lowest"),))
    assert pareto.pareto_front(_table([]), MIN2).empty


def _eval(name_tp: int, verdict: str, cap: float, ttft: float, tpot: float) -> Evaluation:
    gpu = get_gpu("h100_sxm")
    c = Candidate(gpu, Parallelism(name_tp, 1, 1), Precision("bf16", "bf16"), 256, 3.0)
    return Evaluation(c, verdict, capacity_rps=cap, ttft_ms=ttft, tpot_ms=tpot)


def test_candidate_metrics_hand_computed():
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    slos = [SLOTarget("ttft", 90, 1000), SLOTarget("tpot", 90, 50)]
    df = pareto.candidate_metrics([_eval(2, "ok", 2.0, 300.0, 40.0), _eval(4, "slo", 0.0, 2000.0, 80.0)], wl, slos)
    [r] = df.to_dict("records")   # no replica model: one row, latency at capacity
    assert r["replicas"] == 3 and r["usd_per_hour"] == pytest.approx(18.0)          # ceil(5 / 2) x 2 GPUs x $3
    assert r["usd_per_million_output_tokens"] == pytest.approx(18.0 / (5 * 200 * 3600) * 1e6)   # $5
    assert r["output_tokens_per_s_per_gpu"] == pytest.approx(1000.0 / 6)              # 5 rps x 200 tokens / 6 GPUs
    assert r["output_tokens_per_s_per_user"] == pytest.approx(25.0)                   # 1000 / 40 ms
    assert r["latency_basis"] == "capacity" and r["meets_slo"] and r["option"].endswith(" x3")
    assert math.isnan(r["joules_per_output_token"])   # no replica model: energy unknown, not guessed
    # load headroom: at most 80% of capacity -> ceil(5 / 1.6) = 4 replicas
    assert pareto.candidate_metrics([_eval(2, "ok", 2.0, 300.0, 40.0)], wl, slos, max_load=0.8)["replicas"][0] == 4


def test_meets_slo_checks_every_target_at_its_own_percentile():
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    slos = [SLOTarget("ttft", 50, 300), SLOTarget("ttft", 99, 2000), SLOTarget("tpot", 90, 50)]
    e = _eval(2, "ok", 2.0, 250.0, 40.0)
    e.at_capacity.update({"ttft_p50": 250.0, "ttft_p99": 1500.0, "tpot_p90": 40.0})
    assert pareto.candidate_metrics([e], wl, slos)["meets_slo"].all()
    e.at_capacity["ttft_p99"] = 2500.0   # the second TTFT percentile misses: the row does not meet the SLOs
    assert not pareto.candidate_metrics([e], wl, slos)["meets_slo"].any()


def test_more_replicas_cost_more_and_wait_less():
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import evaluate_candidates
    from llmplan.sim.types import EngineProfile

    wl = WorkloadStats(rate_rps=20.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    slos = [SLOTarget("ttft", 90, 1000.0), SLOTarget("tpot", 90, 50.0)]
    cand = Candidate(get_gpu("h100_sxm"), Parallelism(1, 1, 1), Precision("bf16", "bf16"), 256, 2.0)
    evals = evaluate_candidates(load_model("llama3_1_8b"), [cand], EngineProfile(), wl, slos, "spec")
    df = pareto.candidate_metrics(evals, wl, slos, extra_replicas=2)
    assert len(df) == 3 and list(df["replicas"]) == list(range(df["replicas"][0], df["replicas"][0] + 3))
    assert (df["latency_basis"] == "operating_point").all() and df["meets_slo"].all()
    assert df["usd_per_hour"].is_monotonic_increasing and df["tpot_ms"].is_monotonic_decreasing
    assert df["load_rps_per_replica"].iloc[0] == pytest.approx(20.0 / df["replicas"][0])
    # same tokens on more GPUs: more idle power, more J per token
    assert df["gpu_power_w"].is_monotonic_increasing and df["joules_per_output_token"].is_monotonic_increasing
    assert df["joules_per_output_token"].iloc[0] == pytest.approx(df["gpu_power_w"].iloc[0] / (20.0 * 200))


def test_write_csv_and_plot(tmp_path):
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=4000)
    evals = [_eval(1, "ok", 1.0, 200.0, 45.0), _eval(2, "ok", 2.5, 150.0, 30.0), _eval(4, "ok", 3.0, 400.0, 48.0)]
    slos = [SLOTarget("ttft", 90, 1000), SLOTarget("tpot", 90, 50)]
    front = pareto.write(evals, wl, slos, tmp_path, title="test")
    back = pd.read_csv(tmp_path / "pareto.csv")
    assert list(back.columns[:4]) == ["frontier", "mode", "option", "candidate"] and len(back) == len(front)
    assert set(back["mode"]) == {"agg"}  # no split given
    assert set(back["frontier"]) == set(pareto.FRONTIERS)
    # tp4: 3 rps per replica at $12/h -> 2 replicas $24/h, TTFT 400: dominated on $/h vs TTFT by tp2 ($12/h, 150 ms);
    # tp1: 5 replicas at $3/h = $15/h, 200 ms: dominated by tp2 too
    f = back[back["frontier"] == "usd_per_hour_vs_ttft"]
    assert list(f["option"]) == ["h100_sxm-tp2-pp1-bf16-b256 x2"]
    assert (tmp_path / "pareto.png").stat().st_size > 10_000

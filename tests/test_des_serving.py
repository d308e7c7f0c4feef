"""The entry points: results, summaries, closed loop, overload guard, goodput search, plots."""

import json

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.sim.metrics import MeasureWindow, SLOThresholds
from llmplan.sim.serving import estimate_capacity_rps, find_max_rate, simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.workload import LengthSpec, WorkloadSpec, mean_lengths


def test_result_tables_and_json_summary(tmp_path):
    slo = SLOThresholds(ttft_ms=500, tpot_ms=50)
    res = simulate_serving(WorkloadSpec(num_requests=400, rate_rps=5.0), [make_replica()] * 2, slo=slo)
    s = res.summary
    json.dumps(s, allow_nan=False)
    for k in ("ttft_ms_p99", "tpot_ms_p50", "itl_ms_p95", "e2e_ms_p90", "queue_ms_mean", "request_throughput_rps",
              "input_throughput_tps", "output_throughput_tps", "goodput_rps", "slo_attainment", "prefix_hit_rate",
              "preemptions", "kv_peak_util"):
        assert k in s, k
    assert s["slo_met"] and 0.9 <= s["slo_attainment"] <= 1 and s["goodput_rps"] <= s["request_throughput_rps"]
    assert s["measured_requests"] == 400 - 20 - 20  # 5% warm-up, 5% cool-down
    assert s["offered_rate_rps"] == pytest.approx(5.0, rel=0.15)
    ts = res.timeseries
    assert list(ts.columns) == ["time_ms", "replica", "running", "waiting", "batch_size", "kv_util", "preemptions"]
    assert len(ts) > 50 and ts["kv_util"].between(0, 1).all() and set(ts["replica"]) == {0, 1}
    assert ts["time_ms"].is_monotonic_increasing
    h = res.itl_histogram
    assert h["tokens"].sum() == s["itl_count"] and h["itl_ms"].is_monotonic_increasing
    p = res.write_requests(tmp_path / "r.csv")
    assert p.read_text().splitlines()[0].startswith("request_id,replica,arrival_ms")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="pyarrow"):
            res.write_requests(tmp_path / "r.parquet")


def test_strict_slo_fails_and_goodput_drops():
    res = simulate_serving(WorkloadSpec(num_requests=300, rate_rps=5.0), [make_replica()],
                           slo=SLOThresholds(ttft_ms=1.0, tpot_ms=1.0))
    assert res.summary["slo_met"] is False and res.summary["goodput_rps"] == 0.0


def test_rate_left_unset_offers_about_80_percent_of_capacity():
    spec = WorkloadSpec(num_requests=500)
    rep = make_replica()
    cap = estimate_capacity_rps([rep], *mean_lengths(spec))
    res = simulate_serving(spec, [rep])
    assert res.summary["rate_picked_by_simulator"]
    assert res.summary["offered_rate_rps"] == pytest.approx(0.8 * cap)
    assert not res.overloaded


def test_closed_loop_keeps_at_most_n_in_flight():
    spec = WorkloadSpec(arrival="closed_loop", concurrency=6, num_requests=120)
    res = simulate_serving(spec, [make_replica()])
    df = res.requests.sort_values("arrival_ms")
    events = sorted([(t, 1) for t in df["arrival_ms"]] + [(t, -1) for t in df["finish_ms"]], key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([d for _, d in events])) == 6
    assert (df["arrival_ms"].iloc[:6] == 0).all()
    assert res.summary["measured_requests"] == 120 - 6 - 6  # first `concurrency` and 5% cool-down skipped
    assert res.summary["closed_loop_concurrency"] == 6


def test_overload_stops_at_the_queue_limit_and_time_limit():
    res = simulate_serving(WorkloadSpec(num_requests=20000, rate_rps=1000.0), [make_replica(max_num_seqs=16)],
                           max_queue=100)
    assert res.overloaded and res.unfinished > 10000 and res.summary["sim_time_ms"] < 1000
    res = simulate_serving(WorkloadSpec(num_requests=50, rate_rps=100.0), [make_replica()], max_sim_time_ms=200.0)
    assert res.overloaded and res.unfinished > 0 and res.summary["sim_time_ms"] == 200.0


def test_progress_reports_increasing_fractions():
    seen = []
    simulate_serving(WorkloadSpec(num_requests=300, rate_rps=5.0), [make_replica()], progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0 and 50 <= len(seen) <= 101


def test_find_max_rate_brackets_the_goodput_capacity():
    rep = make_replica(LinearStepCost.constant(10.0), max_num_seqs=1, max_num_batched_tokens=64, max_model_len=64,
                       kv_capacity_tokens=4096, enable_prefix_caching=False)
    spec = WorkloadSpec(preset=None, input_tokens=LengthSpec(kind="fixed", mean_tokens=16),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=1))
    slo = SLOThresholds(ttft_ms=40.0, percentile=90)
    out = find_max_rate(spec, [rep], slo, lo_rps=10.0, hi_rps=99.0, num_requests=1500, rel_tol=0.02)
    assert out.feasible and 40 < out.rate_rps < 95
    lo, hi = out.bracket
    assert lo == out.rate_rps and (hi - lo) <= 0.02 * hi
    met = {e["rate_rps"]: e["met"] for e in out.evaluations}
    assert all(v for r, v in met.items() if r <= lo) and not any(v for r, v in met.items() if r >= hi)
    again = simulate_serving(WorkloadSpec(**{**spec.__dict__, "rate_rps": out.rate_rps, "num_requests": 1500}),
                             [rep], slo=slo)
    assert again.summary["slo_met"]
    with pytest.raises(UserError):
        find_max_rate(WorkloadSpec(arrival="closed_loop"), [rep], slo, 1.0, 2.0)
    infeasible = find_max_rate(spec, [rep], SLOThresholds(ttft_ms=5.0), lo_rps=10.0, hi_rps=20.0, num_requests=200)
    assert not infeasible.feasible


def test_plots_are_written(tmp_path):
    from llmplan.sim.plots import plot_report

    res = simulate_serving(WorkloadSpec(num_requests=200, rate_rps=5.0), [make_replica()] * 2)
    paths = plot_report(res, tmp_path / "plots")
    assert [p.name for p in paths] == ["latency_cdf.png", "timeseries.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_latency_plot_has_titles_units_and_slo_lines():
    """Each panel is titled, its axis names the unit, and every SLO limit of the panel's metric is
    a labelled dashed line at the limit; metrics without an SLO get none."""
    import matplotlib.pyplot as plt

    from llmplan.sim.plots import latency_cdf_figure

    res = simulate_serving(WorkloadSpec(num_requests=200, rate_rps=5.0), [make_replica()])
    fig = latency_cdf_figure(res, {"ttft": [(250.0, "TTFT p90 <= 250 ms"), (400.0, "TTFT p99 <= 400 ms")],
                                   "tpot": [(30.0, "TPOT p90 <= 30 ms")]})
    try:
        ttft, tpot, e2e = fig.axes[:3]
        assert fig._suptitle is not None and fig._suptitle.get_text()
        assert all(ax.get_title() for ax in (ttft, tpot, e2e))
        assert [ax.get_xlabel() for ax in (ttft, tpot, e2e)] == ["TTFT (ms)", "TPOT (ms)", "end-to-end (ms)"]

        def slo(ax):
            return sorted((line.get_xdata()[0], line.get_label()) for line in ax.get_lines()
                          if line.get_label().startswith("SLO "))

        assert slo(ttft) == [(250.0, "SLO TTFT p90 <= 250 ms"), (400.0, "SLO TTFT p99 <= 400 ms")]
        assert slo(tpot) == [(30.0, "SLO TPOT p90 <= 30 ms")]
        assert slo(e2e) == []
    finally:
        plt.close(fig)


def test_window_can_measure_everything():
    res = simulate_serving(WorkloadSpec(num_requests=100, rate_rps=5.0), [make_replica()],
                           window=MeasureWindow(0.0, 0.0))
    assert res.summary["measured_requests"] == 100 and res.requests["measured"].all()

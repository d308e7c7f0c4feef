"""When `plan` chooses a disaggregated split, the console, `whatif` (rows and curve points) and
sweep summaries lead with / report the CHOSEN deployment, not the aggregated selection
(optimizer/chosen_console.py, optimizer/report.py render, llmplan/cli/chosen_figures.py)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from rich.console import Console

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.resolve import to_app
from llmplan.cli.sweep_summary import SweptJob, job_row
from llmplan.cli.whatif_cmd import run_whatif

# long prompts and a 12 ms TPOT on H100s: a 1P1D-style split is cheaper than aggregated (test_mode_select.py)
SPLIT = ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization", "workload.rate_rps=10",
         "slo.tpot_p90_ms=12", "slo.ttft_p90_ms=3000"]
AGG = ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast"]


def _plan(args: list[str], out) -> tuple[int, dict, str]:
    buf = io.StringIO()
    rc = run_plan(compose("plan", args), out, Console(file=buf, width=100, no_color=True))
    return rc, json.loads((out / "plan.json").read_text()), buf.getvalue()


@pytest.fixture(scope="module")
def split_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("split")
    rc, d, text = _plan(SPLIT, out)
    assert rc == 0 and d["mode"] == "disagg", "the fixture's config must choose the split"
    return out, d, text


def test_console_opens_with_the_chosen_split_then_the_mode_table_then_the_aggregated_alternative(split_plan):
    _, d, text = split_plan
    lines = text.splitlines()
    assert lines[0].startswith("llmplan llama3_1_8b")
    xpyd = d["chosen_deployment"]["xpyd"]
    # the first block after the header names the chosen split, its cost, GPUs and $/M tokens
    head = " ".join(lines[1:3])
    assert head.startswith(f"Chosen deployment: disaggregated {xpyd}, ${d['total_usd_per_hour']:.2f}/h")
    assert f"${d['total_usd_per_month']:,.0f}/month" in head and f"{d['total_gpus']} GPUs" in head
    assert f"${d['usd_per_million_output_tokens']:.3f} per million output tokens" in head
    chosen, modes = text.index("Chosen deployment:"), text.index("Serving mode (search.modes)")
    alt = text.index("Aggregated alternative (not chosen")
    assert chosen < modes < alt and text.count("Serving mode (search.modes)") == 1
    block = text[chosen:modes]
    for dep in d["deployments"]:  # each pool: role, GPU, workers, GPUs, TP/PP/EP, precision/kv, $/h
        row = next(ln for ln in block.splitlines() if ln.lstrip().startswith(dep["role"] + " "))
        cells = row.split()
        assert cells[:5] == [dep["role"], dep["gpu"], str(dep["replicas"]),
                             str(dep["replicas"] * dep["gpus_per_replica"]), f"{dep['tp']}/{dep['pp']}/{dep['ep']}"]
        assert f"{dep['precision']}/{dep['kv_cache_dtype']}" in cells and f"{dep['usd_per_hour']:.2f}" in cells
    # the split's simulated latencies at the SLO percentile and P(every SLO met), before the mode table
    dep = d["deployments"][0]
    src = dep["latency_source"]["ttft"]
    assert f"latency ({src}, the whole split): TTFT p90 {dep['ttft_ms']:.0f} ms, TPOT p90 {dep['tpot_ms']:.1f} ms" \
        in block
    assert f"P(every SLO met) {xpyd} = {d['every_slo_probability']:.2f}" in block
    # the aggregated alternative's table carries plan.json 'aggregated' figures
    assert f"${d['aggregated']['total_usd_per_hour']:.2f}/h" in text[alt:alt + 200]


def test_chosen_split_table_fits_100_columns_unfolded(split_plan):
    _, d, text = split_plan
    block = text[text.index("Chosen deployment:"):text.index("Serving mode (search.modes)")]
    table = [ln for ln in block.splitlines() if ln.lstrip().startswith(("pool ", "prefill ", "decode "))]
    assert len(table) == 1 + len(d["deployments"])  # one header line and one line per pool: no folded cells
    assert max(len(ln.rstrip()) for ln in text.splitlines()) <= 100


def test_aggregated_choice_keeps_the_aggregated_table_first(tmp_path):
    rc, d, text = _plan(AGG, tmp_path)
    assert rc == 0 and d["mode"] == "agg"
    second = text.splitlines()[1]
    assert second.startswith(f"Cheapest deployment: ${d['total_usd_per_hour']:.2f}/h")
    assert "Chosen deployment:" not in text and "Aggregated alternative" not in text
    if d["mode_selection"]:
        assert text.index("Cheapest deployment") < text.index("Serving mode (search.modes)")


def test_sweep_row_reports_the_chosen_split_with_pool_roles(split_plan):
    out, d, _ = split_plan
    row = job_row(SweptJob(0, "x=1", "x=1", out, 0))
    assert row["mode"] == "disagg" and row["total_usd_per_hour"] == d["total_usd_per_hour"]
    assert row["total_gpus"] == d["total_gpus"] and row["total_usd_per_hour"] < d["aggregated"]["total_usd_per_hour"]
    pools = row["deployment"].split(" + ")
    assert [p.split()[0] for p in pools] == [x["role"] for x in d["deployments"]] == ["prefill", "decode"]
    assert pools[0].split()[1:3] == [f"{d['deployments'][0]['replicas']}x", d["deployments"][0]["gpu"]]


def test_whatif_rows_report_the_chosen_deployment(split_plan, tmp_path):
    _, d, _ = split_plan
    buf = io.StringIO()
    assert run_whatif(compose("whatif", SPLIT + ["whatif.rate_scale=1"]), tmp_path,
                      Console(file=buf, width=160, no_color=True)) == 0
    w = json.loads((tmp_path / "whatif.json").read_text())
    for side in ("baseline", "whatif"):
        s = w[side]
        assert s["mode"] == d["mode"] == "disagg"
        assert s["total_usd_per_hour"] == d["total_usd_per_hour"] and s["total_gpus"] == d["total_gpus"]
        assert s["usd_per_million_output_tokens"] == d["usd_per_million_output_tokens"]
        assert s["joules_per_output_token"] == pytest.approx(d["energy"]["joules_per_output_token"], rel=1e-3)
    text = buf.getvalue()
    mode_row = next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith("mode"))
    assert mode_row.count(f"disaggregated {d['chosen_deployment']['xpyd']}") == 2
    dep_row = next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith("deployment"))
    assert "prefill" in dep_row and "decode" in dep_row
    # a split has no replica: the capacity row states the whole split's (its smaller pool's)
    cap = min(x["replicas"] * x["capacity_rps_per_replica"] for x in d["deployments"])
    cap_row = next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith("capacity"))
    assert cap_row.count(f"whole split: {cap:.2f}") == 2 and "+0.0%" in cap_row
    # the sweep summary of a whatif job names each side's mode
    row = job_row(SweptJob(0, "x=1", "x=1", tmp_path, 0))
    assert row["baseline_mode"] == row["whatif_mode"] == "disagg"
    assert row["baseline_usd_per_hour"] == d["total_usd_per_hour"]


def test_curve_point_reports_the_chosen_split(split_plan, tmp_path):
    _, d, _ = split_plan
    buf = io.StringIO()
    run_whatif(compose("whatif", SPLIT + ["whatif.curve.figure=rate", "whatif.curve.scales=[1]"]), tmp_path,
               Console(file=buf, width=160, no_color=True))
    row = pd.read_csv(tmp_path / "whatif_curve.csv").iloc[0]
    assert row["mode"] == "disagg" and bool(row["feasible"])
    assert row["usd_per_hour"] == pytest.approx(d["total_usd_per_hour"]) and row["total_gpus"] == d["total_gpus"]
    assert row["usd_per_million_output_tokens"] == pytest.approx(d["usd_per_million_output_tokens"])
    assert row["joules_per_output_token"] == pytest.approx(d["energy"]["joules_per_output_token"], rel=1e-3)
    assert row["deployment"].startswith("prefill ") and " + decode " in row["deployment"]
    assert row["every_slo_probability"] == pytest.approx(d["every_slo_probability"])
    # at capacity: the smaller pool's SLO capacity (workers x capacity per worker x search.max_load)
    max_load = to_app(compose("plan", SPLIT)).search.max_load
    pools = d["disaggregated"]["pools"]
    assert row["capacity_rps"] == pytest.approx(min(p["workers"] * p["capacity_rps_per_worker"] for p in pools)
                                                * max_load, rel=1e-3)
    assert row["capacity_output_tokens_per_s_per_gpu"] == pytest.approx(
        row["capacity_rps"] * d["workload"]["mean_output_tokens"] / d["total_gpus"], rel=1e-3)
    assert pd.isna(row["capacity_joules_per_output_token"])
    assert "J/tok at capacity is left empty" in buf.getvalue()


def test_columns_sets_the_console_width(monkeypatch):
    """`COLUMNS=100 llmplan plan` renders at 100 columns (issue 11); unset, a pipe gets 160."""
    from llmplan.progress import make_console

    monkeypatch.setenv("COLUMNS", "100")
    assert make_console().width == 100
    monkeypatch.delenv("COLUMNS")
    assert make_console().width == 160  # pytest's stdout is not a terminal

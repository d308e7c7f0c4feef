"""The plan's choice between aggregated and disaggregated serving (optimizer/mode_select.py):
the cheapest allowed mode meeting the SLOs wins, search.modes restricts it, and the output says
when disaggregated candidates were not searched and why."""

from __future__ import annotations

import pytest

from llmplan.errors import UserError
from llmplan.optimizer.mode_select import check_modes, choose, disagg_skip_reason
from llmplan.optimizer.types import SLOTarget, WorkloadStats


def _row(mode, usd, gpus, met=True, allowed=True):
    return {"mode": mode, "label": mode, "pools": "x", "usd_per_hour": usd, "gpus": gpus, "meets_slo": met,
            "basis": "analytical", "allowed": allowed, "chosen": False, "why": ""}


def test_choose_is_the_cheapest_allowed_mode_meeting_the_slos():
    rows = [_row("agg", 10.0, 4), _row("disagg", 8.0, 4)]
    assert choose(rows) == "disagg" and rows[1]["chosen"] and not rows[0]["chosen"]
    # the disaggregated simulation misses a target: the dearer aggregated answer wins
    assert choose([_row("agg", 10.0, 4), _row("disagg", 8.0, 4, met=False)]) == "agg"
    # not allowed by search.modes
    assert choose([_row("agg", 10.0, 4), _row("disagg", 8.0, 4, allowed=False)]) == "agg"
    # same price: fewer GPUs, then aggregated
    assert choose([_row("agg", 8.0, 5), _row("disagg", 8.0, 4)]) == "disagg"
    assert choose([_row("agg", 8.0, 4), _row("disagg", 8.0, 4)]) == "agg"
    # nothing meets the SLOs
    assert choose([_row("agg", None, None, met=False), _row("disagg", 8.0, 4, met=False)]) is None


@pytest.mark.parametrize("bad", [[], ["agg", "split"], "agg", None])
def test_bad_modes_are_refused_naming_the_key(bad):
    with pytest.raises(UserError) as e:
        check_modes(bad)
    assert e.value.key == "search.modes"


def test_skip_reasons_name_the_setting():
    assert disagg_skip_reason(["agg", "disagg"], False, "vllm") is None
    assert "search.modes=[agg]" in disagg_skip_reason(["agg"], False, "sglang")
    assert "search.uniform" in disagg_skip_reason(["agg", "disagg"], True, "vllm")
    assert "mystery" in disagg_skip_reason(["agg", "disagg"], False, "mystery")


def _plan(I, O, ttft_ms, tpot_ms, rate, modes=("agg", "disagg"), uniform=False):
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.optimizer.planner import SearchSpace, plan
    from llmplan.sim.types import EngineProfile

    gpu = get_gpu("h100_sxm")
    wl = WorkloadStats(rate_rps=rate, mean_input_tokens=I, mean_output_tokens=O, max_request_tokens=I + O)
    slos = [SLOTarget("ttft", 90, ttft_ms), SLOTarget("tpot", 90, tpot_ms)]
    space = SearchSpace(tp=[1, 2], pp=[1], ep=[1], precision=["bf16", "fp8"], max_batch=[64, 256], finalists=0,
                        modes=list(modes), uniform=uniform)
    return plan(load_model("llama3_1_8b"), [(gpu, gpu.usd_per_hour)], EngineProfile(name="vllm"), wl, slos, space,
                {}, "spec")


def _rows(res):
    return {r["mode"]: r for r in res.mode_selection}


def test_long_prompts_and_a_tight_tpot_choose_disaggregated():
    """16k-token prompts, 12 ms TPOT: aggregated replicas must keep prefill chunks out of the decode
    steps' way, a separate prefill pool need not (about 40% cheaper here)."""
    res = _plan(16000, 200, 5000.0, 12.0, 5.0)
    rows = _rows(res)
    assert res.chosen_mode == "disagg" and res.feasible
    assert rows["disagg"]["usd_per_hour"] < rows["agg"]["usd_per_hour"] and rows["disagg"]["chosen"]
    d = res.disaggregated
    assert d["chosen"] and d["recommended"] and rows["disagg"]["label"] == d["xpyd"]
    assert d["total_usd_per_hour"] == pytest.approx(sum(p["usd_per_hour"] for p in d["pools"]), rel=1e-6)
    assert any("chosen deployment is disaggregated" in n for n in res.notes)
    # restricted to aggregated: disaggregated is not searched, and the output says so
    only_agg = _plan(16000, 200, 5000.0, 12.0, 5.0, modes=["agg"])
    assert only_agg.chosen_mode == "agg" and only_agg.disaggregated is None
    assert any("not searched: search.modes=[agg]" in n for n in only_agg.notes)
    assert _rows(only_agg)["agg"]["usd_per_hour"] == rows["agg"]["usd_per_hour"]


def test_short_prompts_and_a_loose_tpot_choose_aggregated():
    """1k prompts at 20 req/s fit one aggregated GPU; a split needs at least two."""
    res = _plan(1000, 250, 1000.0, 50.0, 20.0)
    rows = _rows(res)
    assert res.chosen_mode == "agg" and rows["agg"]["chosen"] and not rows["disagg"]["chosen"]
    assert rows["agg"]["usd_per_hour"] < rows["disagg"]["usd_per_hour"]
    assert not res.disaggregated["chosen"]
    # search.modes=[disagg]: the split is the answer, the aggregated one is shown as not allowed
    forced = _plan(1000, 250, 1000.0, 50.0, 20.0, modes=["disagg"])
    assert forced.chosen_mode == "disagg" and not _rows(forced)["agg"]["allowed"]
    assert forced.disaggregated["chosen"]


def test_uniform_search_states_why_disaggregated_is_not_searched():
    res = _plan(1000, 250, 1000.0, 50.0, 20.0, uniform=True)
    assert res.disaggregated is None and res.chosen_mode == "agg"
    assert any("not searched: search.uniform=true" in n for n in res.notes)
    assert "search.uniform" in _rows(res)["disagg"]["why"]


def test_plan_command_outputs_follow_the_chosen_mode(tmp_path):
    """`llmplan plan` with long prompts and a 12 ms TPOT: plan.json's chosen deployment, the
    deploy/ index and the launch files name the disaggregated split; report.html shows the mode table."""
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization",
                                   "workload.rate_rps=10", "slo.tpot_p90_ms=12", "slo.ttft_p90_ms=3000",
                                   "report.html=true"]), tmp_path)
    assert rc == 0
    d = json.loads((tmp_path / "plan.json").read_text())
    rows = {r["mode"]: r for r in d["mode_selection"]}
    assert d["mode"] == "disagg" and rows["disagg"]["chosen"] and not rows["agg"]["chosen"]
    chosen = d["chosen_deployment"]
    assert chosen["mode"] == "disaggregated" and chosen["xpyd"] == d["disaggregated"]["xpyd"]
    assert chosen["total_usd_per_hour"] == rows["disagg"]["usd_per_hour"] < rows["agg"]["usd_per_hour"]
    index = json.loads((tmp_path / "deploy" / "deploy.json").read_text())
    assert index["chosen_mode"] == "disagg" and index["disaggregated"] == d["deploy"]["disaggregated"]
    assert index["pools"] == d["deploy"]["pools"]
    assert d["deploy"]["chosen_mode"] == "disagg" and d["deploy"]["disaggregated"]["recommended"]
    assert "CHOSEN deployment" in (tmp_path / "deploy" / "disagg" / "router.sh").read_text()
    page = (tmp_path / "report.html").read_text()
    assert f"Chosen deployment (disaggregated): {chosen['xpyd']}" in page and "id='modes'" in page
    answer = page[page.index("id='answer'"):page.index("</section>", page.index("id='answer'"))]
    assert f"Chosen: disaggregated {chosen['xpyd']}" in answer and "describe this split" in answer
    # the answer's pools are the split's (role-labelled); the aggregated selection has its own section
    assert "prefill 1x h100_sxm" in answer and "decode 1x h100_sxm" in answer
    assert "id='aggregated'><h2>Aggregated alternative (not chosen)" in page
    # plan.json's top level describes the split; the aggregated selection sits under 'aggregated'
    assert d["feasible"] is True and d["total_usd_per_hour"] == chosen["total_usd_per_hour"]
    assert d["total_gpus"] == chosen["total_gpus"] and {x["role"] for x in d["deployments"]} == {"prefill", "decode"}
    assert d["aggregated"]["total_usd_per_hour"] == rows["agg"]["usd_per_hour"]
    assert d["energy"]["mode"] == "disaggregated" and "mode" not in d["aggregated"]["energy"]
    assert len(d["kv_budget"]) == 2 and {b["role"] for b in d["kv_budget"]} == {"prefill", "decode"}


def test_plan_command_exits_3_when_no_allowed_mode_meets_the_slos(tmp_path):
    """search.modes=[disagg] with a TPOT no decode worker reaches: exit 3, not the aggregated answer."""
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "search.modes=[disagg]",
                                   "slo.tpot_p90_ms=0.5"]), tmp_path)
    assert rc == 3


def test_split_is_the_answer_when_no_aggregated_deployment_fits_the_gpus(tmp_path, capsys):
    """2 H100s allowed, 7 ms TPOT on long prompts: aggregated needs 4 GPUs, a 1P1D split 2; exit 0,
    only deploy/disagg/ is written; plan.json's top-level 'feasible' is true (the split meets the
    SLOs) while the aggregated selection's, under 'aggregated', stays false."""
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    rc = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=summarization",
                                   "workload.rate_rps=5", "slo.tpot_p90_ms=7", "slo.ttft_p90_ms=5000",
                                   "gpu.max_gpus={h100_sxm: 2}"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert rc == 0 and d["feasible"] is True and d["mode"] == "disagg"
    assert d["aggregated"]["feasible"] is False and d["aggregated"]["deployments"] == []
    assert d["chosen_deployment"]["total_gpus"] == d["total_gpus"] <= 2
    # the split's probability and energy are stated although no aggregated deployment exists
    assert 0.0 <= d["every_slo_probability"] <= 1.0 and d["energy"]["joules_per_output_token"] > 0
    # the split's energy is the sum of its pools', per output token at the plan's rate
    e = d["energy"]
    assert [p["role"] for p in e["pools"]] == ["prefill", "decode"]
    assert abs(e["gpu_power_w"] - sum(p["power_w"] for p in e["pools"])) <= 0.2
    assert abs(e["joules_per_output_token"] - e["facility_power_w"] / e["output_tokens_per_s"]) <= 1e-3
    assert (tmp_path / "deploy" / "disagg" / "router.sh").is_file()
    index = json.loads((tmp_path / "deploy" / "deploy.json").read_text())  # the index lists the split alone
    assert index == {"pools": [], "disaggregated": d["deploy"]["disaggregated"], "chosen_mode": "disagg"}
    assert d["deploy"]["pools"] == [] and d["deploy"]["index"] == "deploy/deploy.json"
    out = capsys.readouterr().out
    assert "No aggregated deployment meets the targets" in out and "No deployment meets" not in out


def test_closed_loop_users_plan_searches_aggregated_only_and_says_so(tmp_path):
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    base = ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "workload=closed_loop", "workload.concurrency=8"]
    run_plan(compose("plan", base), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["disaggregated"] is None and d["mode"] in ("agg", None)
    assert any("not searched: the closed-loop users check" in n for n in d["notes"])
    with pytest.raises(UserError) as e:
        run_plan(compose("plan", base + ["search.modes=[disagg]"]), tmp_path / "x")
    assert e.value.key == "search.modes"

"""Session-10 QA pass over the CLI: one test per defect found (each failed before its fix).

Bad input: exit code 2, the key as the user typed it, a fix, no traceback, and (where the
check used to run late) nothing planned or written first. Silently ignored settings are now
refused or said. Each case runs in well under a few seconds.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.test_cli_bad_inputs import FAST, _run
from tests.test_cli_bad_inputs import _assert_clear as _assert_error


def _assert_clear(code, out, err, key, needle=None):
    """test_cli_bad_inputs' check, and the message ends with a fix line."""
    _assert_error(code, out, err, key, needle)
    assert [ln for ln in err.splitlines() if ln.strip()][-1].lstrip().startswith("fix: "), err


CASES = [
    # a group of keys given one value: said so, with the fixed-length spelling (was "expects a value")
    (["plan", "workload.input_tokens=1000"], "workload.input_tokens",
     "workload.input_tokens.kind=fixed workload.input_tokens.mean_tokens=1000"),
    (["plan", "deployment.kv_transfer=3"], "deployment.kv_transfer", "is a group of keys"),
    # an integer out of range printed as typed (was "got 2e+06")
    (["plan", "workload.num_requests=2000000"], "workload.num_requests", "got 2000000"),
    # keys the chosen arrival process never reads (were silently ignored)
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "workload.concurrency=64"], "workload.concurrency",
     "workload=closed_loop"),
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "workload.cv=3"], "workload.cv", "gamma"),
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "workload.think_time_ms=100"], "workload.think_time_ms",
     "closed_loop"),
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "workload=closed_loop", "workload.rate_rps=5"],
     "workload.rate_rps", "sets its own rate"),
    # a fleet of an unknown GPU names fleet.gpus.<name> (was `gpu`)
    (["plan", "model=llama3_1_8b", "fleet.gpus={h100_sx: 8}"], "fleet.gpus.h100_sx", "did you mean h100_sxm"),
    # another engine's memory fraction (was silently ignored: vLLM kept 0.9)
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine=vllm", "engine.mem_fraction_static=0.5"],
     "engine.mem_fraction_static", "engine.gpu_memory_utilization=0.5"),
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine=sglang", "engine.gpu_memory_utilization=0.5"],
     "engine.gpu_memory_utilization", "engine.mem_fraction_static=0.5"),
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "engine=trtllm", "engine.gpu_memory_utilization=0.8", *FAST],
     "engine.gpu_memory_utilization", "engine.kv_cache_free_gpu_mem_fraction=0.8"),
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine=vllm", "engine.kv_cache_free_gpu_mem_fraction=0.5"],
     "engine.kv_cache_free_gpu_mem_fraction", "engine=trtllm"),
    # an unknown draft model names speculative.draft_model (was `model`)
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "speculative.method=draft_model", "speculative.k=3",
      "speculative.draft_model=no_such_draft"], "speculative.draft_model", "unknown model 'no_such_draft'"),
    # an EP degree that divides no expert count is bad input (was exit 3, "no deployment")
    (["plan", "model=deepseek_r1", "gpu=h100_sxm", "search.ep=[3]", *FAST], "search.ep", "256 experts"),
    (["simulate", "model=mixtral_8x7b", "gpu=h100_sxm", "deployment.tp=4", "deployment.ep=3"], "deployment.ep",
     "8 experts"),
    # whatif scaling a GPU the plan never considers (was two identical columns)
    (["whatif", "gpu=h100_sxm", "whatif.gpu_scale={h200_sxm: {hbm_bw_gbps: 2}}"], "whatif.gpu_scale.h200_sxm",
     "whatif.add_gpus=[h200_sxm]"),
    (["whatif", "gpu=h100_sxm", "whatif.price_scale={b200: 0.5}"], "whatif.price_scale.b200", "not a candidate"),
    (["whatif", "model=llama3_1_8b", "fleet.gpus={b200: 8}", "whatif.gpu_scale={h100_sxm: {hbm_bw_gbps: 2}}"],
     "whatif.gpu_scale.h100_sxm", "add it to fleet.gpus"),
    (["whatif", "model=llama3_1_8b", "fleet.gpus={b200: 8}", "whatif.add_gpus=[h100_sxm]"], "whatif.add_gpus",
     "would be ignored"),
    # a curve over a figure one candidate lacks (L40S: no scale-up fabric) named gpu.spec_overrides.l40s...
    (["whatif", "whatif.curve.figure=scaleup_bw_gbps", "whatif.curve.scales=[1,2]"], "whatif.curve.figure",
     "whatif.curve.gpus=[h100_sxm,h200_sxm,a100_sxm]"),
    (["whatif", "gpu=l40s", "whatif.gpu_scale={l40s: {scaleup_bw_gbps: 2}}"], "whatif.gpu_scale.l40s.scaleup_bw_gbps",
     "nothing to scale"),
    # day.* without a profile (was silently ignored)
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "day.interval_s=900"], "day.interval_s", "day.profile"),
    # same_domain with two GPU types: the fix no longer suggests smaller pools
    (["simulate", "deployment=disagg_example", "deployment.kv_transfer.placement=same_domain"],
     "deployment.kv_transfer.placement", "placement=network (or auto)"),
    # TensorRT-LLM on an AMD or Intel GPU (was planned, with a trtllm-serve launch script)
    (["plan", "model=llama3_1_8b", "gpu=mi300x", "engine=trtllm", *FAST], "engine", "mi300x is an AMD GPU"),
    (["simulate", "model=llama3_1_8b", "gpu=b60", "engine=trtllm"], "engine", "b60 is an Intel GPU"),
    (["simulate", "deployment=disagg_example", "deployment.decode.gpu=mi300x", "engine=trtllm"], "engine",
     "NVIDIA GPUs only"),
    # an engine the simulator does not model (fell back to vLLM's memory rule without a word)
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine.name=foo"], "engine.name", "unknown value 'foo'"),
    (["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine.kernel_backend=vlm"], "engine.kernel_backend",
     "did you mean vllm"),
    # scaling a figure the catalog marks unknown (a placeholder) in a what-if
    (["whatif", "gpu=l40s", "whatif.gpu_scale={l40s: {scaleout_bw_gbps: 2}}"],
     "whatif.gpu_scale.l40s.scaleout_bw_gbps", "gpu.spec_overrides="),
    # the KV-transfer error's fix names the key that gives the unknown figure
    (["simulate", "deployment=disagg_example", "model=llama3_1_8b", "deployment.prefill.gpu=l40s",
      "deployment.prefill.tp=1", "deployment.decode.tp=1"], "deployment.prefill.gpu (l40s).scaleout_bw_gbps",
     "gpu.spec_overrides='{l40s: {scaleout_bw_gbps: 50}}'"),
    # an offline throughput plan has no latency targets and no speculation (both were dropped silently)
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", "target.tokens_per_s=5000",
      "search.confidence=0.9"], "search.confidence", "offline throughput plan takes no"),
    (["plan", "model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", "target.tokens_per_s=5000",
      "speculative.method=eagle3", "speculative.k=3"], "speculative.method", "offline throughput plan takes no"),
    # a co-location plan has no P(SLO met) target and no disaggregated pools (both dropped silently)
    (["plan", "colocate=llama2_7b_13b", "search.confidence=0.9", *FAST], "search.confidence", "point prediction"),
    (["plan", "colocate=llama2_7b_13b", "search.modes=[disagg]", *FAST], "search.modes", "aggregated pools only"),
    # messages that had no fix line
    (["simulate", "workload=azure_trace", "workload.trace_format=mooncake", "workload.num_requests=50"],
     "workload.trace_path", "not valid JSON"),
    (["simulate", "workload.num_requests=0"], "workload.num_requests", "arrival=trace only"),
    (["plan", "workload.input_tokens.min_tokens=500", "workload.input_tokens.max_tokens=100"],
     "workload.input_tokens.max_tokens", "max_tokens 100 < min_tokens 500"),
]


@pytest.mark.parametrize("argv,key,needle", CASES, ids=[" ".join(c[0][1:])[:60] for c in CASES])
def test_bad_input_is_one_clear_message(argv, key, needle, capsys, tmp_path):
    code, out, err = _run(argv + [f"hydra.run.dir={tmp_path}"], capsys)
    _assert_clear(code, out, err, key, needle)


def test_smaller_pools_still_offered_when_the_domain_is_too_small(capsys, tmp_path):
    code, out, err = _run(["simulate", "deployment=disagg_example", "deployment.prefill.gpu=h100_sxm",
                           "deployment.decode.gpu=h100_sxm", "deployment.prefill.tp=4", "deployment.decode.tp=8",
                           "deployment.kv_transfer.placement=same_domain", f"hydra.run.dir={tmp_path}"], capsys)
    _assert_clear(code, out, err, "deployment.kv_transfer.placement", "smaller pools")


@pytest.mark.parametrize("day", [["day.profile=no_such_profile"], ["day.profile=diurnal_24h", "day.interval_s=0"],
                                 ["day.profile=diurnal_24h", "day.min_replicas=-1"],
                                 ["day.profile=diurnal_24h", "day.scale_up_s=1e9"]])
def test_bad_day_input_fails_before_the_plan_is_written(day, capsys, tmp_path):
    """A bad day.* input used to fail only after the whole plan ran and wrote plan.json."""
    code, out, err = _run(["plan", "model=llama3_1_8b", "gpu=h100_sxm", *day, f"hydra.run.dir={tmp_path}"], capsys)
    _assert_clear(code, out, err, day[-1].split("=")[0])
    assert not (tmp_path / "plan.json").exists()
    assert "Wrote" not in out


def test_catalog_configs_folder_checked_before_printing(capsys):
    code, out, err = _run(["catalog", "models", "--configs", "/no/such/folder"], capsys)
    _assert_clear(code, out, err, "configs", "not a folder")
    assert out == ""  # was: the whole model table, then the error


@pytest.mark.parametrize("argv,key", [(["catalog", "gpus", "--configs", "."], "configs"),
                                      (["catalog", "models", "--sources"], "sources")])
def test_catalog_option_of_the_other_listing_refused(argv, key, capsys):
    code, out, err = _run(argv, capsys)
    _assert_clear(code, out, err, key)
    assert out == ""


def test_calibrate_workers_checked_before_reading(capsys, tmp_path):
    """--workers -1 used to fail after reading every measurement table (~10 s)."""
    code, out, err = _run(["calibrate", "--measurements", str(tmp_path / "none"), "--out", str(tmp_path / "c.json"),
                           "--workers", "-1"], capsys)
    _assert_clear(code, out, err, "workers", "must be >= 1")


def test_speculation_settings_without_a_method_are_said(capsys, tmp_path):
    """`simulate speculative.k=3` (method none) ran without speculation and said nothing."""
    code, out, err = _run(["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "speculative.k=3",
                           "workload.num_requests=50", f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    notes = json.loads((tmp_path / "summary.json").read_text())["notes"]
    assert any("simulated WITHOUT speculation" in n and "speculative.k" in n for n in notes), notes
    assert "simulated WITHOUT speculation" in out


def test_draft_that_fills_one_shape_does_not_abort_the_plan(capsys, tmp_path):
    """A 7B draft leaves no KV memory on Llama-2-70B fp8 at TP1: that candidate does not fit; the plan
    goes on (was: exit 2 for the whole plan, `speculative.draft_model: ... leaves no KV memory`)."""
    code, out, err = _run(["plan", "+experiment=survey_i5_1", "search.modes=[agg]", *FAST,
                           f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "plan.json").read_text())["feasible"] is True
    rows = list(csv.DictReader((tmp_path / "candidates.csv").open()))
    filled = [r for r in rows if r["candidate"] == "h100_sxm-tp1-pp1-fp8-b256-draft_model-k4"]
    assert filled and filled[0]["verdict"] == "memory"
    assert "draft loaded the KV cache holds 0 tokens" in filled[0]["reason"]


def test_short_prefill_first_run_keeps_its_own_requests(capsys, tmp_path):
    """`simulate engine=sglang workload.num_requests=50`: the run is lengthened for its steady-state
    window, and its token budget (sized from the longest request) came from 50 draws only, so it
    refused its own request 218 (exit 2, 'more than max_model_len 8192')."""
    code, out, err = _run(["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "engine=sglang",
                           "workload.num_requests=50", f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    assert (tmp_path / "summary.json").is_file()


def test_sweep_summary_gives_an_infeasible_job_no_cost(capsys, tmp_path):
    """An infeasible job's plan.json zeros made it the $0.00 'cheapest' row of summary.csv."""
    code, out, err = _run(["plan", "-m", "model=llama3_1_8b", "gpu=h100_sxm", "slo.ttft_p90_ms=1,1000", *FAST,
                           f"hydra.sweep.dir={tmp_path}"], capsys)
    assert code == 3
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    bad, ok = rows
    assert bad["status"] == "infeasible" and ok["status"] == "ok"
    assert bad["total_usd_per_hour"] == bad["total_gpus"] == bad["usd_per_million_output_tokens"] == ""
    assert float(ok["total_usd_per_hour"]) > 0 and ok["total_gpus"] == "1"
    assert "NaN" not in (tmp_path / "summary.md").read_text()
    # the stderr line of the failed job carries its reason (was empty after 'infeasible: ')
    line = next(ln for ln in err.splitlines() if ln.startswith("job 0 "))
    assert "no candidate meets the SLOs" in line


def test_an_unknown_figure_given_in_spec_overrides_is_used(capsys, tmp_path):
    """The KV-transfer error said 'give the figure in a GPU catalog override', but
    gpu.spec_overrides kept the figure marked unknown, so the same error came back."""
    code, out, err = _run(["simulate", "deployment=disagg_example", "model=llama3_1_8b", "deployment.prefill.gpu=l40s",
                           "deployment.prefill.tp=1", "deployment.decode.tp=1", "workload.num_requests=30",
                           "gpu.spec_overrides={l40s: {scaleout_bw_gbps: 50}}", f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["requests_per_s"] > 0


def test_speculation_settings_without_a_method_are_said_disaggregated(capsys, tmp_path):
    code, out, err = _run(["simulate", "deployment=disagg_example", "speculative.k=3", "workload.num_requests=30",
                           f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    notes = json.loads((tmp_path / "summary.json").read_text())["notes"]
    assert any("simulated WITHOUT speculation" in n for n in notes), notes

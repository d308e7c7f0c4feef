"""Bad and edge inputs a demanding user tries: exit code 2, the key as typed, a fix, no traceback.

Each case is checked where it is caught (schema, override check or value check), before any
planning work starts, so the whole list runs in seconds.
"""

from __future__ import annotations

import pytest

from llmplan.cli import main

FAST = ["search.finalists=0"]


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # pragma: no cover - a SystemExit is itself a failure of the contract
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _assert_clear(code, out, err, key, needle=None):
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 2, err
    assert lines[0].startswith(f"error: {key}: "), err
    if needle:
        assert needle in err, err


CASES = [
    # keys that do not exist, with and without `+`
    (["plan", "+no_such_key=1"], "no_such_key", "no config group or key"),
    (["simulate", "+experiment=no_such_experiment"], "experiment", "unknown option 'no_such_experiment'"),
    (["plan", "slo.ttft_p9_ms=500"], "slo.ttft_p9_ms", "did you mean ttft_p99_ms"),
    (["plan", "slo.ttft_p90=500"], "slo.ttft_p90", "did you mean ttft_p90_ms"),
    (["plan", "search.finalist=2"], "search.finalist", "did you mean finalists"),
    (["plan", "workload.input_tokens.mean=5"], "workload.input_tokens.mean", "did you mean mean_tokens"),
    (["plan", "workload.rate_rps.x=5"], "workload.rate_rps.x", "single value"),
    (["plan", "+model=llama3_1_8b"], "model", "already chosen"),
    (["plan", "~slo.ttft_p90_ms"], "slo.ttft_p90_ms", "null"),
    # unknown options in every group
    *[(["plan", f"{g}=nope_xyz"], g, "unknown option 'nope_xyz'") for g in ("workload", "slo", "search", "engine", "deployment")],
    (["plan", "gpu=h100_smx"], "gpu", "did you mean h100_sxm"),
    (["plan", "model=llama3_1_7b"], "model", "did you mean"),
    # wrong types
    (["plan", "search.finalists=1.5"], "search.finalists", "expects an integer"),
    (["plan", "search.tp=4"], "search.tp", "expects a list of integers"),
    (["plan", "slo.ttft_p90_ms=fast"], "slo.ttft_p90_ms", "expects a number"),
    (["plan", "output.progress=maybe"], "output.progress", "expects a boolean"),
    (["plan", "gpu.max_gpus={h100_sxm: 2.5}"], "gpu.max_gpus.h100_sxm", "expects an integer"),
    (["plan", "slo.ttft_p90_ms=[1"], "slo.ttft_p90_ms", "cannot parse"),
    # zero, negative, NaN, huge
    (["plan", "search.finalists=-1"], "search.finalists", ">= 0"),
    (["plan", "search.max_load=0"], "search.max_load", "(0, 1]"),
    (["plan", "search.max_load=1.5"], "search.max_load", "(0, 1]"),
    (["plan", "search.tp=[0]"], "search.tp", ">= 1"),
    (["plan", "search.tp=[]"], "search.tp", "empty"),
    (["plan", "search.max_batch=[-64]"], "search.max_batch", ">= 1"),
    (["plan", "gpu.candidates=[]"], "gpu.candidates", "empty"),
    (["plan", "workload.rate_rps=nan"], "workload.rate_rps", "finite"),
    (["plan", "workload.rate_rps=inf"], "workload.rate_rps", "finite"),
    (["plan", "slo.tpot_p90_ms=inf"], "slo.tpot_p90_ms", "finite"),
    (["plan", "workload.cv=0"], "workload.cv", "> 0"),
    (["plan", "workload.output_tokens.mean_tokens=0"], "workload.output_tokens.mean_tokens", "> 0"),
    (["plan", "workload.input_tokens.min_tokens=-5"], "workload.input_tokens.min_tokens", ">= 1"),
    (["plan", "seed=-1"], "seed", ">= 0"),
    (["plan", "workload.num_requests=100000000"], "workload.num_requests", "in [0, 1,000,000]"),
    (["simulate", "model=llama3_1_8b", "deployment.replicas=100000"], "deployment.replicas", "in [1, 256]"),
    (["plan", "engine.gpu_memory_utilization=1.5"], "engine.gpu_memory_utilization", "(0, 1]"),
    (["plan", "engine.max_num_seqs=0"], "engine.max_num_seqs", ">= 1"),
    (["plan", "engine.watermark=1"], "engine.watermark", "[0, 1)"),
    # the front end (sim/frontend_ceiling.py): the key at fault is named
    (["simulate", "engine.frontend=nginx"], "engine.frontend", "one of engine, dynamo"),
    (["simulate", "engine.frontend=dynamo", "engine.frontend_per_token_ms=-0.01"], "engine.frontend_per_token_ms",
     "is negative"),
    (["simulate", "engine.frontend_per_token_ms=0.05"], "engine.frontend_per_token_ms", "engine.frontend=dynamo"),
    (["simulate", "engine=vllm", "engine.frontend=dynamo"], "engine.frontend", "has no per-token time"),
    (["simulate", "engine.frontend=dynamo", "engine.frontend_per_token_ms=0"], "engine.frontend", "given as 0"),
    (["simulate", "deployment.mode=disagg", "deployment.router=round_robin"], "deployment.router",
     "decode: a free batch slot, then the most free KV"),
    (["simulate", "model=llama3_1_8b", "deployment.replicas=0"], "deployment.replicas", "in [1, 256]"),
    (["plan", "gpu.max_gpus={h100_sxm: -1}"], "gpu.max_gpus.h100_sxm", ">= 0"),
    (["plan", "gpu.usd_per_hour={h100_sxm: 0}"], "gpu.usd_per_hour.h100_sxm", "> 0"),
    (["plan", "gpu.spec_overrides={h100_sxm: {hbm_bw_gbps: 0}}"], "gpu.spec_overrides.h100_sxm.hbm_bw_gbps", "> 0"),
    (["whatif", "whatif.slo_scale=0"], "whatif.slo_scale", "> 0"),
    (["whatif", "whatif.price_scale={h100_sxm: -1}"], "whatif.price_scale.h100_sxm", "> 0"),
    # named options that do not exist
    (["plan", "search.kv_cache_dtype=int3"], "search.kv_cache_dtype", "unknown value 'int3'"),
    (["simulate", "deployment.kv_cache_dtype=fp6"], "deployment.kv_cache_dtype", "auto, bf16, fp8"),
    (["simulate", "deployment.router=random"], "deployment.router", "round_robin"),
    (["plan", "workload.arrival=poison"], "workload.arrival", "did you mean poisson"),
    (["plan", "workload.input_tokens.kind=normal"], "workload.input_tokens.kind", "lognormal"),
    (["simulate", "output.requests_format=xlsx"], "output.requests_format", "csv, parquet"),
    # GPU names in mappings and lists: the key the user typed, not `gpu`
    (["plan", "gpu.max_gpus={h100_smx: 4}"], "gpu.max_gpus.h100_smx", "did you mean h100_sxm"),
    (["plan", "gpu.usd_per_hour={h100_smx: 2}"], "gpu.usd_per_hour.h100_smx", "did you mean h100_sxm"),
    (["whatif", "whatif.add_gpus=[tpu_v5]"], "whatif.add_gpus", "unknown GPU"),
    (["whatif", "whatif.gpu_scale={h100_smx: {hbm_bw_gbps: 2}}"], "whatif.gpu_scale.h100_smx", "did you mean h100_sxm"),
    (["whatif", "whatif.price_scale={b2000: 0.5}"], "whatif.price_scale.b2000", "unknown GPU"),
    (["simulate", "deployment.gpu=h100_smx"], "deployment.gpu", "unknown GPU"),
    # command-line flags and sweeps
    (["plan", "--cfg"], "--cfg", "needs a value"),
    (["plan", "--cfg", "everything"], "--cfg", "job, --cfg hydra"),
    (["plan", "--frobnicate"], "--frobnicate", "unknown option"),
    (["plan", "model=llama3_1_8b,qwen3_8b"], "model", "add -m"),
    (["plan", "hydra.job.chdir=maybe"], "hydra.job.chdir", "maybe"),
]


@pytest.mark.parametrize("argv,key,needle", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_names_the_key(argv, key, needle, capsys, tmp_path):
    code, out, err = _run([argv[0], *FAST, f"hydra.run.dir={tmp_path / 'out'}", *argv[1:]], capsys)
    _assert_clear(code, out, err, key, needle)
    assert not (tmp_path / "out" / "plan.json").exists()


def test_output_dir_that_is_a_file(capsys, tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    code, out, err = _run(["plan", "model=llama3_1_8b", f"hydra.run.dir={f}"] + FAST, capsys)
    _assert_clear(code, out, err, "hydra.run.dir", "existing file")


def test_output_dir_that_cannot_be_created(capsys, tmp_path):
    code, out, err = _run(["plan", "model=llama3_1_8b", "hydra.run.dir=/proc/llmplan_cannot_be_here"] + FAST, capsys)
    _assert_clear(code, out, err, "hydra.run.dir", "cannot create output folder")


def test_sweep_dir_that_is_a_file(capsys, tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    code, out, err = _run(["plan", "-m", "model=llama3_1_8b,qwen3_8b", f"hydra.sweep.dir={f}"] + FAST, capsys)
    _assert_clear(code, out, err, "hydra.sweep.dir", "existing file")


def test_a_tiny_rate_gets_a_real_deployment(tmp_path):
    """1e-9 req/s is within the ILP's tolerance of zero: still at least one replica, never $0/h."""
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "workload.rate_rps=1e-9"] + FAST), tmp_path)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert code == 0 and plan["feasible"]
    assert plan["total_gpus"] >= 1 and plan["total_usd_per_hour"] > 0

"""`llmplan simulate`: one deployment, full metrics (simulated percentiles + analytical breakdown)."""

from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from llmplan.cli import hydra_app
from llmplan.errors import EXIT_OK, ConfigError, InfeasibleDeployment
from llmplan.progress import make_console
from llmplan.cli.resolve import check_engine, check_search, resolve_gpu, resolve_model, resolve_slos, to_app
from llmplan.optimizer.enumerate import kv_dtype_for
from llmplan.optimizer.evaluate import ReplicaAnalyzer
from llmplan.sim.deployment import Deployment, build, parallelism_problem
from llmplan.sim.types import Parallelism, Precision, StepShape

SUMMARY = ("Simulate one deployment (the `deployment` group: gpu, tp, pp, ep, precision, replicas,\n"
           "router) under a workload: TTFT/TPOT/E2E percentiles, throughput, goodput, SLO attainment,\n"
           "and a per-operator breakdown of a prefill and a decode step. Writes summary.json,\n"
           "requests.csv (and plots with output.plots=true) to the output directory.\n"
           "deployment.mode=disagg (or deployment=disagg_example): a prefill and a decode pool,\n"
           "deployment.{prefill,decode}.{gpu,tp,pp,ep,precision,workers,...} (docs/DISAGG.md).\n"
           "+experiment=NAME: a survey scenario from conf/experiment/ (docs/EXPERIMENTS.md).")

from llmplan.sim.serving import DEFAULT_RATE_FRACTION as LOAD_FRACTION  # load when workload.rate_rps is null


def resolve_deployment(app, model, console: Console | None = None) -> tuple[Deployment, object, object]:
    d = app.deployment
    gpu_key = d.gpu or (app.gpu.candidates[0] if app.gpu.candidates else None)
    if gpu_key is None:
        raise ConfigError("no GPU chosen", key="deployment.gpu", fix="e.g. gpu=h100_sxm")
    gpu = resolve_gpu(gpu_key, app)
    if d.replicas < 1:
        raise ConfigError("must be >= 1", key="deployment.replicas", fix="e.g. deployment.replicas=2")
    check_search(model, [d.tp] if d.tp else [1], [d.ep], [d.precision], key="deployment")
    prec = Precision(d.precision, kv_dtype_for(d.precision, d.kv_cache_dtype, gpu))
    tps = [d.tp] if d.tp else [t for t in (1, 2, 4, 8) if model.num_attention_heads % t == 0]
    last_reason = ""
    for tp in tps:
        par = Parallelism(tp, d.pp, d.ep, dp=d.dp)
        problem = parallelism_problem(model, gpu, par, prec)
        if problem:
            dp_key = problem.startswith("dp=") or "x dp=" in problem
            raise ConfigError(problem, key="deployment.dp" if dp_key else "deployment",
                              fix="deployment.dp=1 (dense models: use deployment.replicas), or ep dividing tp x dp"
                              if dp_key else "choose tp/pp/ep/precision the model and GPU support")
        dep = Deployment(model, gpu, par, prec, app.engine, d.replicas)
        step, mem = build(dep, app.calibration, min_kv_tokens=4096)
        if mem.fits:
            return dep, step, mem
        last_reason = mem.reason
    raise InfeasibleDeployment(f"{model.key} does not fit on {gpu.key} with tp={tps[-1]} pp={d.pp} "
                               f"{prec.weights}: {last_reason}", key="deployment",
                               fix="raise deployment.tp / deployment.pp, use precision=fp8, or a GPU with more memory")


def breakdown_table(title: str, step, shape: StepShape) -> Table:
    bd = step.breakdown(shape)
    total = bd.latency_ms
    t = Table(title=f"{title}: {total:.2f} ms", title_justify="left")
    for c in ("operator", "family", "ms", "share", "bound", "tier"):
        t.add_column(c, justify="right" if c in ("ms", "share") else "left")
    for o in sorted(bd.ops, key=lambda o: -o.latency_ms):
        t.add_row(o.name, o.family, f"{o.latency_ms:.3f}", f"{o.latency_ms / total:.1%}" if total else "-", o.bound, o.tier)
    return t


def breakdown_json(step, shape: StepShape) -> dict:
    bd = step.breakdown(shape)
    return {"latency_ms": round(bd.latency_ms, 4), "ops": [
        {"name": o.name, "family": o.family, "ms": round(o.latency_ms, 4), "bound": o.bound, "tier": o.tier}
        for o in bd.ops]}


def run_simulate(cfg: DictConfig, out_dir: Path | None = None, console: Console | None = None) -> int:
    console = console or make_console()
    t0 = time.perf_counter()
    app = to_app(cfg)
    model = resolve_model(app)
    check_engine(app.engine)
    slos = resolve_slos(app)
    from llmplan.cli.simulate_disagg import check_mode_keys, run_disagg

    check_mode_keys(app)
    if app.colocate.models:  # several models on one pool (docs/SIMULATOR.md, co-location)
        from llmplan.cli.simulate_colocate import run_colocate

        return run_colocate(app, out_dir or _output_dir(), console, t0)
    if app.deployment.mode == "disagg" and app.speculative.method not in ("none", "off"):
        raise ConfigError("speculative decoding is simulated for aggregated deployments only", key="speculative.method",
                          fix="speculative.method=none with deployment.mode=disagg")
    if app.deployment.mode == "disagg":
        return run_disagg(app, model, slos, out_dir or _output_dir(), console, t0)
    dep, step, mem = resolve_deployment(app, model)
    from llmplan.cli.simulate_run import (experiment_result, length_stats, render_tail, run_des,
                                          speculation_unused_note, write_summary)

    # analytical view (capacity, latency at the load) from the workload's own length sample
    wl_spec = app.workload
    stats = length_stats(app, model)
    mean_in, mean_out = stats.mean_input_tokens, stats.mean_output_tokens
    an = ReplicaAnalyzer(step, stats, app.engine.max_num_seqs, app.engine.max_num_batched_tokens,
                         mem.kv_capacity_tokens, app.engine.chunked_prefill)
    cap_rps, limit, _, _ = an.capacity([])
    notes: list[str] = []
    from llmplan.sim.frontend_ceiling import frontend_note

    if frontend_note(app.engine):   # engine.frontend=dynamo: the per-token ceiling is on (stated)
        notes.append(frontend_note(app.engine))
    unused = speculation_unused_note(app.speculative)
    if unused:
        notes.append(unused)
    rate = wl_spec.rate_rps
    if rate is None and wl_spec.arrival in ("poisson", "gamma"):
        rate = round(LOAD_FRACTION * cap_rps * dep.replicas, 4)
        notes.append(f"workload.rate_rps not set: driving at {rate:g} req/s = {LOAD_FRACTION:.0%} of the analytical "
                     f"capacity ({cap_rps:.2f} req/s per replica, limited by {limit or 'throughput'})")
    an_rate = rate if rate is not None else (stats.rate_rps if wl_spec.arrival == "trace" else None)
    pcts = sorted({s.percentile for s in slos} | {50.0, 90.0, 99.0})
    an_op = an.operating_point(an_rate / dep.replicas, pcts) if an_rate else None
    sim_summary, extra_files = run_des(app, dep, step, mem, rate, slos, out_dir or _output_dir(), console,
                                       stats.max_request_tokens, (mean_in, mean_out))
    decode_shape = StepShape.build([], [int(mean_in + mean_out / 2)] * max(1, min(app.engine.max_num_seqs, 32)))
    prefill_shape = StepShape.build([(int(min(mean_in, app.engine.max_num_batched_tokens)), 0)], [])
    summary = dict(sim_summary)
    summary["mode"] = "aggregated"
    summary["deployment"] = {
        "mode": "aggregated",
        "model": model.key, "gpu": dep.gpu.key, "tp": dep.par.tp, "pp": dep.par.pp, "ep": dep.par.ep,
        "dp": dep.par.dp,
        "precision": dep.prec.weights, "kv_cache_dtype": dep.prec.kv_cache, "replicas": dep.replicas,
        "gpus": dep.total_gpus, "engine": app.engine.name, "router": app.deployment.router,
        "usd_per_hour": round(dep.total_gpus * dep.gpu.usd_per_hour, 4),
        "kv_capacity_tokens_per_replica": mem.kv_capacity_tokens, "weights_gb_per_gpu": round(mem.weights_gb, 3),
        "calibration_tier": getattr(step.kernels, "tier", "spec"),
    }
    summary["analytical"] = {
        "capacity_rps": round(cap_rps * dep.replicas, 4), "capacity_limit": limit, "rate_rps": an_rate,
        "ttft_ms": {f"p{q:g}": round(v, 3) for q, v in an_op.ttft_ms.items() if q != "mean"} if an_op else None,
        "tpot_ms": {f"p{q:g}": round(v, 3) for q, v in an_op.tpot_ms.items() if q != "mean"} if an_op else None,
    }
    summary["step_breakdown"] = {"prefill": breakdown_json(step, prefill_shape), "decode": breakdown_json(step, decode_shape)}
    from llmplan.sim.uncertainty import step_band

    bands = {}
    for name, shape in (("tpot", decode_shape), ("ttft", prefill_shape)):
        b = step_band(step, shape, app.calibration if app.calibration not in (None, "spec") else None) \
            if summary["deployment"]["calibration_tier"] != "spec" else None
        if b is not None:
            bands[name] = {"p50_pct": b.p50_pct, "p90_pct": b.p90_pct, "tier": b.tier, "extrapolated": list(b.extrapolated)}
            if b.extrapolated:
                notes.append(f"{name} step: kernel queries outside the calibrated shape range: {', '.join(b.extrapolated)}")
    summary["error_band"] = bands
    from llmplan.sim.serving_bands import served_bands

    summary["served_band"] = served_bands(app.engine.name, summary)
    summary["notes"] = notes + summary.get("notes", [])
    summary["experiment"] = experiment_result(app, summary)
    out = out_dir or _output_dir()
    write_summary(out, summary)
    from llmplan.cli.simulate_run import render_summary

    render_summary(console, summary, slos)
    for name, b in bands.items():
        console.print(f"{name.upper()} step-time error band ({b['tier']} tier, held-out kernel residuals): "
                      f"median ±{b['p50_pct']:.1f}%, p90 ±{b['p90_pct']:.1f}%")
    parts = [f"{m.upper()} mean {v['mean_ms_low']:.1f}-{v['mean_ms_high']:.1f} ms (x{v['factor_low']:.2f}-x{v['factor_high']:.2f})"
             for m, v in summary["served_band"].items() if v and v.get("mean_ms_low") is not None]
    if parts:
        console.print(f"Served-latency p90 band ({app.engine.name}, from held-out served runs; docs/ACCURACY.md): "
                      + ", ".join(parts))
    console.print(breakdown_table(f"Prefill step ({prefill_shape.prefill_tokens} tokens)", step, prefill_shape))
    console.print(breakdown_table(f"Decode step ({decode_shape.decode_seqs} sequences)", step, decode_shape))
    render_tail(console, summary, out, extra_files, t0)
    return EXIT_OK


def _output_dir() -> Path:
    from llmplan.cli.plan_cmd import output_dir

    return output_dir()


def main(argv: list[str]) -> int:
    return hydra_app.run("simulate", "simulate", argv, lambda cfg: run_simulate(cfg), SUMMARY)



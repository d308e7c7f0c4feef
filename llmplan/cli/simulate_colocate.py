"""`llmplan simulate` with `colocate.models` set: several models on one GPU pool
(sim/colocation.py). Writes summary.json (per model, the pool, the memory split, the
interference) and each model's requests table under <out>/<model>/."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from llmplan.cli.colocate_inputs import ColocateInput, colocate_inputs
from llmplan.cli.resolve import check_search, resolve_gpu
from llmplan.errors import EXIT_OK, ConfigError, InfeasibleDeployment
from llmplan.optimizer.enumerate import kv_dtype_for
from llmplan.sim.colocation import ColocatedModel, Pool, build_pool, simulate_colocated
from llmplan.sim.types import Parallelism, Precision

#: deployment keys a co-located pool reads
POOL_KEYS = ("gpu", "tp", "pp", "ep", "precision", "kv_cache_dtype", "replicas")


def resolve_pool(app, inputs: list[ColocateInput]) -> tuple[object, Parallelism, Precision, Pool]:
    """GPU, parallelism, precision and memory split of the shared pool (the smallest TP of
    1, 2, 4, 8 where every model fits together, unless deployment.tp is set)."""
    d = app.deployment
    if d.mode != "aggregated":
        raise ConfigError("co-located models share one aggregated pool", key="deployment.mode",
                          fix="drop deployment.mode=disagg with colocate")
    if app.speculative.method not in ("none", "off"):
        raise ConfigError("speculative decoding with co-location is not simulated", key="speculative.method",
                          fix="speculative.method=none with colocate")
    gpu_key = d.gpu or (app.gpu.candidates[0] if app.gpu.candidates else None)
    if gpu_key is None:
        raise ConfigError("no GPU chosen", key="deployment.gpu", fix="e.g. deployment.gpu=a100_sxm")
    gpu = resolve_gpu(gpu_key, app)
    prec = Precision(d.precision, kv_dtype_for(d.precision, d.kv_cache_dtype, gpu))
    tps = [d.tp] if d.tp else [t for t in (1, 2, 4, 8) if t <= gpu.scaleup_domain_size]
    last: InfeasibleDeployment | None = None
    for tp in tps:
        for c in inputs:
            check_search(c.model, [tp], [d.ep], [d.precision], key="deployment")
        par = Parallelism(tp, d.pp, d.ep)
        try:
            pool = build_pool([c.model for c in inputs], gpu, par, prec, app.engine, app.calibration,
                              [c.stats.max_request_tokens for c in inputs], [c.workload.rate_rps or 1.0 for c in inputs],
                              [c.stats.mean_input_tokens + c.stats.mean_output_tokens for c in inputs],
                              app.colocate.kv_share)
            return gpu, par, prec, pool
        except InfeasibleDeployment as exc:
            last = exc
    assert last is not None
    raise last


def run_colocate(app, out: Path, console: Console, t0: float) -> int:
    from llmplan.cli.simulate_run import des_summary, experiment_result, render_tail, write_summary
    from llmplan.optimizer.verify import thresholds

    inputs = colocate_inputs(app)
    gpu, par, prec, pool = resolve_pool(app, inputs)
    reps = app.deployment.replicas
    runs = [ColocatedModel(c.key, pool.replica_specs(i, reps), c.workload, thresholds(c.slos), app.deployment.router)
            for i, c in enumerate(inputs)]
    res = simulate_colocated(runs, seed=app.seed)
    models, files, notes = {}, [], []
    for i, (c, r) in enumerate(zip(inputs, res.results)):
        s, f = des_summary(replace(app, workload=c.workload), r, c.workload, c.slos, out / c.key)
        s["memory"] = pool.memory[i].as_dict()
        s["interference"] = {"utilization": round(res.utilizations[i], 4), "step_stretch": round(res.factors[i], 4),
                             "starved": res.starved[i]}
        models[c.key] = s
        files += f
        notes += [f"{c.key}: {n}" for n in s["notes"]]
        if res.starved[i]:
            notes.append(f"{c.key}: STARVED: the other models use {sum(res.utilizations) - res.utilizations[i]:.0%} of "
                         f"the GPU time")
    from llmplan.sim.frontend_ceiling import frontend_note

    if frontend_note(app.engine):   # engine.frontend=dynamo: the per-token ceiling is on (stated, as aggregated)
        notes.append(frontend_note(app.engine))
    total_gpus = par.gpus * reps
    summary = {
        "mode": "colocated",
        "deployment": {"mode": "colocated", "models": [c.key for c in inputs], "gpu": gpu.key, "tp": par.tp,
                       "pp": par.pp, "ep": par.ep, "precision": prec.weights, "kv_cache_dtype": prec.kv_cache,
                       "replicas": reps, "gpus": total_gpus, "engine": app.engine.name,
                       "usd_per_hour": round(total_gpus * gpu.usd_per_hour, 4),
                       "memory": [m.as_dict() for m in pool.memory]},
        "interference": {"model": "time-sliced GPU: step_i x 1 / (1 - sum of the other models' utilization), "
                                  "utilizations from the simulation (sim/colocation.py, docs/SIMULATOR.md)",
                         "iterations": res.iterations,
                         "utilization": {c.key: round(u, 4) for c, u in zip(inputs, res.utilizations)},
                         "step_stretch": {c.key: round(f, 4) for c, f in zip(inputs, res.factors)}},
        "models": models,
        "output_tokens_per_s": sum(m["output_tokens_per_s"] or 0.0 for m in models.values()),
        "requests_per_s": sum(m["requests_per_s"] or 0.0 for m in models.values()),
        "slo_attainment_min": min((m["slo_attainment"] for m in models.values() if m["slo_attainment"] is not None),
                                  default=None),
        "overloaded": any(m["overloaded"] for m in models.values()),
        "notes": notes,
    }
    summary["experiment"] = experiment_result(app, summary)
    write_summary(out, summary)
    _render(console, summary)
    render_tail(console, summary, out, files, t0)
    return EXIT_OK


def _render(console: Console, s: dict) -> None:
    d = s["deployment"]
    console.print(f"[bold]llmplan simulate[/bold] co-located {', '.join(d['models'])} on {d['replicas']}x "
                  f"{d['gpu']} TP{d['tp']} {d['precision']} ({d['engine']}), {d['gpus']} GPUs, ${d['usd_per_hour']:.2f}/h")
    for key, m in s["models"].items():
        mem, it = m["memory"], m["interference"]
        f = _fmt
        console.print(f"  {key}: weights {mem['weights_gb_per_gpu']:.1f} GB/GPU, KV {mem['kv_gb_per_gpu']:.1f} GB/GPU "
                      f"({mem['kv_capacity_tokens']:,} tokens, share {mem['kv_share']:.0%}); utilization "
                      f"{it['utilization']:.0%}, steps x{it['step_stretch']:.2f}; TTFT p90 {f(m['ttft_ms']['p90'])} ms, "
                      f"TPOT p90 {f(m['tpot_ms']['p90'])} ms, {f(m['output_tokens_per_s'], '{:.0f}')} tok/s, "
                      f"SLO attainment {f(m['slo_attainment'], '{:.1%}')}")


def _fmt(x, fmt: str = "{:.1f}") -> str:
    """A number, or '-' where the simulation has none."""
    return "-" if x is None else fmt.format(x)

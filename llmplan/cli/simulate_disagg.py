"""`llmplan simulate` with `deployment.mode=disagg`: a prefill pool and a decode pool (xPyD),
each resolved like the aggregated deployment (GPU, TP/PP/EP, precision, batch limits), the KV
link between them, and the disaggregated discrete-event simulator (sim/disaggregated.py,
docs/DISAGG.md). Every bad input is an error naming the `deployment.*` key the user types."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from llmplan.cli.resolve import check_search, resolve_gpu
from llmplan.cli.simulate_run import (_thresholds, des_summary, experiment_result, length_stats, render_summary,
                                      render_tail, speculation_unused_note, write_summary)
from llmplan.errors import EXIT_OK, ConfigError, InfeasibleDeployment, UserError
from llmplan.optimizer.enumerate import kv_dtype_for
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.deployment import Deployment, build, parallelism_problem
from llmplan.sim.engine_terms import fit_range_note, operating_point
from llmplan.sim.types import Parallelism, Precision

POOLS = ("prefill", "decode")
#: keys the simulator names without the `deployment.` prefix the user types
_SIM_KEYS = ("prefill.", "decode.", "kv_transfer.", "first_token_at")


def _rekey(exc: UserError) -> UserError:
    """The same error, naming the key as typed on the command line (deployment.prefill.workers)."""
    key = exc.key
    if key and key.startswith(_SIM_KEYS):
        key = "deployment." + key
    return type(exc)(str(exc), key=key, fix=exc.fix)


def check_mode_keys(app) -> None:
    """Keys of the other mode are refused, never silently ignored."""
    from dataclasses import fields

    from llmplan.cli.config_schema import DeploymentConfig

    d, default = app.deployment, DeploymentConfig()
    if d.mode == "disagg":
        for k, fix in (("replicas", "set the pools' sizes: deployment.prefill.workers / deployment.decode.workers"),
                       ("router", "drop it (prefill: fewest unfinished requests; decode: a free batch slot, "
                                  "then the most free KV; docs/DISAGG.md)")):
            if getattr(d, k) != getattr(default, k):
                raise ConfigError(f"applies to aggregated deployments only, got {getattr(d, k)!r} with "
                                  f"deployment.mode=disagg", key=f"deployment.{k}", fix=fix)
        return
    for name in ("prefill", "decode", "kv_transfer"):
        node, base = getattr(d, name), getattr(default, name)
        for f in fields(node):
            if getattr(node, f.name) != getattr(base, f.name):
                raise ConfigError(f"applies to disaggregated deployments only (deployment.mode={d.mode})",
                                  key=f"deployment.{name}.{f.name}", fix="add deployment.mode=disagg, or drop it")
    if d.first_token_at != default.first_token_at:
        raise ConfigError(f"applies to disaggregated deployments only (deployment.mode={d.mode})",
                          key="deployment.first_token_at", fix="add deployment.mode=disagg, or drop it")


def resolve_pool(app, model, name: str) -> Deployment:
    """One pool's worker as a Deployment (its `replicas` is the worker count): pool keys first,
    then the deployment-level keys, then the engine's batch limits."""
    d, p = app.deployment, getattr(app.deployment, name)
    key = f"deployment.{name}"
    if p.workers < 1:  # config_checks refuses it first; kept for callers that skip the checks
        raise ConfigError(f"the {name} pool needs at least one worker, got {p.workers}", key=f"{key}.workers",
                          fix="set it to an integer >= 1 (xPyD: x prefill, y decode workers)")
    gpu_key = p.gpu or d.gpu or (app.gpu.candidates[0] if app.gpu.candidates else None)
    if gpu_key is None:
        raise ConfigError("no GPU chosen for this pool", key=f"{key}.gpu", fix=f"e.g. {key}.gpu=h100_sxm")
    gpu = resolve_gpu(gpu_key, app)
    pp, ep = p.pp or d.pp, p.ep or d.ep
    precision = p.precision or d.precision
    tp_set = p.tp or d.tp
    check_search(model, [tp_set] if tp_set else [1], [ep], [precision], key=key)
    prec = Precision(precision, kv_dtype_for(precision, d.kv_cache_dtype, gpu))
    engine = replace(app.engine, max_num_seqs=p.max_num_seqs or app.engine.max_num_seqs,
                     max_num_batched_tokens=p.max_num_batched_tokens or app.engine.max_num_batched_tokens)
    tps = [tp_set] if tp_set else [t for t in (1, 2, 4, 8) if model.num_attention_heads % t == 0]
    reason = ""
    for tp in tps:
        par = Parallelism(tp, pp, ep)
        problem = parallelism_problem(model, gpu, par, prec)
        if problem:
            raise ConfigError(problem, key=key, fix=f"choose {key}.tp/pp/ep/precision the model and GPU support")
        dep = Deployment(model, gpu, par, prec, engine, p.workers)
        _, mem = build(dep, app.calibration, min_kv_tokens=4096)
        if mem.fits:
            return dep
        reason = mem.reason
    raise InfeasibleDeployment(f"{model.key} does not fit a {name} worker on {gpu.key} with tp={tps[-1]} pp={pp} "
                               f"{prec.weights}: {reason}", key=key,
                               fix=f"raise {key}.tp / {key}.pp, use {key}.precision=fp8, or a GPU with more memory")


def build_disagg_spec(app, model, longest_request_tokens: int):
    """(DisaggSpec, prefill Deployment, decode Deployment) from the config."""
    from llmplan.sim.disagg_build import disagg_from_deployments

    from llmplan.sim.disagg_handoff import handoff_ms

    pre, dec = (resolve_pool(app, model, n) for n in POOLS)
    k = app.deployment.kv_transfer
    handoff = handoff_ms(app.engine.name) if getattr(k, "handoff_ms", None) is None else float(k.handoff_ms)
    try:
        spec = disagg_from_deployments(pre, dec, pre.replicas, dec.replicas, longest_request_tokens,
                                       calibration=app.calibration, placement=k.placement,
                                       latency_us=k.latency_us, layerwise=k.layerwise,
                                       first_token_at=app.deployment.first_token_at, handoff_ms=handoff)
    except UserError as exc:
        raise _rekey(exc) from None
    return spec, pre, dec


def describe(app, spec, pre: Deployment, dec: Deployment) -> dict:
    """summary.json's deployment block: mode, both pools (with GPU type and precision), the link."""
    from llmplan.sim.disaggregated import describe_disagg

    out = describe_disagg(spec)
    for name, dep in (("prefill", pre), ("decode", dec)):
        out[name] |= {"gpu": dep.gpu.key, "pp": dep.par.pp, "ep": dep.par.ep, "precision": dep.prec.weights,
                      "kv_cache_dtype": dep.prec.kv_cache,
                      "usd_per_hour": round(dep.total_gpus * dep.gpu.usd_per_hour, 4)}
    out |= {"model": pre.model.key, "engine": app.engine.name,
            "usd_per_hour": round(out["prefill"]["usd_per_hour"] + out["decode"]["usd_per_hour"], 4)}
    return out


def simulate_disagg_summary(app, model, slos: list[SLOTarget], out: Path) -> tuple[dict, list[str]]:
    """Run the disaggregated simulation of the config; (summary.json dict, extra files written)."""
    from llmplan.sim.disaggregated import estimate_disagg_capacity_rps, simulate_disaggregated

    if app.workload.arrival == "offline":
        raise ConfigError("offline (all-at-once) workloads are not simulated for disaggregated deployments",
                          key="workload.arrival", fix="use poisson, gamma, trace or closed_loop arrivals")
    stats = length_stats(app, model)
    spec, pre, dec = build_disagg_spec(app, model, stats.max_request_tokens)
    cap = estimate_disagg_capacity_rps(spec, stats.mean_input_tokens, stats.mean_output_tokens)
    try:
        res = simulate_disaggregated(app.workload, spec, seed=app.seed, slo=_thresholds(slos),
                                     steady_state=app.workload.steady_state)
    except UserError as exc:
        raise _rekey(exc) from None
    summary, files = des_summary(app, res, app.workload, slos, out)
    s = res.summary
    summary["mode"] = "disaggregated"
    summary["deployment"] = describe(app, spec, pre, dec)
    summary["disaggregated"] = {k: s.get(k) for k in ("kv_transfers", "transfer_ms_mean", "transfer_wait_ms_mean",
                                                      "prefill_steps", "decode_steps")}
    summary["analytical"] = {"capacity_rps": round(cap, 4), "capacity_limit": "min(prefill pool, decode pool)",
                             "rate_rps": app.workload.rate_rps}
    done = res.requests[res.requests["measured"] & res.requests["finished"]]
    if len(done) and summary.get("requests_per_s"):
        far = fit_range_note(app.engine.name, operating_point(summary["requests_per_s"] / dec.replicas, done, decode_only=True))
        if far:
            summary["notes"].append(f"decode pool: {far}")
    if app.workload.rate_rps is None and app.workload.arrival in ("poisson", "gamma"):
        summary["notes"] = [f"workload.rate_rps not set: driving at {s.get('offered_rate_rps') or 0:.4g} req/s, "
                            f"about 80% of the estimated capacity {cap:.3g} req/s (the smaller of the prefill and "
                            f"decode pools')"] + summary["notes"]

    from llmplan.sim.frontend_ceiling import frontend_note

    if frontend_note(app.engine):   # engine.frontend=dynamo: the per-token ceiling is on (stated, as aggregated)
        summary["notes"].append(frontend_note(app.engine))
    unused = speculation_unused_note(app.speculative)  # speculative.k=3 with method none: said, as aggregated
    if unused:
        summary["notes"].append(unused)
    return summary, files


def run_disagg(app, model, slos: list[SLOTarget], out: Path, console: Console, t0: float) -> int:
    summary, files = simulate_disagg_summary(app, model, slos, out)
    summary["experiment"] = experiment_result(app, summary)
    write_summary(out, summary)
    render_summary(console, summary, slos)
    x = summary["disaggregated"]

    def ms(v):
        return "-" if v is None else f"{v:.2f} ms"

    console.print(f"KV transfers: {x['kv_transfers']}, mean transfer {ms(x['transfer_ms_mean'])}, mean wait beyond "
                  f"the transfer (decode room, busy links) {ms(x['transfer_wait_ms_mean'])}; steps: prefill "
                  f"{x['prefill_steps']}, decode {x['decode_steps']}")
    h = (summary.get("deployment") or {}).get("handoff_ms")
    if h:
        console.print(f"TTFT includes a {h:g} ms hand-off per request (the engine's fitted disaggregated front-end "
                      "delay; deployment.kv_transfer.handoff_ms=0 leaves it out)")
    render_tail(console, summary, out, files, t0)
    return EXIT_OK

"""The discrete-event half of `llmplan simulate`: run the DES, write requests.csv and plots,
render the percentile table with SLO attainment."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from llmplan.optimizer.slo_check import sample_value
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.engine_terms import fit_range_note, operating_point
from llmplan.sim.metrics import SLOThresholds
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import simulate_serving
from llmplan.sim.trtllm_batch_wait import simulated_only_note

PCTS = ("mean", "p50", "p90", "p95", "p99")


def _thresholds(slos: list[SLOTarget]) -> SLOThresholds:
    from llmplan.optimizer.verify import thresholds

    return thresholds(slos)


def offline_engine(app, dep, mem, mean_tokens: tuple[float, float], longest_tokens: int):
    """(engine, limits dict) for an offline run: the engine's own offline batch limits when the
    workload asks for them (sim/offline.py), else the configured ones."""
    from llmplan.sim.offline import offline_engine_profile

    e = app.engine
    if not app.workload.offline_engine_limits:
        return e, {"max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens,
                   "source": "engine.max_num_seqs / engine.max_num_batched_tokens (workload.offline_engine_limits=false)"}
    return offline_engine_profile(e, dep.gpu, dep.model, dep.par.pp, mem.kv_capacity_tokens, mean_tokens[0],
                                  mean_tokens[1], longest_tokens)


def run_des(app, dep, step, mem, rate: float | None, slos: list[SLOTarget], out: Path,
            console: Console, longest_request_tokens: int,
            mean_tokens: tuple[float, float] = (1.0, 1.0)) -> tuple[dict, list[str]]:
    """Simulate; returns (summary fields for summary.json, extra files written)."""
    from dataclasses import replace

    from llmplan.sim.deployment import replica_limits

    spec = app.workload if rate is None else replace(app.workload, rate_rps=rate)
    engine, offline = app.engine, None
    if spec.arrival == "offline":
        engine, offline = offline_engine(app, dep, mem, mean_tokens, longest_request_tokens)
    engine, max_len = replica_limits(engine, dep.model, longest_request_tokens)
    from dataclasses import asdict

    from llmplan.sim.spec_decode import speculative_replica

    step, kv_tokens, spec_info = speculative_replica(asdict(app.speculative), step, mem.kv_capacity_tokens,
                                                     mean_tokens, app.seed)
    reps = [ReplicaSpec(step, engine, kv_tokens, max_len) for _ in range(dep.replicas)]
    from llmplan.progress import fraction_progress  # a bar on stderr (a terminal only)

    with fraction_progress("simulate", app.output.progress) as bar:
        res = simulate_serving(spec, reps, router=app.deployment.router, seed=app.seed, slo=_thresholds(slos),
                               progress=bar, steady_state=spec.steady_state)
    summary, files = des_summary(app, res, spec, slos, out, offline)
    done = res.requests[res.requests["measured"] & res.requests["finished"]]
    if len(done) and summary["requests_per_s"]:
        far = fit_range_note(engine.name, operating_point(summary["requests_per_s"] / dep.replicas, done))
        if far:
            summary["notes"].append(far)
    waits = simulated_only_note(engine, dep.par.dp)   # the DES waits; the analytical model (optimizer.evaluate) does not
    if waits:
        summary["notes"].append(waits + ": the analytical figures (the analytical p90 column, the capacity a "
                                "default rate is drawn from) leave it out")
    if spec_info is not None:
        summary["speculative"] = spec_info
        summary["notes"].append(spec_info["note"])
    return summary, files


def des_summary(app, res, spec, slos: list[SLOTarget], out: Path, offline: dict | None = None) -> tuple[dict, list[str]]:
    """summary.json fields of a simulation result (aggregated or disaggregated), and the
    files written (requests table, plots)."""
    out.mkdir(parents=True, exist_ok=True)
    ext = "parquet" if app.output.requests_format == "parquet" else "csv"
    files = [str(res.write_requests(out / f"requests.{ext}"))]
    if app.output.plots:
        from llmplan.sim.plots import plot_report

        lines: dict[str, list[tuple[float, str]]] = {}
        for t in slos:
            lines.setdefault(t.metric, []).append((t.limit_ms, t.label))
        files += [str(p) for p in plot_report(res, out, lines)]
    s = res.summary
    summary = {k: {p: s.get(f"{k}_{p}") for p in PCTS} for k in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")}
    summary["itl_ms"] = {p: s.get(f"itl_ms_{p}") for p in PCTS}
    df = res.requests
    done = df[df["measured"] & df["finished"]]
    targets = {}
    for t in slos:
        vals = done[f"{t.metric}_ms"].dropna().to_numpy()
        v = sample_value(vals, t) if len(vals) else None  # the mean for a mean target
        share = float((vals <= t.limit_ms).mean()) if len(vals) else None
        targets[t.label] = {"simulated_ms": v, "met": bool(v is not None and v <= t.limit_ms), "share_within": share}
    summary |= {
        "requests_per_s": s.get("request_throughput_rps"), "output_tokens_per_s": s.get("output_throughput_tps"),
        "input_tokens_per_s": s.get("input_throughput_tps"), "goodput_rps": s.get("goodput_rps"),
        "slo_attainment": s.get("slo_attainment"), "slo_targets": targets,
        "offered_rate_rps": s.get("offered_rate_rps"), "requests": s.get("requests"),
        "measured_requests": s.get("measured_requests"), "window": s.get("window"),
        "unfinished": res.unfinished, "overloaded": res.overloaded,
        "preemptions": int(df["preemptions"].sum()),
        "prefix_hit_rate": s.get("prefix_hit_rate"),
        "kv_util_mean": float(res.timeseries["kv_util"].mean()) if len(res.timeseries) else None,
        "batch_size_mean": float(res.timeseries["batch_size"].mean()) if len(res.timeseries) else None,
        "workload": {"arrival": spec.arrival, "preset": spec.preset, "num_requests": spec.num_requests,
                     "concurrency": spec.concurrency if spec.arrival == "closed_loop" else None},
        "offline": None if offline is None else {
            **offline, "makespan_s": s.get("makespan_s"), "requests_per_s": s.get("request_throughput_rps"),
            "output_tokens_per_s": s.get("output_throughput_tps"), "total_tokens_per_s": s.get("total_throughput_tps")},
        "notes": window_notes(s.get("window"), res, s.get("request_throughput_rps")),
    }
    return summary, files


def window_notes(w: dict | None, res, throughput_rps: float | None) -> list[str]:
    """What the user must know about the measured window and overload, in words."""
    notes = []
    if w is not None:
        if w["requests_simulated"] > w["requests_asked"]:
            notes.append(f"workload.num_requests={w['requests_asked']} is too short for a steady-state window at this "
                         f"load: simulated {w['requests_simulated']} requests (warm-up {w['warmup_ms'] / 1e3:.1f} s, "
                         f"drain {w['drain_ms'] / 1e3:.1f} s excluded)")
        if w.get("lengthened_run_requests"):
            notes.append(f"the run lengthened to {w['lengthened_run_requests']} requests for a steady-state window hit "
                         f"the queue limit before its window; latencies are those of the {w['requests_asked']} requests "
                         f"asked (first and last 5% left out)")
        if w.get("too_short_to_judge"):
            notes.append(f"TOO SHORT TO JUDGE overload: the {w['requests_simulated']} requests arrive within "
                         f"{(w['window_end_ms'] - w['window_start_ms']) / 1e3:.1f} s, less than a warm-up and a drain "
                         f"of one request lifetime each ({w['drain_ms'] / 1e3:.1f} s); requests in the system grow while "
                         f"a stable system fills, so no overload verdict and the latencies include the filling; "
                         f"use a longer trace or a synthetic workload (lengthened automatically)")
        elif w["window_kind"] != "steady" and not w.get("lengthened_run_requests"):
            notes.append("no steady-state window (the queue limit stopped the run): overload judged over the "
                         "arrival period")
        elif not w["stationary"] and not res.overloaded:
            notes.append(f"the system was still filling at the end of the warm-up (requests in the system "
                         f"{w['queue_start']} -> {w['queue_end']}): latencies may be understated")
        if w.get("capped"):
            notes.append("the run length was capped: the window is shorter than planned")
    if res.overloaded:
        why = "the queue grew past its limit" if res.stopped_early else (
            f"{res.unfinished} requests unfinished" if res.unfinished else "the requests in the system kept growing")
        rates = ""
        if w is not None:
            steady = w["window_kind"] == "steady" and w.get("served_rate_rps") is not None
            served = w["served_rate_rps"] if steady else throughput_rps
            rates = (f": offered {w['offered_rate_rps']:.4g} req/s, served {served or 0:.4g} req/s "
                     f"({'over the window' if steady else 'over the run'}), "
                     f"requests in the system {w['queue_start']} -> {w['queue_end']}")
        notes.append(f"OVERLOADED: the simulated system cannot keep up with the offered rate ({why}){rates}")
    return notes


def length_stats(app, model):
    """Length moments and the longest request of the configured workload (2,000 draws at most;
    a closed-loop or offline workload is drawn as Poisson arrivals, only its lengths count)."""
    from dataclasses import replace

    from llmplan.cli.resolve import workload_sample
    from llmplan.sim.workload import validate_spec

    wl_spec = app.workload
    validate_spec(wl_spec)  # the workload as given, before the probe below changes its arrivals
    probe = app if wl_spec.rate_rps or wl_spec.arrival in ("trace", "closed_loop") else \
        replace(app, workload=replace(wl_spec, rate_rps=1.0))
    if wl_spec.arrival in ("closed_loop", "offline"):
        probe = replace(app, workload=replace(wl_spec, arrival="poisson", rate_rps=1.0))
    if wl_spec.arrival != "trace":  # length moments: 2,000 draws are plenty
        n = min(wl_spec.num_requests, 2000)
        if wl_spec.steady_state and wl_spec.arrival in ("poisson", "gamma"):
            # an open-loop run is lengthened for its steady-state window (sim/steady_state.py), so it
            # draws more requests than asked: the longest request, which sizes a prefill-first
            # engine's token budget (sim.deployment.replica_limits), comes from as many draws as a
            # default run's, or `workload.num_requests=50 engine=sglang` refuses its own request 218
            n = 2000
        probe = replace(probe, workload=replace(probe.workload, num_requests=n))
    stats, _ = workload_sample(probe, model, need_rate=False)
    return stats


def experiment_result(app, summary: dict) -> dict | None:
    """The experiment's target metric read from summary.json's fields (dotted key), or None
    when no experiment is set. ConfigError naming experiment.target_metric if it names nothing."""
    from llmplan.errors import ConfigError, suggest

    ex = app.experiment
    if not ex.target_metric:
        return None
    node = summary
    for part in ex.target_metric.split("."):
        if not isinstance(node, dict) or part not in node:
            choices = [k for k in node] if isinstance(node, dict) else []
            raise ConfigError(f"'{ex.target_metric}' is not a summary.json value ({suggest(part, choices)})",
                              key="experiment.target_metric", fix="a dotted summary.json key, e.g. e2e_ms.mean")
        node = node[part]
    if not isinstance(node, (int, float)) or isinstance(node, bool):
        raise ConfigError(f"'{ex.target_metric}' is not a number in summary.json (got {node!r})",
                          key="experiment.target_metric", fix="name a numeric value, e.g. e2e_ms.mean")
    return {"name": ex.name, "target_metric": ex.target_metric, "value": float(node), "description": ex.description}


def write_summary(out: Path, summary: dict) -> Path:
    import json

    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def render_tail(console: Console, summary: dict, out: Path, files: list[str], t0: float) -> None:
    """The notes, the experiment's headline (its target metric) and the files written."""
    import time

    for n in summary["notes"]:
        console.print(f"[yellow]note:[/yellow] {n}")
    ex = summary.get("experiment")
    if ex:
        console.print(f"[bold]experiment {ex['name']}[/bold]: {ex['target_metric']} = {ex['value']:.4g}"
                      + (f"  ({ex['description']})" if ex["description"] else ""))
    console.print(f"Wrote {out / 'summary.json'}" + "".join(f", {f}" for f in files))
    console.print(f"[dim]simulated in {time.perf_counter() - t0:.1f} s[/dim]")


def _headline(console: Console, d: dict) -> None:
    if d.get("mode") != "disaggregated":
        dp = f" DP{d['dp']}" if d.get("dp", 1) > 1 else ""
        console.print(f"[bold]llmplan simulate[/bold] {d['model']} on {d['replicas']}x {d['gpu']} TP{d['tp']}{dp} "
                      f"PP{d['pp']} EP{d['ep']} {d['precision']} ({d['engine']}, calibration tier "
                      f"{d['calibration_tier']}), ${d['usd_per_hour']:.2f}/h")
        return
    console.print(f"[bold]llmplan simulate[/bold] {d['model']} disaggregated: {d['prefill']['workers']}P + "
                  f"{d['decode']['workers']}D, {d['total_gpus']} GPUs ({d['engine']}), ${d['usd_per_hour']:.2f}/h")
    for name in ("prefill", "decode"):
        p = d[name]
        console.print(f"  {name} pool: {p['workers']}x {p['worker']} {p['precision']} ({p['gpus']} GPUs), "
                      f"max_num_seqs {p['max_num_seqs']}, max_num_batched_tokens {p['max_num_batched_tokens']}, "
                      f"KV {p['kv_capacity_tokens_per_worker']:,} tokens/worker")
    k = d["kv_transfer"]
    if k.get("model") == "kv_link":
        console.print(f"  KV link: {k['link']}, send {k['send_bw_gbps']:g} / receive {k['recv_bw_gbps']:g} GB/s, "
                      f"latency {k['latency_us']:g} us{', layer-wise' if k['layerwise'] else ''}; TTFT stamped at "
                      f"{d['first_token_at']}")
    else:
        console.print(f"  KV link: {k}")


def render_summary(console: Console, summary: dict, slos: list[SLOTarget]) -> None:
    _headline(console, summary["deployment"])
    t = Table(title="Latency (ms) over measured requests", title_justify="left")
    t.add_column("metric")
    for p in PCTS:
        t.add_column(p, justify="right")
    t.add_column("analytical p90", justify="right")
    an = summary.get("analytical", {})
    for k, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"), ("queue_ms", "queue")):
        row = summary.get(k, {})
        a = (an.get(k) or {}).get("p90")
        a_txt = "-" if a is None else ("overload" if a == float("inf") else f"{a:.1f}")
        t.add_row(label, *[("-" if row.get(p) is None else f"{row[p]:.1f}") for p in PCTS], a_txt)
    console.print(t)

    def f(x, fmt="{:.2f}"):
        return "-" if x is None else fmt.format(x)

    console.print(f"throughput: {f(summary.get('requests_per_s'))} req/s, {f(summary.get('output_tokens_per_s'), '{:.0f}')} "
                  f"output tok/s; goodput {f(summary.get('goodput_rps'))} req/s; SLO attainment "
                  f"{f(summary.get('slo_attainment'), '{:.1%}')}; preemptions {summary.get('preemptions')}; "
                  f"prefix hit rate {f(summary.get('prefix_hit_rate'), '{:.1%}')}; mean batch {f(summary.get('batch_size_mean'), '{:.1f}')}, "
                  f"mean KV use {f(summary.get('kv_util_mean'), '{:.0%}')}")
    off = summary.get("offline")
    if off is not None:
        console.print(f"offline: {summary.get('requests')} requests queued at time 0, finished in "
                      f"{f(off.get('makespan_s'), '{:.1f}')} s: {f(off.get('requests_per_s'))} req/s, "
                      f"{f(off.get('output_tokens_per_s'), '{:.0f}')} output tok/s, "
                      f"{f(off.get('total_tokens_per_s'), '{:.0f}')} total tok/s; batch limits max_num_seqs="
                      f"{off['max_num_seqs']}, max_num_batched_tokens={off['max_num_batched_tokens']} ({off['source']})")
        if off.get("note"):
            console.print(f"  {off['note']}")
    w = summary.get("window")
    if w is not None:
        state = "[red]OVERLOADED[/red]" if summary.get("overloaded") else (
            "[yellow]not judged (run too short)[/yellow]" if w.get("too_short_to_judge") else "stable")
        served = w.get("served_rate_rps") if w["window_kind"] == "steady" else summary.get("requests_per_s")
        console.print(f"load: offered {f(w.get('offered_rate_rps'), '{:.4g}')} req/s, served "
                      f"{f(served, '{:.4g}')} req/s over the {w['window_kind']} window "
                      f"{w['window_start_ms'] / 1e3:.1f}-{w['window_end_ms'] / 1e3:.1f} s "
                      f"({w['requests_measured']} requests measured); in system {w['queue_start']} -> "
                      f"{w['queue_end']} ({f(w.get('queue_growth_rps'), '{:+.3g}')} req/s): {state}")
    for label, v in summary.get("slo_targets", {}).items():
        mark = "[green]met[/green]" if v["met"] else "[red]missed[/red]"
        console.print(f"  {label}: simulated {f(v['simulated_ms'], '{:.1f}')} ms {mark} "
                      f"({f(v['share_within'], '{:.1%}')} of requests within)")


#: speculative keys that only a speculation method reads
SPEC_SETTINGS = ("k", "acceptance", "accepted_length_probs", "accept_length", "draft_model", "verify_tokens")


def speculation_unused_note(spec) -> str | None:
    """`simulate speculative.k=3` with the method left at none runs without speculation: said in
    the notes (a note, not an error: `+experiment=survey_i5_1 speculative.method=none` is the
    documented baseline of a speculating experiment)."""
    if spec.method not in ("none", "off"):
        return None
    given = [k for k in SPEC_SETTINGS if getattr(spec, k) is not None] + (["topk"] if spec.topk != 1 else [])
    if not given:
        return None
    return (f"speculative.method={spec.method}: simulated WITHOUT speculation; "
            + ", ".join(f"speculative.{k}" for k in given)
            + " unused (set speculative.method=eagle3, mtp or draft_model to speculate)")

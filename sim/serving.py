"""Top-level entry: simulate a deployment serving a workload; find its goodput capacity.

:func:`simulate_serving` wires a workload, a router and replicas onto one
:class:`~sim.events.EventLoop` and returns a :class:`SimResult`. :func:`find_max_rate`
bisects the arrival rate for the highest rate at which the SLOs hold at their
percentile. :func:`estimate_capacity_rps` is the quick analytical throughput bound used
when a workload leaves ``rate_rps`` unset (the simulator then offers 80% of it).

Overload guard: a run stops early and reports ``overloaded`` when more than
``max_queue`` requests wait beyond what the replicas can run at once
(``max_queue + sum(max_num_seqs)`` outstanding), or when simulated time passes
``max_sim_time_ms`` (default: last arrival + max(last arrival, 10 min)); requests not
finished by then are counted in ``unfinished``. A run therefore never hangs.
"""

from __future__ import annotations

import gc
import math
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import pandas as pd

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.parallel import beside
from llmplan.sim.engine_terms import cost_model_request_ttft_ms, request_ttft_fn, shift_by_request_ttft
from llmplan.sim.events import PRIORITY_ARRIVAL, PRIORITY_LAST, EventLoop
from llmplan.sim.metrics import (LogHistogram, MeasureWindow, SLOThresholds, json_clean, requests_frame,
                         summarize)
from llmplan.sim.replica import Replica, ReplicaSpec, validate_replica
from llmplan.sim.router import make_router
from llmplan.sim.scheduler import Seq
from llmplan.sim.trtllm_token_budget import budget_bounds_prompts_only, prompt_over_budget
from llmplan.sim.steady_state import (MAX_WARMUP_DOUBLINGS, RunPlan, assess_window, estimate_service,
                                      first_warmup_doublings, plan_run, speculate_next,
                                      step_shape, window_indices)
from llmplan.sim.workload import Request, Workload, WorkloadSpec, generate_workload, mean_lengths, validate_spec

__all__ = ["ReplicaSpec", "SimResult", "MaxRateResult", "simulate_serving", "find_max_rate",
           "estimate_capacity_rps", "DEFAULT_MAX_QUEUE", "DEFAULT_RATE_FRACTION"]

#: waiting requests (beyond those the replicas can run at once) that mark a run overloaded
DEFAULT_MAX_QUEUE = 5000
#: offered load when the workload gives no rate: this fraction of estimated capacity
DEFAULT_RATE_FRACTION = 0.8
#: drain allowance after the last arrival before a run is cut off (at least), ms
DEFAULT_MIN_DRAIN_MS = 600_000.0

TIMESERIES_COLUMNS = ("time_ms", "replica", "running", "waiting", "batch_size", "kv_util", "preemptions")


@dataclass
class SimResult:
    """Outcome of one simulation."""

    requests: pd.DataFrame          # one row per request, see sim.metrics.REQUEST_COLUMNS
    summary: dict                   # aggregates (JSON-serializable; None where undefined)
    timeseries: pd.DataFrame        # sampled per replica: running, waiting, batch size, KV utilisation
    overloaded: bool                # the run hit the queue or time limit
    unfinished: int                 # requests not finished when the run ended
    replica_stats: list[dict] = field(default_factory=list)  # per-replica counters
    itl_histogram: pd.DataFrame = field(default_factory=pd.DataFrame)  # all measured ITLs, 0.1% bins
    stopped_early: bool = False     # the queue or time limit stopped the run

    def write_requests(self, path: str | Path) -> Path:
        """Per-request table as CSV (default) or Parquet (``.parquet``, needs pyarrow)."""
        p = Path(path)
        if p.suffix == ".parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError as e:
                raise UserError("writing Parquet needs pyarrow", key="output",
                                fix="pip install pyarrow, or write .csv") from e
            self.requests.to_parquet(p, index=False)
        else:
            self.requests.to_csv(p, index=False, float_format="%.6f")
        return p


# ---------------------------------------------------------------------------- capacity


def estimate_capacity_rps(replicas: list[ReplicaSpec], mean_input_tokens: float, mean_output_tokens: float) -> float:
    """Rough sustainable request rate: full batches (limited by ``max_num_seqs`` and KV),
    decode time per request plus the marginal cost of its prefill, summed over replicas."""
    total = 0.0
    pin, pout = max(1.0, mean_input_tokens), max(1.0, mean_output_tokens)
    for r in replicas:
        e, cm = r.engine, r.cost_model
        pp = int(getattr(cm, "pp", 1) or 1)
        kv_seqs = int(r.kv_capacity_tokens * (1 - e.watermark) // (pin + pout))
        b = max(1, min(e.max_num_seqs, kv_seqs) // pp)
        kv = int(b * (pin + pout / 2))
        t_dec = float(cm.stage_time_ms(step_shape(dec=b, kv=kv)))
        chunk = int(max(1, min(pin, e.max_num_batched_tokens - b)))
        t_mix = float(cm.stage_time_ms(step_shape(prefill=chunk, dec=b, kv=kv)))
        per_req_ms = (pout - 1) * t_dec / b + max(t_mix - t_dec, 1e-6) * pin / chunk
        total += 1000.0 / per_req_ms
    return total


# ---------------------------------------------------------------------------- simulate


def _resolve_workload(workload: Union[WorkloadSpec, Workload, list[Request]], replicas: list[ReplicaSpec],
                      seed: int, rate_fraction: float,
                      capacity_rps: Optional[Callable[[float, float], float]] = None) -> tuple[Workload, Optional[float]]:
    """The workload to run and the rate picked for it (``capacity_rps(mean_in, mean_out)``
    replaces :func:`estimate_capacity_rps` of ``replicas``; sim.disaggregated uses it)."""
    if isinstance(workload, Workload):
        return workload, None
    if isinstance(workload, list):
        return Workload(sorted(workload, key=lambda r: r.arrival_ms)), None
    validate_spec(workload)
    spec, picked = workload, None
    if spec.rate_rps is None and spec.arrival in ("poisson", "gamma"):
        cap = capacity_rps or (lambda i, o: estimate_capacity_rps(replicas, i, o))
        picked = rate_fraction * cap(*mean_lengths(spec))
        spec = replace(spec, rate_rps=picked)
    return generate_workload(spec, np.random.default_rng([spec.seed, seed])), picked


def _check_requests(wl: Workload, replicas: list[Replica]) -> None:
    if not wl.requests:
        raise UserError("the workload has no requests", key="workload.num_requests")
    max_len = min(r.spec.max_model_len for r in replicas)
    kv_len = min(r.max_request_tokens() for r in replicas)
    prompt_cap = min((r.spec.engine.max_num_batched_tokens for r in replicas
                      if budget_bounds_prompts_only(r.spec.engine)), default=math.inf)
    for i, q in enumerate(wl.requests):
        need = q.input_tokens + q.output_tokens
        if need > max_len:
            raise UserError(f"request {i} needs {q.input_tokens} prompt + {q.output_tokens} output = {need} tokens, "
                            f"more than max_model_len {max_len}", key="workload",
                            fix="shorten the trace's requests or lower workload max_tokens (max_model_len is the model's "
                                "context, max_position_embeddings, or for a prefill-first engine twice the "
                                "longest request within it)")
        if q.input_tokens > prompt_cap:   # TensorRT-LLM: whole prompts within the budget (sim.trtllm_token_budget)
            why = next(w for w in (prompt_over_budget(r.spec.engine, q.input_tokens) for r in replicas) if w)
            raise UserError(f"request {i}: {why}", key="engine.max_num_batched_tokens",
                            fix="raise max_num_tokens to the longest prompt plus the running decodes")
        if need > kv_len:
            raise InfeasibleDeployment(f"request {i} needs KV for {need} tokens but a replica (engine) holds only "
                                       f"{kv_len} beyond its watermark", key="kv_capacity_tokens",
                                       fix="use more or larger GPUs, fewer pipeline stages, or shorter requests")


def simulate_serving(workload: Union[WorkloadSpec, Workload, list[Request]], replicas: list[ReplicaSpec],
                     router: str = "least_outstanding", seed: int = 0, slo: Optional[SLOThresholds] = None,
                     window: Optional[MeasureWindow] = None, progress: Optional[Callable[[float], None]] = None,
                     max_queue: int = DEFAULT_MAX_QUEUE, max_sim_time_ms: Optional[float] = None,
                     timeseries_interval_ms: Optional[float] = None,
                     rate_fraction: float = DEFAULT_RATE_FRACTION, steady_state: bool = False,
                     near_capacity: bool = False, min_warmup_doublings: int = 0) -> SimResult:
    """Simulate ``replicas`` behind ``router`` serving ``workload``.

    ``workload`` is a spec (generated with ``seed`` and ``spec.seed``), a :class:`Workload`
    or a list of :class:`Request` (open loop at their ``arrival_ms``). ``window`` selects
    the measured requests (default 5%/5%; closed loop also skips ``concurrency``).
    ``progress`` is called with the finished fraction about every 1%.

    ``steady_state`` (open loop only): measure the window of :mod:`llmplan.sim.steady_state`
    instead of ``window``: a warm-up and a drain of about one request lifetime each, a
    synthetic workload lengthened so the window holds enough requests, and the warm-up
    doubled (up to ``MAX_WARMUP_DOUBLINGS`` times) while the requests in the system still
    change over the window beyond noise. Overload is then flagged by that growth. ``summary["window"]``
    reports the window, offered vs served rate and the queue growth.
    """
    if not replicas:
        raise UserError("no replicas to simulate", key="replicas")
    for i, r in enumerate(replicas):
        validate_replica(r, i)
    if max_queue < 0:
        raise UserError("max_queue must be >= 0", key="max_queue")
    wl, picked_rate = _resolve_workload(workload, replicas, seed, rate_fraction)
    closed = wl.closed_loop_concurrency is not None
    run = dict(router=router, slo=slo, progress=progress, max_queue=max_queue, max_sim_time_ms=max_sim_time_ms,
               timeseries_interval_ms=timeseries_interval_ms)
    offered = picked_rate if picked_rate is not None else (
        workload.rate_rps if isinstance(workload, WorkloadSpec) and workload.rate_rps else _offered_rate(wl))
    if wl.offline:  # everything queued at 0: every request counts, throughput over the whole run
        return _offline_summary(_simulate(wl, replicas, (0, len(wl.requests)), None, None, **run))
    if steady_state and not closed and wl.requests and offered:
        return _simulate_steady(workload, wl, replicas, seed, picked_rate, offered, run, near_capacity=near_capacity,
                                min_warmup_doublings=min_warmup_doublings)
    if window is None:
        window = MeasureWindow(warmup_requests=wl.closed_loop_concurrency if closed else None)
    return _simulate(wl, replicas, window.measured_range(len(wl.requests)), picked_rate, offered, **run)


def _simulate_steady(workload, wl: Workload, replicas: list[ReplicaSpec], seed: int, picked_rate: Optional[float],
                     rate: float, run: dict, simulate: Optional[Callable[..., SimResult]] = None,
                     near_capacity: bool = False, min_warmup_doublings: int = 0) -> SimResult:
    """Simulate with the steady-state window, lengthening the warm-up while the system still fills.
    ``simulate`` (default :func:`_simulate`, same arguments) runs one attempt (sim.disaggregated);
    ``near_capacity``, ``min_warmup_doublings``: the first attempt's warm-up (steady_state.first_warmup_doublings)."""
    asked = len(wl.requests)
    outs = np.fromiter((q.output_tokens for q in wl.requests), float, asked)
    ins = np.fromiter((q.input_tokens for q in wl.requests), float, asked)
    est = estimate_service(replicas, rate, float(ins.mean()), float(outs.mean()))
    synthetic = isinstance(workload, WorkloadSpec) and workload.arrival in ("poisson", "gamma")
    wl_asked = wl

    def prepare(attempt: int, prev: Workload) -> tuple:
        plan = plan_run(rate, est, outs, asked, warmup_factor=2.0 ** attempt)
        w = prev
        if synthetic and plan.num_requests != len(w.requests):
            spec = replace(workload, rate_rps=rate, num_requests=plan.num_requests)
            w = generate_workload(spec, np.random.default_rng([spec.seed, seed]))
        steady = window_indices([q.arrival_ms for q in w.requests], plan.warmup_ms, plan.drain_ms)
        rng = steady if steady[1] > steady[0] else MeasureWindow().measured_range(len(w.requests))
        return attempt, plan, w, steady, rng

    def run_attempt(prep: tuple, progress: bool = True) -> tuple[SimResult, dict]:
        attempt, plan, w, steady, rng = prep
        # an attempt run beside draws no progress (the disaggregated runner takes no progress argument)
        kw = {**run, "progress": None} if not progress and "progress" in run else run
        r = (simulate or _simulate)(w, replicas, rng, picked_rate, rate, **kw)
        rp = _window_report(r.requests, steady, plan, rate, asked, r.stopped_early)
        rp["warmup_doublings"] = attempt
        return r, rp

    def last(prep: tuple) -> bool:  # no further attempt, whatever this one shows
        attempt, plan, _, steady, _ = prep
        return attempt >= MAX_WARMUP_DOUBLINGS or not synthetic or plan.capped or steady[1] <= steady[0]

    # the estimate sizes the run but does not decide the verdict (it can put a load the
    # simulator serves steadily above capacity): a run it calls unstable is lengthened and
    # settled like any other, and the queue limit stops one that really is overloaded. Such a
    # run usually needs a second attempt: where a core is free the next attempt runs beside this
    # one (steady_state.speculate_next); the attempts and the one kept are the same either way
    prep = prepare(first_warmup_doublings(est, near_capacity, len(replicas), min_warmup_doublings), wl)
    while True:
        nxt = prepare(prep[0] + 1, prep[2]) if not last(prep) and speculate_next(est) else None
        with beside(lambda p=nxt: run_attempt(p, False)) if nxt else nullcontext() as later:
            res, rep = run_attempt(prep)
            if last(prep) or rep["stationary"] or res.stopped_early:
                break
            if later is not None:
                prep, nxt = nxt, None
                res, rep = later()
                if last(prep) or rep["stationary"] or res.stopped_early:
                    break
        prep = nxt or prepare(prep[0] + 1, prep[2])
    attempt, plan, wl, steady, _ = prep
    if res.stopped_early and rep["requests_measured"] == 0 and len(wl.requests) > asked:
        # the queue limit stopped the lengthened run before its window: overloaded. Its measured
        # set is empty, so the latencies reported are those of the requests asked (first and
        # last 5% left out), the run a workload without a steady window gets
        lengthened = len(wl.requests)
        res = (simulate or _simulate)(wl_asked, replicas, MeasureWindow().measured_range(asked), picked_rate, rate,
                                      **run)
        res.stopped_early = res.overloaded = True   # the verdict is the lengthened run's
        rep = _window_report(res.requests, (0, 0), plan, rate, asked, True)
        rep.update(warmup_doublings=attempt, lengthened_run_requests=lengthened)
    if steady[1] <= steady[0] and not res.stopped_early:
        # no steady window (a given workload shorter than a warm-up and a drain of one request
        # lifetime each): requests in the system grow while a stable system fills, so their
        # growth over the arrival period cannot tell filling from overload: no verdict
        rep["too_short_to_judge"] = True
        rep["overloaded_by_growth"] = False
    if rep["window_kind"] == "steady":  # throughput of the window, not diluted by the drain
        _window_throughput(res.summary, res.requests, rep["window_start_ms"], rep["window_end_ms"])
    res.overloaded = bool(res.overloaded or rep["overloaded_by_growth"])
    res.summary["overloaded"] = res.overloaded
    res.summary["window"] = json_clean(rep)
    if run["slo"] is not None and res.overloaded:
        res.summary["slo_met"] = False
    return res


def request_terms_summary(replicas: list[ReplicaSpec]) -> dict:
    """The per-request TTFT terms included in the reported TTFT and end-to-end latency (ms per
    request, ms per prompt token; those of the first replica, all replicas of one run share an engine)."""
    c = replicas[0].cost_model
    r0 = cost_model_request_ttft_ms(c, 0.0)
    return {"per_request_ms": round(r0, 6), "per_prompt_token_ms": round(cost_model_request_ttft_ms(c, 1.0) - r0, 9)}


def _add_request_ttft(seqs: list[Seq], replicas: list[ReplicaSpec]) -> None:
    """Add each replica's per-request TTFT (``sim.engine_terms``: API server, client round trip,
    tokenisation; carried by the analytical step model with the engine's fitted terms) to the
    first-token and finish times its client sees. It is outside the engine's steps, so the
    schedule is unchanged (a closed-loop client's next send is not delayed by it: tens of ms
    against request latencies of seconds, a second-order effect that keeps the engine fit exact)."""
    # resolved once per replica, not per request
    shift_by_request_ttft(seqs, [request_ttft_fn(r.cost_model) for r in replicas])


def _simulate(wl: Workload, replicas: list[ReplicaSpec], measured: tuple[int, int], picked_rate: Optional[float],
              offered: Optional[float], router: str, slo: Optional[SLOThresholds], progress: Optional[Callable[[float], None]], max_queue: int,
              max_sim_time_ms: Optional[float], timeseries_interval_ms: Optional[float]) -> SimResult:
    """One run of ``wl``; requests ``measured[0]..measured[1]-1`` count in the aggregates."""
    n = len(wl.requests)
    closed = wl.closed_loop_concurrency is not None
    lo, hi = measured

    loop = EventLoop()
    itl = LogHistogram()
    horizon = wl.horizon_ms
    interval = timeseries_interval_ms or (max(horizon / 500.0, 10.0) if not closed else 1000.0)
    seqs = [Seq(i, q, lo <= i < hi) for i, q in enumerate(wl.requests)]
    state = {"done": 0, "issued": 0, "overloaded": False, "next_progress": 1}
    limit_outstanding = math.inf if wl.offline else max_queue + sum(r.engine.max_num_seqs for r in replicas)

    def on_finish(seq: Seq) -> None:
        state["done"] += 1
        if progress is not None and state["done"] * 100 >= state["next_progress"] * n:
            state["next_progress"] = state["done"] * 100 // n + 1
            progress(state["done"] / n)
        if closed and state["issued"] < n:
            nxt = seqs[state["issued"]]
            state["issued"] += 1
            nxt.client = seq.client
            loop.schedule(loop.now + wl.think_time_ms, PRIORITY_ARRIVAL, arrive, nxt)

    reps = [Replica(i, r, loop, itl, on_finish, wl.prefix_block_tokens, interval) for i, r in enumerate(replicas)]
    _check_requests(wl, reps)
    route = make_router(router)

    def arrive(seq: Seq) -> None:
        now = loop.now
        seq.arrival = now
        reps[route.choose(seq, reps)].submit(seq, now)
        if state["issued"] - state["done"] > limit_outstanding:
            state["overloaded"] = True
            loop.stop()
        if not closed and state["issued"] < n:
            nxt = seqs[state["issued"]]
            state["issued"] += 1
            loop.schedule(nxt.req.arrival_ms, PRIORITY_ARRIVAL, arrive, nxt)

    def deadline(_: object) -> None:
        if state["done"] < n:
            state["overloaded"] = True
        loop.stop()

    if closed:
        for k in range(min(wl.closed_loop_concurrency, n)):
            seqs[k].client = k
            state["issued"] += 1
            loop.schedule(0.0, PRIORITY_ARRIVAL, arrive, seqs[k])
    else:
        state["issued"] = 1
        loop.schedule(seqs[0].req.arrival_ms, PRIORITY_ARRIVAL, arrive, seqs[0])
    if max_sim_time_ms is None and not closed and not wl.offline:
        max_sim_time_ms = horizon + max(horizon, DEFAULT_MIN_DRAIN_MS)
    if max_sim_time_ms is not None:
        loop.schedule(max_sim_time_ms, PRIORITY_LAST, deadline)
    run_loop(loop)
    _add_request_ttft(seqs, replicas)

    df = requests_frame(seqs)
    unfinished = int((~df["finished"]).sum())
    overloaded = bool(state["overloaded"] or unfinished > 0)
    stats = [r.stats() for r in reps]
    summary = summarize(df, itl, slo)
    queried = sum(s["prompt_tokens_queried"] for s in stats)
    summary.update({
        "offered_rate_rps": offered,
        "rate_picked_by_simulator": picked_rate is not None,
        "closed_loop_concurrency": wl.closed_loop_concurrency,
        "router": router,
        "replicas": len(replicas),
        "overloaded": overloaded,
        "unfinished": unfinished,
        "sim_time_ms": loop.now,
        "events": loop.events_processed,
        "steps": sum(s["steps"] for s in stats),
        "preemptions": sum(s["preemptions"] for s in stats),
        "prefix_hit_rate": (sum(s["prompt_tokens_hit"] for s in stats) / queried) if queried else 0.0,
        "kv_peak_util": max(s["kv_peak_util"] for s in stats),
        "generated_tokens": int(df.loc[df["finished"], "output_tokens"].sum()),
        "ttft_request_terms": request_terms_summary(replicas),
    })
    if slo is not None and overloaded:
        summary["slo_met"] = False
    return SimResult(df, json_clean(summary), timeseries_frame(reps), overloaded, unfinished, stats, itl.frame(), bool(state["overloaded"]))


def run_loop(loop: EventLoop) -> None:
    """Run ``loop`` with the cyclic garbage collector paused: the loop allocates many
    short-lived objects and no garbage cycles, and the collector would re-walk every live
    request at each full pass (~20% of a 100k run)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        loop.run()
    finally:
        if gc_was_enabled:
            gc.enable()


def timeseries_frame(reps: list[Replica]) -> pd.DataFrame:
    """The replicas' periodic samples as one frame (:data:`TIMESERIES_COLUMNS`), in time order."""
    samples = [s for r in reps for s in r.samples]
    samples.sort(key=lambda s: (s[0], s[1]))
    return pd.DataFrame(samples, columns=list(TIMESERIES_COLUMNS))


def _offline_summary(res: SimResult) -> SimResult:
    """Offline: throughput over the makespan (time 0 to the last finish); no load, no overload."""
    s, df = res.summary, res.requests
    fin = df["finish_ms"].to_numpy()
    makespan_s = float(np.nanmax(fin)) / 1000.0 if np.isfinite(fin).any() else math.nan
    done = df["finished"].to_numpy()
    s.update({
        "offline": True, "makespan_s": makespan_s, "duration_s": makespan_s,
        "request_throughput_rps": float(done.sum()) / makespan_s,
        "input_throughput_tps": float(df["input_tokens"].to_numpy()[done].sum()) / makespan_s,
        "output_throughput_tps": float(df["output_tokens"].to_numpy()[done].sum()) / makespan_s,
    })
    s["total_throughput_tps"] = s["input_throughput_tps"] + s["output_throughput_tps"]
    res.summary = json_clean(s)
    return res


def _window_throughput(summary: dict, df: pd.DataFrame, t0: float, t1: float) -> None:
    """Request and token throughput of the requests that finished inside ``(t0, t1]``."""
    fin = df["finish_ms"].to_numpy()
    inside = (fin > t0) & (fin <= t1)
    dur_s = (t1 - t0) / 1000.0
    summary["duration_s"] = dur_s
    summary["request_throughput_rps"] = float(inside.sum()) / dur_s
    summary["input_throughput_tps"] = float(df["input_tokens"].to_numpy()[inside].sum()) / dur_s
    summary["output_throughput_tps"] = float(df["output_tokens"].to_numpy()[inside].sum()) / dur_s
    if summary.get("slo_attainment") is not None:  # measured requests (arrived in the window) within the SLOs
        summary["goodput_rps"] = summary["slo_attainment"] * summary["measured_requests"] / dur_s


def _window_report(df: pd.DataFrame, steady_range: tuple[int, int], plan: RunPlan, offered: float, asked: int,
                   stopped: bool) -> dict:
    lo, hi = steady_range
    rep = assess_window(df["arrival_ms"].to_numpy(), df["finish_ms"].to_numpy(), lo, hi, offered)
    est = plan.estimate
    rep.update({
        "requests_measured": int((df["measured"] & df["finished"]).sum()),
        "warmup_ms": plan.warmup_ms, "drain_ms": plan.drain_ms,
        "requests_asked": asked, "requests_simulated": int(len(df)), "capped": plan.capped,
        "stopped_by_queue_limit": stopped,
        "estimate": {"ttft_ms": est.ttft_ms, "tpot_ms": est.tpot_ms, "batch_per_replica": est.batch_per_replica,
                     "utilisation": est.utilisation},
    })
    return rep


def _offered_rate(wl: Workload) -> Optional[float]:
    if wl.closed_loop_concurrency is not None or len(wl.requests) < 2 or wl.horizon_ms <= 0:
        return None
    return (len(wl.requests) - 1) / (wl.horizon_ms / 1000.0)


# ---------------------------------------------------------------------------- goodput capacity


@dataclass
class MaxRateResult:
    """Highest arrival rate found at which the SLOs hold (goodput capacity)."""

    rate_rps: float                   # best rate that met the SLOs (the low bracket if none did)
    feasible: bool                    # whether any evaluated rate met the SLOs
    evaluations: list[dict]           # one per simulation: rate, met, key latencies
    bracket: tuple[float, float]      # final (passing, failing) rates


def find_max_rate(workload: WorkloadSpec, replicas: list[ReplicaSpec], slo: SLOThresholds, lo_rps: float,
                  hi_rps: float, *, router: str = "least_outstanding", seed: int = 0, num_requests: int = 1000,
                  rel_tol: float = 0.02, max_evaluations: int = 14, expand: int = 3,
                  window: Optional[MeasureWindow] = None, steady_state: bool = False) -> MaxRateResult:
    """Bisect the arrival rate in ``[lo_rps, hi_rps]`` for the highest rate meeting ``slo``.

    Every evaluation reuses the same random draws (common random numbers), only the time
    scale changes. If ``hi_rps`` still passes it is doubled up to ``expand`` times; if
    ``lo_rps`` fails it is halved up to ``expand`` times. ``num_requests`` (default 1000)
    gives a stable 90th/99th percentile after the warm-up/cool-down cut. ``steady_state``
    measures each rate in its steady-state window instead (``num_requests`` is then the
    least; long outputs need it, at the cost of longer runs near capacity).
    """
    if workload.arrival not in ("poisson", "gamma", "trace"):
        raise UserError("find_max_rate needs an open-loop workload (poisson, gamma or trace)",
                        key="workload.arrival")
    if not (0 < lo_rps < hi_rps):
        raise UserError(f"need 0 < lo_rps < hi_rps, got {lo_rps}, {hi_rps}", key="rate bracket")
    spec = replace(workload, num_requests=num_requests)
    evals: list[dict] = []

    def ok(rate: float) -> bool:
        res = simulate_serving(replace(spec, rate_rps=rate), replicas, router=router, seed=seed, slo=slo,
                               window=window, steady_state=steady_state)
        s = res.summary
        met = bool(s.get("slo_met")) and not res.overloaded
        evals.append({"rate_rps": rate, "met": met, "ttft_ms_p90": s.get("ttft_ms_p90"),
                      "tpot_ms_p90": s.get("tpot_ms_p90"), "ttft_ms_p99": s.get("ttft_ms_p99"),
                      "tpot_ms_p99": s.get("tpot_ms_p99"), "slo_attainment": s.get("slo_attainment"),
                      "overloaded": res.overloaded, "requests": s.get("requests")})
        return met

    lo, hi = lo_rps, hi_rps
    for _ in range(expand + 1):
        if ok(lo):
            break
        hi, lo = lo, lo / 2
    else:
        return MaxRateResult(lo, False, evals, (0.0, lo))
    if hi == hi_rps:
        for _ in range(expand):
            if not ok(hi):
                break
            lo, hi = hi, hi * 2
        else:
            if ok(hi):
                return MaxRateResult(hi, True, evals, (hi, math.inf))
    while len(evals) < max_evaluations and (hi - lo) > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return MaxRateResult(lo, True, evals, (lo, hi))

"""SLO attainment through a day of traffic, simulated (docs/AUTOSCALING.md, "Attainment").

The day plan (:mod:`llmplan.optimizer.day_plan`) sizes replicas per interval from each
candidate's SLO capacity; this module replays each interval's rate on the replicas actually
in place in the serving simulator, for the autoscaled schedule and for static provisioning
for the peak, and reports the fraction of requests that meet each SLO target, per interval
and over the whole profile.

Model (stated in the output's ``model`` lines):

* **Phases.** An interval runs at its constant rate; the replicas in place change only at
  the events below, which split the interval into phases. Each phase is simulated at steady
  state (warm-up and drain excluded, :func:`llmplan.sim.serving.simulate_serving` with
  ``steady_state=True``) with ``requests_per_phase`` requests at least, as if it lasted long
  enough to warm up; the backlog an under-provisioned phase hands to the next is not carried
  over. A phase with no replica and a positive rate meets nothing. Phases with the same
  replicas and rate share one simulation. Interval attainment = phase attainments weighted by
  requests (rate x phase length); the whole profile = intervals weighted by requests.
* **Scale-up lead** (``lead``): ``planned`` (the day plan's own assumption) starts replicas
  ``scale_up_s`` before the interval they serve, so they serve from its start; ``reactive``
  starts them at the interval's start (an autoscaler that reacts to the new rate), so
  replicas added over the previous interval serve only after ``scale_up_s``; until then the
  pool keeps the previous interval's count (scale-down is immediate). Reserved replicas run
  all day in both.
* **Spot interruptions** (one sampled day, seeded): each spot replica serving an interval is
  interrupted with probability ``q`` (the GPU type's ``spot_interruption_rate``, per
  interval, as in :mod:`llmplan.optimizer.price_tiers`) at a time uniform in the interval,
  and is lost for the rest of it. Its replacement starts at the interruption and serves
  ``scale_up_s`` later, so an interruption close to the end of an interval leaves the next
  interval one replica short until then.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from llmplan.errors import UserError
from llmplan.optimizer.day_plan import DayPlan, LoadProfile
from llmplan.optimizer.price_tiers import PriceTiers
from llmplan.optimizer.slo_check import sample_value
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.workload import WorkloadSpec

LEADS = ("planned", "reactive")
Fleet = tuple[tuple[str, int], ...]  # (candidate, replicas in place), sorted, replicas > 0


@dataclass(frozen=True)
class AttainmentSettings:
    requests_per_phase: int = 600   # requests per simulated phase (at least; steady state may lengthen)
    lead: str = "planned"           # planned | reactive (module docstring)
    seed: int = 0
    max_intervals: int = 96         # longer profiles: every k-th interval is simulated (a sample)


@dataclass(frozen=True)
class Phase:
    start_s: float
    end_s: float
    fleet: Fleet


@dataclass
class ScheduleAttainment:
    """Simulated SLO attainment of one replica schedule over a profile."""

    label: str
    targets: list[str]                         # SLO labels, in order
    intervals: list[dict] = field(default_factory=list)  # one row per simulated interval
    share_within: dict[str, float | None] = field(default_factory=dict)  # whole profile, per target
    share_all: float | None = None             # whole profile: requests meeting every target
    intervals_met: int = 0                     # simulated intervals whose targets hold at their percentiles
    intervals_overloaded: int = 0              # simulated intervals with a phase whose queue grows
    spot_interruptions: int = 0
    simulations: int = 0

    def as_dict(self) -> dict:
        return {"label": self.label, "share_within": self.share_within, "share_all_targets": self.share_all,
                "intervals_simulated": len(self.intervals), "intervals_met": self.intervals_met,
                "intervals_overloaded": self.intervals_overloaded,
                "spot_interruptions": self.spot_interruptions, "simulations": self.simulations,
                "intervals": self.intervals}


def check_settings(settings: AttainmentSettings) -> None:
    if settings.lead not in LEADS:
        raise UserError(f"unknown lead model {settings.lead!r}", key="day.attainment.lead", fix="planned or reactive")
    if not (isinstance(settings.requests_per_phase, int) and settings.requests_per_phase >= 50):
        raise UserError(f"must be an integer >= 50, got {settings.requests_per_phase!r}",
                        key="day.attainment.requests_per_phase", fix="e.g. 600")
    if not (isinstance(settings.max_intervals, int) and settings.max_intervals >= 1):
        raise UserError(f"must be an integer >= 1, got {settings.max_intervals!r}",
                        key="day.attainment.max_intervals", fix="e.g. 96")


def sampled_intervals(n: int, max_intervals: int) -> tuple[list[int], int]:
    """(indices simulated, stride): all when ``n <= max_intervals``, else every k-th from 0."""
    stride = max(1, math.ceil(n / max_intervals))
    return list(range(0, n, stride)), stride


def _pools(serving: Mapping[tuple[str, str], tuple[int, ...]]) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(name, tier, tuple(xs)) for (name, tier), xs in sorted(serving.items())]


def phases(profile: LoadProfile, serving: Mapping[tuple[str, str], tuple[int, ...]], gpu_of: Mapping[str, str],
           tiers: Mapping[str, PriceTiers], scale_up_s: float, lead: str, cyclic: bool,
           rng: np.random.Generator) -> tuple[list[list[Phase]], int]:
    """Per interval, its phases (replicas in place between events); and the spot interruptions drawn."""
    n = len(profile.rate_rps)
    starts, ends = profile.t_start_s, [s + d for s, d in zip(profile.t_start_s, profile.duration_s)]
    # per pool and interval: (down_from_s, up_at_s) outages of replica slots, clipped to the interval
    outages: dict[tuple[str, str], list[list[tuple[float, float]]]] = {}
    interrupted = 0
    pools = _pools(serving)
    for name, tier, xs in pools:
        out = [[] for _ in range(n)]
        if tier != "reserved" and lead == "reactive":
            for t in range(n):
                prev = xs[t - 1] if (t > 0 or cyclic) else xs[t]
                for _ in range(max(0, xs[t] - prev)):
                    out[t].append((starts[t], starts[t] + scale_up_s))
        if tier == "spot":
            q = tiers[gpu_of[name]].spot_interruption_rate
            for t in range(n):
                hits = rng.random(xs[t]) < q
                times = starts[t] + rng.random(xs[t]) * (ends[t] - starts[t])
                for u in np.sort(times[hits]):
                    interrupted += 1
                    out[t].append((float(u), ends[t]))
                    nxt = (t + 1) % n if cyclic else t + 1
                    late = float(u) + scale_up_s - ends[t]  # how far into the next interval the replacement is late
                    if nxt < n and nxt != t and late > 0:
                        out[nxt].append((starts[nxt], starts[nxt] + late))
        outages[name, tier] = out
    result = []
    for t in range(n):
        cuts = {starts[t], ends[t]}
        for (name, tier), out in outages.items():
            for a, b in out[t]:
                cuts |= {min(max(a, starts[t]), ends[t]), min(max(b, starts[t]), ends[t])}
        edges = sorted(cuts)
        ph = []
        for a, b in zip(edges, edges[1:]):
            if b - a <= 1e-9:
                continue
            mid = 0.5 * (a + b)
            fleet: dict[str, int] = {}
            for name, tier, xs in pools:
                down = sum(1 for lo, hi in outages[name, tier][t] if lo <= mid < hi)
                fleet[name] = fleet.get(name, 0) + max(0, xs[t] - down)
            key = tuple(sorted((k, v) for k, v in fleet.items() if v > 0))
            if ph and ph[-1].fleet == key:
                ph[-1] = Phase(ph[-1].start_s, b, key)
            else:
                ph.append(Phase(a, b, key))
        result.append(ph)
    return result, interrupted


@dataclass(frozen=True)
class PhaseSim:
    """One steady-state simulation of a fleet at a rate (measured requests)."""

    values_ms: dict[str, np.ndarray]   # metric -> per-request value (NaN where not reached)
    finished: np.ndarray
    overloaded: bool                   # the queue grows over the window (or no replica)
    served_rps: float                  # completed requests per second in the window
    held: bool                         # every target holds at its percentile, not overloaded
    backlog_growth_rps: float = 0.0    # growth of the requests in the system over the window (overloaded)


#: per phase: (share within each target in order, share meeting all, targets held, overloaded)
PhaseResult = tuple[tuple[float, ...], float, bool, bool]

#: points of the phase at which the fluid backlog of an overloaded phase is evaluated
BACKLOG_POINTS = 64
#: a phase is simulated over at least this many seconds of arrivals: with chat lengths a request
#: lives 5-15 s, and the steady window needs a warm-up and a drain of a lifetime each (at 59 req/s
#: on two H100 replicas of Llama-3.1-8B, 600 requests = 10 s showed only the fill-up, read as
#: overload; 2,400 requests gave a steady, stationary window)
MIN_PHASE_ARRIVALS_S = 40.0
#: an overloaded run without a steady window is run once more, this many times longer
RETRY_FACTOR = 4


def run_phase(fleet: Fleet, rate_rps: float, replica_of: Callable[[str], ReplicaSpec], wl_spec: WorkloadSpec,
              slos: list[SLOTarget], requests: int, seed: int) -> PhaseSim:
    """Steady-state simulation of ``fleet`` at ``rate_rps``: ``requests`` at least, 100 per replica and
    :data:`MIN_PHASE_ARRIVALS_S` of arrivals; an overloaded run judged without a steady window
    (on its fill-up) is run once more :data:`RETRY_FACTOR` times longer."""
    from llmplan.optimizer.verify import thresholds
    from llmplan.sim.serving import simulate_serving

    if not fleet:
        empty = np.zeros(0)
        return PhaseSim({t.metric: empty for t in slos}, np.zeros(0, bool), True, 0.0, False)
    reps = [replica_of(name) for name, k in fleet for _ in range(k)]
    arrival = wl_spec.arrival if wl_spec.arrival in ("poisson", "gamma") else "poisson"
    n = max(requests, 100 * len(reps), math.ceil(rate_rps * MIN_PHASE_ARRIVALS_S))
    for attempt in range(2):
        spec = replace(wl_spec, arrival=arrival, rate_rps=rate_rps, num_requests=n)
        r = simulate_serving(spec, reps, router="least_outstanding", seed=seed, slo=thresholds(slos), steady_state=True)
        window = r.summary.get("window") or {}
        if not r.overloaded or window.get("window_kind") == "steady":
            break
        n *= RETRY_FACTOR  # overload judged on the arrival period alone (the fill-up): a longer run tells
    m = r.requests[r.requests["measured"]]
    fin = m["finished"].to_numpy()
    values = {t.metric: m[f"{t.metric}_ms"].to_numpy(dtype=float) for t in slos}
    held = not r.overloaded and bool(len(m))
    for t in slos:
        done = values[t.metric][fin & ~np.isnan(values[t.metric])]
        held &= (len(done) == 0 and t.metric == "tpot") or (
            len(done) > 0 and sample_value(done, t) <= t.limit_ms)  # the mean for a mean target
        if not t.is_mean:  # a mean is over finished requests (a growing queue counts as overloaded)
            held &= float(fin.mean()) >= t.percentile / 100.0
    # the rate served: over the steady window when there is one, else completions over the run
    # (first arrival to last finish; the fill-up and the drain make it a lower bound)
    done = r.requests[r.requests["finished"]]
    span_s = (float(done["finish_ms"].max()) - float(r.requests["arrival_ms"].min())) / 1000.0 if len(done) else 0.0
    served = window.get("served_rate_rps") if window.get("window_kind") == "steady" else (
        len(done) / span_s if span_s > 0 else 0.0)
    served = min(rate_rps, float(served or 0.0))
    return PhaseSim(values, fin, bool(r.overloaded), float(served), bool(held), max(0.0, rate_rps - served))


def phase_shares(sim: PhaseSim, slos: list[SLOTarget], rate_rps: float, duration_s: float) -> PhaseResult:
    """Shares of a phase's requests within each target and within all.

    Not overloaded: the simulated requests' shares. Overloaded (fluid backlog): from the
    phase's start the requests in the system grow at ``g = rate - served`` req/s (``served``:
    completions over the simulated run, first arrival to last finish), so a request arriving ``tau``
    seconds in waits ``g tau / served`` s more before its first token than the simulated
    requests did; its TPOT is as simulated. The shares average over ``tau`` uniform
    in the phase. Unfinished requests miss every target; with no replica nothing is served."""
    if sim.served_rps <= 0 or not len(sim.finished):
        return tuple(0.0 for _ in slos), 0.0, False, True
    fin = sim.finished
    extra_ms = [0.0]
    if sim.overloaded and sim.backlog_growth_rps > 0:
        taus = (np.arange(BACKLOG_POINTS) + 0.5) / BACKLOG_POINTS * duration_s
        extra_ms = list(1000.0 * sim.backlog_growth_rps * taus / sim.served_rps)
    shares = np.zeros(len(slos))
    share_all = 0.0
    for extra in extra_ms:
        all_ok = fin.copy()
        for i, t in enumerate(slos):
            v = sim.values_ms[t.metric] + (extra if t.metric == "ttft" else 0.0)
            ok = fin & ((v <= t.limit_ms) | (np.isnan(v) if t.metric == "tpot" else False))
            all_ok &= ok
            shares[i] += float(ok.mean())
        share_all += float(all_ok.mean())
    k = len(extra_ms)
    return tuple(float(x) / k for x in shares), share_all / k, sim.held, sim.overloaded


def simulate_phase(fleet: Fleet, rate_rps: float, replica_of: Callable[[str], ReplicaSpec], wl_spec: WorkloadSpec,
                   slos: list[SLOTarget], requests: int, seed: int, duration_s: float = 3600.0) -> PhaseResult:
    """:func:`run_phase` then :func:`phase_shares` for a phase of ``duration_s``."""
    return phase_shares(run_phase(fleet, rate_rps, replica_of, wl_spec, slos, requests, seed), slos, rate_rps,
                        duration_s)


def _schedule_phases(profile: LoadProfile, serving, gpu_of, tiers, scale_up_s: float, cyclic: bool,
                     settings: AttainmentSettings) -> tuple[list[list[Phase]], int]:
    """:func:`phases` of one schedule with its own seeded draw of spot interruptions."""
    rng = np.random.default_rng([settings.seed, 11])
    return phases(profile, serving, gpu_of, tiers, scale_up_s, settings.lead, cyclic, rng)


def phase_keys(profile: LoadProfile, schedules: list, gpu_of, tiers, scale_up_s: float, cyclic: bool,
               settings: AttainmentSettings) -> list[tuple[Fleet, float]]:
    """The distinct (fleet, rate) phases :func:`simulate_schedule` simulates for each schedule of
    ``schedules`` in turn, in the order it first meets them."""
    keys: dict[tuple[Fleet, float], None] = {}
    idx, _ = sampled_intervals(len(profile.rate_rps), settings.max_intervals)
    for serving in schedules:
        per_interval, _ = _schedule_phases(profile, serving, gpu_of, tiers, scale_up_s, cyclic, settings)
        for t in idx:
            rate = profile.rate_rps[t]
            for ph in per_interval[t]:
                if rate * (ph.end_s - ph.start_s) > 0:
                    keys[(ph.fleet, rate)] = None
    return list(keys)


def simulate_phases(keys: list[tuple[Fleet, float]], replica_of: Callable[[str], ReplicaSpec], wl_spec: WorkloadSpec,
                    slos: list[SLOTarget], settings: AttainmentSettings,
                    progress: Callable[[str, int, int], None] | None = None) -> dict:
    """(fleet, rate) -> :func:`run_phase` for every key, the independent simulations spread over
    worker processes (:mod:`llmplan.parallel`; the results do not depend on it). The
    busiest phases (highest rate per replica, the longest runs near capacity) start first."""
    from llmplan.parallel import map_jobs

    order = sorted(range(len(keys)), key=lambda i: (-keys[i][1] / max(1, sum(n for _, n in keys[i][0])), i))
    for name in sorted({name for fleet, _ in keys for name, _ in fleet}):
        replica_of(name)  # built once here, inherited by the workers
    jobs = [lambda f=keys[i][0], r=keys[i][1]: run_phase(f, r, replica_of, wl_spec, slos, settings.requests_per_phase,
                                                          settings.seed) for i in order]
    tick = (lambda done, total: progress("attain phases", done, total)) if progress else None
    results = map_jobs(jobs, tick)
    return {keys[i]: res for i, res in zip(order, results)}


def simulate_schedule(label: str, profile: LoadProfile, serving: Mapping[tuple[str, str], tuple[int, ...]],
                      gpu_of: Mapping[str, str], tiers: Mapping[str, PriceTiers], scale_up_s: float, cyclic: bool,
                      replica_of: Callable[[str], ReplicaSpec], wl_spec: WorkloadSpec, slos: list[SLOTarget],
                      settings: AttainmentSettings = AttainmentSettings(),
                      cache: dict | None = None,
                      progress: Callable[[str, int, int], None] | None = None,
                      precomputed: dict | None = None) -> ScheduleAttainment:
    """Simulated attainment of one schedule (``serving``: (candidate, tier) -> replicas per interval).
    ``precomputed``: (fleet, rate) -> :func:`run_phase` result of that phase, simulated ahead
    (:func:`simulate_phases`); taken instead of simulating, and counted as this schedule's simulation."""
    check_settings(settings)
    per_interval, interrupted = _schedule_phases(profile, serving, gpu_of, tiers, scale_up_s, cyclic, settings)
    idx, stride = sampled_intervals(len(profile.rate_rps), settings.max_intervals)
    cache = {} if cache is None else cache
    precomputed = {} if precomputed is None else precomputed
    out = ScheduleAttainment(label, [s.label for s in slos], spot_interruptions=interrupted)
    tot_w, tot_within, tot_all = 0.0, [0.0] * len(slos), 0.0
    for k, t in enumerate(idx):
        rate = profile.rate_rps[t]
        w_int, within, all_ok, held, over = 0.0, [0.0] * len(slos), 0.0, True, False
        for ph in per_interval[t]:
            w = rate * (ph.end_s - ph.start_s)
            if w <= 0:
                continue
            key = (ph.fleet, rate)
            if key not in cache:
                cache[key] = precomputed[key] if key in precomputed else run_phase(
                    ph.fleet, rate, replica_of, wl_spec, slos, settings.requests_per_phase, settings.seed)
                out.simulations += 1
            shares, share_all, ok, overloaded = phase_shares(cache[key], slos, rate, ph.end_s - ph.start_s)
            over |= overloaded
            w_int += w
            within = [a + w * s for a, s in zip(within, shares)]
            all_ok += w * share_all
            held &= ok
        row = {"interval": t, "t_start_s": profile.t_start_s[t], "rate_rps": rate,
               "replicas": [sum(n for _, n in ph.fleet) for ph in per_interval[t]],
               "phases": len(per_interval[t])}
        if w_int > 0:
            row |= {f"share_within[{lab}]": round(v / w_int, 4) for lab, v in zip(out.targets, within)}
            row |= {"share_all_targets": round(all_ok / w_int, 4), "targets_met": held, "overloaded": over}
            out.intervals_met += int(held)
            out.intervals_overloaded += int(over)
            weight = w_int * stride  # a sampled interval stands for the ``stride`` intervals from it
            tot_w += weight
            tot_within = [a + stride * v for a, v in zip(tot_within, within)]
            tot_all += stride * all_ok
        else:
            row |= {"share_all_targets": None, "targets_met": None, "overloaded": None}
        out.intervals.append(row)
        if progress:
            progress(f"attain {label}", k + 1, len(idx))
    out.share_within = {lab: (round(v / tot_w, 4) if tot_w else None) for lab, v in zip(out.targets, tot_within)}
    out.share_all = round(tot_all / tot_w, 4) if tot_w else None
    return out


def day_attainment(day: DayPlan, replica_of: Callable[[str], ReplicaSpec], wl_spec: WorkloadSpec,
                   slos: list[SLOTarget], settings: AttainmentSettings = AttainmentSettings(),
                   progress: Callable[[str, int, int], None] | None = None) -> dict:
    """The ``attainment`` block of a day plan: the autoscaled schedule and static provisioning
    for the peak, each simulated over the profile (module docstring for the model)."""
    check_settings(settings)
    gpu_of = {c.name: c.gpu for c in day.candidates}
    n = len(day.profile.rate_rps)
    static = {k: (v,) * n for k, v in day.static_fleet.items()}
    cache: dict = {}
    # every distinct phase of both schedules simulated up front, in parallel where cores allow; the
    # schedules then take them in their own order (counting each where the sequential walk would)
    keys = phase_keys(day.profile, [day.serving, static], gpu_of, day.tiers, day.scale_up_s, day.cyclic, settings)
    ahead = simulate_phases(keys, replica_of, wl_spec, slos, settings, progress)
    common = (gpu_of, day.tiers, day.scale_up_s, day.cyclic, replica_of, wl_spec, slos, settings, cache, progress, ahead)
    plan = simulate_schedule("day", day.profile, day.serving, *common)
    peak = simulate_schedule("static", day.profile, static, *common)
    idx, stride = sampled_intervals(n, settings.max_intervals)
    model = [f"each phase simulated at steady state with >= {settings.requests_per_phase} requests and >= "
             f"{MIN_PHASE_ARRIVALS_S:g} s of arrivals (an overloaded run without a steady window is run once more, "
             f"{RETRY_FACTOR}x longer); backlog between phases not carried over; unfinished requests miss every target",
             f"scale-up lead: {settings.lead}" + (" (replicas started scale_up_s ahead serve from the interval's start)"
                                                  if settings.lead == "planned" else
                                                  " (replicas added at an interval's start serve scale_up_s later)"),
             f"spot: one sampled day (seed {settings.seed}): each spot replica interrupted with probability q per "
             "interval at a uniform time, lost for the rest of it; its replacement serves scale_up_s after the "
             "interruption",
             "whole-profile shares weight intervals by their requests (rate x length)",
             "an overloaded phase (the queue grows over the simulated window) misses its targets at their percentiles; "
             "its backlog grows from the phase's start at (rate - the rate the simulated run served) "
             "(fluid model), delaying each request's first token by the backlog ahead of it; TPOT as simulated"]
    if stride > 1:
        model.append(f"sample: every {stride}th interval simulated ({len(idx)} of {n}), each standing for the "
                     f"{stride} intervals from it")
    return {"model": model, "lead": settings.lead, "seed": settings.seed, "requests_per_phase": settings.requests_per_phase,
            "intervals_simulated": len(idx), "intervals": n, "day": plan.as_dict(), "static": peak.as_dict(),
            "simulations": plan.simulations + peak.simulations}


def for_plan(day: DayPlan, evaluations, engine, model, wl_spec: WorkloadSpec, slos: list[SLOTarget],
             settings: AttainmentSettings = AttainmentSettings(),
             progress: Callable[[str, int, int], None] | None = None) -> dict:
    """:func:`day_attainment` with each candidate's replica as the planner evaluated it."""
    from llmplan.optimizer.verify import replica_spec

    by_name = {e.candidate.name: e for e in evaluations}
    specs: dict[str, ReplicaSpec] = {}

    def replica_of(name: str) -> ReplicaSpec:
        if name not in specs:
            specs[name] = replica_spec(by_name[name], engine, model)
        return specs[name]

    return day_attainment(day, replica_of, wl_spec, slos, settings, progress)

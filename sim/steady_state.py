"""Steady-state measurement window and overload test for open-loop simulations.

A simulation starts empty and ends with its last requests running on an emptying
system. Both ends see smaller batches than the offered load produces, so their TPOT is
too low. The measured window leaves out a warm-up and a drain that each last about one
request lifetime, and the run is made long enough that the window holds enough requests.

* **Request lifetime** ``S = TTFT + (output_tokens - 1) x TPOT`` at the load's steady
  batch. :func:`estimate_service` solves Little's law ``L = lambda x W`` per replica
  for the running batch ``L`` with the replica's own step model (decode step at batch
  ``L``, stretched by the share of time spent on the prefills that arrive at that rate).
* **Warm-up = drain = D** at first, the 95th percentile of ``S`` over the workload's own output
  lengths. After D the number of requests in the system of an M/G/inf-like batch
  server is within ~5% of its steady value (it grows as ``lambda E[min(S, t)]``), and a
  request that arrives D before the last arrival finishes, with 95% probability, before
  the system starts to empty. Near capacity the batch, and with it TPOT and the
  lifetime, keeps growing for several lifetimes; the simulator therefore doubles the
  warm-up (up to ``MAX_WARMUP_DOUBLINGS`` times) while the window is not stationary.
* **Window** at least ``max(MIN_MEASURED_REQUESTS / lambda, WINDOW_LIFETIMES x D)``, so
  it holds enough requests for a p99 and spans more than one lifetime. The run length is
  ``lambda x (2D + window)`` requests: adaptive in the output length (through D) and in the
  load (through lambda), instead of a fixed count. It is never shorter than asked and at
  most ``MAX_REQUESTS``.
* The measured requests are those that **arrive** in ``[first arrival + D, last arrival - D]``
  (selection by arrival, not by finish, so long requests are not under-represented).

**Overload** (:func:`assess_window`): over the window, the number of requests in the
system (arrived, not finished) goes from ``Q0`` to ``Q1``. The run is overloaded when the
growth ``Q1 - Q0`` exceeds ``OVERLOAD_TOLERANCE`` (5%) of the requests that arrived in the
window plus the noise ``3 c sqrt(2 max(Q0, Q1))``: the difference of two populations that
are each about Poisson (M/G/inf) and a lifetime or more apart has variance ``2Q``, and
arrivals burstier than Poisson (coefficient of variation ``c`` of the gaps in the window,
at least 1) scale the count's variance by about ``c^2`` (renewal-process counts), so a
stable run is not flagged by chance. Equivalently: the served (completed) rate fell more
than 5% below the offered rate, beyond noise. The window is **stationary** when
``|Q1 - Q0|`` is within that noise; a synthetic run that is not stationary, and not
overloaded, is repeated with a doubled warm-up. The estimate only sizes the run: one it puts
above capacity is lengthened and settled the same way (a run that is overloaded stops at the
queue guard). Without a steady window (a given workload too short, or a run the queue guard
stopped) the window is the arrival period, first to last arrival; growth there is no verdict
unless the queue guard stopped the run (sim.serving: ``too_short_to_judge``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from llmplan.parallel import can_fork_beside
from llmplan.sim.types import StepShape

#: lifetime quantile used for the warm-up and the drain
LIFETIME_QUANTILE = 95.0
#: fewest requests wanted inside the window (a stable p99 after the cuts)
MIN_MEASURED_REQUESTS = 1000
#: the window spans at least this many warm-up lengths (request lifetimes)
WINDOW_LIFETIMES = 2.0
#: the warm-up is doubled at most this many times while the system still fills
MAX_WARMUP_DOUBLINGS = 3
#: a near-capacity run of several replicas starts with one warm-up doubling at or above this
#: estimated utilisation (:func:`first_warmup_doublings`)
NEAR_CAPACITY_UTILISATION = 0.9
#: hard cap on the requests of one extended run
MAX_REQUESTS = 200_000
#: served rate may fall this far below the offered rate (beyond noise) before "overloaded"
OVERLOAD_TOLERANCE = 0.05
#: noise allowance in standard deviations of a Poisson population of requests in the system
NOISE_SIGMAS = 3.0


@dataclass(frozen=True)
class ServiceEstimate:
    """Analytical steady state of the replicas at an offered rate (used to size a run)."""

    ttft_ms: float                 # prompt time of a mean request at the steady batch
    tpot_ms: float                 # decode time per token at the steady batch
    batch_per_replica: float       # running sequences per replica (Little's law, capped)
    utilisation: float             # offered rate / estimated capacity (>= 1: no steady state)

    @property
    def stable(self) -> bool:
        return self.utilisation < 1.0


def step_shape(prefill: int = 0, dec: int = 0, kv: int = 0) -> StepShape:
    """A step of one fresh ``prefill``-token chunk beside ``dec`` decoding sequences holding ``kv`` tokens."""
    return StepShape(prefill, 1 if prefill else 0, float(prefill * (prefill + 1) / 2), 0, dec, kv)


class _ReplicaModel:
    """Step times of one replica at a mean request shape."""

    def __init__(self, r, mean_in: float, mean_out: float):
        e, self.cm = r.engine, r.cost_model
        self.pp = int(getattr(self.cm, "pp", 1) or 1)
        self.pin, self.pout = max(1.0, mean_in), max(1.0, mean_out)
        kv_seqs = int(r.kv_capacity_tokens * (1 - e.watermark) // (self.pin + self.pout))
        self.b_max = max(1, min(e.max_num_seqs, kv_seqs))
        self.chunk = int(max(1, min(self.pin, e.max_num_batched_tokens - 1)))

    def at(self, b: float) -> tuple[float, float, float]:
        """(ttft, decode step, prefill ms per request) with ``b`` sequences running, ms."""
        pp, pin = self.pp, self.pin
        mb = max(1, int(round(b / pp)))  # pipeline: pp micro-batches, a token crosses pp stages
        kv = int(mb * (pin + self.pout / 2))
        t_dec = pp * float(self.cm.stage_time_ms(step_shape(dec=mb, kv=kv)))
        t_mix = pp * float(self.cm.stage_time_ms(step_shape(prefill=self.chunk, dec=mb, kv=kv)))
        return t_mix * math.ceil(pin / self.chunk), t_dec, max(t_mix - t_dec, 1e-6) * pin / self.chunk

    def capacity_per_ms(self) -> float:
        """Requests per ms with full batches: decode shared by the batch plus each prefill."""
        _, t_dec, pre = self.at(self.b_max)
        return self.b_max / ((self.pout - 1) * t_dec + self.b_max * pre)

    def steady(self, lam_per_ms: float, util: float) -> ServiceEstimate:
        """Little's law ``b = lam x (TTFT + (O - 1) x TPOT(b))`` solved for the batch ``b``."""
        b, ttft, tpot = 1.0, 0.0, 0.0
        for _ in range(60):
            ttft, t_dec, pre = self.at(b)
            busy = min(lam_per_ms * pre, 0.95)          # share of time spent on prefill work
            tpot = t_dec / (1.0 - busy)
            b_new = min(lam_per_ms * (ttft + (self.pout - 1) * tpot), float(self.b_max))
            done = abs(b_new - b) < 0.01 * max(b, 1.0)
            b = b_new if done else 0.5 * (b + b_new)
            if done:
                break
        return ServiceEstimate(ttft, tpot, b, util)


def estimate_service(replicas: list, rate_rps: float, mean_input_tokens: float,
                     mean_output_tokens: float) -> ServiceEstimate:
    """Steady state at ``rate_rps`` spread over ``replicas`` in proportion to their capacity
    (a load-balancing router keeps every replica equally busy); the replica with the
    longest request lifetime is returned."""
    models = [_ReplicaModel(r, mean_input_tokens, mean_output_tokens) for r in replicas]
    caps = [m.capacity_per_ms() for m in models]
    total = sum(caps)
    util = rate_rps / 1000.0 / total if total > 0 else math.inf
    ests = [m.steady(rate_rps / 1000.0 * c / total, util) for m, c in zip(models, caps)]
    return max(ests, key=lambda x: x.ttft_ms + (mean_output_tokens - 1) * x.tpot_ms)


@dataclass(frozen=True)
class RunPlan:
    """How long to run and what to leave out (times in ms)."""

    num_requests: int              # requests to simulate
    warmup_ms: float               # left out after the first arrival
    drain_ms: float                # left out before the last arrival
    window_ms: float               # planned measured span
    capped: bool                   # MAX_REQUESTS bound the run
    estimate: ServiceEstimate


def lifetimes_ms(est: ServiceEstimate, output_tokens: np.ndarray) -> np.ndarray:
    """Estimated lifetime of each request from its output length."""
    o = np.asarray(output_tokens, dtype=float)
    return est.ttft_ms + np.maximum(o - 1.0, 0.0) * est.tpot_ms


def plan_run(rate_rps: float, est: ServiceEstimate, output_tokens: np.ndarray, asked_requests: int,
             min_measured: int = MIN_MEASURED_REQUESTS, warmup_factor: float = 1.0) -> RunPlan:
    """Run length for a steady window at ``rate_rps``; never fewer than ``asked_requests``.

    The warm-up is ``warmup_factor`` x D (the caller doubles it while the system still
    fills). An estimate above capacity (``est.stable`` false) is sized the same way: the
    estimate is approximate (it can put a load the simulator serves steadily above capacity),
    and only a steady window tells a system that fills from one that is overloaded."""
    d = float(np.percentile(lifetimes_ms(est, output_tokens), LIFETIME_QUANTILE)) if len(output_tokens) else 0.0
    warmup = warmup_factor * d
    window = max(min_measured / rate_rps * 1000.0, WINDOW_LIFETIMES * d)
    need = int(math.ceil(rate_rps * (warmup + d + window) / 1000.0)) + 1
    n = max(asked_requests, min(need, MAX_REQUESTS))
    return RunPlan(n, warmup, d, window, need > MAX_REQUESTS, est)


def first_warmup_doublings(est: ServiceEstimate, near_capacity: bool, replicas: int, at_least: int = 0) -> int:
    """Warm-up doublings of a stable run's first attempt (0 for a run without a steady state).

    ``at_least``: a caller that simulated the same deployment at a lower rate passes the
    doublings that run needed (the batch fills more slowly the busier the replicas are).
    ``near_capacity`` (the fleet's rate settling): at least 1 when the run has several
    replicas and the estimate is at least :data:`NEAR_CAPACITY_UTILISATION` busy. There the
    first attempt (warm-up D) was rarely stationary in the runs measured (docs/STEADY_STATE.md:
    the requests in the system of several replicas are many, so the noise allowance is tight
    while the batch still grows) and the run was repeated with 2 D.

    Starting at 2^k D skips attempts whose window would not have been stationary: the run at
    2^k D is the one the doublings would have made (same length, same requests), so the result
    is unchanged whenever they were needed; otherwise the window is measured after a longer
    warm-up. The doublings stop at the same ``MAX_WARMUP_DOUBLINGS``."""
    if not est.stable:
        return 0
    rule = int(near_capacity and replicas >= 2 and est.utilisation >= NEAR_CAPACITY_UTILISATION)
    return min(MAX_WARMUP_DOUBLINGS, max(rule, int(at_least)))


def speculate_next(est: ServiceEstimate) -> bool:
    """Whether a run's next attempt (warm-up doubled) starts on a free core beside the current
    one (``llmplan.parallel.beside``): when the estimate puts the load at or above capacity.
    Such runs, settled near capacity, were rarely stationary at their first attempt (the fleet's
    8 H100 replicas of Llama-3.1-8B at its maximum rate: not stationary at D, stationary at 2 D;
    day-plan phases at estimated utilisation 1.3: three doublings), so the second attempt is
    usually needed and its wall time is saved; where it is not, its result is dropped (it only
    costs a core that was free). Speculation never changes which attempt is kept."""
    return not est.stable and can_fork_beside()


def window_indices(arrival_ms: np.ndarray, warmup_ms: float, drain_ms: float) -> tuple[int, int]:
    """Half-open range ``[lo, hi)`` of requests (sorted by arrival) arriving in
    ``[first + warmup, last - drain]``; ``(0, 0)`` when that span holds fewer than 2."""
    a = np.asarray(arrival_ms, dtype=float)
    if len(a) < 2:
        return 0, 0
    lo = int(np.searchsorted(a, a[0] + warmup_ms, side="left"))
    hi = int(np.searchsorted(a, a[-1] - drain_ms, side="right"))
    return (lo, hi) if hi - lo >= 2 else (0, 0)


def in_system(arrival_ms: np.ndarray, finish_ms: np.ndarray, t: float) -> int:
    """Requests arrived by ``t`` and not finished by ``t`` (NaN finish: never)."""
    arr = np.asarray(arrival_ms, dtype=float)
    fin = np.asarray(finish_ms, dtype=float)
    return int(np.sum(arr <= t) - np.sum(fin <= t))


def assess_window(arrival_ms: np.ndarray, finish_ms: np.ndarray, lo: int, hi: int,
                  offered_rate_rps: Optional[float]) -> dict:
    """Offered vs served rate and the growth of the requests in the system over the
    window (requests ``lo..hi-1`` by arrival; the arrival period when the range is empty).
    Keys: window_start_ms, window_end_ms, window_kind (steady | arrivals), offered_rate_rps,
    arrivals_in_window, served_rate_rps, queue_start, queue_end, queue_growth_rps,
    growth_allowance, overloaded_by_growth, stationary (the change is within noise)."""
    arr = np.asarray(arrival_ms, dtype=float)
    fin = np.asarray(finish_ms, dtype=float)
    seen = arr[np.isfinite(arr)]
    if hi - lo >= 2 and np.isfinite(arr[lo]) and np.isfinite(arr[hi - 1]):
        t0, t1, kind = float(arr[lo]), float(arr[hi - 1]), "steady"
    elif len(seen) >= 2:
        t0, t1, kind = float(seen.min()), float(seen.max()), "arrivals"
    else:
        t0 = t1 = float(seen.min()) if len(seen) else 0.0
        kind = "arrivals"
    dur_ms = t1 - t0
    q0, q1 = in_system(arr, fin, t0), in_system(arr, fin, t1)
    arrived = int(np.sum((arr > t0) & (arr <= t1)))
    served = int(np.sum((fin > t0) & (fin <= t1)))
    inside = arr[(arr >= t0) & (arr <= t1)]
    gaps = np.diff(np.sort(inside))
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else 1.0
    noise = NOISE_SIGMAS * max(1.0, cv) * math.sqrt(2.0 * max(q0, q1, 1))
    allowance = OVERLOAD_TOLERANCE * arrived + noise
    per_s = 1000.0 / dur_ms if dur_ms > 0 else math.nan
    return {
        "window_kind": kind, "window_start_ms": t0, "window_end_ms": t1,
        "offered_rate_rps": offered_rate_rps, "arrivals_in_window": arrived,
        "arrival_rate_in_window_rps": arrived * per_s, "served_rate_rps": served * per_s,
        "queue_start": q0, "queue_end": q1, "queue_growth_rps": (q1 - q0) * per_s,
        "arrival_cv": max(1.0, cv), "growth_allowance": allowance, "overloaded_by_growth": bool(dur_ms > 0 and (q1 - q0) > allowance),
        "stationary": bool(kind == "steady" and abs(q1 - q0) <= noise),
    }

"""Stage 2: the analytical screen. Latency and SLO capacity of one replica from the step model.

Engines interleave two kinds of iterations: decode-only steps (memory bound, ~tau_d) and
steps that also carry prompt tokens (tau_pf, often several times longer). Averaging the
prompt tokens over all steps would hide that (step time is convex in tokens: small
batches are weight-bandwidth bound), so the screen models the mix explicitly:

  * prefill steps per second  n_pf = lam * I / T_pf, with T_pf = min(k I, budget - B) tokens
    per prefill step and k = 1 + lam * tau_pf prompts batched per prefill step;
  * mean step  tau = tau_d / (1 - n_pf (tau_pf - tau_d));  stable iff n_pf (tau_pf - tau_d) < 1;
  * sequences decoding  B = lam * O * tau (Little's law), iterated to a fixed point.

TPOT at percentile q: a request's O tokens see N ~ Poisson(f O) prefill steps, f = n_pf tau
the fraction of steps that carry prompts, and B_q = B + z_q sqrt(B) decoders:
tpot_q = tau_d(B_q) + (tau_pf - tau_d) (f O_e + z_q sqrt(f O_e)) / O_e, O_e = O / 4 (shorter
outputs see more variance). TTFT at q: the q-quantile of the time left in the step an
arrival lands in (`residual_quantile_ms`), the request's own prefill (its prompt at the
q-quantile, with the k - 1 prompts batched beside it, in budget-sized chunks) and, when
prompts exceed the token budget, a G/G/1 wait (`wait_quantile_ms`: Kingman's mean with an
exponential tail).
The SLO capacity is the largest lam meeting every target (bisection). Pipeline parallelism:
per micro-batch stage times, TPOT = pp x stage time.

Constants and where they come from:
  * ``MAX_LOAD = 0.98``: the prefill load n_pf (tau_pf - tau_d) is a utilisation; the mean
    step tau_d / (1 - load) diverges at 1. Beyond 0.98 the mean step is > 50 x tau_d, which
    misses any TPOT target a decode step can meet, so the point is reported as unstable
    instead of iterating towards the pole. ``1 - MAX_LOAD`` (0.02) is the same guard on the
    prefill-first slow-down 1 / (1 - f).
  * ``O_EFFECTIVE_FRACTION = 1/4``: TPOT variance from prompt-carrying steps scales as
    1 / sqrt(f O) for a request of O tokens; the SLO percentile is set by the requests with
    short outputs, not by the mean one. A quarter of the mean output is an empirical choice,
    checked against the simulator in tests/test_optimizer_evaluate.py (p90 TPOT within the
    tolerance stated there at two loads); it is not derived.
  * ``BRACKET_HEADROOM = 1.5``: the bisection's upper end is the decode-only throughput of a
    full batch, max_num_seqs / (O tau_full), which ignores prefill work and so bounds the
    capacity from above; the 1.5 margin covers the 2% decode-count grid and the step
    model's KV-length buckets, which can make the fixed point's steps slightly cheaper than
    the bound's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from statistics import NormalDist

from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.engine_terms import cost_model_request_ttft_ms
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import StepShape

_TOKEN_GRID = 16  # token counts rounded up to a multiple of this (cache friendliness)
MAX_LOAD = 0.98               # see module docstring
O_EFFECTIVE_FRACTION = 0.25   # see module docstring
BRACKET_HEADROOM = 1.5        # see module docstring


def wait_quantile_ms(rho: float, service_ms: float, ca2: float, cs2: float, q: float) -> float:
    """q-quantile (0 < q < 1) of the waiting time of a G/G/1 queue at utilisation ``rho``.

    P(W > 0) = rho, and the wait beyond 0 is exponential with mean
    theta = S (ca^2 + cs^2) / (2 (1 - rho)), so E[W] = rho theta is Kingman's heavy-traffic
    formula (J.F.C. Kingman, "The single server queue in heavy traffic", Proc. Camb. Phil. Soc.
    57, 1961) and the Pollaczek-Khinchine mean for Poisson arrivals (ca^2 = 1). For M/M/1
    (ca^2 = cs^2 = 1) this is the exact distribution P(W > t) = rho exp(-t (1 - rho) / S).
    Then P(W > t) = 1 - q gives t = theta ln(rho / (1 - q)), and 0 when rho <= 1 - q.
    """
    if rho <= 1.0 - q:
        return 0.0
    rho = min(rho, 0.999)
    theta = service_ms * (ca2 + cs2) / (2.0 * (1.0 - rho))
    return theta * math.log(rho / (1.0 - q))


def mean_wait_ms(rho: float, service_ms: float, ca2: float, cs2: float) -> float:
    """Mean of the wait of ``wait_quantile_ms``: rho theta (Kingman's formula)."""
    rho = min(rho, 0.999)
    return rho * service_ms * (ca2 + cs2) / (2.0 * (1.0 - rho))


def residual_quantile_ms(tau_d: float, tau_pf: float, p_pf: float, q: float) -> float:
    """q-quantile of the time left in the step an arrival lands in. Poisson arrivals see time
    averages (PASTA): with probability ``p_pf`` (the share of time in prompt-carrying steps) the
    step is a prefill step and the time left is uniform on [0, tau_pf], else uniform on
    [0, tau_d]. Solves P(R > t) = 1 - q on the piecewise-linear survival function."""
    lo, hi = sorted((tau_d, tau_pf))
    p_hi = p_pf if tau_pf >= tau_d else 1.0 - p_pf   # weight of the longer step
    if hi <= 0:
        return 0.0
    # above the short step only the long one is left: P(R > t) = p_hi (1 - t / hi)
    if lo < hi and (1.0 - q) <= p_hi * (1.0 - lo / hi):
        return hi * (1.0 - (1.0 - q) / p_hi)
    # below it both are: P(R > t) = 1 - t (p_hi / hi + (1 - p_hi) / lo)
    slope = p_hi / hi + ((1.0 - p_hi) / lo if lo > 0 else 0.0)
    return min(lo, q / slope) if slope > 0 else 0.0


def lognormal_cv2(mean: float, median: float) -> float:
    """Squared coefficient of variation of a lognormal with this mean and median:
    mean / median = exp(sigma^2 / 2) and cv^2 = exp(sigma^2) - 1 = (mean / median)^2 - 1.
    0 for fixed lengths (mean = median); 1.08 for an exponential (mean / median = 1 / ln 2)."""
    if not median > 0 or not mean > median:
        return 0.0
    return (mean / median) ** 2 - 1.0


@dataclass(frozen=True)
class OperatingPoint:
    rate_rps: float
    stable: bool
    step_ms: float           # mean iteration time
    decode_seqs: float       # mean sequences decoding
    prefill_tokens: float    # mean prefill tokens per iteration
    utilization: float       # share of the token budget / batch slots in use (0..1+)
    ttft_ms: dict[float | str, float]  # percentile -> ms, and "mean" -> the mean (ms)
    tpot_ms: dict[float | str, float]
    limit: str               # what stops a higher rate ("" when far from limits)


def _round_tokens(x: float) -> int:
    return int(math.ceil(max(0.0, x) / _TOKEN_GRID) * _TOKEN_GRID)


class ReplicaAnalyzer:
    """Analytical latency/capacity of one replica for a workload."""

    def __init__(self, step: AnalyticalStepModel, wl: WorkloadStats, max_num_seqs: int,
                 max_num_batched_tokens: int, kv_capacity_tokens: int, chunked_prefill: bool = True):
        self.step, self.wl = step, wl
        self.max_seqs, self.budget = max_num_seqs, max_num_batched_tokens
        self.kv_cap, self.chunked = kv_capacity_tokens, chunked_prefill
        self.I, self.O = max(1.0, wl.mean_input_tokens), max(1.0, wl.mean_output_tokens)
        # _fixed_point is a pure function of lam and the fields above (never reassigned):
        # the Pareto rows and their pool power ask for the same load rates
        self._fixed_points: dict[float, tuple[bool, float, float, tuple, str]] = {}

    def _shape(self, b: float, p: float) -> StepShape:
        # decode counts on a ~2% grid above 32 (step-model cache hits; <1% effect on time)
        n_dec = int(round(b)) if b <= 32 else int(round(1.02 ** round(math.log(b, 1.02))))
        pt = _round_tokens(p) if p > 0 else 0
        pseq = max(1, int(round(pt / self.I))) if pt else 0
        # a chunk of prompt tokens sits on average halfway through its prompt
        pairs = pt * (self.I / 2.0 + 0.5) if pt else 0.0
        return StepShape(prefill_tokens=pt, prefill_seqs=pseq, prefill_attn_pairs=pairs,
                         prefill_ctx_tokens=int(pseq * max(0.0, self.I - pt / max(pseq, 1)) / 2),
                         decode_seqs=n_dec, decode_kv_tokens=int(n_dec * (self.I + self.O / 2.0)))

    def _steps(self, b: float, lam: float) -> tuple[float, float, float, float]:
        """(tau_d, tau_pf, prompt tokens per prefill step, prefill steps per second) at B = b."""
        st = self.step
        tau_d = st.stage_time_ms(self._shape(max(b, 1.0), 0))
        room = max(1.0, self.budget - b) if self.chunked else float(self.budget)
        k = 1.0
        tau_pf = tau_d
        tokens = min(self.I, room)
        for _ in range(2):  # prompts that arrive during a prefill step join the next one
            tokens = min(k * self.I, room)
            shape = self._shape(b if self.chunked else 0.0, tokens)
            tau_pf = st.stage_time_ms(shape)
            k = 1.0 + lam * tau_pf / 1e3
        n_pf = lam * self.I / tokens
        return tau_d, tau_pf, tokens, n_pf

    def _fixed_point(self, lam: float) -> tuple[bool, float, float, tuple, str]:
        """(stable, mean stage time ms, B per micro-batch, (tau_d, tau_pf, tokens, n_pf), limit)."""
        if lam not in self._fixed_points:
            self._fixed_points[lam] = self._solve_fixed_point(lam)
        return self._fixed_points[lam]

    def _solve_fixed_point(self, lam: float) -> tuple[bool, float, float, tuple, str]:
        pp = self.step.pp
        b = 1.0
        tau = self.step.stage_time_ms(self._shape(1, 0))
        parts = (tau, tau, 0.0, 0.0)
        prev = None
        f = 0.0
        for _ in range(40):
            # prefill-first: prompt steps emit no decode tokens, so a token takes tau / (1 - f)
            b = lam * self.O * (tau if self.chunked else tau / max(1.0 - MAX_LOAD, 1.0 - f)) / 1e3
            if b * pp > self.max_seqs:
                return False, tau, b, parts, "max_num_seqs"
            if b * pp * (self.I + self.O / 2.0) > self.kv_cap:
                return False, tau, b, parts, "KV cache"
            parts = tau_d, tau_pf, _, n_pf = self._steps(b, lam)
            load = n_pf * (tau_pf - tau_d) / 1e3
            if load >= MAX_LOAD:
                return False, tau, b, parts, "prefill load"
            new = tau_d / (1.0 - load)
            f = min(MAX_LOAD, n_pf * new / 1e3)
            if abs(new - tau) <= 2e-3 * tau:
                tau = new
                break
            # plain iteration; damp only when it starts to oscillate
            oscillating = prev is not None and (new - tau) * (tau - prev) < 0
            prev, tau = tau, (0.5 * (tau + new) if oscillating else new)
        return True, tau, b, parts, ""

    def operating_point(self, lam: float, percentiles: list[float], with_mean: bool = True) -> OperatingPoint:
        """The replica at load ``lam``: latency at each of ``percentiles`` and (``with_mean``) the
        mean. Each quantity is computed on its own, so a subset gives the same values."""
        stable, tau, b, (tau_d, tau_pf, tokens, n_pf), limit = self._fixed_point(lam)
        if not stable:
            inf = {q: math.inf for q in [*percentiles, "mean"]}
            return OperatingPoint(lam, False, tau, b, 0.0, 1.0, inf, dict(inf), limit)
        st, pp = self.step, self.step.pp
        f = min(1.0, n_pf * tau / 1e3)               # fraction of steps carrying prompt tokens
        p_in_pf = min(1.0, f * tau_pf / tau)           # share of time spent in prompt-carrying steps
        # Waiting for the token budget: prompts that arrive during a step all join the next one
        # (that delay is the residual, the batching `own`) until their tokens exceed the budget `room`.
        # Beyond that the prompts queue for budget: an M/G/1 queue whose server works through
        # `room` prompt tokens per prefill step, so a prompt's service is S = tau_pf I / room and
        # rho = lam S is the share of the token budget that prompts use. S varies with the
        # prompt length (cv^2 of a lognormal with the prompts' mean and median).
        room = max(1.0, self.budget - b) if self.chunked else float(self.budget)
        service = tau_pf * min(1.0, self.I / room)
        rho = min(0.999, lam * service / 1e3)
        ca2 = self.wl.arrival_cv ** 2
        cs2 = lognormal_cv2(self.I, self.wl.input_quantile(50))
        o_e = max(1.0, self.O * O_EFFECTIVE_FRACTION)
        ttft, tpot = {}, {}
        for q in percentiles:
            qq = q / 100.0
            z = NormalDist().inv_cdf(qq)
            i_q = self.wl.input_quantile(q)
            own = i_q + max(0.0, tokens - self.I)    # the prompt plus those batched beside it
            chunks = max(1, math.ceil(own / room))
            pf = st.step_time_ms(self._shape(b if self.chunked else 0.0, min(own, room))) * chunks
            ttft[q] = (residual_quantile_ms(tau_d, tau_pf, p_in_pf, qq) + pf + wait_quantile_ms(rho, service, ca2, cs2, qq)
                       + cost_model_request_ttft_ms(st, i_q))   # per-request terms outside the steps
            b_q = min(self.max_seqs / pp, b + max(0.0, z) * math.sqrt(max(b, 1.0)))
            # prompt-carrying steps a request's tokens see: chunked, each replaces a decode
            # step (+tau_pf - tau_d); prefill-first, each is an extra pause (+tau_pf)
            n_hits = (f if self.chunked else f / max(1.0 - MAX_LOAD, 1.0 - f)) * o_e
            n_hits += max(0.0, z) * math.sqrt(n_hits)
            extra = tau_pf - tau_d if self.chunked else tau_pf
            tpot[q] = (st.stage_time_ms(self._shape(max(1.0, b_q), 0)) + extra * n_hits / o_e) * pp
        bt = b * pp
        util = max(bt / self.max_seqs, bt * (self.I + self.O / 2) / max(1, self.kv_cap), n_pf * (tau_pf - tau_d) / 1e3)
        if not with_mean:
            return OperatingPoint(lam, True, tau, b, tokens * f, util, ttft, tpot, limit)
        # the means (SLOs on the mean): mean residual E[R] = sum over step kinds of the time share
        # x half the step (PASTA, uniform residual), the mean prompt's prefill, Kingman's mean wait
        # E[W] = rho theta; TPOT at the mean batch with the mean prefill interference (z = 0)
        own = self.I + max(0.0, tokens - self.I)
        pf = st.step_time_ms(self._shape(b if self.chunked else 0.0, min(own, room))) * max(1, math.ceil(own / room))
        residual = p_in_pf * tau_pf / 2.0 + (1.0 - p_in_pf) * tau_d / 2.0
        ttft["mean"] = residual + pf + mean_wait_ms(rho, service, ca2, cs2) + cost_model_request_ttft_ms(st, self.I)
        n_hits = (f if self.chunked else f / max(1.0 - MAX_LOAD, 1.0 - f)) * o_e
        extra = tau_pf - tau_d if self.chunked else tau_pf
        tpot["mean"] = (st.stage_time_ms(self._shape(max(1.0, b), 0)) + extra * n_hits / o_e) * pp
        return OperatingPoint(lam, True, tau, b, tokens * f, util, ttft, tpot, limit)

    def meets(self, op: OperatingPoint, slos: list[SLOTarget]) -> str:
        """'' if every target holds, else the first violated target's label."""
        if not op.stable:
            return f"overloaded ({op.limit})"
        for s in slos:
            v = (op.ttft_ms if s.metric == "ttft" else op.tpot_ms)[s.quantity]
            if not v <= s.limit_ms:
                return s.label
        return ""

    def capacity(self, slos: list[SLOTarget], iters: int = 22) -> tuple[float, str, OperatingPoint, OperatingPoint]:
        """(highest rate meeting every SLO, binding constraint, point at capacity, point at light load)."""
        pcts = sorted({s.percentile for s in slos} | {50.0, 90.0, 99.0})
        light = self.operating_point(1e-6, pcts)
        why = self.meets(light, slos)
        if why:
            return 0.0, why, light, light
        # bracket: throughput upper bound from a full batch
        full = self.step.stage_time_ms(self._shape(self.max_seqs / self.step.pp, 0))
        hi = max(1e-3, self.max_seqs / (self.O * full / 1e3) * BRACKET_HEADROOM)
        lo = 0.0
        binding = ""
        # the bisection judges only the targets' own quantities; the point at capacity gets all
        judged = sorted({s.percentile for s in slos if not s.is_mean})
        with_mean = any(s.is_mean for s in slos)
        for _ in range(iters):
            mid = (lo + hi) / 2.0
            v = self.meets(self.operating_point(mid, judged, with_mean), slos)
            if v:
                hi, binding = mid, v
            else:
                lo = mid
            if hi - lo <= 0.01 * hi:
                break
        return lo, binding, (self.operating_point(lo, pcts) if lo > 0 else light), light

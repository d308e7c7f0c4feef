"""Stage 2: the analytical screen. Latency and SLO capacity of one replica from the step model.

Steady state at a per-replica arrival rate lam (Little's law + a fixed point):
  * each iteration of duration tau carries B decode tokens and p prefill tokens, with
    B = lam * O * tau (sequences decoding) and p = lam * I * tau (prompt tokens arriving);
  * tau = step_time(B decodes at mean KV length I + O/2, p prefill tokens): iterate to a
    fixed point; no fixed point under the token budget / max_num_seqs means overload.
TPOT at percentile q: the step time with B_q = B + z_q sqrt(B) decoding sequences (the
count in system is ~Poisson). TTFT at percentile q: the request's own prefill (its prompt
in chunks of the budget left by decodes, one iteration each) + half an iteration of
alignment + queueing: an M/G/1 wait on the prefill "server" whose service time is the
prefill of one prompt, with the waiting-time tail of Kingman's approximation
(P(W > t) ~ rho exp(-t (1 - rho) / (rho S_e)), S_e = mean residual service). The capacity
is the largest lam meeting every SLO target, found by bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import norm

from optimizer.types import SLOTarget, WorkloadStats
from sim.step_model import AnalyticalStepModel
from sim.types import StepShape

_TOKEN_GRID = 16  # token counts rounded up to a multiple of this (cache friendliness)


@dataclass(frozen=True)
class OperatingPoint:
    rate_rps: float
    stable: bool
    step_ms: float           # mean iteration time
    decode_seqs: float       # mean sequences decoding
    prefill_tokens: float    # mean prefill tokens per iteration
    utilization: float       # share of the token budget / batch slots in use (0..1+)
    ttft_ms: dict[float, float]  # percentile -> ms
    tpot_ms: dict[float, float]
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

    def _shape(self, b: float, p: float) -> StepShape:
        n_dec = int(round(b))
        pt = _round_tokens(p) if p > 0 else 0
        pseq = max(1, int(round(pt / self.I))) if pt else 0
        # a chunk of prompt tokens sits on average halfway through its prompt
        pairs = pt * (self.I / 2.0 + 0.5) if pt else 0.0
        return StepShape(prefill_tokens=pt, prefill_seqs=pseq, prefill_attn_pairs=pairs,
                         prefill_ctx_tokens=int(pseq * max(0.0, self.I - pt / max(pseq, 1)) / 2),
                         decode_seqs=n_dec, decode_kv_tokens=int(n_dec * (self.I + self.O / 2.0)))

    def _fixed_point(self, lam: float) -> tuple[bool, float, float, float, str]:
        """(stable, tau_ms, B, p, limit) at per-replica rate lam."""
        tau = self.step.stage_time_ms(self._shape(1, 0))
        pp = self.step.pp
        b = p = 0.0
        for _ in range(40):
            # per micro-batch (pp micro-batches in flight; pp = 1: the whole batch)
            b = lam * self.O * tau / 1e3
            p = lam * self.I * tau / 1e3
            if b * pp > self.max_seqs:
                return False, tau, b, p, "max_num_seqs"
            if b + p > self.budget:
                return False, tau, b, p, "token budget"
            if b * pp * (self.I + self.O / 2.0) > self.kv_cap:
                return False, tau, b, p, "KV cache"
            new = self.step.stage_time_ms(self._shape(b, p))
            if abs(new - tau) <= 1e-4 * tau:
                tau = new
                break
            tau = new
        # utilization of the iteration: time spent on prefill work per unit time
        return True, tau, b, p, ""

    def operating_point(self, lam: float, percentiles: list[float]) -> OperatingPoint:
        stable, tau, b, p, limit = self._fixed_point(lam)
        if not stable:
            inf = {q: math.inf for q in percentiles}
            return OperatingPoint(lam, False, tau, b, p, 1.0, inf, dict(inf), limit)
        step = self.step
        # prefill server: time to prefill one prompt alone (chunked into the budget)
        chunk = max(1, self.budget - int(round(b))) if self.chunked else int(self.I)
        n_chunks = max(1, math.ceil(self.I / chunk))
        per_chunk_tokens = min(self.I, chunk)
        pf_shape = self._shape(b, per_chunk_tokens)
        pf_step = step.step_time_ms(pf_shape)
        s_pf = n_chunks * pf_step
        # utilisation of the replica by prompt work: prefill tokens per second vs capacity
        pf_alone = step.stage_time_ms(self._shape(0, per_chunk_tokens)) * n_chunks
        rho = min(0.999, lam * pf_alone / 1e3)
        ca2 = self.wl.arrival_cv ** 2
        s_resid = pf_alone  # mean residual service incl. prompt-length variability (E[S^2]/2E[S] ~ S)
        ttft, tpot = {}, {}
        for q in percentiles:
            qq = q / 100.0
            # Kingman tail: P(W > t) = rho exp(-t (1-rho) / (rho * S_e * (ca2+1)/2))
            scale = rho * s_resid * (ca2 + 1.0) / 2.0 / max(1e-9, 1.0 - rho)
            wait = 0.0 if rho <= (1.0 - qq) else scale * math.log(rho / (1.0 - qq))
            ttft[q] = s_pf + tau / 2.0 + wait
            z = float(norm.ppf(qq))
            b_q = min(self.max_seqs / step.pp, b + z * math.sqrt(max(b, 1.0)))
            tpot[q] = step.stage_time_ms(self._shape(max(1.0, b_q), p)) * step.pp
        bt = b * step.pp
        util = max(bt / self.max_seqs, (b + p) / self.budget, bt * (self.I + self.O / 2) / max(1, self.kv_cap))
        return OperatingPoint(lam, True, tau, b, p, util, ttft, tpot, limit)

    def meets(self, op: OperatingPoint, slos: list[SLOTarget]) -> str:
        """'' if every target holds, else the first violated target's label."""
        if not op.stable:
            return f"overloaded ({op.limit})"
        for s in slos:
            v = (op.ttft_ms if s.metric == "ttft" else op.tpot_ms)[s.percentile]
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
        hi = max(1e-3, self.max_seqs / (self.O * full / 1e3) * 1.5)
        lo = 0.0
        best = light
        binding = ""
        for _ in range(iters):
            mid = (lo + hi) / 2.0
            op = self.operating_point(mid, pcts)
            v = self.meets(op, slos)
            if v:
                hi, binding = mid, v
            else:
                lo, best = mid, op
            if hi - lo <= 0.005 * hi:
                break
        return lo, binding, best, light

"""Discrete-event simulation of disaggregated prefill/decode serving (xPyD).

A deployment is a prefill pool of ``P`` workers and a decode pool of ``D`` workers
(:class:`DisaggSpec`), each pool with its own step model, engine limits and KV capacity
(one :class:`~sim.replica.ReplicaSpec` per pool), GPU type and parallelism. One request:

1. arrives (open or closed loop, the same :class:`~sim.workload.Workload` as the
   aggregated simulator) and is routed to the prefill worker with the fewest unfinished
   requests (ties: lowest index; ``routing="round_robin"``: the next worker in turn, as
   Dynamo's frontend does by default);
2. queues there and is prefilled by the worker's chunked-prefill loop (token budget,
   ``max_num_seqs``, KV blocks, prefix cache): the prefill produces the first token;
3. is assigned to the decode worker with a free batch slot and the most free KV tokens, net of
   the requests already in transit to it or waiting there (ties: lowest index; round-robin: the
   next worker in turn); after the hand-off delay when ``handoff_at="before_decode"``; with
   ``reserve_decode_kv`` (default, as SGLang's pre-allocation queue and vLLM's decode-side
   pull) it waits there until fewer than ``max_num_seqs`` requests run or hold KV and its
   prompt's blocks fit above the watermark, the blocks are allocated, and then its KV moves:
   :mod:`sim.kv_transfer` times it (payload per TP rank, NVLink inside one scale-up domain
   else the scale-out network) and two :class:`~sim.kv_transfer.LinkOccupancy` per transfer,
   the sending prefill worker's NICs and the receiving decode worker's, serve transfers
   first come first served (:func:`~sim.kv_transfer.reserve_transfer`);
4. once its KV has arrived it joins the decode batch at the worker's next step (without
   ``reserve_decode_kv`` the room check of step 3 happens here instead, after the transfer)
   and decodes in continuous batches of decode-only steps until its last token.

TTFT convention (``first_token_at``): ``"decode"`` (default) is what a benchmark client
measures against vLLM's, SGLang's and Dynamo's disaggregated front ends: the client's
stream comes from the decode worker, so its first token is seen when the decode worker
takes the request, after the prefill (queue included), the KV transfer and any wait for
decode room. ``"prefill"`` stamps the first token at the end of the prefill instead (the
transfer and the decode wait then show in the gap to the second token, i.e. in TPOT and ITL).
A one-token request finishes at the end of its prefill (nothing to transfer).

Prefill steps: every step of a prefill worker is a prompt, whose device work hides the eager
host launch the aggregated step model adds (``context_launch``, :mod:`sim.disagg_launch`).

Prefill KV: with ``hold_prefill_kv`` (default, as SGLang and vLLM's NIXL connector do) the
prefill worker keeps ``ceil(P / block)`` blocks of the request until its transfer has ended,
so slow transfers and a full decode pool throttle the prefill pool. Simplification
(docs/DISAGG.md): a transfer's duration is fixed when it is reserved (no bandwidth sharing). Metrics are those of :mod:`sim.metrics` (same columns, windows, SLOs),
plus per-request ``prefill_worker``, ``prefill_done_ms``, ``kv_arrival_ms``, ``transfer_ms``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Union

import numpy as np

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.sim.disagg_launch import CONTEXT_LAUNCH, DEFAULT_CONTEXT_LAUNCH, context_step_model
from llmplan.sim.disagg_request_terms import REQUEST_TERMS, add_request_ttft
from llmplan.sim.disagg_workers import DecodeWorker, free_kv_tokens, prepare_decode, prepare_prefill
from llmplan.sim.events import PRIORITY_ARRIVAL, PRIORITY_LAST, EventLoop
from llmplan.sim.kv_transfer import (KVPayload, LinkOccupancy, PoolLink, exposed_transfer_ms, pool_link,
                                     request_kv_payload, reserve_transfer)
from llmplan.sim.metrics import LogHistogram, MeasureWindow, SLOThresholds, json_clean, requests_frame, summarize
from llmplan.sim.replica import Replica, ReplicaSpec, validate_replica
from llmplan.sim.scheduler import Seq
from llmplan.sim.serving import (DEFAULT_MAX_QUEUE, DEFAULT_MIN_DRAIN_MS, DEFAULT_RATE_FRACTION, SimResult,
                                 _offered_rate, _resolve_workload, _simulate_steady, run_loop,
                                 timeseries_frame)
from llmplan.sim.types import StepShape
from llmplan.sim.workload import Request, Workload, WorkloadSpec

FIRST_TOKEN_AT = ("decode", "prefill")
ROUTING = ("least_loaded", "round_robin")
HANDOFF_AT = ("after_transfer", "before_decode")


@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical workers. ``replica`` carries the worker's step model, engine
    limits (``max_num_seqs``, ``max_num_batched_tokens``), KV capacity and max length."""

    workers: int
    replica: ReplicaSpec
    tp: int = 1               # attention TP of a worker: KV shard per GPU for the transfer
    gpus_per_worker: int = 1  # GPUs of one worker (pool link: do both pools fit one domain)
    label: str = ""           # e.g. "h100_sxm TP8" (reports)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    def describe(self) -> dict:
        """JSON-ready description (plan.json / summary.json)."""
        e = self.replica.engine
        return {"workers": self.workers, "worker": self.label, "gpus_per_worker": self.gpus_per_worker,
                "gpus": self.gpus, "tp": self.tp, "max_num_seqs": e.max_num_seqs,
                "max_num_batched_tokens": e.max_num_batched_tokens,
                "kv_capacity_tokens_per_worker": self.replica.kv_capacity_tokens}


class TransferModel:
    """Time of one request's KV transfer, ms, from its prompt length (and its prefill time,
    used when the transfer is layer-wise)."""

    def duration_ms(self, prompt_tokens: int, prefill_ms: float) -> float:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"model": type(self).__name__}


@dataclass(frozen=True)
class FixedTransfer(TransferModel):
    """Every transfer takes ``ms`` (0: free and instant; tests, what-if)."""

    ms: float = 0.0

    def duration_ms(self, prompt_tokens: int, prefill_ms: float) -> float:
        return self.ms

    def describe(self) -> dict:
        return {"model": "fixed", "transfer_ms": self.ms}


@dataclass
class KVLinkTransfer(TransferModel):
    """:mod:`sim.kv_transfer` timing: the request's KV payload over the pools' link."""

    payload: Callable[[int], KVPayload]
    link: PoolLink
    layerwise: bool = False
    _memo: dict = field(default_factory=dict, repr=False)  # prompt tokens -> (payload, ms after prefill)

    def duration_ms(self, prompt_tokens: int, prefill_ms: float) -> float:
        m = self._memo.get(prompt_tokens)
        if m is None:
            pl = self.payload(prompt_tokens)
            m = self._memo[prompt_tokens] = (pl, exposed_transfer_ms(pl, self.link, 0.0))
        if self.layerwise and prefill_ms > 0.0:
            return exposed_transfer_ms(m[0], self.link, prefill_ms, layerwise=True)
        return m[1]

    def describe(self) -> dict:
        k = self.link
        return {"model": "kv_link", "link": k.kind, "send_bw_gbps": k.send_bw_gbps, "recv_bw_gbps": k.recv_bw_gbps,
                "latency_us": k.latency_us, "layerwise": self.layerwise, "note": k.note}


def kv_link_transfer(model, kv_dtype: str, prefill_gpu, decode_gpu, prefill: PoolSpec, decode: PoolSpec,
                     placement: str = "auto", latency_us: Optional[float] = None,
                     layerwise: bool = False) -> KVLinkTransfer:
    """The transfer model of a deployment: link from :func:`~sim.kv_transfer.pool_link`
    (UserError for an unknown link figure), payload per TP rank of each side."""
    link = pool_link(prefill_gpu, decode_gpu, prefill.gpus, decode.gpus, placement, latency_us)
    return KVLinkTransfer(lambda p: request_kv_payload(model, kv_dtype, p, prefill.tp, decode.tp), link, layerwise)


@dataclass(frozen=True)
class DisaggSpec:
    """A disaggregated deployment: the two pools and how KV moves between them."""

    prefill: PoolSpec
    decode: PoolSpec
    transfer: TransferModel = FixedTransfer(0.0)
    first_token_at: str = "decode"   # TTFT convention, see the module docstring
    hold_prefill_kv: bool = True     # a prefill worker keeps a request's KV until its transfer ends
    reserve_decode_kv: bool = True   # the transfer starts once the decode worker has allocated the KV
    #: fixed per-request hand-off delay (ms) between the KV's arrival and the decode worker taking
    #: the request: the disaggregated front end's extra hops (router -> prefill -> decode, connector
    #: handshake, detokenised first chunk); it occupies no link and no compute. Fitted per engine on
    #: served rows (sim/data/disagg_handoff.json, docs/DISAGG.md), 0 = none
    handoff_ms: float = 0.0
    #: how the front end picks the prefill worker of an arriving request and the decode worker of
    #: a prefilled one: ``"least_loaded"`` (default: fewest unfinished requests; decode: a free
    #: batch slot, then the most free KV) or ``"round_robin"`` (each pool cycles through its
    #: workers whatever their load: Dynamo's frontend default, ``--router-mode round-robin``)
    routing: str = "least_loaded"
    #: where the hand-off delay sits: ``"after_transfer"`` (default: between the KV's arrival and
    #: the decode worker taking the request, which holds its decode slot meanwhile) or
    #: ``"before_decode"`` (between the end of the prefill and the request reaching the decode
    #: worker, which then reserves its KV and pulls it; the prefill worker holds the KV meanwhile:
    #: the order of Dynamo's PrefillRouter with TensorRT-LLM, whose generation server allocates the
    #: KV and requests the transfer only once the decode request has arrived)
    handoff_at: str = "after_transfer"
    #: how a prefill worker's eager host launch composes with its device work (sim/disagg_launch.py):
    #: ``"under_device"`` (default: the launch runs under the long prompt steps, max of the two) or
    #: ``"additive"`` (the aggregated step model's sum)
    context_launch: str = DEFAULT_CONTEXT_LAUNCH
    #: which of the engine's per-request TTFT terms the request meets, once (sim/disagg_request_terms.py):
    #: ``"prompt"`` (default: the constant and the per-prompt-token term, the engine's own API server) or
    #: ``"request"`` (the constant only: a front end that tokenises in its Rust preprocessor, Dynamo)
    request_terms: str = "prompt"


def prefill_replica(spec: DisaggSpec) -> ReplicaSpec:
    """The prefill pool's replica as the run uses it: its step model under ``spec.context_launch``."""
    rs = spec.prefill.replica
    return replace(rs, cost_model=context_step_model(rs.cost_model, spec.context_launch))


def describe_disagg(spec: DisaggSpec) -> dict:
    """The deployment as plan.json / summary.json state it: mode, pools, transfer, conventions."""
    return {"mode": "disaggregated", "prefill": spec.prefill.describe(), "decode": spec.decode.describe(),
            "total_gpus": spec.prefill.gpus + spec.decode.gpus, "kv_transfer": spec.transfer.describe(),
            "first_token_at": spec.first_token_at, "hold_prefill_kv": spec.hold_prefill_kv,
            "reserve_decode_kv": spec.reserve_decode_kv, "handoff_ms": spec.handoff_ms, "routing": spec.routing,
            "handoff_at": spec.handoff_at, "context_launch": spec.context_launch,
            "request_terms": spec.request_terms}


def validate_disagg(spec: DisaggSpec) -> None:
    """UserError naming the key for pool sizes and settings that cannot run."""
    for name, pool in (("prefill", spec.prefill), ("decode", spec.decode)):
        w = pool.workers
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise UserError(f"the {name} pool needs at least one worker, got {w!r}", key=f"{name}.workers",
                            fix=f"set {name}.workers to an integer >= 1 (xPyD: x prefill, y decode workers)")
        for k, v in (("tp", pool.tp), ("gpus_per_worker", pool.gpus_per_worker)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"must be an integer >= 1, got {v!r}", key=f"{name}.{k}")
        validate_replica(pool.replica, 0)
    h = spec.handoff_ms
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) or h < 0:
        raise UserError(f"must be a finite number >= 0, got {h!r}", key="handoff_ms")
    if spec.context_launch not in CONTEXT_LAUNCH:
        raise UserError(f"unknown context launch rule {spec.context_launch!r}", key="context_launch",
                        fix="one of " + ", ".join(CONTEXT_LAUNCH))
    if spec.request_terms not in REQUEST_TERMS:
        raise UserError(f"unknown per-request TTFT terms {spec.request_terms!r}", key="request_terms",
                        fix="one of " + ", ".join(REQUEST_TERMS))
    if spec.handoff_at not in HANDOFF_AT:
        raise UserError(f"unknown hand-off point {spec.handoff_at!r}", key="handoff_at",
                        fix="one of " + ", ".join(HANDOFF_AT))
    if spec.routing not in ROUTING:
        raise UserError(f"unknown routing {spec.routing!r}", key="routing", fix="one of " + ", ".join(ROUTING))
    if spec.first_token_at not in FIRST_TOKEN_AT:
        raise UserError(f"unknown first-token convention {spec.first_token_at!r}", key="first_token_at",
                        fix="one of " + ", ".join(FIRST_TOKEN_AT))


# ---------------------------------------------------------------------------- capacity


def estimate_disagg_capacity_rps(spec: DisaggSpec, mean_input_tokens: float, mean_output_tokens: float) -> float:
    """Rough sustainable rate: the smaller of the prefill pool's (full token-budget chunks)
    and the decode pool's (full batches, limited by ``max_num_seqs`` and KV)."""
    pin, pout = max(1.0, mean_input_tokens), max(1.0, mean_output_tokens)
    p = prefill_replica(spec)
    chunk = int(max(1, min(pin, p.engine.max_num_batched_tokens)))
    t = float(p.cost_model.stage_time_ms(StepShape(chunk, 1, float(chunk * (chunk + 1) / 2), 0, 0, 0)))
    pre = spec.prefill.workers * 1000.0 * chunk / (t * pin)
    d = spec.decode.replica
    e = d.engine
    pp = int(getattr(d.cost_model, "pp", 1) or 1)
    b = max(1, min(e.max_num_seqs, int(d.kv_capacity_tokens * (1 - e.watermark) // (pin + pout))) // pp)
    t_dec = pp * float(d.cost_model.stage_time_ms(StepShape(0, 0, 0.0, 0, b, int(b * (pin + pout / 2)))))
    dec = spec.decode.workers * 1000.0 * b * pp / (max(pout - 1, 1.0) * t_dec)
    return min(pre, dec)


# ---------------------------------------------------------------------------- simulate


def _check_requests(wl: Workload, pre: list[Replica], dec: list[Replica]) -> None:
    """Refuse requests no worker could ever hold: the first offender is named."""
    if not wl.requests:
        raise UserError("the workload has no requests", key="workload.num_requests")
    n = len(wl.requests)
    ins = np.fromiter((q.input_tokens for q in wl.requests), np.int64, n)
    need = ins + np.fromiter((q.output_tokens for q in wl.requests), np.int64, n)
    max_len = min(r.spec.max_model_len for r in pre + dec)
    pre_kv = min(r.max_request_tokens() for r in pre)
    dec_kv = min(r.max_request_tokens() for r in dec)
    checks = (
        (need > max_len, UserError, "workload", "more than max_model_len {lim}", max_len,
         "shorten the requests or raise max_model_len"),
        (ins + 1 > pre_kv, InfeasibleDeployment, "prefill.kv_capacity_tokens",
         "its prompt does not fit a prefill worker's KV cache ({lim} tokens beyond its watermark)", pre_kv,
         "use larger prefill workers or shorter prompts"),
        (need > dec_kv, InfeasibleDeployment, "decode.kv_capacity_tokens",
         "a decode worker holds only {lim} KV tokens beyond its watermark", dec_kv,
         "use larger decode workers or shorter requests"),
    )
    for bad, cls, key, why, lim, fix in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise cls(f"request {i} needs {ins[i]} prompt + {need[i] - ins[i]} output = {need[i]} tokens: "
                      + why.format(lim=lim), key=key, fix=fix)


def simulate_disaggregated(workload: Union[WorkloadSpec, Workload, list[Request]], spec: DisaggSpec, seed: int = 0,
                           slo: Optional[SLOThresholds] = None, window: Optional[MeasureWindow] = None,
                           max_queue: int = DEFAULT_MAX_QUEUE, max_sim_time_ms: Optional[float] = None,
                           timeseries_interval_ms: Optional[float] = None,
                           rate_fraction: float = DEFAULT_RATE_FRACTION, steady_state: bool = False) -> SimResult:
    """Simulate ``workload`` on the disaggregated deployment ``spec``; the result has the
    aggregated simulator's shape (:class:`~sim.serving.SimResult`). ``workload``, ``window``,
    ``max_queue`` and ``max_sim_time_ms`` mean what they mean in
    :func:`~sim.serving.simulate_serving` (a rate left unset is 80% of
    :func:`estimate_disagg_capacity_rps`); ``steady_state`` measures the steady-state window of
    :mod:`sim.steady_state` through the aggregated simulator's own loop (open loop only)."""
    validate_disagg(spec)
    if max_queue < 0:
        raise UserError("max_queue must be >= 0", key="max_queue")
    decode_specs = [spec.decode.replica] * spec.decode.workers
    wl, picked = _resolve_workload(workload, decode_specs, seed, rate_fraction,
                                   capacity_rps=lambda i, o: estimate_disagg_capacity_rps(spec, i, o))
    if wl.offline:
        raise UserError("offline (all-at-once) workloads are not simulated for disaggregated deployments",
                        key="workload.arrival", fix="use poisson, gamma, trace or closed_loop arrivals")
    closed = wl.closed_loop_concurrency is not None
    offered = picked if picked is not None else (
        workload.rate_rps if isinstance(workload, WorkloadSpec) and workload.rate_rps else _offered_rate(wl))
    run = dict(slo=slo, max_queue=max_queue, max_sim_time_ms=max_sim_time_ms,
               timeseries_interval_ms=timeseries_interval_ms)

    def attempt(wl_: Workload, _replicas: list, measured: tuple[int, int], picked_: Optional[float],
                offered_: Optional[float], slo: Optional[SLOThresholds], max_queue: int,
                max_sim_time_ms: Optional[float], timeseries_interval_ms: Optional[float]) -> SimResult:
        return _Run(wl_, spec, measured, max_queue, max_sim_time_ms, timeseries_interval_ms).result(
            slo, picked_, offered_)

    if steady_state and not closed and offered:
        # the warm-up is sized by sim.steady_state's estimate of the decode pool (a request's
        # lifetime is mostly its decode); stationarity is then checked on the run itself
        return _simulate_steady(workload, wl, decode_specs, seed, picked, offered, run, simulate=attempt)
    if window is None:
        window = MeasureWindow(warmup_requests=wl.closed_loop_concurrency if closed else None)
    return attempt(wl, decode_specs, window.measured_range(len(wl.requests)), picked, offered, **run)


class _Run:
    """One simulation: the event loop, both pools and the per-request transfer records."""

    def __init__(self, wl: Workload, spec: DisaggSpec, measured: tuple[int, int], max_queue: int,
                 max_sim_time_ms: Optional[float], interval_ms: Optional[float]):
        self.wl, self.spec = wl, spec
        n = len(wl.requests)
        self.closed = wl.closed_loop_concurrency is not None
        lo, hi = measured
        self.loop = loop = EventLoop()
        self.itl = LogHistogram()
        interval = interval_ms or (max(wl.horizon_ms / 500.0, 10.0) if not self.closed else 1000.0)
        self.seqs = [Seq(i, q, lo <= i < hi) for i, q in enumerate(wl.requests)]
        P, D = spec.prefill.workers, spec.decode.workers
        pre_rs = prefill_replica(spec)
        self.pre = [Replica(i, pre_rs, loop, self.itl, self._prefilled, wl.prefix_block_tokens, interval)
                    for i in range(P)]
        for r in self.pre:   # context servers run without the overlap scheduler (sim.trtllm_scheduling)
            for ve in r.ves:
                ve.overlap = False
                ve.sg = None   # SGLang's aggregated admission rule (sim.sglang_admission) not on prefill workers
        self.dec = [DecodeWorker(P + j, spec.decode.replica, loop, self.itl, self._finished, wl.prefix_block_tokens,
                                 interval, self._reserved, self._joined, spec.reserve_decode_kv) for j in range(D)]
        _check_requests(wl, self.pre, self.dec)
        self.send = [LinkOccupancy() for _ in range(P)]
        self.recv = [LinkOccupancy() for _ in range(D)]
        self.pending_tokens = [0] * D        # in transit to or waiting on each decode worker
        self.prefill_worker = np.full(n, -1, np.int64)
        self.prefill_done = np.full(n, math.nan)
        self.kv_arrival = np.full(n, math.nan)
        self.xfer_ms = np.full(n, math.nan)
        self.transfer_start = np.full(n, math.nan)
        self.first_at_decode = spec.first_token_at == "decode"
        self.round_robin = spec.routing == "round_robin"
        self.handoff_first = spec.handoff_at == "before_decode" and spec.handoff_ms > 0.0
        self.rr_prefill = 0                  # next worker of each pool under round-robin routing
        self.rr_decode = 0
        self.held: dict[int, tuple] = {}     # request -> (prefill engine, blocks) held until sent
        self.transfers = 0
        self.done = 0
        self.issued = 0
        self.overloaded = False
        self.limit = max_queue + P * spec.prefill.replica.engine.max_num_seqs + D * spec.decode.replica.engine.max_num_seqs
        if self.closed:
            for k in range(min(wl.closed_loop_concurrency, n)):
                self.seqs[k].client = k
                self.issued += 1
                loop.schedule(0.0, PRIORITY_ARRIVAL, self._arrive, self.seqs[k])
        else:
            self.issued = 1
            loop.schedule(self.seqs[0].req.arrival_ms, PRIORITY_ARRIVAL, self._arrive, self.seqs[0])
            if max_sim_time_ms is None:
                max_sim_time_ms = wl.horizon_ms + max(wl.horizon_ms, DEFAULT_MIN_DRAIN_MS)
        if max_sim_time_ms is not None:
            loop.schedule(max_sim_time_ms, PRIORITY_LAST, self._deadline)

    # ------------------------------------------------------------------ events

    def _arrive(self, seq: Seq) -> None:
        now = self.loop.now
        seq.arrival = now
        pre = self.pre
        if self.round_robin:
            best = self.rr_prefill
            self.rr_prefill = (best + 1) % len(pre)
        else:
            best, best_n = 0, pre[0].outstanding
            for i in range(1, len(pre)):
                if pre[i].outstanding < best_n:
                    best, best_n = i, pre[i].outstanding
        self.prefill_worker[seq.idx] = best
        prepare_prefill(seq)
        pre[best].submit(seq, now)
        if self.issued - self.done > self.limit:
            self.overloaded = True
            self.loop.stop()
        if not self.closed and self.issued < len(self.seqs):
            nxt = self.seqs[self.issued]
            self.issued += 1
            self.loop.schedule(nxt.req.arrival_ms, PRIORITY_ARRIVAL, self._arrive, nxt)

    def _prefilled(self, seq: Seq) -> None:
        """Prefill done (first token produced): pick a decode worker and start the transfer."""
        now = self.loop.now
        i = seq.idx
        self.prefill_done[i] = now
        if seq.req.output_tokens <= 1:
            self._finished(seq)
            return
        prepare_decode(seq)
        dec, pend = self.dec, self.pending_tokens
        # the worker with the most free batch slots (max_num_seqs minus the requests it holds,
        # in transit or waiting), then the most free KV: a worker with free KV but a full batch
        # would make the request wait while another has room
        if self.round_robin:
            best = self.rr_decode
            self.rr_decode = (best + 1) % len(dec)
        else:
            cap = self.spec.decode.replica.engine.max_num_seqs
            best, best_key = 0, (min(cap - dec[0].outstanding, 1), free_kv_tokens(dec[0]) - pend[0])
            for j in range(1, len(dec)):
                k = (min(cap - dec[j].outstanding, 1), free_kv_tokens(dec[j]) - pend[j])
                if k > best_key:
                    best, best_key = j, k
        pend[best] += seq.P
        src = int(self.prefill_worker[i])
        if self.spec.hold_prefill_kv:
            ves = self.pre[src].ves
            ve = ves[0] if len(ves) == 1 else max(ves, key=lambda v: (v.pool.free, -v.index))
            blocks = -(-seq.P // ve.B)
            ve.pool.allocate(blocks)   # just freed by the prefill, so they fit
            self.held[i] = (ve, blocks)
        seq.replica = dec[best].index
        if self.handoff_first:
            self.loop.schedule(now + self.spec.handoff_ms, PRIORITY_ARRIVAL, self._reached_decode, seq)
        else:
            self._reached_decode(seq)

    def _reached_decode(self, seq: Seq) -> None:
        """The prefilled request is at its decode worker: reserve room there, or transfer at once."""
        now = self.loop.now
        if self.spec.reserve_decode_kv:
            self.dec[seq.replica - self.spec.prefill.workers].offer(seq, now)   # transfer once it has room
        else:
            self._start_transfer(seq, now)

    def _start_transfer(self, seq: Seq, now: float) -> None:
        i = seq.idx
        # layer-wise overlap with the prefill only when the transfer starts as the prefill ends
        overlap = now - seq.first_sched if now == self.prefill_done[i] else 0.0
        dur = self.spec.transfer.duration_ms(seq.P, overlap)
        self.xfer_ms[i] = dur
        d = seq.replica - self.spec.prefill.workers
        t = reserve_transfer(self.send[int(self.prefill_worker[i])], self.recv[d], now, dur) if dur > 0.0 else now
        self.transfer_start[i] = t - dur
        self.transfers += 1
        self.loop.schedule(t, PRIORITY_ARRIVAL, self._kv_arrived, seq)

    def _kv_arrived(self, seq: Seq) -> None:
        now = self.loop.now
        self.kv_arrival[seq.idx] = now
        held = self.held.pop(seq.idx, None)
        if held is not None:
            held[0].pool.release(held[1])
            w = self.pre[int(self.prefill_worker[seq.idx])]
            if any(v.waiting for v in w.ves):
                w._wake(max(now, w.stage_free_at))
        if self.spec.handoff_ms > 0.0 and not self.handoff_first:
            self.loop.schedule(now + self.spec.handoff_ms, PRIORITY_ARRIVAL, self._handed_off, seq)
        else:
            self.dec[seq.replica - self.spec.prefill.workers].kv_arrived(seq, now)

    def _handed_off(self, seq: Seq) -> None:
        """The hand-off delay after the KV's arrival is over: the decode worker takes the request."""
        self.dec[seq.replica - self.spec.prefill.workers].kv_arrived(seq, self.loop.now)

    def _reserved(self, seq: Seq, now: float) -> None:
        """A decode worker has allocated the request's KV blocks."""
        self.pending_tokens[seq.replica - self.spec.prefill.workers] -= seq.P
        if self.spec.reserve_decode_kv:
            self._start_transfer(seq, now)

    def _joined(self, seq: Seq, now: float) -> None:
        """The request joins a decode batch: with ``first_token_at="decode"`` the client sees its first token."""
        if self.first_at_decode:
            seq.first_token = now
            seq.last_token = now

    def _finished(self, seq: Seq) -> None:
        self.done += 1
        if self.closed and self.issued < len(self.seqs):
            nxt = self.seqs[self.issued]
            self.issued += 1
            nxt.client = seq.client
            self.loop.schedule(self.loop.now + self.wl.think_time_ms, PRIORITY_ARRIVAL, self._arrive, nxt)

    def _deadline(self, _: object) -> None:
        if self.done < len(self.seqs):
            self.overloaded = True
        self.loop.stop()

    # ------------------------------------------------------------------ result

    def result(self, slo: Optional[SLOThresholds], picked: Optional[float], offered: Optional[float]) -> SimResult:
        run_loop(self.loop)
        for s in self.seqs:  # a request stopped mid-prefill still has its prefill-only length
            s.O = s.req.output_tokens
        # the engine's per-request TTFT (front end: client round trip, API server, tokenisation,
        # first-token streaming; sim.engine_terms), once per request as in the aggregated DES,
        # from the decode worker that streams the answer (indices: prefill workers, then decode);
        # spec.request_terms says which terms (sim/disagg_request_terms.py)
        sp = self.spec
        add_request_ttft(self.seqs, [sp.prefill.replica] * sp.prefill.workers + [sp.decode.replica] * sp.decode.workers,
                         sp.request_terms)
        df = requests_frame(self.seqs)
        df["prefill_worker"] = self.prefill_worker
        df["prefill_done_ms"] = self.prefill_done
        df["transfer_start_ms"] = self.transfer_start
        df["kv_arrival_ms"] = self.kv_arrival
        df["transfer_ms"] = self.xfer_ms
        unfinished = int((~df["finished"]).sum())
        overloaded = bool(self.overloaded or unfinished > 0)
        stats = [dict(r.stats(), pool="prefill") for r in self.pre] + [dict(r.stats(), pool="decode") for r in self.dec]
        summary = summarize(df, self.itl, slo)
        m = df[df["measured"].to_numpy() & df["finished"].to_numpy()]
        busy = [o.busy_ms for o in self.send]
        summary.update({
            "mode": "disaggregated",
            "offered_rate_rps": offered,
            "rate_picked_by_simulator": picked is not None,
            "closed_loop_concurrency": self.wl.closed_loop_concurrency,
            "router": "least_outstanding (prefill), most free KV (decode)",
            "replicas": len(self.pre) + len(self.dec),
            "prefill_workers": len(self.pre),
            "decode_workers": len(self.dec),
            "first_token_at": self.spec.first_token_at,
            "deployment": describe_disagg(self.spec),
            "overloaded": overloaded,
            "unfinished": unfinished,
            "sim_time_ms": self.loop.now,
            "events": self.loop.events_processed,
            "steps": sum(s["steps"] for s in stats),
            "prefill_steps": sum(s["steps"] for s in stats[:len(self.pre)]),
            "decode_steps": sum(s["steps"] for s in stats[len(self.pre):]),
            "preemptions": sum(s["preemptions"] for s in stats),
            "kv_transfers": self.transfers,
            "transfer_ms_mean": float(np.nanmean(m["transfer_ms"])) if m["transfer_ms"].notna().any() else None,
            "transfer_wait_ms_mean": float(np.nanmean(m["kv_arrival_ms"] - m["prefill_done_ms"]
                                                      - m["transfer_ms"])) if m["kv_arrival_ms"].notna().any()
            else None,
            "transfer_link_busy_ms_max": max(busy) if busy else 0.0,
            "prefix_hit_rate": (sum(s["prompt_tokens_hit"] for s in stats[:len(self.pre)])
                                / max(1, sum(s["prompt_tokens_queried"] for s in stats[:len(self.pre)]))),
            "kv_peak_util": max(s["kv_peak_util"] for s in stats),
            "generated_tokens": int(df.loc[df["finished"], "output_tokens"].sum()),
        })
        if slo is not None and overloaded:
            summary["slo_met"] = False
        return SimResult(df, json_clean(summary), timeseries_frame(self.pre + self.dec), overloaded, unfinished, stats, self.itl.frame(),
                         bool(self.overloaded))

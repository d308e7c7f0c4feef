"""Prefill-only and decode-only workers of a disaggregated deployment, built from the
aggregated simulator's :class:`~sim.replica.Replica` and :class:`~sim.scheduler.EngineState`
by configuration and subclassing (neither file is changed).

* A **prefill worker** is a plain ``Replica``: each request is submitted with its output
  length set to 1, so the engine's own chunked-prefill loop (token budget, ``max_num_seqs``,
  KV blocks, prefix cache, preemption) computes the prompt, emits the first token and
  finishes the request, freeing its KV. ``on_finish`` hands it to the KV transfer.
* A **decode worker** (:class:`DecodeWorker`) is a ``Replica`` whose engines are :class:`DecodeEngineState`:
  a transferred request waits in ``arrived`` (not in ``waiting``) and is admitted straight
  into the decode aggregates with its prompt's KV blocks allocated (``ceil(P / block)``),
  when fewer than ``max_num_seqs`` run and the blocks fit above the watermark, first come
  first served. From then on the unchanged scheduler runs it: decode-only steps, block
  growth, preemption by recompute (a preempted request recomputes prompt + generated tokens
  on the decode worker, as SGLang's decode-side retraction does), fast-forward.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

from llmplan.sim.replica import Replica
from llmplan.sim.scheduler import WAITING, EngineState, Seq

NAN = math.nan


class DecodeEngineState(EngineState):
    """An engine whose new requests arrive with their prompt's KV already computed.

    Without ``reserve_first`` a request joins ``arrived`` when its KV is complete and is
    admitted when fewer than ``max_num_seqs`` run and its blocks fit above the watermark.
    With ``reserve_first`` (SGLang's decode pre-allocation queue, vLLM's decode-side pull) a
    prefilled request waits in ``pending`` until those conditions hold, its blocks are
    allocated then and ``on_reserve`` starts its transfer; when the KV has arrived it joins
    the batch at the next launch without further checks. ``on_reserve(seq, now)`` is called
    when blocks are allocated (both modes), ``on_join(seq, now)`` when it joins decoding."""

    def __init__(self, *args, on_reserve: Callable[[Seq, float], None], on_join: Callable[[Seq, float], None],
                 reserve_first: bool = False, **kw):
        super().__init__(*args, **kw)
        self.sg = None   # SGLang's aggregated admission rule (sim.sglang_admission) not modelled on decode workers
        self.pending: deque[Seq] = deque()   # reserve_first: prefilled, waiting for decode room
        self.arrived: deque[Seq] = deque()   # KV complete on this worker, not yet decoding
        self.in_transit = 0                  # reserve_first: blocks allocated, KV on its way
        self.reserve_first = reserve_first
        self.on_reserve = on_reserve
        self.on_join = on_join

    @property
    def outstanding(self) -> int:
        return len(self.pending) + self.in_transit + len(self.arrived) + len(self.waiting) + len(self.running)

    def _room(self, seq: Seq) -> int:
        """Blocks ``seq`` needs if it can be taken now, else -1."""
        if len(self.running) + self.in_transit + (len(self.arrived) if self.reserve_first else 0) >= self.max_seqs:
            return -1
        blocks = -(-seq.target // self.B)
        return blocks if self.pool.free - blocks >= self.watermark_blocks else -1

    def reserve_pending(self, now: float) -> None:
        """reserve_first: allocate decode KV for waiting prefilled requests, first come first served."""
        q = self.pending
        while q and not self.waiting:   # preempted requests (recomputing) go first
            blocks = self._room(q[0])
            if blocks < 0:
                break
            seq = q.popleft()
            self.pool.allocate(blocks)
            seq.blocks = blocks
            self.in_transit += 1
            self.on_reserve(seq, now)

    def admit_arrived(self, now: float) -> None:
        """Put requests whose KV has arrived into the decode batch (between steps only)."""
        q, running = self.arrived, self.running
        while q:
            seq = q[0]
            if not self.reserve_first:
                if self.waiting:   # preempted requests (recomputing) go first
                    break
                blocks = self._room(seq)
                if blocks < 0:
                    break
                self.pool.allocate(blocks)
                seq.blocks = blocks
                self.on_reserve(seq, now)
            q.popleft()
            running[seq.idx] = seq
            self.on_join(seq, now)
            self._join_decode(seq)


class DecodeWorker(Replica):
    """A ``Replica`` whose engines are :class:`DecodeEngineState`: before each launch, engines
    with no batch in flight admit what has arrived (``Replica._try_launch`` looks only at
    ``waiting`` and ``running``); after it, engines reserve KV for pending requests."""

    def __init__(self, index: int, spec, loop, itl, on_finish, prefix_block_tokens: int, sample_interval_ms: float,
                 on_reserve: Callable[[Seq, float], None], on_join: Callable[[Seq, float], None],
                 reserve_first: bool = False):
        super().__init__(index, spec, loop, itl, on_finish, prefix_block_tokens, sample_interval_ms)
        e = self.run_engine(spec)
        blocks = spec.kv_capacity_tokens // e.block_size // self.pp
        seqs = max(1, e.max_num_seqs // self.pp)
        self.ves = [DecodeEngineState(i, e, blocks, self.unit_tokens, seqs, on_reserve=on_reserve, on_join=on_join,
                                      reserve_first=reserve_first, step_space=self.spec_steps is not None)
                    for i in range(self.pp)]
        self.reserve_first = reserve_first
        self.prefix_caching = False  # nothing is prefilled here from a prompt match
        self._engine_of: dict[int, DecodeEngineState] = {}

    def _take(self, seq: Seq) -> DecodeEngineState:
        ve = self.ves[0] if self.pp == 1 else min(self.ves, key=lambda v: (v.outstanding, v.index))
        seq.replica = self.index
        self.outstanding += 1
        return ve

    def offer(self, seq: Seq, now: float) -> None:
        """reserve_first: a prefilled request asks this worker for KV room."""
        ve = self._take(seq)
        self._engine_of[seq.idx] = ve
        ve.pending.append(seq)
        ve.reserve_pending(now)

    def kv_arrived(self, seq: Seq, now: float) -> None:
        """A request's KV is complete here: it joins at the next launch of its engine."""
        if self.reserve_first:
            ve = self._engine_of.pop(seq.idx)
            ve.in_transit -= 1
        else:
            ve = self._take(seq)
        ve.arrived.append(seq)
        if not ve.in_flight:
            self._wake(max(now, self.stage_free_at))

    def _try_launch(self, now: float) -> None:
        if now >= self.stage_free_at:
            for ve in self.ves:
                if ve.arrived and not ve.in_flight:
                    ve.admit_arrived(now)
        super()._try_launch(now)
        if self.reserve_first:
            for ve in self.ves:
                if ve.pending:
                    ve.reserve_pending(now)


def prepare_prefill(seq: Seq) -> None:
    """Make a request prefill-only: it finishes when its first token is produced."""
    seq.O = 1


def prepare_decode(seq: Seq) -> None:
    """Reset a prefilled request (prompt in KV, first token generated) for the decode worker."""
    seq.O = seq.req.output_tokens
    seq.state = WAITING
    seq.finish = NAN
    seq.target = seq.P
    seq.computed = 0
    seq.g = 1
    seq.keys = ()
    seq.nreg = 0


def free_kv_tokens(worker: Replica) -> int:
    """KV tokens free on a worker right now (all its virtual engines)."""
    return sum(v.pool.free for v in worker.ves) * worker.spec.engine.block_size

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
    """An engine whose new requests arrive with their prompt's KV already computed."""

    def __init__(self, *args, on_admit: Callable[[Seq, float], None], **kw):
        super().__init__(*args, **kw)
        self.arrived: deque[Seq] = deque()   # KV complete on this worker, waiting for admission
        self.on_admit = on_admit

    @property
    def outstanding(self) -> int:
        return len(self.arrived) + len(self.waiting) + len(self.running)

    def _admit_arrived(self, now: float) -> None:
        q, pool, running, B = self.arrived, self.pool, self.running, self.B
        while q and len(running) < self.max_seqs:
            seq = q[0]
            blocks = -(-seq.target // B)
            if pool.free - blocks < self.watermark_blocks:
                break
            q.popleft()
            pool.allocate(blocks)
            seq.blocks = blocks
            running[seq.idx] = seq
            self.on_admit(seq, now)
            self._join_decode(seq)


class DecodeWorker(Replica):
    """A ``Replica`` whose engines are :class:`DecodeEngineState`: before each launch, an
    engine with no batch in flight and no preempted request to recompute admits what has
    arrived (``Replica._try_launch`` looks only at ``waiting`` and ``running``)."""

    def __init__(self, index: int, spec, loop, itl, on_finish, prefix_block_tokens: int, sample_interval_ms: float,
                 on_admit: Callable[[Seq, float], None]):
        super().__init__(index, spec, loop, itl, on_finish, prefix_block_tokens, sample_interval_ms)
        e = spec.engine
        blocks = spec.kv_capacity_tokens // e.block_size // self.pp
        seqs = max(1, e.max_num_seqs // self.pp)
        self.ves = [DecodeEngineState(i, e, blocks, self.unit_tokens, seqs, on_admit=on_admit)
                    for i in range(self.pp)]
        self.prefix_caching = False  # nothing is prefilled here from a prompt match

    def _try_launch(self, now: float) -> None:
        if now >= self.stage_free_at:
            for ve in self.ves:
                if ve.arrived and not ve.in_flight and not ve.waiting:  # preempted requests go first
                    ve._admit_arrived(now)
        super()._try_launch(now)


def submit_transferred(worker: DecodeWorker, seq: Seq, now: float) -> None:
    """A request whose KV has fully arrived joins the decode worker's admission queue."""
    ve = worker.ves[0] if worker.pp == 1 else min(worker.ves, key=lambda v: (v.outstanding, v.index))
    seq.replica = worker.index
    ve.arrived.append(seq)
    worker.outstanding += 1
    if not ve.in_flight:
        worker._wake(max(now, worker.stage_free_at))


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

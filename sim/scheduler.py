"""Continuous-batching scheduler of one engine (one vLLM "virtual engine").

Three policies, chosen by ``EngineProfile.chunked_prefill`` and ``whole_prompts``:

* **chunked prefill** (vLLM v1 ``Scheduler.schedule``): running requests first: every
  decoding sequence gets its one token, then a partially prefilled request continues
  with as much of its prompt as the remaining token budget allows; then, if nothing was
  preempted this step, waiting requests are admitted in FCFS order, each with a chunk of
  its prompt, until the token budget, ``max_num_seqs`` or free KV blocks run out.
* **in-flight batching with whole prompts** (``whole_prompts``; TensorRT-LLM's default,
  ``enable_chunked_prefill=False``): as chunked prefill, but a waiting prompt joins a step
  only if all of it fits in the token budget left after the decodes; otherwise it waits.
* **prefill-first** (vLLM v0 default without chunking): if waiting prompts fit (whole
  prompts only, within the token budget), the step is prefill-only and decodes wait;
  otherwise the step decodes every running sequence. SGLang (:mod:`sim.sglang_scheduling`)
  fills its prefill batch to the budget instead: the prompt left unfinished by the last
  prefill batch goes first, then whole prompts, and the first prompt that does not fit is cut
  to the tokens left and finished by the next prefill batches, before any decode.

KV blocks are allocated per step for the tokens computed (v1 ``allocate_slots``); new
requests are admitted only while ``free - needed >= watermark`` blocks (v0
``BlockSpaceManager.can_allocate``). SGLang's prefill-first path uses SGLang's own rule instead
(:mod:`sim.sglang_admission`): each running request reserves its remaining output tokens x
``new_token_ratio``, a refused request marks the batch full until one finishes, and out of KV
the request with the fewest generated tokens is retracted to the end of the queue. TensorRT-LLM's capacity scheduler
(:data:`NO_EVICT_ENGINES`) admits a request only when the blocks of its *whole* sequence
(prompt + requested output) fit next to the whole sequences of the running requests:
``CapacitySchedulerPolicy.GUARANTEED_NO_EVICT``, its default
(https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html,
``SchedulerConfig.capacity_scheduler_policy``), so it
queues requests instead of preempting them. TensorRT-LLM's overlap scheduler
(:mod:`sim.trtllm_scheduling`): a request that arrived while a step was in flight is not admitted
before the step after the one already scheduled (``Seq.not_before``). When a running step cannot get its blocks, the
newest running request is preempted by recompute: its blocks are freed and it goes
back to the *front* of the waiting queue, to recompute prompt plus generated tokens.
With prefix caching on, its full blocks stay cached (evictable, ``KVBlockPool.park``) and
are reused when it is admitted again, as far as they were not evicted meanwhile: only the
rest is recomputed (``sim/kv_cache.py``).

Decode bookkeeping is aggregate, so a step costs O(changes), not O(batch): the engine
keeps a decode-step counter ``c``; a sequence that joined decoding at ``c0`` with
``computed`` tokens has ``computed + (c - c0)`` tokens of KV at counter ``c``. The sum of
KV lengths is ``kv_base + n_dec * c``; completions sit in a heap keyed by the counter
at which they finish; new-block demand per step is a count per ``c mod block_size``
phase.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from llmplan.sim.kv_cache import KVBlockPool
from llmplan.sim.sglang_admission import (SGLangAdmission, admits, clipped_output_tokens, ignore_eos_admits,
                                           uses_sglang_admission)
from llmplan.sim.sglang_scheduling import chunks_prompts
from llmplan.sim.trtllm_batch_wait import batch_wait
from llmplan.sim.trtllm_scheduling import overlap_scheduler
from llmplan.sim.vllm_async_scheduling import schedules_one_step_ahead
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import Request

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3
#: engines whose default capacity scheduler reserves every admitted request's whole sequence
NO_EVICT_ENGINES = frozenset({"trtllm"})
NAN = math.nan


class Seq:
    """Mutable simulator state of one request (times in ms, NaN until they happen)."""

    __slots__ = ("idx", "req", "P", "O", "measured", "replica", "state", "target", "computed", "g", "blocks",
                 "shared_blocks", "keys", "refkeys", "nreg", "c0", "phase", "kvb", "gen", "arrival",
                 "first_sched", "first_token", "last_token", "finish", "preemptions", "cached_tokens", "client",
                 "park_from", "resv", "not_before")

    def __init__(self, idx: int, req: Request, measured: bool):
        self.idx = idx
        self.req = req
        self.P = req.input_tokens
        self.O = req.output_tokens
        self.measured = measured
        self.replica = -1
        self.state = WAITING
        self.target = self.P      # tokens to (re)compute before the next token: prompt + generated
        self.computed = 0         # prefill progress (prefill state only)
        self.g = 0                # tokens generated (decode state: as of counter c0)
        self.blocks = 0           # KV blocks held (prefill state only; decode: derived)
        self.shared_blocks = 0    # of which in shared prefix-cache units
        self.keys: tuple[int, ...] = ()   # prefix-cache unit keys of the prompt
        self.refkeys: list[int] = []      # units this sequence references
        self.nreg = 0             # keys considered for hit/registration so far
        self.c0 = 0               # decode counter when it joined decoding
        self.phase = 0            # c mod block_size at which it needs a new block
        self.kvb = 0              # its contribution to kv_base
        self.gen = 0              # invalidates stale completion-heap entries
        self.arrival = NAN
        self.first_sched = NAN
        self.first_token = NAN
        self.last_token = NAN
        self.finish = NAN
        self.preemptions = 0
        self.cached_tokens = 0    # prompt tokens served from the prefix cache at first admission
        self.client = -1          # closed loop: the client that sent it
        self.park_from = -1       # preempted with cached blocks: token where its parked blocks start
        self.resv = 0             # blocks reserved for its whole sequence (GUARANTEED_NO_EVICT engines)
        self.not_before = 0       # first step index it may join (overlap scheduler, sim.trtllm_scheduling)


class EngineState:
    """Queues, KV blocks and the decode aggregates of one engine; plans and applies steps."""

    def __init__(self, index: int, engine: EngineProfile, total_blocks: int, unit_tokens: int, max_seqs: int,
                 attention_dp: int = 1, step_space: bool = False):
        self.index = index
        self.B = engine.block_size
        self.U = unit_tokens
        self.ub = unit_tokens // engine.block_size
        self.budget = engine.max_num_batched_tokens
        self.max_seqs = max_seqs
        self.chunked = engine.chunked_prefill
        self.whole = engine.whole_prompts
        self.chunk_prompts = chunks_prompts(engine)   # SGLang: prefill-first batches cut the last prompt
        # SGLang's own admission / retraction (sim.sglang_admission); None for other engines
        self.sg = (SGLangAdmission(dp_attention=attention_dp > 1,
                                   ignore_eos=not engine.enable_prefix_caching)
                   if uses_sglang_admission(engine) else None)
        self.sg_retracted = False              # the planned step retracted (SGLang: ratio set, not decayed)
        self.prefix_caching = engine.enable_prefix_caching
        self.no_evict = engine.name in NO_EVICT_ENGINES
        self.step_space = step_space           # speculative decoding: KV pool and seq.O in verify steps (sim.replica)
        # arrivals while busy skip the step already scheduled (TensorRT-LLM; vLLM async scheduling)
        self.overlap = overlap_scheduler(engine.name) or schedules_one_step_ahead(engine)
        self.batch_wait = batch_wait(engine, attention_dp)   # TensorRT-LLM batch waiting (sim.trtllm_batch_wait); None = off
        self.held = False                      # the planned step left a waiting request for a later step
        self.reserved = 0                      # blocks reserved by running requests (no_evict)
        self.pool = KVBlockPool(total_blocks, engine.block_size, self.ub, engine.enable_prefix_caching)
        self.watermark_blocks = int(engine.watermark * total_blocks)
        self.waiting: deque[Seq] = deque()
        self.running: dict[int, Seq] = {}      # admission order; newest last
        self.prefilling: list[Seq] = []        # running sequences still in prefill
        self.n_dec = 0
        self.n_dec_meas = 0                    # decoding sequences that count in metrics
        self.kv_base = 0
        self.phase_cnt = [0] * self.B
        self.heap: list[tuple[int, int, int, Seq]] = []
        self.counter = 0
        self.in_flight = False
        self.last_done_ms = 0.0
        self.last_decode_ms = 0.0              # end of the last step that decoded
        self.fresh: list[tuple[Seq, int]] = []  # (seq, gen) joined decoding since that step
        self.preemptions = 0
        self.prompt_tokens_queried = 0
        self.prompt_tokens_hit = 0
        self.steps = 0
        # the planned (in-flight) step
        self.plan_chunks: list[tuple[Seq, int, int]] = []   # (seq, new tokens, context before)
        self.plan_dec = 0
        self.plan_stable = False
        self.plan_steps = 1

    # ------------------------------------------------------------------ queries

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def kv_tokens_sum(self) -> int:
        """Sum of decode KV lengths attended in the next decode step."""
        return self.kv_base + self.n_dec * self.counter

    def next_finish_counter(self) -> int:
        """Decode counter at which the next sequence finishes (stale heap entries dropped)."""
        heap = self.heap
        while heap and heap[0][2] != heap[0][3].gen:
            heapq.heappop(heap)
        return heap[0][0] if heap else 1 << 62

    # ------------------------------------------------------------------ planning

    def plan(self, now: float) -> bool:
        """Choose the next step's work (allocating its KV blocks). False when idle."""
        if self.chunked:
            chunks, preempted = self._plan_chunked(now)
        else:
            chunks, preempted = self._plan_prefill_first(now)
        self.plan_chunks = chunks
        self.plan_stable = not chunks and not preempted and not self.held
        self.plan_steps = 1
        return bool(chunks) or self.plan_dec > 0

    def _decode_blocks(self, now: float) -> bool:
        """Allocate this step's new decode blocks, preempting newest requests as needed."""
        pool, pc, c, B = self.pool, self.phase_cnt, self.counter, self.B
        preempted = False
        nb = pc[c % B]
        if self.sg is not None:
            self.sg_retracted = False
            if nb > pool.free:
                self._sg_retract(now)
                return True
        while nb > pool.free:
            self._preempt(next(reversed(self.running.values())), now)
            preempted = True
            nb = pc[c % B]
        if nb:
            pool.allocate(nb)
        return preempted

    def _generated(self, s: Seq) -> int:
        """Output tokens a running request has generated by now (a decoding one counts from the
        decode counter at which it joined)."""
        return s.g + (self.counter - s.c0) if s.state == DECODE else s.g

    def _sg_retract(self, now: float) -> None:
        """SGLang ``retract_decode`` (sim.sglang_admission): retract the request with the fewest
        generated tokens (ties: longest prompt, then the latest admitted) until the decode step's new
        blocks fit; it goes to the end of the waiting queue; the ratio is set from the requests kept."""
        pool, pc, c, B, sg = self.pool, self.phase_cnt, self.counter, self.B, self.sg
        gen = self._generated
        while True:
            _, victim = max(enumerate(self.running.values()), key=lambda t: (-gen(t[1]), t[1].P, t[0]))
            self._preempt(victim, now)
            self.waiting.popleft()
            self.waiting.append(victim)   # FCFS: a retracted request joins the end of the queue
            sg.retractions += 1
            if pc[c % B] <= pool.free or not self.running:
                break
        nb = pc[c % B]
        if nb:
            pool.allocate(nb)
        decoded = sum(gen(s) for s in self.running.values())
        sg.ratio.retracted(decoded, len(self.running), sum(s.O for s in self.running.values()))
        sg.full = False
        self.sg_retracted = True

    def _sg_ignore_eos_admits(self, seq: Seq, free_tokens: int, offset: float) -> bool:
        """SGLang ``add_one_req_ignore_eos`` (radix cache off; sim.sglang_admission): the prompt fits
        and, taking requests in order of tokens left, no retraction can be needed. The running and
        already-batched requests hold their prompt blocks in ``free_tokens`` already."""
        B = self.B
        extend = -(-(seq.target) // B) * B
        if extend > min(free_tokens, free_tokens - offset):
            return False
        states = [(seq.O - seq.g, seq.P + seq.g)]
        for s in self.running.values():
            g = self._generated(s)
            states.append((s.O - g, s.P + g))
        return ignore_eos_admits(states, free_tokens, extend)

    def _match(self, seq: Seq) -> tuple[int, int]:
        if not seq.keys:
            return 0, 0
        return self.pool.match(seq.keys, (seq.target - 1) // self.U)

    def _whole_blocks(self, seq: Seq) -> int:
        """Blocks of a request's whole sequence on this engine: prompt + the output it generates
        here (the requested output; 1 on a disaggregated prefill worker, which stops after the
        first token). Under speculative decoding the replica's KV pool is in step space (its token
        capacity scaled by the mean footprint ratio, sim.spec_decode.speculative_kv), and so is
        ``seq.O`` (verify steps): the reservation is counted in the pool's own units."""
        out = seq.O if (self.step_space or seq.O <= 1) else seq.req.output_tokens
        return -(-(seq.P + out) // self.B)

    def _no_room(self, seq: Seq) -> bool:
        """GUARANTEED_NO_EVICT: the whole sequence does not fit beside the running ones' (a
        request alone is always admitted: the replica already refused any that can never fit)."""
        return (self.no_evict and self.reserved > 0
                and self.reserved + self._whole_blocks(seq) > self.pool.total - self.watermark_blocks)

    def _reusable(self, seq: Seq, hit_units: int) -> int:
        """Blocks of a preempted request's parked group it can reuse now: those still cached,
        when its shared prefix is cached exactly up to where they start (else it recomputes)."""
        if seq.park_from < 0 or hit_units * self.U != seq.park_from:
            return 0
        have = self.pool.parked(("preempted", seq.idx))
        return min(have, (seq.target - 1 - seq.park_from) // self.B) if have else 0

    def _admit(self, seq: Seq, hit_units: int, new_blocks: int, now: float, reuse: int = 0) -> None:
        pool = self.pool
        if hit_units:
            keys = seq.keys[:hit_units]
            pool.acquire(keys)
            seq.refkeys = list(keys)
        if seq.park_from >= 0:   # reuse the first `reuse` parked blocks, drop the rest
            pool.unpark(("preempted", seq.idx), reuse)
            seq.park_from = -1
        seq.nreg = hit_units
        seq.shared_blocks = hit_units * self.ub
        if self.no_evict:
            seq.resv = self._whole_blocks(seq)
            self.reserved += seq.resv
        if new_blocks:
            pool.allocate(new_blocks)
        seq.blocks = seq.shared_blocks + reuse + new_blocks
        hit = hit_units * self.U + reuse * self.B
        seq.computed = hit
        seq.state = PREFILL
        self.running[seq.idx] = seq
        self.prefilling.append(seq)
        if seq.first_sched != seq.first_sched:  # NaN: first admission
            seq.first_sched = now
            seq.cached_tokens = hit
        self.prompt_tokens_queried += seq.target
        self.prompt_tokens_hit += hit

    def _not_yet(self, seq: Seq) -> bool:
        """Overlap scheduler: the request arrived after the step being planned was scheduled (it
        waits while other requests run; an engine with nothing running takes it at once)."""
        if seq.not_before > self.steps and self.running:
            self.held = True
            return True
        return False

    def _plan_chunked(self, now: float) -> tuple[list[tuple[Seq, int, int]], bool]:
        pool, B = self.pool, self.B
        self.held = False
        budget = self.budget
        preempted = False
        if self.n_dec:
            preempted = self._decode_blocks(now)
        self.plan_dec = self.n_dec
        budget -= self.n_dec
        chunks: list[tuple[Seq, int, int]] = []
        if self.prefilling:
            for seq in tuple(self.prefilling):
                if seq.state != PREFILL:
                    continue
                if budget <= 0:
                    break
                n = min(seq.target - seq.computed, budget)
                need = -(-(seq.computed + n) // B) - seq.blocks
                while need > pool.free:
                    victim = next(reversed(self.running.values()))
                    self._preempt(victim, now)
                    preempted = True
                    if victim is seq:
                        break
                if seq.state != PREFILL:
                    break
                if need > 0:
                    pool.allocate(need)
                    seq.blocks += need
                chunks.append((seq, n, seq.computed))
                budget -= n
            self.plan_dec = self.n_dec  # preemption may have removed decoders
        if not preempted and self.batch_wait is not None and self.n_dec and self.waiting:
            ctx = self._pickable_prompt_tokens(budget)
            if ctx and not self.batch_wait.release(ctx, self.n_dec):
                self.held = True   # the prompts wait this step (sim.trtllm_batch_wait)
                return chunks, preempted
        if not preempted:
            waiting, running, U, ub = self.waiting, self.running, self.U, self.ub
            while waiting and budget > 0 and len(running) < self.max_seqs:
                seq = waiting[0]
                if self.overlap and self._not_yet(seq):
                    break
                hit_units, evict_blocks = self._match(seq)
                reuse = self._reusable(seq, hit_units)
                hit = hit_units * U + reuse * B
                n = min(seq.target - hit, budget)
                if self.whole and n < seq.target - hit:
                    break   # in-flight batching without chunking: the prompt waits for room
                new_blocks = -(-(hit + n) // B) - hit_units * ub - reuse
                if pool.free - new_blocks - evict_blocks - reuse < self.watermark_blocks or self._no_room(seq):
                    break
                waiting.popleft()
                self._admit(seq, hit_units, new_blocks, now, reuse)
                chunks.append((seq, n, hit))
                budget -= n
        return chunks, preempted

    def _pickable_prompt_tokens(self, budget: int) -> int:
        """Prompt tokens of the waiting requests the step could take whole, in FCFS order, within
        ``budget`` and ``max_seqs`` (what TensorRT-LLM's batch waiting counts; KV room not checked)."""
        total, seqs = 0, len(self.running)
        for seq in self.waiting:
            if seqs >= self.max_seqs or seq.target > budget or (self.overlap and self._not_yet(seq)):
                break
            total += seq.target
            budget -= seq.target
            seqs += 1
        return total

    def _plan_prefill_first(self, now: float) -> tuple[list[tuple[Seq, int, int]], bool]:
        pool, B = self.pool, self.B
        chunks: list[tuple[Seq, int, int]] = []
        budget = self.budget
        self.held = False
        sg = self.sg
        offset = 0.0   # SGLang: reserved output tokens (rem_total_token_offset, less the KV already taken)
        if sg is not None:
            offset = sg.reserved_tokens(self.counter)
        if self.chunk_prompts:   # the prompts cut by earlier prefill batches continue first
            # SGLang allocates a chunked prompt chunk by chunk; here its whole prompt's blocks were taken
            # at admission, so its tokens not yet computed count as free in SGLang's rem_total_tokens
            uncomputed = sum(s.target - s.computed for s in self.prefilling) if sg is not None else 0
            for seq in self.prefilling:
                if budget <= 0:
                    break
                n = min(seq.target - seq.computed, budget)
                if sg is not None:   # add_chunked_req: at most rem_total_tokens when that is positive
                    rem = int(pool.free * B + uncomputed - offset)
                    if rem > 0:
                        n = min(n, rem)
                    uncomputed -= n   # _update_prefill_budget: the chunk's tokens are taken
                    if seq.computed + n >= seq.target:   # reserves min(max_new_tokens, CLIP), not less output_ids
                        offset += clipped_output_tokens(seq.O, 0)
                chunks.append((seq, n, seq.computed))
                budget -= n
        waiting, running, U, ub = self.waiting, self.running, self.U, self.ub
        while waiting and budget > 0 and len(running) < self.max_seqs:
            if sg is not None and sg.full:
                break   # batch_is_full: no new prefill until a running request finishes or is retracted
            seq = waiting[0]
            if self.overlap and self._not_yet(seq):
                break
            hit_units, evict_blocks = self._match(seq)
            reuse = self._reusable(seq, hit_units)
            hit = hit_units * U + reuse * B
            n = seq.target - hit
            if n > budget:
                if not self.chunk_prompts:
                    break
                n = budget   # cut to the tokens left; its KV blocks are taken whole below
            new_blocks = -(-seq.target // B) - hit_units * ub - reuse
            if sg is not None:
                # PrefillAdder.add_one_req (sim.sglang_admission); an engine with nothing running or
                # prefilling takes the request (the replica refused any that can never fit)
                if (running or chunks) and not (
                        self._sg_ignore_eos_admits(seq, pool.free * B, offset) if sg.ignore_eos else
                        admits(seq.target - hit, seq.O, seq.g, (pool.free - evict_blocks - reuse) * B - offset)):
                    sg.full = True
                    sg.no_token_stops += 1
                    break
                if pool.free - new_blocks - evict_blocks - reuse < 0:
                    break
            elif pool.free - new_blocks - evict_blocks - reuse < self.watermark_blocks or self._no_room(seq):
                break
            waiting.popleft()
            self._admit(seq, hit_units, new_blocks, now, reuse)
            chunks.append((seq, n, hit))
            budget -= n
            if sg is not None and n == seq.target - hit:   # whole prompt: its output is reserved
                offset += clipped_output_tokens(seq.O, 0)
        if chunks:
            self.plan_dec = 0
            return chunks, False
        preempted = self._decode_blocks(now) if self.n_dec else False
        self.plan_dec = self.n_dec
        return chunks, preempted

    # ------------------------------------------------------------------ state changes

    def _join_decode(self, seq: Seq) -> None:
        c = self.counter
        seq.state = DECODE
        seq.c0 = c
        seq.phase = (c - seq.target) % self.B
        seq.kvb = seq.target - c + 1
        self.n_dec += 1
        self.n_dec_meas += seq.measured
        self.kv_base += seq.kvb
        self.phase_cnt[seq.phase] += 1
        heapq.heappush(self.heap, (c + seq.O - seq.g, seq.idx, seq.gen, seq))
        if self.sg is not None:
            self.sg.outputs.add(seq.idx, c + seq.O - seq.g, c)
        self.fresh.append((seq, seq.gen))

    def _leave_decode(self, seq: Seq) -> int:
        """Remove from the decode aggregates; returns the tokens of KV it holds."""
        k = self.counter - seq.c0
        if self.sg is not None:
            self.sg.outputs.remove(seq.idx, self.counter)
        self.n_dec -= 1
        self.n_dec_meas -= seq.measured
        self.kv_base -= seq.kvb
        self.phase_cnt[seq.phase] -= 1
        seq.gen += 1
        seq.g += k
        return seq.target + k

    def _free(self, seq: Seq, blocks: int) -> None:
        self.pool.release(blocks - seq.shared_blocks)
        if seq.refkeys:
            self.pool.unref(seq.refkeys)
            seq.refkeys = []
        seq.shared_blocks = 0
        seq.blocks = 0
        self.reserved -= seq.resv
        seq.resv = 0
        del self.running[seq.idx]

    def _preempt(self, seq: Seq, now: float) -> None:
        """Preempt by recompute: free its KV, put it at the front of the waiting queue."""
        if seq.state == DECODE:
            if seq.c0 != self.counter:  # decoded since joining: its last token came with the last decode step
                seq.last_token = self.last_decode_ms
            kv = self._leave_decode(seq)
            blocks = -(-kv // self.B)
        else:
            self.prefilling.remove(seq)
            blocks, kv = seq.blocks, seq.computed
        self._park(seq, blocks, kv)
        seq.target = seq.P + seq.g
        seq.computed = 0
        seq.nreg = 0
        seq.state = WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _park(self, seq: Seq, blocks: int, tokens: int) -> None:
        """Free a preempted sequence, keeping its full private blocks (``tokens`` computed)
        cached for its return when prefix caching is on and its shared units are a prefix."""
        units = len(seq.refkeys)
        n = 0
        if self.sg is not None:   # SGLang retraction: only the prefilled tokens stay in the radix tree
            tokens = min(tokens, seq.target)   # (release_kv_cache(is_insert=False); sim.sglang_admission)
        if self.prefix_caching and tuple(seq.refkeys) == seq.keys[:units]:
            n = max(0, min(tokens // self.B, blocks) - seq.shared_blocks)
        if n:
            self.pool.release(blocks - seq.shared_blocks - n)
            self.pool.park(("preempted", seq.idx), n)
            seq.park_from = units * self.U
            blocks = seq.shared_blocks   # _free releases nothing more, unrefs the shared units
        self._free(seq, blocks)

    def complete(self, now: float, itl_samples: list[float]) -> list[Seq]:
        """Apply the in-flight plan at its finish time ``now``; returns finished sequences.

        ``itl_samples`` receives the gap before the next token of requests resuming after
        a preemption (other inter-token gaps are recorded by the replica per step)."""
        finished: list[Seq] = []
        self.steps += self.plan_steps
        B = self.B
        if self.plan_dec:
            self.last_decode_ms = now
            if self.sg is not None and not self.sg_retracted:
                self.sg.ratio.step(self.plan_steps)   # SGLang: one decay per decode batch
            self.counter += self.plan_steps
            c, heap = self.counter, self.heap
            while heap and heap[0][0] <= c:
                _, _, gen, seq = heapq.heappop(heap)
                if gen != seq.gen:
                    continue
                kv = self._leave_decode(seq)
                self._free(seq, -(-kv // B))
                seq.state = DONE
                seq.finish = now
                finished.append(seq)
        pool, U, ub = self.pool, self.U, self.ub
        for seq, n, _ in self.plan_chunks:
            seq.computed += n
            if seq.keys and self.prefix_caching:
                k, lim = seq.nreg, min(len(seq.keys), seq.computed // U)
                while k < lim:
                    key = seq.keys[k]
                    if pool.register(key):
                        seq.refkeys.append(key)
                        seq.shared_blocks += ub
                    k += 1
                seq.nreg = k
            if seq.computed >= seq.target:
                self.prefilling.remove(seq)
                seq.g += 1
                if seq.first_token != seq.first_token:  # NaN: first token ever
                    seq.first_token = now
                elif seq.measured:
                    itl_samples.append(now - seq.last_token)
                seq.last_token = now
                if seq.g >= seq.O:
                    self._free(seq, seq.blocks)
                    seq.state = DONE
                    seq.finish = now
                    finished.append(seq)
                else:
                    self._join_decode(seq)
        self.plan_chunks = []
        self.last_done_ms = now
        if finished and self.sg is not None:
            self.sg.full = False   # the running batch shrank (scheduler: batch_is_full = False)
            if not self.running and not self.waiting:
                # SGLang: new_token_ratio back to init when the scheduler idles (self_check_during_idle).
                # Here, not in plan(): the replica never plans an engine with nothing to do.
                self.sg.ratio.reset()
        return finished

    # ------------------------------------------------------------------ debugging

    def check_invariants(self) -> None:
        """Recompute the aggregates from the sequences and compare (slow; tests only)."""
        c, B, pool = self.counter, self.B, self.pool
        dec = [s for s in self.running.values() if s.state == DECODE]
        pre = [s for s in self.running.values() if s.state == PREFILL]
        assert len(dec) + len(pre) == len(self.running)
        assert pre == self.prefilling, "prefilling list out of order"
        assert all(s.state == WAITING for s in self.waiting)
        assert self.n_dec == len(dec)
        assert self.n_dec_meas == sum(s.measured for s in dec)
        assert self.kv_tokens_sum() == sum(s.target + (c - s.c0) + 1 for s in dec)
        assert self.phase_cnt[c % B] == sum((s.target + c - s.c0) % B == 0 for s in dec)
        refs: dict[int, int] = {}
        private = 0
        for s in self.running.values():
            held = -(-(s.target + c - s.c0) // B) if s.state == DECODE else s.blocks
            assert held >= s.shared_blocks == len(s.refkeys) * self.ub
            private += held - s.shared_blocks
            for k in s.refkeys:
                refs[k] = refs.get(k, 0) + 1
        live = {k: r for k, r in pool._refs.items() if r > 0}
        assert live == refs, "unit reference counts disagree"
        assert pool.used == private + len(live) * self.ub, (pool.used, private, len(live))
        parked = sum(pool._parked.values())
        assert pool.evictable == (len(pool._lru) - len(pool._parked)) * self.ub + parked
        assert 0 <= pool.used <= pool.total and pool.used + pool.evictable <= pool.total
        assert len(self.running) <= self.max_seqs
        assert self.reserved == sum(s.resv for s in self.running.values())
        if self.sg is not None:
            dec_rem = sum(min(s.O - s.g - (c - s.c0), 4096) for s in dec)
            assert len(self.sg.outputs) == len(dec) and self.sg.outputs.total(c) == dec_rem

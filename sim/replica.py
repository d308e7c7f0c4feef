"""One serving replica: its engine iteration loop, pipeline stages and step timing.

A replica runs ``pp`` *virtual engines* (vLLM v0 ``virtual_engine``, one scheduler each
with ``1/pp`` of the KV blocks and of ``max_num_seqs``); with ``pp == 1`` there is one.
Requests are assigned to the virtual engine with the fewest unfinished requests. The
first pipeline stage is a shared resource: a virtual engine with no batch in flight
may launch its next batch when the stage is free; the batch's tokens appear
``step_time_ms`` after launch and the stage is free again ``stage_time_ms`` after
launch, so up to ``pp`` micro-batches are in flight and pipeline bubbles show in the
timing. The cost model's step time already includes host overhead; none is added.

Fast-forward (``pp == 1``): when a step decodes only and nothing can change the batch
(no prefill in flight, waiting requests cannot be admitted, no preemption), the replica
runs consecutive decode steps in one tight loop up to the next completion, the next
step that would run out of KV blocks, the next timeseries sample, or the next event on
the agenda (an arrival or another replica's step), whichever comes first. The result is
exactly what stepping one event at a time would give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.sim.events import PRIORITY_STEP, PRIORITY_WAKE, EventLoop
from llmplan.sim.kv_cache import unit_keys, unit_tokens_for
from llmplan.sim.metrics import LogHistogram
from llmplan.sim.scheduler import EngineState, Seq
from llmplan.sim.sglang_scheduling import chunks_prompts
from llmplan.sim.trtllm_scheduling import first_schedulable_step
from llmplan.sim.trtllm_token_budget import budget_bounds_prompts_only
from llmplan.sim.types import EngineProfile, StepCostModel, StepShape
from llmplan.sim.vllm_async_scheduling import async_refusal, schedules_one_step_ahead

#: run several identical decode steps per event when nothing can change the batch
FAST_FORWARD = True
#: recompute every aggregate from the sequences after each change (slow; for tests)
DEBUG_CHECKS = False


@dataclass(frozen=True)
class ReplicaSpec:
    """One model replica: how fast it steps, how its engine schedules, how much KV it holds."""

    cost_model: StepCostModel     # batch shape -> step and stage time (host overhead included)
    engine: EngineProfile         # batching limits, block size, prefix caching, watermark
    kv_capacity_tokens: int       # KV-cache tokens the replica can hold (all pipeline stages)
    max_model_len: int            # longest prompt + output accepted, tokens


def validate_replica(spec: ReplicaSpec, i: int) -> None:
    """Raise UserError for engine settings the engine itself would refuse."""
    e, key = spec.engine, f"replicas[{i}]"
    pp = int(getattr(spec.cost_model, "pp", 1) or 1)

    def need(cond: bool, msg: str, k: str, fix: str | None = None, cls: type[UserError] = UserError) -> None:
        if not cond:
            raise cls(msg, key=f"{key}.{k}", fix=fix)

    need(pp >= 1, f"pipeline degree must be >= 1, got {pp}", "cost_model.pp")
    # a vLLM setting (sim/vllm_async_scheduling.py): another engine would run it silently unchanged
    need(not e.async_scheduling or e.name == "vllm",
         f"async_scheduling is a vLLM setting; the {e.name} engine has no such option", "engine.async_scheduling",
         "drop engine.async_scheduling (it selects vLLM's async scheduling only)")
    need(e.block_size >= 1, f"block_size must be >= 1, got {e.block_size}", "engine.block_size")
    need(e.max_num_seqs >= 1, f"max_num_seqs must be >= 1, got {e.max_num_seqs}", "engine.max_num_seqs")
    need(0.0 <= e.watermark < 1.0, f"watermark must be in [0, 1), got {e.watermark}", "engine.watermark")
    need(spec.max_model_len >= 1, f"max_model_len must be >= 1, got {spec.max_model_len}", "max_model_len")
    need(e.max_num_batched_tokens >= e.block_size,
         f"token budget {e.max_num_batched_tokens} is smaller than one KV block ({e.block_size} tokens)",
         "engine.max_num_batched_tokens", "raise max_num_batched_tokens (vLLM default 8192 with chunked prefill)")
    need(e.max_num_batched_tokens >= e.max_num_seqs,
         f"max_num_batched_tokens ({e.max_num_batched_tokens}) must be >= max_num_seqs ({e.max_num_seqs})",
         "engine.max_num_batched_tokens", "as vLLM requires; raise the budget or lower max_num_seqs")
    # TensorRT-LLM bounds only the prompts by the budget (checked per request in sim.serving)
    if ((not e.chunked_prefill and not chunks_prompts(e)) or e.whole_prompts) and not budget_bounds_prompts_only(e):
        need(e.max_num_batched_tokens >= spec.max_model_len,
             f"without chunked prefill (or with whole_prompts) the token budget ({e.max_num_batched_tokens}) "
             f"must cover max_model_len "
             f"({spec.max_model_len})", "engine.max_num_batched_tokens",
             "enable chunked_prefill (whole_prompts off) or raise max_num_batched_tokens (the engines refuse this)")
    blocks = spec.kv_capacity_tokens // e.block_size // pp
    need(blocks >= 1, f"KV cache of {spec.kv_capacity_tokens} tokens holds no {e.block_size}-token block "
         f"per pipeline virtual engine", "kv_capacity_tokens", "use more or larger GPUs, or a smaller model",
         InfeasibleDeployment)


class Replica:
    """Event handlers and state of one replica (created by :func:`sim.serving.simulate_serving`)."""

    def __init__(self, index: int, spec: ReplicaSpec, loop: EventLoop, itl: LogHistogram,
                 on_finish: Callable[[Seq], None], prefix_block_tokens: int, sample_interval_ms: float):
        e = spec.engine
        self.index = index
        self.spec = spec
        self.cost = spec.cost_model
        self.pp = int(getattr(spec.cost_model, "pp", 1) or 1)
        self.loop = loop
        self.itl = itl
        self.on_finish = on_finish
        self.id_tokens = prefix_block_tokens
        self.unit_tokens = unit_tokens_for(prefix_block_tokens, e.block_size)
        blocks = spec.kv_capacity_tokens // e.block_size // self.pp
        seqs = max(1, e.max_num_seqs // self.pp)
        dp = int(getattr(spec.cost_model, "dp", 1) or 1)   # attention DP ranks (sim.dp_layout)
        e = self.run_engine(spec)
        # speculative decoding (sim/spec_decode.py): output length in verify steps, restored on finish; the
        # KV pool is then in step space too (sim.spec_decode.speculative_kv), and the engines reserve in it
        self.spec_steps = getattr(spec.cost_model, "spec_decode_steps", None)
        self.ves = [EngineState(i, e, blocks, self.unit_tokens, seqs, dp, step_space=self.spec_steps is not None)
                    for i in range(self.pp)]
        self.prefix_caching = e.enable_prefix_caching
        self.outstanding = 0
        self.stage_free_at = 0.0
        self.sample_interval_ms = sample_interval_ms
        self.next_sample_ms = 0.0
        self.samples: list[tuple] = []
        self._wakes: set[float] = set()
        self._rr = 0
        self._memo: dict[StepShape, float] = {}
        # decode-only step time without a StepShape (AnalyticalStepModel.decode_step_ms), or None.
        # Looked up on the class: wrappers that delegate attributes (colocation's StretchedCost,
        # speculative decoding) must not hand out their base model's method, which skips them.
        cm = spec.cost_model
        self._decode_ms = cm.decode_step_ms if callable(getattr(type(cm), "decode_step_ms", None)) else None
        self._keys: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._resume_itl: list[float] = []
        self.launches = 0
        self.busy_ms = 0.0  # first-stage busy time (co-location's utilization, sim/colocation.py)

    def run_engine(self, spec: ReplicaSpec) -> EngineProfile:
        """The engine profile the replica runs: ``spec.engine``, synchronous where vLLM refuses async
        scheduling (pipeline stages, non-EAGLE/MTP speculation: sim.vllm_async_scheduling.async_refusal)."""
        e = spec.engine
        if schedules_one_step_ahead(e):
            cfg = getattr(spec.cost_model, "cfg", None)
            if async_refusal(self.pp, getattr(cfg, "method", None)) is not None:
                return replace(e, async_scheduling=False)
        return e

    # ------------------------------------------------------------------ capacity checks

    def max_request_tokens(self) -> int:
        """Longest prompt+output whose KV fits one virtual engine alone (watermark kept)."""
        ve = self.ves[0]
        return (ve.pool.total - ve.watermark_blocks) * ve.B

    # ------------------------------------------------------------------ prefix keys

    def keys_for(self, seq: Seq) -> tuple[int, ...]:
        """Cache-unit keys of a request's prompt at this replica's unit size."""
        ids = seq.req.hash_ids
        if not ids:
            return ()
        full = self._keys.get(ids)
        if full is None:
            if len(self._keys) > 20000:
                self._keys.clear()
            full = unit_keys(ids, self.id_tokens, self.unit_tokens, len(ids) * self.id_tokens)
            self._keys[ids] = full
        n = min(len(ids) * self.id_tokens, seq.P) // self.unit_tokens
        return full if n >= len(full) else full[:n]

    def prefix_match_tokens(self, seq: Seq) -> int:
        """Leading prompt tokens of ``seq`` already in this replica's prefix cache."""
        if not self.prefix_caching:
            return 0
        keys = self.keys_for(seq)
        if not keys:
            return 0
        return max(ve.pool.contains_prefix(keys) for ve in self.ves) * self.unit_tokens

    # ------------------------------------------------------------------ events

    def submit(self, seq: Seq, now: float) -> None:
        """A routed request arrives at this replica."""
        ve = self.ves[0] if self.pp == 1 else min(self.ves, key=lambda v: (v.outstanding, v.index))
        if self.prefix_caching and seq.req.hash_ids:
            seq.keys = self.keys_for(seq)
        seq.replica = self.index
        if self.spec_steps is not None:
            seq.O = self.spec_steps(seq)
        if ve.overlap and ve.in_flight:   # the next step is already scheduled (sim.trtllm_scheduling)
            seq.not_before = first_schedulable_step(ve.steps + ve.plan_steps - 1)
        ve.waiting.append(seq)
        self.outstanding += 1
        if not ve.in_flight:
            self._wake(max(now, self.stage_free_at))

    def _wake(self, t: float) -> None:
        if t not in self._wakes:
            self._wakes.add(t)
            self.loop.schedule(t, PRIORITY_WAKE, self._on_wake, t)

    def _on_wake(self, t: float) -> None:
        self._wakes.discard(t)
        self._try_launch(self.loop.now)

    def _try_launch(self, now: float) -> None:
        if now < self.stage_free_at:
            self._wake(self.stage_free_at)
            return
        n = self.pp
        # virtual engines in round-robin order from self._rr (one engine: no list to build)
        for ve in self.ves if n == 1 else [self.ves[(self._rr + k) % n] for k in range(n)]:
            if ve.in_flight or not (ve.waiting or ve.running):
                continue
            if DEBUG_CHECKS:
                ve.check_invariants()
            planned = ve.plan(now)
            if not planned and ve.waiting and not ve.running:
                planned = ve.plan(now)  # everything was preempted: admit afresh
            if planned:
                self._rr = (ve.index + 1) % n
                self._launch(ve, now)
                if n > 1:
                    self._wake(self.stage_free_at)
                return

    def _step_time(self, shape: StepShape) -> float:
        memo = self._memo
        t = memo.get(shape)
        if t is None:
            t = float(self.cost.step_time_ms(shape))
            if not (t > 0.0 and math.isfinite(t)):
                raise ValueError(f"cost model returned step time {t!r} for {shape}")
            if len(memo) >= 65536:
                memo.clear()
            memo[shape] = t
        return t

    def _decode_step_time(self, n: int, kv: int) -> float:
        """:meth:`_step_time` of a decode-only step (``n`` >= 1 sequences, ``kv`` KV tokens)."""
        dms = self._decode_ms
        if dms is None:
            return self._step_time(StepShape(0, 0, 0.0, 0, n, kv))
        t = dms(n, kv)
        if not (t > 0.0 and math.isfinite(t)):
            raise ValueError(f"cost model returned step time {t!r} for {StepShape(0, 0, 0.0, 0, n, kv)}")
        return t

    def _launch(self, ve: EngineState, now: float) -> None:
        chunks, n_dec = ve.plan_chunks, ve.plan_dec
        kv = ve.kv_base + n_dec * ve.counter if n_dec else 0
        shape = None
        if chunks:
            pt = ctx = 0
            pairs = 0.0
            for _, n, c in chunks:
                pt += n
                ctx += c
                pairs += n * c + n * (n + 1) / 2
            shape = StepShape(pt, len(chunks), pairs, ctx, n_dec, kv)
            end = now + self._step_time(shape)
        elif n_dec:
            end = now + self._decode_step_time(n_dec, kv)
        else:
            shape = StepShape(0, 0, 0.0, 0, n_dec, kv)
            end = now + self._step_time(shape)
        w = ve.n_dec_meas
        itl = self.itl
        if n_dec:
            # gap since each decoder's previous token: the last decode step, or its own prefill
            if w:
                fw = 0
                for s, gen in ve.fresh:
                    if s.gen == gen and s.measured:
                        itl.add(end - s.last_token)
                        fw += 1
                if w > fw:
                    itl.add(end - ve.last_decode_ms, w - fw)
            ve.fresh.clear()
        if self.pp == 1:
            if ve.plan_stable and n_dec and FAST_FORWARD:
                end = self._fast_forward(ve, end, w)
            self.stage_free_at = end
        else:
            if shape is None:
                shape = StepShape(0, 0, 0.0, 0, n_dec, kv)
            self.stage_free_at = now + float(self.cost.stage_time_ms(shape))
        self.busy_ms += self.stage_free_at - now
        if now >= self.next_sample_ms:
            self._sample(now, n_dec + len(chunks))
        ve.in_flight = True
        self.launches += 1
        self.loop.schedule(end, PRIORITY_STEP, self._on_done, ve)

    def _fast_forward(self, ve: EngineState, end: float, w: int) -> float:
        """Extend a stable decode-only step by further identical-membership decode steps."""
        bound = min(self.loop.peek(), self.next_sample_ms)
        if end >= bound:
            return end
        c, n, kvb, pc, B = ve.counter, ve.n_dec, ve.kv_base, ve.phase_cnt, ve.B
        max_steps = ve.next_finish_counter() - c
        free = ve.pool.free
        steps, alloc = 1, 0
        step_time, itl = self._decode_step_time, self.itl
        while steps < max_steps and end < bound:
            cc = c + steps
            nb = pc[cc % B]
            if nb > free - alloc:
                break
            alloc += nb
            dt = step_time(n, kvb + n * cc)
            if w:
                itl.add(dt, w)
            end += dt
            steps += 1
        if alloc:
            ve.pool.allocate(alloc)
        ve.plan_steps = steps
        return end

    def _on_done(self, ve: EngineState) -> None:
        now = self.loop.now
        ve.in_flight = False
        resumed = self._resume_itl
        finished = ve.complete(now, resumed)
        if DEBUG_CHECKS:
            ve.check_invariants()
        if resumed:
            for x in resumed:
                self.itl.add(x)
            resumed.clear()
        if finished:
            self.outstanding -= len(finished)
            for seq in finished:
                if self.spec_steps is not None:
                    seq.O = seq.req.output_tokens
                self.on_finish(seq)
        self._try_launch(now)

    # ------------------------------------------------------------------ observation

    def _sample(self, now: float, batch: int) -> None:
        used = sum(v.pool.used for v in self.ves)
        total = sum(v.pool.total for v in self.ves)
        self.samples.append((now, self.index, sum(len(v.running) for v in self.ves),
                             sum(len(v.waiting) for v in self.ves), batch, used / total,
                             sum(v.preemptions for v in self.ves)))
        k = math.floor(now / self.sample_interval_ms) + 1
        self.next_sample_ms = k * self.sample_interval_ms

    def stats(self) -> dict:
        """Counters of this replica (for the summary)."""
        ves = self.ves
        return {
            "replica": self.index,
            "steps": sum(v.steps for v in ves),
            "launches": self.launches,
            "preemptions": sum(v.preemptions for v in ves),
            "prompt_tokens_queried": sum(v.prompt_tokens_queried for v in ves),
            "prompt_tokens_hit": sum(v.prompt_tokens_hit for v in ves),
            "kv_blocks": sum(v.pool.total for v in ves),
            "kv_peak_blocks": sum(v.pool.peak_used for v in ves),
            "kv_peak_util": max(v.pool.peak_used / v.pool.total for v in ves),
            "prefix_evictions": sum(v.pool.evictions for v in ves),
            "busy_ms": self.busy_ms,
        }

"""SGLang's own admission and retraction rule: reserved output tokens scaled by ``new_token_ratio``.

SGLang (v0.5.6-0.5.9) does not admit a request while free KV blocks merely hold its prompt, as vLLM
does. Its ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``; line numbers below
are of the 0.5.9 wheel; 0.5.6.post2 has the same code and defaults) counts the KV tokens the
*running* requests will still need:

* ``rem_total_tokens = available + evictable - rem_total_token_offset`` where the offset starts at
  ``sum over running requests of min(max_new_tokens - len(output_ids), CLIP) x new_token_ratio``
  (``PrefillAdder.__init__`` / ``_get_running_request_total_token_offset``, lines 413-446) and each
  request added to the prefill batch adds ``ceil_page(extend_input_len) + min(max_new_tokens, CLIP)``
  (``_update_prefill_budget``, 510-517; a prompt truncated to a chunk adds only its chunk, 825);
* a waiting request is admitted only if ``extend_input_len + min(max_new_tokens - len(output_ids),
  CLIP) < rem_total_tokens`` (``add_one_req``, 733-745 and 752); otherwise ``NO_TOKEN`` ends the
  batch and the scheduler marks the running batch full (``batch_is_full``; ``scheduler.py``
  ``get_new_batch_prefill``, 2103-2114) and builds no prefill batch until a running request
  finishes or is retracted (``batch_is_full = False`` when the batch shrinks, 1909-1910, 2262-2263);
* the chunked (truncated) request continues with ``min(rem_chunk_tokens, rem_total_tokens)`` tokens
  and reserves its output only in the batch that finishes its prompt (``add_chunked_req``, 591-616).

``CLIP`` is ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` (4,096). ``new_token_ratio``
(``scheduler.py`` ``Scheduler.__init__`` 811-823, ``update_running_batch`` 2203-2260; ``environ.py``
225-229, 0.5.6.post2 177-181): starts at ``init = min(SGLANG_INIT_NEW_TOKEN_RATIO (0.7) x
--schedule-conservativeness (1.0), 1)``, falls by ``(init - min) /
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS (600)`` every decode batch down to ``min = init x
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR (0.14)``, and goes back to ``init`` when the scheduler idles
(``scheduler_runtime_checker_mixin.py`` ``self_check_during_idle``, 334). DP attention multiplies
the conservativeness by 0.3 (``server_args.py`` ``_handle_data_parallelism``, 2114-2115).

Retraction (``schedule_batch.py`` ``check_decode_mem`` / ``retract_decode``, 1834-1904): when the
next decode step's new pages do not fit the free + evictable tokens, requests are retracted, fewest
generated tokens first (ties: longest prompt; among equals the last in the batch), at least one and
until the step fits; they return to the *end* of the waiting queue (``_add_request_to_queue``,
FCFS, the default ``schedule_policy``) and recompute what is not cached: ``release_kv_cache(req,
tree_cache, is_insert=False)`` frees the generated tokens, while the prompt, inserted into the radix
tree when its prefill finished, stays there (evictable) when the radix cache is on. The ratio is then
set to ``min(1, (sum len(output_ids) + SGLANG_RETRACT_DECODE_STEPS (20) x n) / (sum max_new_tokens
+ 1))`` over the requests kept.

The simulator knows each request's output length; SGLang knows ``max_new_tokens``. The benchmark
clients of the measured rows send ``max_tokens = osl`` with ``ignore_eos``, so the two are equal
there; for traces the simulator takes the recorded output length as ``max_new_tokens``.

**Radix cache disabled + ignore_eos** (``add_one_req_ignore_eos``, 632-717; taken when
``req.sampling_params.ignore_eos and getattr(tree_cache, "disable", True)``, 731): instead of the
ratio reserve, the adder checks that no retraction can be needed. Every running request, every
request already in the batch and the new one gives ``(tokens_left, tokens_occupied) = (max_new_tokens
- len(output_ids), prompt + len(output_ids))`` (the ratio is 1.0 for ignore_eos requests); sorted by
``tokens_left``, the request ``i`` with ``bs`` requests at or after it must leave ``cur_rem_tokens -
ceil_page(extend) + sum of tokens_occupied before i - tokens_left_i x bs > IGNORE_EOS_RESERVE_TOKENS
(1) x bs``, else ``NO_TOKEN``; and the prompt alone must fit ``min(cur_rem_tokens, rem_total_tokens)``.
The simulator takes this branch for SGLang profiles without prefix caching
(``enable_prefix_caching = False``, i.e. ``--disable-radix-cache``), treating every request as
``ignore_eos`` (the simulator's output lengths are fixed in advance, as ``ignore_eos`` makes them);
the InferenceX sweep runs launch DeepSeek-R1/V3 and Qwen3.5 with ``--disable-radix-cache`` and the
client with ``--ignore-eos`` (:mod:`llmplan.calibration.sglang_sweep_launch`). With the radix cache
on (SGLang's default and the planner's) the general rule above applies.

SGLang keeps no free-block watermark, so the engine profile's ``watermark`` does not apply on this
path; pages are the simulator's KV blocks
(``conf/engine/sglang.yaml``: page size 1 modelled as 16-token blocks), so free tokens are counted
in whole blocks. This module holds the arithmetic; the hooks are in
:class:`llmplan.sim.scheduler.EngineState` (SGLang's prefill-first path only: ``--enable-mixed-chunk``
profiles keep the chunked-prefill admission).
"""

from __future__ import annotations

import heapq

from llmplan.sim.sglang_scheduling import chunks_prompts
from llmplan.sim.types import EngineProfile

#: ``SGLANG_INIT_NEW_TOKEN_RATIO`` (environ.py, 0.5.9)
INIT_NEW_TOKEN_RATIO = 0.7
#: ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS``
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``
CLIP_MAX_NEW_TOKENS = 4096
#: ``SGLANG_RETRACT_DECODE_STEPS``
RETRACT_DECODE_STEPS = 20
#: ``IGNORE_EOS_RESERVE_TOKENS`` (schedule_policy.py): tokens kept per request in the ignore_eos check
IGNORE_EOS_RESERVE_TOKENS = 1
#: ``--schedule-conservativeness`` default and its DP-attention factor (server_args.py)
SCHEDULE_CONSERVATIVENESS = 1.0
DP_ATTENTION_CONSERVATIVENESS_FACTOR = 0.3


def uses_sglang_admission(engine: EngineProfile) -> bool:
    """True for SGLang profiles on the prefill-first path (the default launch)."""
    return chunks_prompts(engine)


def clipped_output_tokens(max_new_tokens: int, generated: int = 0) -> int:
    """``min(max(max_new_tokens - len(output_ids), 0), CLIP)``: the output tokens SGLang reserves."""
    return min(max(int(max_new_tokens) - int(generated), 0), CLIP_MAX_NEW_TOKENS)


def admits(extend_tokens: int, max_new_tokens: int, generated: int, rem_total_tokens: float) -> bool:
    """``add_one_req``'s memory test: prompt tokens to compute + clipped remaining output must be
    strictly below ``rem_total_tokens``."""
    return extend_tokens + clipped_output_tokens(max_new_tokens, generated) < rem_total_tokens


def retract_ratio(decoded_tokens: int, requests: int, max_new_tokens: int) -> float:
    """``new_token_ratio`` after a retraction (``retract_decode``), over the requests kept."""
    return min(1.0, (decoded_tokens + RETRACT_DECODE_STEPS * requests) / (max_new_tokens + 1))


def ignore_eos_admits(states: list[tuple[int, int]], cur_rem_tokens: int, extend_tokens: int) -> bool:
    """``add_one_req_ignore_eos``'s no-retraction test. ``states``: ``(tokens_left, tokens_occupied)``
    of the running requests, the requests already in the batch and the new one; ``cur_rem_tokens``:
    free + evictable tokens less the prompt tokens already taken by the batch; ``extend_tokens``: the
    new request's prompt tokens to compute (page-rounded)."""
    rem = cur_rem_tokens - extend_tokens
    freed = 0
    live = sorted(s for s in states if s[0] > 0)
    n = len(live)
    for i, (left, occupied) in enumerate(live):
        bs = n - i
        if rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
            return False
        freed += occupied
    return True


class NewTokenRatio:
    """SGLang's ``new_token_ratio``: init, per-decode-batch linear decay to min, reset when idle,
    set by a retraction."""

    __slots__ = ("init", "min", "decay", "value")

    def __init__(self, conservativeness: float = SCHEDULE_CONSERVATIVENESS, dp_attention: bool = False):
        c = conservativeness * (DP_ATTENTION_CONSERVATIVENESS_FACTOR if dp_attention else 1.0)
        self.init = min(INIT_NEW_TOKEN_RATIO * c, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.value = self.init

    def step(self, decode_batches: int = 1) -> None:
        """``decode_batches`` decode batches ran without a retraction."""
        self.value = max(self.value - self.decay * decode_batches, self.min)

    def reset(self) -> None:
        self.value = self.init

    def retracted(self, decoded_tokens: int, requests: int, max_new_tokens: int) -> None:
        self.value = retract_ratio(decoded_tokens, requests, max_new_tokens)


class RemainingOutputs:
    """Sum over decoding requests of ``min(remaining output, CLIP)`` at decode counter ``c``, kept as
    aggregates (O(log n) per change, as the scheduler's decode bookkeeping). A request registered with
    ``end`` (the counter at which it has generated all its output) has ``end - c`` tokens left."""

    __slots__ = ("n_big", "n_small", "s_small", "_end", "_heap")

    def __init__(self) -> None:
        self.n_big = 0        # requests with more than CLIP tokens left (each counts CLIP)
        self.n_small = 0
        self.s_small = 0      # sum of their ``end``
        self._end: dict[int, tuple[int, bool]] = {}
        self._heap: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._end)

    def advance(self, c: int) -> None:
        heap, ends = self._heap, self._end
        while heap and heap[0][0] <= c:
            _, key, end = heapq.heappop(heap)
            cur = ends.get(key)
            if cur is None or cur[0] != end or not cur[1]:
                continue   # stale entry
            ends[key] = (end, False)
            self.n_big -= 1
            self.n_small += 1
            self.s_small += end

    def add(self, key: int, end: int, c: int) -> None:
        self.advance(c)
        big = end - c > CLIP_MAX_NEW_TOKENS
        self._end[key] = (end, big)
        if big:
            self.n_big += 1
            heapq.heappush(self._heap, (end - CLIP_MAX_NEW_TOKENS, key, end))
        else:
            self.n_small += 1
            self.s_small += end

    def remove(self, key: int, c: int) -> None:
        self.advance(c)
        end, big = self._end.pop(key)
        if big:
            self.n_big -= 1
        else:
            self.n_small -= 1
            self.s_small -= end

    def total(self, c: int) -> int:
        self.advance(c)
        return self.n_big * CLIP_MAX_NEW_TOKENS + self.s_small - self.n_small * c


class SGLangAdmission:
    """Per-engine state of SGLang's rule: the ratio, the running requests' remaining outputs, the
    ``batch_is_full`` flag and counters for reports."""

    __slots__ = ("ratio", "outputs", "full", "retractions", "no_token_stops", "ignore_eos")

    def __init__(self, conservativeness: float = SCHEDULE_CONSERVATIVENESS, dp_attention: bool = False,
                 ignore_eos: bool = False):
        self.ignore_eos = ignore_eos   # radix cache off: add_one_req_ignore_eos's test
        self.ratio = NewTokenRatio(conservativeness, dp_attention)
        self.outputs = RemainingOutputs()
        self.full = False
        self.retractions = 0
        self.no_token_stops = 0

    def reserved_tokens(self, c: int) -> float:
        """The running requests' part of ``rem_total_token_offset`` at decode counter ``c``."""
        return self.outputs.total(c) * self.ratio.value

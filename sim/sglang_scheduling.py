"""SGLang's prefill batching: chunked prompts inside prefill-first scheduling.

SGLang (v0.5.x) runs a prefill batch before the decode batch whenever prompts wait, and does not
mix the two unless started with ``--enable-mixed-chunk`` (off by default). Its prefill batch is
filled by ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``) in this order:

1. the request whose prompt the previous prefill batch left unfinished (``chunked_req``) goes
   first, with up to ``chunked_prefill_size`` of its remaining tokens;
2. then waiting requests first come, first served: a prompt that fits the tokens left in the
   batch (``rem_chunk_tokens``) joins whole; the first one that does not is *truncated* to the
   tokens left (page-aligned) and becomes the next ``chunked_req``; the batch is then full.

While a chunked request is unfinished the scheduler keeps building prefill batches
(``get_new_batch_prefill`` runs whenever ``chunked_req`` is set), so decodes wait until every
waiting prompt, and the rest of a truncated one, has been prefilled.

``chunked_prefill_size`` defaults by GPU memory (``ServerArgs._handle_gpu_memory_settings``,
SGLang v0.5.x; :func:`llmplan.sim.kv_budget.sglang_default_fraction`): 8,192 tokens on 60-160 GiB
GPUs (H100, H200), 16,384 above, 2,048-4,096 below. Sources: SGLang server arguments,
``--chunked-prefill-size`` and ``--enable-mixed-chunk``
(https://docs.sglang.io/advanced_features/server_arguments.html, v0.5.x); the scheduler code above
(sgl-project/sglang, v0.5.x). ``max_prefill_tokens`` (16,384 by default) bounds a batch's new
tokens too; it is above the chunk size on every GPU this rule covers, so the chunk binds.

Before this module the replay raised the token budget to the whole prompt for SGLang rows and
never split a prompt over two prefill batches. The cut applies to every SGLang profile without
chunked prefill (:func:`chunks_prompts`), the planner's and ``llmplan simulate``'s too: there the
budget is still raised to cover the longest request (:func:`llmplan.sim.deployment.replica_limits`),
so a prompt alone is never cut, but the last prompt of a full prefill batch is cut to the tokens
left instead of waiting for the next batch. Only served-row replays use SGLang's chunk size
(:func:`replay_engine`, :func:`mixed_chunk_engine`).
"""

from __future__ import annotations

from dataclasses import replace

from llmplan.sim.kv_budget import sglang_default_fraction
from llmplan.sim.types import EngineProfile

#: engines whose prefill-first batches chunk a prompt that does not fit (SGLang ``PrefillAdder``)
PREFILL_CHUNK_ENGINES = frozenset({"sglang"})
#: SGLang's ``max_prefill_tokens`` default (server arguments, v0.5.x): new tokens of one prefill batch
SGLANG_MAX_PREFILL_TOKENS = 16384


def chunks_prompts(engine: EngineProfile) -> bool:
    """True when the engine's prefill-first batches split a prompt over batches."""
    return engine.name in PREFILL_CHUNK_ENGINES and not engine.chunked_prefill and not engine.whole_prompts


def sglang_chunk_tokens(device_bytes: int, tp: int, pp: int) -> int:
    """SGLang's default prefill batch size in tokens: ``min(chunked_prefill_size, max_prefill_tokens)``
    for a GPU of ``device_bytes`` (the CUDA-visible total) at this TP and PP."""
    _, chunk, _ = sglang_default_fraction(device_bytes, tp, pp)
    return min(chunk, SGLANG_MAX_PREFILL_TOKENS)


def mixed_chunk_engine(engine: EngineProfile, device_bytes: int, tp: int, pp: int, dp: int = 1,
                       max_prefill_tokens: int = SGLANG_MAX_PREFILL_TOKENS) -> EngineProfile:
    """SGLang launched with ``--enable-mixed-chunk``: a prefill chunk joins the running decodes in
    one batch (``PrefillAdder`` with ``mixed_with_decode_tokens``: the decodes' tokens count
    against both ``chunked_prefill_size`` and ``max_prefill_tokens``), i.e. the chunked-prefill
    policy with a per-step budget of ``min(chunk, max_prefill_tokens)`` tokens, decodes included
    (per attention-DP rank)."""
    if engine.name not in PREFILL_CHUNK_ENGINES:
        return engine
    per_rank = min(sglang_chunk_tokens(device_bytes, tp, pp), max_prefill_tokens)
    return replace(engine, chunked_prefill=True, whole_prompts=False,
                   max_num_batched_tokens=max(per_rank * max(dp, 1), engine.max_num_seqs))


def replay_engine(engine: EngineProfile, device_bytes: int, tp: int, pp: int, dp: int = 1,
                  chunk_tokens: int = 0) -> EngineProfile:
    """A served SGLang run's engine: the prefill budget is SGLang's default chunk (per attention-DP
    rank, so ``dp`` times it per replica), never raised to the whole prompt. ``chunk_tokens`` > 0:
    the run's launch set ``min(--chunked-prefill-size, --max-prefill-tokens)`` to that instead
    (e.g. the InferenceX scripts, :mod:`llmplan.calibration.sglang_sweep_launch`). Other engines, and
    SGLang profiles with mixed chunks, are returned unchanged."""
    if not chunks_prompts(engine):
        return engine
    per_rank = chunk_tokens if chunk_tokens > 0 else sglang_chunk_tokens(device_bytes, tp, pp)
    tokens = max(per_rank * max(dp, 1), engine.max_num_seqs)
    return replace(engine, max_num_batched_tokens=tokens)


#: SGLang's request-slot pool when ``--max-running-requests`` is not given: ``pool tokens /
#: context length x 512``, clamped to [2048, 4096] (``ModelRunner.init_memory_pool``, v0.5.x)
SGLANG_REQ_POOL_MIN = 2048
SGLANG_REQ_POOL_MAX = 4096
SGLANG_REQ_POOL_PER_CONTEXT = 512


def sglang_max_running_requests(pool_tokens: int, context_len: int, requested: int | None = None) -> int:
    """Requests one SGLang (v0.5.x) scheduler runs at once, per attention-DP rank.

    Without ``--max-running-requests`` (``requested`` None) the request-slot pool is sized from the
    KV pool, ``min(max(int(pool_tokens / context_len x 512), 2048), 4096)``
    (``ModelRunner.init_memory_pool``), and the limit is ``min(pool_tokens // 2, that pool)``
    (``TpModelWorker.__init__``: ``max_total_num_tokens // 2`` when the flag is unset, capped by
    ``req_to_token_pool.size``); with the flag, ``min(requested, pool_tokens // 2)``
    (sgl-project/sglang ``python/sglang/srt/managers/tp_worker.py`` and
    ``model_executor/model_runner.py``, v0.5.x; the ``--max-running-requests`` server argument,
    https://docs.sglang.io/advanced_features/server_arguments.html). So, unlike vLLM's
    ``max_num_seqs`` (256 by default), SGLang's default never holds back fewer than 2,048 requests
    unless the KV pool is below 4,096 tokens: the binding limit is the KV pool itself, which
    ``PrefillAdder`` checks per request (prompt + reserved output tokens of the running requests).
    """
    pool = max(0, int(pool_tokens))
    if requested is not None:
        return max(0, min(int(requested), pool // 2))
    slots = int(pool / max(1, int(context_len)) * SGLANG_REQ_POOL_PER_CONTEXT)
    slots = min(max(slots, SGLANG_REQ_POOL_MIN), SGLANG_REQ_POOL_MAX)
    return min(pool // 2, slots)

"""TensorRT-LLM's token budget bounds a step's prompt tokens, not a request's whole sequence.

Without chunked context (the PyTorch backend's default, ``enable_chunked_prefill=False``)
TensorRT-LLM's micro-batch scheduler counts a context request as its prompt tokens
(``reqNumTokens = llmReq->getNumTokens(beam)`` plus draft tokens) against ``max_num_tokens``,
next to one token per generation request, and stops filling the step at the first prompt that no
longer fits (``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``, NVIDIA/TensorRT-LLM,
1.0-1.1: ``if (maxNumTokensRuntime && batchNumTokens + reqNumTokens > maxNumTokensRuntime.value())
break;``). The generated tokens never pass through a context step again: its default capacity
scheduler (``GUARANTEED_NO_EVICT``, :data:`llmplan.sim.scheduler.NO_EVICT_ENGINES`) reserves a
request's whole sequence at admission and never evicts it, so nothing is recomputed. A launch may
therefore set ``max_num_tokens`` below ``max_seq_len``: InferenceX's DeepSeek-R1 H200 script runs
``--max_seq_len=$MAX_MODEL_LEN`` (isl + osl + slack) with ``--max_num_tokens`` = concurrency + isl
+ 64 rounded up to 64 (:mod:`llmplan.calibration.trtllm_sweep_launch`).

So for such an engine the replay requires only that every prompt fit the budget
(:func:`budget_bounds_prompts_only`), where other whole-prompt engines need the whole request.
"""

from __future__ import annotations

from llmplan.sim.scheduler import NO_EVICT_ENGINES
from llmplan.sim.types import EngineProfile


def budget_bounds_prompts_only(engine: EngineProfile) -> bool:
    """True when ``engine``'s token budget must cover each prompt only (whole prompts, never evicted,
    so never recomputed with their generated tokens)."""
    return bool(engine.whole_prompts) and engine.name in NO_EVICT_ENGINES


def prompt_over_budget(engine: EngineProfile, prompt_tokens: int) -> str:
    """Why a prompt of ``prompt_tokens`` can never be scheduled by ``engine`` ('' when it can)."""
    if budget_bounds_prompts_only(engine) and prompt_tokens > engine.max_num_batched_tokens:
        return (f"a prompt of {prompt_tokens} tokens exceeds the token budget ({engine.max_num_batched_tokens}); "
                "without chunked context TensorRT-LLM refuses it")
    return ""

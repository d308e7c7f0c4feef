"""TensorRT-LLM's batch waiting: new prompts held back while generation runs, to batch more of them.

The PyTorch executor (``PyExecutor._schedule`` / ``_waiting_requests``,
tensorrt_llm/_torch/pyexecutor/py_executor.py, 1.1 and later; LLM API options
``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio``, both 0 = off by default,
https://nvidia.github.io/TensorRT-LLM/llm-api/reference.html, ``TorchLlmArgs``) does, after the
capacity and micro-batch schedulers picked a step's context and generation requests:

* only when batch waiting is on (either option > 0), attention DP is off, and the step has both
  context requests *and* generation requests ("if no generation requests, no need to wait, to
  avoid dead waiting");
* ``num_scheduled_tokens`` = every picked context request's prompt tokens + one token per
  generation request (plus its draft tokens);
* stop waiting when ``batch_wait_iters_count >= batch_wait_timeout_iters`` or
  ``num_scheduled_tokens >= batch_wait_max_tokens_ratio * max_num_tokens``: the context requests
  run in this step and the counter goes back to 0;
* otherwise the step runs the generation requests alone and the counter grows by one.

So with fewer waiting prompts than the token threshold, a prompt that arrives while others decode
waits up to ``batch_wait_timeout_iters`` decode steps (fewer when an earlier prompt's wait had
already advanced the counter); an engine with nothing decoding takes it at once.

:class:`BatchWait` keeps that counter for one engine (:class:`sim.scheduler.EngineState`).
"""

from __future__ import annotations

from typing import Optional

from llmplan.sim.types import EngineProfile

#: engines whose scheduler has the batch-waiting options
BATCH_WAIT_ENGINES = frozenset({"trtllm"})


class BatchWait:
    """The executor's ``batch_wait_iters_count`` and the two thresholds of one engine."""

    __slots__ = ("timeout_iters", "max_tokens_ratio", "max_num_tokens", "iters")

    def __init__(self, timeout_iters: int, max_tokens_ratio: float, max_num_tokens: int):
        if timeout_iters < 0 or max_tokens_ratio < 0 or max_num_tokens < 1:
            raise ValueError(f"batch wait: timeout_iters ({timeout_iters}) and max_tokens_ratio "
                             f"({max_tokens_ratio}) must be >= 0, max_num_tokens ({max_num_tokens}) >= 1")
        self.timeout_iters = timeout_iters
        self.max_tokens_ratio = max_tokens_ratio
        self.max_num_tokens = max_num_tokens
        self.iters = 0

    def release(self, context_tokens: int, generation_tokens: int) -> bool:
        """Whether a step whose schedulers picked ``context_tokens`` prompt tokens beside
        ``generation_tokens`` decode tokens (both > 0) runs its prompts now; False = they wait
        this step (the counter advances)."""
        scheduled = context_tokens + generation_tokens
        if self.iters >= self.timeout_iters or scheduled >= self.max_tokens_ratio * self.max_num_tokens:
            self.iters = 0
            return True
        self.iters += 1
        return False


def batch_wait(engine: EngineProfile, attention_dp: int = 1) -> Optional[BatchWait]:
    """The engine's batch-waiting state, or None when it does not wait (other engines; both
    options 0, TensorRT-LLM's default; ``attention_dp`` > 1 ranks: the executor skips the wait
    under attention DP)."""
    if engine.name not in BATCH_WAIT_ENGINES or attention_dp > 1:
        return None
    if engine.batch_wait_timeout_iters <= 0 and engine.batch_wait_max_tokens_ratio <= 0:
        return None
    return BatchWait(engine.batch_wait_timeout_iters, engine.batch_wait_max_tokens_ratio,
                     engine.max_num_batched_tokens)


def simulated_only_note(engine: EngineProfile, attention_dp: int = 1) -> str:
    """The opening of a note for outputs that show analytical figures (the planner's screen,
    optimizer.evaluate, has no batch waiting) beside simulated ones; "" when the engine does not wait."""
    if batch_wait(engine, attention_dp) is None:
        return ""
    return (f"TensorRT-LLM batch waiting (batch_wait_timeout_iters {engine.batch_wait_timeout_iters}, "
            f"batch_wait_max_tokens_ratio {engine.batch_wait_max_tokens_ratio:g}) is simulated only")

"""vLLM's async scheduling: a request that arrives while the engine is busy waits one step more
than on a synchronous engine.

With ``async_scheduling`` the vLLM V1 engine core keeps two steps in its batch queue
(``MultiprocExecutor.max_concurrent_batches`` 2) and runs ``EngineCore.step_with_batch_queue``:
"Try to schedule a new batch if the batch queue is not full. If a new batch is scheduled, directly
return an empty engine core output. In other words, fulfilling the batch queue has a higher priority
than getting model outputs" (vllm ``v1/engine/core.py``). The scheduler therefore "operate[s] one step
ahead of the current execution" (vllm-project/vllm PR #19970, "Implement Async Scheduling",
2025-06-23): while the GPU runs step k, step k + 1 is already scheduled, and step k + 2 is scheduled
only once step k's outputs are in. A request that arrives during step k joins step k + 2 at the
earliest; a synchronous engine (the simulator's default) would give it step k + 1. An idle engine
schedules at once. This is the shape of TensorRT-LLM's overlap scheduler, and the simulator applies
it the same way (``sim.trtllm_scheduling.first_schedulable_step``, ``sim.replica``).

Which servers run it: vLLM turned async scheduling on by default with vllm-project/vllm PR #27614
("[Core] Enable async scheduling by default", opened 2025-10-27; ``SchedulerConfig.async_scheduling``
``None`` = on, "If set to False, disable async scheduling"); before that it needed
``--async-scheduling``. The flag is carried by :attr:`sim.types.EngineProfile.async_scheduling`
(False by default: ``llmplan plan`` and the configs keep a synchronous vLLM); the served rows set it
from their launch (``calibration.vllm_async_launch``).
"""

from __future__ import annotations

from typing import Any


def schedules_one_step_ahead(engine: Any) -> bool:
    """Whether a vLLM engine profile runs async scheduling (module docstring)."""
    return getattr(engine, "name", "") == "vllm" and bool(getattr(engine, "async_scheduling", False))

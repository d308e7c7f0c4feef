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
(False in the dataclass; ``conf/engine/vllm.yaml`` sets it true, so ``llmplan plan`` and
``simulate`` run vLLM's current default); the served rows set it from their launch
(``calibration.vllm_async_launch``).

Where vLLM does not run it: ``VllmConfig.__post_init__`` (vllm ``vllm/config/vllm.py``, the
PR #27614 logic) turns the default off, and refuses an explicit ``--async-scheduling`` with a
ValueError, for ``pipeline_parallel_size > 1``, for speculative decoding other than the EAGLE/MTP
kind (``EagleModelTypes``: eagle, eagle3, mtp), and for a distributed executor other than ``mp``,
``uni`` or ``external_launcher`` (the ``ray`` backend of a multi-node launch).
:func:`async_refusal` names the reason; the replica simulates such a deployment synchronous
(``sim.replica``) and the launch command does not ask for it (``optimizer/launch/vllm.py``).
"""

from __future__ import annotations

from typing import Any


def schedules_one_step_ahead(engine: Any) -> bool:
    """Whether a vLLM engine profile runs async scheduling (module docstring)."""
    return getattr(engine, "name", "") == "vllm" and bool(getattr(engine, "async_scheduling", False))


#: speculative methods vLLM runs async scheduling with (``EagleModelTypes`` in vllm/config/speculative.py)
ASYNC_SPEC_METHODS = frozenset({"eagle", "eagle3", "mtp"})


def async_refusal(pp: int, spec_method: str | None = None, ray_executor: bool = False) -> str | None:
    """Why vLLM does not run async scheduling for a deployment (None: it does; module docstring):
    ``pp`` pipeline stages, ``spec_method`` the speculative method (None: no speculation),
    ``ray_executor`` whether the launch uses the ``ray`` distributed executor."""
    if pp > 1:
        return f"pipeline_parallel_size {pp} > 1"
    if spec_method is not None and spec_method not in ASYNC_SPEC_METHODS:
        return f"{spec_method} speculative decoding (async scheduling runs with EAGLE/MTP only)"
    if ray_executor:
        return "the ray distributed executor of a multi-node replica (async scheduling needs mp/uni)"
    return None

"""TensorRT-LLM's overlap scheduler: a request that arrives while the engine is busy waits one
more step than on a synchronous engine.

TensorRT-LLM's PyTorch executor (``PyExecutor._executor_loop_overlap``, on by default since 1.0;
``disable_overlap_scheduler=False``) schedules and launches step n + 1 on the GPU *before* it
processes the outputs of step n on the host: "At step n, the system launches GPU computation for
step n+1 without waiting for CPU tasks (e.g., stop criteria checks) from step n to complete"
(Overlap Scheduler, https://nvidia.github.io/TensorRT-LLM/features/overlap-scheduler.html,
1.0-1.3; "Enabled by default"). So while the GPU runs step k, the batch of step k + 1 is already
fixed: a request that arrives during step k (or at its end, when step k + 1 starts at once) can
join step k + 2 at the earliest. On a synchronous engine (the simulator's default) it joins step
k + 1, planned when step k ends. For a closed-loop client, whose next request arrives just after
the response that completed at the end of step k - 1, the new prompt therefore starts in step
k + 2 instead of k + 1: one step more of TTFT per request, and the clients' prompts are scheduled
one step further from the completions that released them.

An idle engine (nothing running) schedules a request at once: the executor loop is waiting for
requests and there is no step in flight to overlap with.

The other half of the documented trade-off ("one extra decoding step": a request whose last
token came in step n is still in step n + 1's batch) is not modelled: one row of one decode step
per request.

Disaggregated context (prefill) servers run without it: TensorRT-LLM's disaggregated examples
set ``disable_overlap_scheduler: True`` for them ("The overlap scheduler for context servers is
currently disabled, as it is not yet supported in disaggregated context server architectures",
``examples/disaggregated/README.md``, 1.0), and so does aiconfigurator's generator rule
(``prefill disable_overlap_scheduler = true``, ``generator/rule_plugin/benchmark/trtllm.rule``);
``sim/disaggregated.py`` turns it off on its prefill workers. Its decode workers admit transferred
requests through their own queue, unaffected.

Only TensorRT-LLM: SGLang's overlap schedule and vLLM's async scheduling have the same shape but
are not modelled here (their fitted terms were chosen without it).
"""

from __future__ import annotations

#: engines whose default executor overlaps the next step's scheduling with the current step
OVERLAP_SCHEDULER_ENGINES = frozenset({"trtllm"})


def overlap_scheduler(engine_name: str) -> bool:
    """Whether the engine schedules step n + 1 before step n's outputs are processed."""
    return engine_name in OVERLAP_SCHEDULER_ENGINES


def first_schedulable_step(last_step_in_flight: int) -> int:
    """Index of the first step a request arriving during step ``last_step_in_flight`` can join
    (0-based step indices of one engine): the next step is already scheduled."""
    return last_step_in_flight + 2

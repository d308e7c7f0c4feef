"""Context-server steps: the host launch of an eager forward runs under its device work.

The step model adds the engine's fitted eager-launch term (``eager_step_ms_per_layer`` x layers,
``sim/engine_terms.py``, ``sim/cuda_graphs.py``) to every step that replays no CUDA graph, on top of
the device time. On a prefill (context) worker of a disaggregated deployment every step is a whole
prompt of hundreds to thousands of tokens (TensorRT-LLM's context servers run ``max_batch_size`` 1
without the overlap scheduler; aiconfigurator's generator, ``generator/rule_plugin/benchmark/
trtllm.rule``), so the device work of each layer (about 1 ms at 1k tokens, DeepSeek-V3 TP8) is
many times the host's launch of that layer's kernels (0.09-0.31 ms per layer fitted for
TensorRT-LLM). Kernel launches are asynchronous: the host enqueues layer i + 1 while the GPU runs
layer i, and the step ends when the later of the two streams does ("Asynchronous Concurrent
Execution", CUDA C++ Programming Guide,
https://docs.nvidia.com/cuda/cuda-c-programming-guide/#asynchronous-concurrent-execution; the
per-launch host cost only shows when kernels are shorter than their launch, which is what CUDA
graphs remove: https://developer.nvidia.com/blog/cuda-graphs/). A context step therefore lasts
``max(device + other host time, launch)``, not their sum.

:class:`LaunchUnderDevice` wraps a pool's step model that way; :func:`~sim.disaggregated.
simulate_disaggregated` applies it to the prefill pool (``DisaggSpec.context_launch``). The
decode pool and the aggregated simulator keep the additive term (decode-only steps replay CUDA
graphs; an eager decode step is short, its launch is not hidden). Validation: docs/DISAGG.md.
"""

from __future__ import annotations

from typing import Any

#: how a prefill pool's eager launch composes with its device work
CONTEXT_LAUNCH = ("under_device", "additive")
#: the rule the disaggregated simulator applies by default (``DisaggSpec.context_launch``), which the
#: planner's analytical prefill screen (``optimizer.disagg_candidates.prefill_ms``) uses too
DEFAULT_CONTEXT_LAUNCH = "under_device"


class LaunchUnderDevice:
    """A step cost model whose eager-launch term (if any) overlaps the rest of the step:
    ``max(t - launch, launch)`` for the wrapped model's time ``t``; everything else (the per-request
    front-end TTFT, breakdowns, ``pp``) is the wrapped model's."""

    def __init__(self, step: Any):
        self.step, self.pp = step, step.pp

    def launch_ms(self, shape: Any, layers: int | None = None) -> float:
        """The eager-launch part of the wrapped model's time of ``shape`` (0 for a graphed step)."""
        per_layer = getattr(getattr(self.step, "engine", None), "eager_step_ms_per_layer", None)
        if not per_layer or not hasattr(self.step, "eager_layers"):
            return 0.0
        return float(per_layer) * self.step.eager_layers(shape, layers)

    def step_time_ms(self, shape: Any) -> float:
        t, e = float(self.step.step_time_ms(shape)), self.launch_ms(shape)
        return max(t - e, e)

    def stage_time_ms(self, shape: Any) -> float:
        t = float(self.step.stage_time_ms(shape))
        e = self.launch_ms(shape, getattr(self.step, "layers_per_stage", None) if self.pp > 1 else None)
        return max(t - e, e)

    def breakdown(self, shape: Any) -> Any:
        """The wrapped model's operators, with this model's step and stage times."""
        from dataclasses import replace

        return replace(self.step.breakdown(shape), latency_ms=self.step_time_ms(shape),
                       stage_ms=self.stage_time_ms(shape))

    def __getattr__(self, name: str) -> Any:
        if name == "step" or name.startswith("__"):   # not set yet (copy / pickle): no recursion
            raise AttributeError(name)
        return getattr(self.step, name)


def context_step_model(cost_model: Any, mode: str) -> Any:
    """The prefill pool's step model under ``mode`` (one of :data:`CONTEXT_LAUNCH`)."""
    return LaunchUnderDevice(cost_model) if mode == "under_device" else cost_model

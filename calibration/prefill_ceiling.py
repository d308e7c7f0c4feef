"""The prompt rate a replica can compute at best, by the simulator's own kernels.

In a closed loop without think time, N clients send N / E2E requests per second (Little's law,
E2E = TTFT + (osl - 1) x TPOT, the client's TPOT definition), so the run must have prefilled
``N x isl / E2E`` prompt tokens per second. The replica computes prompts fastest in a step that
holds nothing but whole prompts up to its token budget (``max_num_batched_tokens`` per
attention-DP rank; one budget-sized chunk when a prompt is longer, which skips the attention
over the earlier chunks and so errs fast). That step's kernel time, without any host time,
bounds the prompt tokens per second from above (times the pipeline stages, which overlap).

A measured run above that ceiling computed fewer prompt tokens than it was sent: prompts served
from the engine's prefix cache (vLLM and SGLang cache by default; identical or overlapping
prompts of the benchmark), which a replay of unique prompts cannot reproduce. Computed from the
measured row and the simulator's kernel model only, never from a prediction of the row.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import Any


def request_rate_per_s(case: Any) -> float:
    """Requests per second the measured closed loop implies: N / E2E (Little's law), with
    E2E = TTFT + (osl - 1) x TPOT; NaN when E2E is not positive and finite."""
    e2e_s = (case.measured_ttft_ms + max(0, case.osl - 1) * case.measured_tpot_ms) / 1e3
    return case.concurrency / e2e_s if e2e_s > 0 and math.isfinite(e2e_s) else math.nan


def prompt_rate_tps(case: Any) -> float:
    """Prompt tokens per second the measured closed loop implies (0 when not finite)."""
    rate = request_rate_per_s(case)
    return rate * case.isl if math.isfinite(rate) else 0.0


#: engine host terms set to zero: the ceiling counts kernel time only (errs fast)
_NO_HOST = {"host_overhead_ms": 0.0, "host_overhead_per_seq_ms": 0.0, "host_overlap_per_seq_ms": 0.0,
            "ttft_per_request_ms": 0.0, "ttft_per_prompt_token_ms": 0.0, "eager_step_ms_per_layer": 0.0}
#: kernel-only step models by (model, GPU, layout, precision, kernel backend, engine)
_STEPS: dict[tuple, Any] = {}


def prefill_capacity_tps(case: Any) -> float:
    """Prompt tokens per second of the replica's best prefill step (kernels only)."""
    from llmplan.calibration.serving_rows import step_model

    dep = case.dep
    key = (dep.model.key, dep.gpu.key, dep.par, dep.prec, dep.engine.kernel_backend, case.backend)
    if key not in _STEPS:
        bare = replace(dep.engine, **_NO_HOST)
        _STEPS[key] = step_model(replace(case, dep=replace(dep, engine=bare)), None)
    return _capacity_tps(key, case.isl, dep.engine.max_num_batched_tokens, max(1, dep.par.dp), max(1, dep.par.pp))


@lru_cache(maxsize=4096)
def _capacity_tps(key: tuple, isl: int, budget: int, dp: int, pp: int) -> float:
    from llmplan.sim.types import StepShape

    per_rank = max(1, budget // dp)
    if isl <= per_rank:
        prompts = [(isl, 0)] * (per_rank // isl * dp)
    else:
        prompts = [(per_rank, 0)] * dp
    ms = _STEPS[key].breakdown(StepShape.build(prompts, [])).latency_ms
    return sum(p for p, _ in prompts) / ms * 1e3 * pp if ms > 0 else float("inf")


def beyond_prefill_ceiling(case: Any) -> bool:
    """True when the measured run implies more prompt tokens per second than the replica's best
    prefill step computes (:func:`prefill_capacity_tps`)."""
    return prompt_rate_tps(case) > prefill_capacity_tps(case)

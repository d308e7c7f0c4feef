"""Disaggregated rows whose TTFT no prefill queue explains: flagged and left out of the hand-off fit
(docs/DISAGG.md, "Rows beyond a full prefill queue").

The per-engine hand-off (``serving_disagg_rows.fit_handoff``) is a constant per-request delay
between a prompt's prefill and its first decode step. Like the aggregated engine terms
(``calibration.serving_regimes``), it must not absorb latency set by something the replay does
not model. The criterion, from the measured row and the simulator's own model only (never from
the prediction error):

* ``beyond a full prefill queue``: the measured mean TTFT exceeds the front-end TTFT plus the time
  the prefill pool needs to serve every one of the run's ``N`` clients once, ``ceil(N / (P x S))``
  prefill steps of ``S`` whole prompts (``S``: the worker's batch x attention DP; ``P`` workers;
  the step timed by the pool's own step model as the replay runs it, host time included,
  the eager launch under the device work: ``sim.disaggregated.prefill_replica``). In a closed loop no request
  can find more than the other ``N - 1`` clients ahead of it, so a TTFT above that bound is not
  prefill queueing; a per-request delay of that size would be a hand-off tens of times the
  engine's other rows'.

On the served rows it flags the seven two-node H100 ``cfg494`` TensorRT-LLM rows (TP16 decode,
attention-DP-16 prefill; 5-14 s measured at 6-60 clients against a full-queue bound of 0.1-2.6 s)
and ``cfg503`` (31 s against 16 s), and no H200 row.
"""

from __future__ import annotations

import math
from typing import Any

BEYOND_PREFILL_QUEUE = "beyond a full prefill queue"


def prefill_step_ms(case: Any, spec: Any) -> float:
    """One prefill step of the case's prefill worker with its full batch of whole prompts (ms);
    ``spec``: the case's :class:`~sim.disaggregated.DisaggSpec` (``serving_disagg_rows.disagg_spec``)."""
    from llmplan.sim.types import StepShape

    from llmplan.sim.disaggregated import prefill_replica

    seqs = max(1, int(case.prefill.dep.engine.max_num_seqs))
    step = prefill_replica(spec).cost_model   # as the replay runs it (DisaggSpec.context_launch)
    return float(step.step_time_ms(StepShape.build([(case.isl, 0)] * seqs, [])))


def full_queue_ttft_ms(case: Any, spec: Any) -> float:
    """Front-end TTFT plus ``ceil(N / (P x S))`` prefill steps (module docstring)."""
    from llmplan.sim.disagg_request_terms import request_ttft_fns

    seqs = max(1, int(case.prefill.dep.engine.max_num_seqs))
    steps = math.ceil(case.concurrency / (case.prefill_workers * seqs))
    f = request_ttft_fns([spec.decode.replica], getattr(spec, "request_terms", "prompt"))[0]   # the spec's form
    front = 0.0 if f is None else float(f(case.isl))
    return front + steps * prefill_step_ms(case, spec)


def disagg_regime(case: Any, spec: Any) -> str:
    """:data:`BEYOND_PREFILL_QUEUE` or ""."""
    return BEYOND_PREFILL_QUEUE if case.measured_ttft_ms > full_queue_ttft_ms(case, spec) else ""

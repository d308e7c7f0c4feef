"""Served-row regimes the replay does not reproduce: flagged, optionally left out of the engine fit.

The engine terms (:mod:`calibration.engine_fit`) describe host time on top of the kernels. A
row whose latency is set by something else pulls them wherever it enters the fit (e.g. dense
vLLM TPOT 3.9% -> 9.6% when admission-limited gpt-oss-120b rows were added, issue 9). Two
criteria, computed from the row and the simulator's own model only, never from the
prediction error:

* ``cache-served prompts``: the prompt FLOPs the run must have computed per second exceed
  the replica's peak dense compute. In a closed loop without think time the request rate is
  N / E2E (Little's law) with E2E = TTFT + (osl - 1) x TPOT (the client's TPOT definition),
  so the prefill compute rate is N x isl x flops_per_token(prefill) / E2E; above
  ``gpus x peak`` no GPU could have computed the prompts: they were served from a prefix
  (radix) cache, which the replay (unique prompts) does not model.
* ``admission-limited``: the concurrency exceeds what the replica can run at once: the
  engine profile's default ``max_num_seqs`` (:func:`default_max_running`) or the sequences of
  isl + osl tokens the computed KV capacity holds above the watermark. Measured TTFT then contains queueing set by server
  settings the row does not record (max running requests, memory fraction), which the host
  terms cannot and must not absorb.

Rows keep being scored by ``llmplan validate serving``, which prints their flag. The engine fit
leaves them out only with ``--exclude-regimes`` (off in the shipped fit: docs/ACCURACY.md).
"""

from __future__ import annotations

import math
from typing import Any

from llmplan.calibration.serving_rows import ServingCase

CACHE_SERVED = "cache-served prompts"
ADMISSION_LIMITED = "admission-limited"
#: the flags, in the order they are reported
FLAGS = (CACHE_SERVED, ADMISSION_LIMITED)


def peak_flops(case: ServingCase) -> float:
    """Peak dense FLOP/s of the replica: its GPUs x the larger of the weight dtype's and
    bf16's catalog figure (the larger bound flags fewer rows)."""
    gpu = case.dep.gpu
    per = [gpu.peak_tflops(d) for d in {case.dep.prec.weights, "bf16"} if gpu.supports(d)]
    return case.dep.par.gpus * max(per) * 1e12


def prompt_compute_ratio(case: ServingCase) -> float:
    """Prompt FLOP/s the measured run implies / the replica's peak (> 1: not computable)."""
    from llmplan.model_catalog.derived import flops_per_token

    e2e_s = (case.measured_ttft_ms + max(0, case.osl - 1) * case.measured_tpot_ms) / 1e3
    if not (e2e_s > 0 and math.isfinite(e2e_s)):
        return math.nan
    rate = case.concurrency / e2e_s
    need = rate * case.isl * flops_per_token(case.dep.model, case.isl, "prefill")
    return need / peak_flops(case)


def admission_limit(case: ServingCase) -> int:
    """Sequences the replayed replica runs at once: min(max_num_seqs, KV capacity above the
    watermark / (isl + osl) tokens)."""
    from llmplan.sim.memory import plan_memory

    dep = case.dep
    e = dep.engine
    mem = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, e, case.isl + case.osl)
    kv_seqs = int(mem.kv_capacity_tokens * (1.0 - e.watermark) // max(1, case.isl + case.osl))
    return min(int(e.max_num_seqs), default_max_running(case.backend), kv_seqs)


def default_max_running(backend: str) -> int:
    """The engine profile's limit of running requests (``max_num_seqs`` in conf/engine; not
    checked against every measured version's default, which varies). The replay raises its own limit to the row's concurrency
    (serving_rows), since the files do not record the server's setting; above the default a
    server started with defaults admits fewer than N and queues the rest."""
    from llmplan.calibration.serving_rows import base_engine

    return int(base_engine(backend).max_num_seqs)


def regime_flags(case: ServingCase) -> tuple[str, ...]:
    """The regimes of :data:`FLAGS` that apply to a row (empty: the replay's regime)."""
    out = []
    if prompt_compute_ratio(case) > 1.0:
        out.append(CACHE_SERVED)
    try:
        if case.concurrency > admission_limit(case):
            out.append(ADMISSION_LIMITED)
    except Exception:   # noqa: BLE001 - memory plan refused: the replay reports it itself
        pass
    return tuple(out)


def flags_of(rows: list[dict[str, Any]], indices: list[int], engines: Any) -> dict[int, tuple[str, ...]]:
    """{row index: flags} for the given rows (rows that do not map get none)."""
    from llmplan.calibration.serving_rows import map_row

    out: dict[int, tuple[str, ...]] = {}
    for i in indices:
        m = map_row(rows[i], i, engines)
        out[i] = regime_flags(m.case) if m.case is not None else ()
    return out

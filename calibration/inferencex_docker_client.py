"""The vLLM gpt-oss-120b H100 rows "at N = 512": a hard-coded client cap, not a concurrency.

InferenceX's H100 Docker launch of gpt-oss (``benchmarks/gptoss_fp4_h100_docker.sh``, the script
the ``h100-cr`` runners ran: ``runners/launch_h100-cr.sh``) called its benchmark client with a
fixed ``--max-concurrency 512`` from its refactor into ``run_benchmark_serving`` (SemiAnalysisAI/
InferenceX d22bf9ca9, PR #227, 2025-11-21) until PR #310 "fix h100 docker error" (4e135fd3f,
2025-12-08 22:20 UTC) replaced it with ``--max-concurrency "$CONC"``. In between, a sweep job of
concurrency ``CONC`` (the master config's ``gptoss-fp4-h100-vllm`` search space: 4-64, TP 8 8k/1k
4-16, ``.github/configs/nvidia-master.yaml`` at 25506e87c / 4e135fd3f) ran

* the server with ``--max-num-seqs=$CONC`` (unchanged), and
* the client (kimbochen/bench_serving ``benchmark_serving.py``, cloned by
  ``benchmarks/benchmark_lib.sh``) with ``--num-prompts $(( CONC x 10 ))``, ``--request-rate inf``
  and ``--max-concurrency 512``: every prompt is created at time 0 and waits on an
  ``asyncio.Semaphore(512)``; the request's clock (``st``, ``backend_request_func.py``) starts
  inside the semaphore. So ``min(10 CONC, 512)`` requests are sent at once, the rest as
  requests finish;

and ``utils/process_result.py`` recorded ``conc = max_concurrency`` of the client's result file =
512. That is the ``silicon_concurrency=512`` of the nine ``2026-04-06.csv`` rows (measured
2025-12-05/08); the run's own ``CONC`` is not in the file, and the results database keys a point
by ``(run, config, isl, osl, conc)`` with a last-write-wins upsert (InferenceX
``docs/results-and-ingestion.md``, "Dedupe and failed-row behavior"), so the five sweep jobs of a
deployment that ran on a Docker runner collapse into one stored row whose ``CONC`` is one of
:func:`candidate_concurrencies`, unknown which.

What the measured means show (no fitted number): with ``P = 10 c`` prompts sent at once to a FIFO
server of ``c`` slots and near-equal service times ``D``, the prompts are served in ten waves, the
mean wait is ``(10 - 1) / 2 = 4.5 D`` and Little's law over the recorded N = 512 gives
``512 x D / (TTFT + D) = 512 / 5.5 = 93`` "running" sequences for every ``c <= 51``, whatever the TP
size and lengths (:func:`burst_running`); the rows show 88-98
(:mod:`calibration.vllm_running_sequences`). So the rows are not closed loops of 512 clients; the
replay leaves them out (status ``missing_input``, :func:`launch_note`) instead of replaying a run that did
not happen. ``python -m llmplan.calibration.inferencex_docker_replay --measurements DIR`` replays
each such row at every candidate ``CONC`` (the client above and ``max_num_seqs = CONC``) for
comparison; choosing one per row by its measured means would be a fit.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import length_range_ratio

#: the client's ``--max-concurrency`` in gptoss_fp4_h100_docker.sh between d22bf9ca9 and 4e135fd3f
DOCKER_CLIENT_MAX_CONCURRENCY = 512
#: ``--num-prompts $(( $CONC * 10 ))``
PROMPTS_PER_CONC = 10
#: measured dates (UTC, inclusive) of the hard-coded cap: PR #227 merged 2025-11-21, PR #310 2025-12-08
CAP_FROM = "2025-11-21"
CAP_UNTIL = "2025-12-08"
#: the master config's sweep of gptoss-fp4-h100-vllm then (conc-start 4, doubling): conc-end per (isl, osl, tp)
SWEEP_START = 4
SWEEP_END = 64
SWEEP_END_EXCEPTIONS = {(8192, 1024, 8): 16}
_MEASURED = re.compile(r"measured\s*=\s*(\d{4}-\d{2}-\d{2})")
_CONC = re.compile(r"silicon_concurrency\s*=\s*(\d+)")


def _int(v: Any) -> int:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return 0
    return int(x) if math.isfinite(x) else 0


def measured_date(row: Mapping[str, Any]) -> str:
    """``YYYY-MM-DD`` of the row's ``measured=`` tag ('' when absent)."""
    m = _MEASURED.search(str(row.get("silicon_data_source") or ""))
    return m.group(1) if m else ""


def docker_capped_row(row: Mapping[str, Any]) -> bool:
    """Whether the row is a gpt-oss H100 vLLM sweep run of the Docker script with the hard-coded
    ``--max-concurrency 512`` (module docstring): vLLM, ``openai/gpt-oss-*``, H100, an InferenceX
    sweep shape (client lengths), recorded concurrency 512, measured 2025-11-21..2025-12-08."""
    if str(row.get("backend") or "").strip().lower() != "vllm":
        return False
    if not str(row.get("model_path") or "").strip().lower().startswith("openai/gpt-oss-"):
        return False
    if str(row.get("system") or "").strip().lower() != "h100_sxm":
        return False
    isl, osl = _int(row.get("isl")), _int(row.get("osl"))
    if length_range_ratio(row, isl, osl) >= 1.0:
        return False
    m = _CONC.search(str(row.get("silicon_data_source") or ""))
    if (int(m.group(1)) if m else _int(row.get("batch_size"))) != DOCKER_CLIENT_MAX_CONCURRENCY:
        return False
    day = measured_date(row)
    return bool(day) and CAP_FROM <= day <= CAP_UNTIL


def as_recorded(row: Mapping[str, Any]) -> dict:
    """The row with its ``measured=`` date dropped, so that :func:`docker_capped_row` no longer
    holds and ``serving_rows.map_row`` maps it as recorded (a closed loop of 512): for the
    evidence tools that need the deployment (KV pool, candidate replays), never for scoring."""
    if not docker_capped_row(row):
        return dict(row)
    src = _MEASURED.sub("measured=unknown", str(row.get("silicon_data_source") or ""))
    return {**row, "silicon_data_source": src}


def candidate_concurrencies(isl: int, osl: int, tp: int) -> tuple[int, ...]:
    """The sweep's ``CONC`` values for a deployment (one of them produced the stored row)."""
    end = SWEEP_END_EXCEPTIONS.get((isl, osl, tp), SWEEP_END)
    out, c = [], SWEEP_START
    while c <= end:
        out.append(c)
        c *= 2
    return tuple(out)


def client_requests(conc: int) -> tuple[int, int]:
    """(requests in flight at once, requests in all) of a job of concurrency ``conc`` under the cap."""
    total = PROMPTS_PER_CONC * conc
    return min(total, DOCKER_CLIENT_MAX_CONCURRENCY), total


def burst_running(conc: int, recorded: int = DOCKER_CLIENT_MAX_CONCURRENCY) -> float:
    """Little's-law "running" count a run of ``10 x conc`` prompts sent at once to ``conc`` FIFO
    slots shows when read as a closed loop of ``recorded`` clients, for equal service times and
    no prefill: the prompts go in ``10`` waves, the mean wait is ``4.5`` services, so
    ``recorded / 5.5``. Only for ``10 x conc <= recorded`` (all prompts sent at once)."""
    if PROMPTS_PER_CONC * conc > recorded:
        raise ValueError(f"{PROMPTS_PER_CONC} x {conc} prompts exceed the {recorded} sent at once")
    waves = PROMPTS_PER_CONC
    mean_wait_services = (waves - 1) / 2.0
    return recorded / (1.0 + mean_wait_services)


def launch_note(row: Mapping[str, Any]) -> str:
    """The ``missing_input`` status text of a :func:`docker_capped_row` row: the concurrency the run served
    is not recorded (the row's 512 is the client's cap)."""
    cands = candidate_concurrencies(_int(row.get("isl")), _int(row.get("osl")), _int(row.get("tp_size")))
    return ("missing_input: the run's concurrency CONC is not recorded; the recorded 512 is the client's hard-coded --max-concurrency of InferenceX's "
            "gptoss_fp4_h100_docker.sh (2025-11-21..12-08, fixed by PR #310): the run served 10 x CONC prompts "
            f"sent at once with --max-num-seqs CONC, CONC one of {'/'.join(map(str, cands))} and not recorded "
            "(calibration/inferencex_docker_client.py)")

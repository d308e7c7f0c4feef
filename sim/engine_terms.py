"""Fitted engine terms the runtime uses (host time per step), from one file.

``sim/data/engine_profiles.json`` is written by ``calibration.engine_fit`` (fitted to the
served runs in ``shared/measurements``) and is the only source of the host-time terms of
:class:`sim.types.EngineProfile`: a profile whose ``host_*`` fields are left unset (None,
the dataclass default and what ``conf/engine/*.yaml`` leaves them at) takes the fitted
values of its engine here. An explicit value (a config override, a test) wins.

Step time with these terms (``sim.step_model``)::

    step = max(device_ms, host_overlap_per_seq_ms x seqs) + host_overhead_ms + host_overhead_per_seq_ms x seqs
           (+ eager_step_ms_per_layer x layers on a step that runs without CUDA graphs)

* ``host_overhead_ms``: per-step host time that is *not* hidden behind the GPU (scheduler
  decision, input preparation, launch of the captured graph, output processing);
* ``host_overlap_per_seq_ms``: per-sequence CPU work of a step that engines with an
  asynchronous / overlap scheduler (vLLM async scheduling, SGLang overlap schedule,
  TensorRT-LLM overlap scheduler) run while the GPU computes the previous step, so it only
  shows where it exceeds the device time. The fit keeps it above 0 only where the served rows
  identify it (a likelihood-ratio test against 0): rows whose steps are never host-bound cannot
  tell 0 from 0.08 ms per sequence, and 0.08 x 512 sequences = 41 ms per step;
* ``host_overhead_per_seq_ms``: per-sequence time that adds to the step whatever its device time.
  The shipped fit keeps it at 0 (``calibration.engine_fit``, form ``overlap``): it grows without
  bound outside the fitted batch range (issue 12). The ``overlap+linear`` diagnostic fit finds one
  in the SGLang Llama-3.1-8B rows at N = 352-512 (measured TPOT minus device TPOT 8-12 ms at every TP;
  docs/ACCURACY.md, "Engine terms at large batch (session 8)"). A config value is still honoured.
* ``eager_step_ms_per_layer``: the host launch of a forward that replays no CUDA graph
  (``sim.cuda_graphs.eager_step``: TensorRT-LLM and SGLang steps that carry a prompt, vLLM steps
  above its largest capture size, decode batches above the captured maximum): the kernels of
  every layer are launched one by one, so the step waits on the host in the short kernels of
  each layer. A constant per eager step that scales with the layers and never with the batch
  (0 where the profile file has no value, i.e. before a fit that includes it).

A front end that handles every streamed token in one process (``EngineProfile.frontend: dynamo``)
floors the step the same way, ``max(device, c x seqs, frontend_per_token_ms x tokens)``
(sim/frontend_ceiling.py); its fitted value is the file's ``frontend_per_token_ms``
(:func:`fitted_frontend_ms`), applied only where the profile names that front end.

Per-request terms of the time to first token (added to each request's TTFT and end-to-end
latency, never to a step; :func:`request_ttft_ms`)::

    ttft += ttft_per_request_ms + ttft_per_prompt_token_ms x prompt_tokens

* ``ttft_per_request_ms``: work a request meets once, outside the engine's steps: the client's
  HTTP round trip, the API server's request handling and hand-off to the engine core, and the
  first token's detokenisation and streaming;
* ``ttft_per_prompt_token_ms``: the API server's tokenisation of the prompt (CPU work
  proportional to the prompt).

Both are >= 0 and do not depend on the batch: they never change a step, so they cannot make the
step time grow with the number of sequences. The simulator adds them when it reports a request
(``sim.serving``); the schedule is that of the engine, which sees the request after them.

Engines missing from the file fall back to the mean of the fitted engines (said in
:func:`fitted_terms`' ``source``); with no file at all every term is 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

PATH = Path(__file__).resolve().parent / "data" / "engine_profiles.json"
#: EngineProfile fields this file supplies
FIELDS = ("host_overhead_ms", "host_overhead_per_seq_ms", "host_overlap_per_seq_ms", "ttft_per_request_ms",
          "ttft_per_prompt_token_ms", "eager_step_ms_per_layer")
#: the per-request TTFT terms among them (not step time)
REQUEST_FIELDS = ("ttft_per_request_ms", "ttft_per_prompt_token_ms")


@lru_cache(maxsize=4)
def load(path: str | None = None) -> dict[str, Any]:
    """The parsed profile file ({} when absent)."""
    p = Path(path) if path else PATH
    if not p.is_file():
        return {}
    return json.loads(p.read_text())


def fitted_terms(engine: str, path: str | None = None) -> tuple[dict[str, float], str]:
    """({field: value} for :data:`FIELDS`, source) of one engine name."""
    engines = load(path).get("engines", {})
    if engine in engines:
        e = engines[engine]
        return {f: float(e.get(f, 0.0)) for f in FIELDS}, f"fitted ({engine})"
    if not engines:
        return {f: 0.0 for f in FIELDS}, "none (no engine_profiles.json)"
    vals = {f: sum(float(e.get(f, 0.0)) for e in engines.values()) / len(engines) for f in FIELDS}
    return vals, f"mean of fitted engines ({', '.join(sorted(engines))}); '{engine}' has no fit"


def fitted_frontend_ms(engine: str, frontend: str, path: str | None = None) -> float:
    """Per streamed token time of ``frontend`` in front of ``engine`` (sim/frontend_ceiling.py), ms:
    0 for the engine's own front end ("engine") and where the file has no fitted value. The file
    holds one value per engine, for the Dynamo front end (``frontend_per_token_ms``)."""
    if frontend == "engine":
        return 0.0
    return float(load(path).get("engines", {}).get(engine, {}).get("frontend_per_token_ms", 0.0))


def fitted_range(engine: str, path: str | None = None) -> dict[str, tuple[float, float]]:
    """{quantity: (low, high)} of the served rows the engine's terms were fitted on
    (``concurrency``, ``isl``, ``osl``); {} when the file has no range for the engine."""
    rng = load(path).get("engines", {}).get(engine, {}).get("fitted_range") or {}
    return {k: (float(lo), float(hi)) for k, (lo, hi) in rng.items()}


def outside_range(rng: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """One phrase per value of ``values`` outside its ``rng`` (low, high) pair ("concurrency 600 not in
    [4, 144]"); values that are missing or not numbers are skipped."""
    bad = []
    for k, (lo, hi) in rng.items():
        try:
            v = float(values[k])
        except (KeyError, TypeError, ValueError):
            continue
        if v < lo or v > hi:
            bad.append(f"{k} {_g(v)} not in [{_g(lo)}, {_g(hi)}]")
    return bad


def operating_point(rate_rps: float, done: Any, decode_only: bool = False) -> dict[str, float]:
    """A replica's simulated operating point in the fitted range's quantities, from its finished
    requests (a table with ``e2e_ms``, ``input_tokens``, ``output_tokens``): running requests by
    Little's law (the replica's rate x mean time in it) and the mean prompt / output lengths.
    ``decode_only``: a disaggregated decode worker, whose requests stay from the KV's arrival
    (``kv_arrival_ms``) to the last token (``finish_ms``)."""
    busy = done["finish_ms"] - done["kv_arrival_ms"] if decode_only else done["e2e_ms"]
    return {"concurrency": rate_rps * float(busy.mean()) / 1000.0,
            "isl": float(done["input_tokens"].mean()), "osl": float(done["output_tokens"].mean())}


def fit_range_note(engine: str, point: dict[str, float], path: str | None = None) -> str:
    """A note when an operating point lies outside the served rows the engine's terms were
    fitted on (issue 12: extrapolated terms are said, not silently trusted); "" when inside."""
    bad = outside_range(fitted_range(engine, path), point)
    return (f"outside the served rows the {engine} engine terms were fitted on ({'; '.join(bad)}); "
            "their host and scheduling times are extrapolated" if bad else "")


def _g(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 10 or float(v).is_integer() else f"{v:.3g}"


def request_ttft_ms(engine: Any, prompt_tokens: float) -> float:
    """Per-request TTFT of ``engine`` (an EngineProfile) for a prompt of ``prompt_tokens``, ms."""
    return float(engine.ttft_per_request_ms or 0.0) + float(engine.ttft_per_prompt_token_ms or 0.0) * prompt_tokens


def request_ttft_fn(cost_model: Any) -> Callable[[float], float] | None:
    """The ``request_ttft_ms`` method a step cost model carries (the analytical step model's: its
    engine's fitted terms), looked up through wrappers (``.base``, ``.step``); None for cost models
    without one (e.g. the explicit linear test costs, which carry no fitted engine terms either).
    Resolve it once per cost model where it is asked per request (``sim.serving``)."""
    m = cost_model
    for _ in range(8):
        if m is None:
            return None
        f = getattr(type(m), "request_ttft_ms", None)
        if f is not None:
            return partial(f, m)
        m = getattr(m, "base", None) or getattr(m, "step", None)
    return None


def cost_model_request_ttft_ms(cost_model: Any, prompt_tokens: float) -> float:
    """Per-request TTFT a step cost model carries (:func:`request_ttft_fn`), ms; 0 without one."""
    f = request_ttft_fn(cost_model)
    return 0.0 if f is None else float(f(prompt_tokens))


def shift_by_request_ttft(seqs: Iterable[Any], fns: Sequence[Optional[Callable[[float], float]]]) -> None:
    """Add each request's per-request TTFT (``fns[seq.replica](prompt tokens)``, :func:`request_ttft_fn`; None =
    none) to its first-token and finish times, outside the schedule (sim.serving for aggregated replicas,
    sim.disagg_request_terms for disaggregated workers). A request that never produced a token is left alone."""
    if not any(f is not None and f(1.0) for f in fns):
        return
    for s in seqs:
        if s.replica < 0 or s.first_token != s.first_token:
            continue
        f = fns[s.replica]
        d = 0.0 if f is None else float(f(s.P))
        s.first_token += d
        if s.finish == s.finish:
            s.finish += d

"""Per-token front-end ceiling: a single serial process that handles every streamed output token.

A serving front end that runs in one Python process handles each output token the engine streams:
SGLang's ``TokenizerManager.handle_loop`` updates one request state per request of every step's
batch output and wakes its stream, and a Dynamo worker that embeds SGLang (``sgl.Engine``, the
``dynamo.sglang`` worker) then yields one chunk per request and step to the Rust runtime, crossing the
GIL for it (ai-dynamo/dynamo ``components/src/dynamo/sglang`` request handlers, ``_process_stream``:
``async for res in engine.async_generate(..., stream=True)`` -> ``{"token_ids": output_ids[n_so_far:]}``;
Dynamo documents the bridge as crossing "the GIL once per token ... so aggregate throughput is
GIL-bound and stays roughly flat as concurrency rises", ai-dynamo/dynamo PR #10609; SGLang's single
TokenizerManager has the same limit, sgl-project/sglang issue #6553, ``--tokenizer-worker-num`` from
PR #8964). With SGLang's default ``--stream-interval 1`` every step sends one token per running
request, so the work per step is ``per_token_ms x tokens`` of the step.

That process runs concurrently with the GPU (its own process; the scheduler's output send does not
wait for it), so it is not added to a step. It bounds the rate instead: the clients cannot receive
the tokens of a step faster than the front end handles them, and in a closed loop the next step's
inputs wait on the same requests. The simulator therefore times a step as at least the front end's
time for the step's tokens::

    step >= per_token_ms x tokens_delivered          (per replica; 0 = no front-end ceiling)

composed like the engine's overlapped per-sequence CPU term (``sim/step_model.py``:
``max(device, c x seqs, per_token_ms x seqs) + host_overhead_ms``): a GPU step longer than the front
end's work is unchanged, and the delivered rate is at most ``1 / per_token_ms`` tokens per second
whatever the tensor-parallel size. ``tokens_delivered`` is taken as the step's sequences (one token
per decode sequence; a prefill chunk is counted as the first token of its request, exact where prompts
are not split across steps and an upper bound where they are).

The time is an engine-profile setting (``EngineProfile.frontend`` / ``frontend_per_token_ms``),
off by default: the engines' own front ends are not modelled this way. ``frontend: dynamo`` takes the
per-token time fitted to the served rows that ran behind Dynamo (``calibration.engine_fit``,
``sim/data/engine_profiles.json``: each engine's ``frontend_per_token_ms``, read by
``sim.engine_terms.fitted_frontend_ms``); an explicit ``frontend_per_token_ms`` wins.
"""

from __future__ import annotations

#: front-end kinds: the engine's own API server (no ceiling modelled) and Dynamo's in-process worker
FRONTENDS = ("engine", "dynamo")
#: the default: the engine's own front end, no per-token ceiling
DEFAULT_FRONTEND = "engine"


def delivered_tokens(decode_seqs: int, prefill_seqs: int) -> int:
    """Tokens a step streams to the front end: one per decode sequence and one per prefill chunk
    (its request's first token)."""
    return int(decode_seqs) + int(prefill_seqs)


def frontend_floor_ms(per_token_ms: float, tokens: int) -> float:
    """The front end's time for ``tokens`` streamed tokens, the shortest the step can be (ms)."""
    return float(per_token_ms) * int(tokens) if per_token_ms > 0.0 else 0.0


def ceiling_tokens_per_s(per_token_ms: float) -> float:
    """Delivered output tokens per second the front end cannot exceed (inf when off)."""
    return 1000.0 / per_token_ms if per_token_ms > 0.0 else float("inf")


def frontend_per_token_ms(engine: object) -> float:
    """The per-token time an engine profile's front end applies (ms): its ``frontend_per_token_ms``
    unless the front end is the engine's own (``frontend: engine``), whose time is not modelled."""
    kind = getattr(engine, "frontend", DEFAULT_FRONTEND)
    value = getattr(engine, "frontend_per_token_ms", 0.0) or 0.0
    return float(value) if kind != DEFAULT_FRONTEND and value > 0.0 else 0.0


def frontend_note(engine: object) -> str:
    """The line that tells a user the front end's ceiling is modelled ("" when it is not): the
    per-token time and the delivered rate it caps each replica at (:func:`ceiling_tokens_per_s`)."""
    t = frontend_per_token_ms(engine)
    if t <= 0.0:
        return ""
    return (f"engine.frontend={getattr(engine, 'frontend', DEFAULT_FRONTEND)}: every step lasts at least "
            f"{t:g} ms per streamed token (decode sequences and prefill chunks), so a replica (a disaggregated "
            f"worker) delivers at most {ceiling_tokens_per_s(t):,.0f} output tokens/s (sim/frontend_ceiling.py)")


def frontend_problem(engine: object) -> tuple[str, str, str] | None:
    """(the engine key at fault, what is wrong, the fix) for a front-end setting the simulator would
    not honour, else None: an unknown kind, a negative time, a time set on the engine's own front end
    (ignored there), or the Dynamo front end without a per-token time (0 given, or none given and none
    fitted). Checked on the user's configuration (``llmplan.cli.resolve.check_engine``); the
    served-row replay sets both fields itself."""
    kind = getattr(engine, "frontend", DEFAULT_FRONTEND)
    value = float(getattr(engine, "frontend_per_token_ms", 0.0) or 0.0)
    if kind not in FRONTENDS:
        return "frontend", f"unknown front end '{kind}'", f"one of {', '.join(FRONTENDS)}"
    if value < 0.0:
        return ("frontend_per_token_ms", f"frontend_per_token_ms {value:g} is negative",
                "use 0 or a positive time per streamed token (ms)")
    if kind == DEFAULT_FRONTEND and value > 0.0:
        return ("frontend_per_token_ms", f"frontend_per_token_ms {value:g} is set but the front end is the "
                "engine's own, which is not modelled with a per-token time",
                "set engine.frontend=dynamo, or engine.frontend_per_token_ms=0")
    if kind != DEFAULT_FRONTEND and value == 0.0:
        return ("frontend", f"front end '{kind}' has no per-token time: frontend_per_token_ms is 0 (given as 0, or "
                f"none given and none fitted in sim/data/engine_profiles.json for engine "
                f"'{getattr(engine, 'name', '?')}')",
                "set engine.frontend_per_token_ms (ms per streamed token) or engine.frontend=engine")
    return None

"""Which of the engine's per-request TTFT terms a disaggregated request meets (``DisaggSpec.request_terms``).

The aggregated engine fit gives each engine two per-request TTFT terms (:mod:`sim.engine_terms`):
``ttft_per_request_ms`` (r0: the client's round trip, the API server's handling, the first token's
detokenisation and streaming) and ``ttft_per_prompt_token_ms`` (r1: per prompt token, labelled the API
server's tokenisation). A disaggregated request passes one front end, so each of them is met at most once
(the prefill and decode workers' extra hops are the fitted hand-off, ``DisaggSpec.handoff_ms``). Forms:

* ``"prompt"`` (default): r0 + r1 x prompt tokens, once, from the decode worker's engine (the aggregated
  replay's own rule, for a disaggregated front end that runs the engine's own API server: SGLang's router
  in front of SGLang servers, vLLM's proxy in front of vLLM servers).
* ``"request"``: r0 only, once. For Dynamo's front end, which applies the chat template and tokenises the
  prompt in its Rust preprocessor before routing (Dynamo architecture flow, steps "Preprocess" and
  "Route to Prefill", https://docs.nvidia.com/dynamo/v-0-9-1/design-docs/architecture-flow.md) with the
  HuggingFace ``tokenizers`` library (about a GB of text in 20 s on one server CPU, i.e. ~0.1 us per
  token, https://github.com/huggingface/tokenizers): a per-prompt-token cost of the engine's own Python API
  server (1-27 us per token as fitted) is not in that path, and the workers receive token ids.

The served disaggregated TensorRT-LLM rows cannot tell these apart themselves: the responsive training rows
all have 8,192-token prompts (docs/DISAGG.md, "Which per-request terms a disaggregated request meets").
"""

from __future__ import annotations

from typing import Any, Sequence

from llmplan.sim.engine_terms import request_ttft_fn, shift_by_request_ttft

#: the forms (module docstring)
REQUEST_TERMS = ("prompt", "request")


def request_ttft_fns(replicas: Sequence[Any], form: str) -> list:
    """Per replica, the function prompt tokens -> per-request TTFT (ms) that ``form`` charges, or None."""
    fns = [request_ttft_fn(r.cost_model) for r in replicas]
    if form == "prompt":
        return fns
    if form == "request":
        return [None if f is None else (lambda _p, c=float(f(0.0)): c) for f in fns]
    raise ValueError(f"unknown request_terms {form!r}; one of {', '.join(REQUEST_TERMS)}")


def add_request_ttft(seqs: Sequence[Any], replicas: Sequence[Any], form: str) -> None:
    """Add the per-request TTFT of ``form`` to each request's first-token and finish times (outside the
    schedule, as ``sim.serving._add_request_ttft`` does for aggregated replicas); ``replicas`` indexed by
    ``seq.replica``."""
    shift_by_request_ttft(seqs, request_ttft_fns(replicas, form))

"""Value checks on the typed config, for every command, before any work starts.

The schema fixes keys and types; this module fixes what values mean: every number must be
finite, counts and latencies must be in range, and every named option must be one that
exists. One table, so a new key gets its rule next to the others; each failure is a
ConfigError naming the key as the user types it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

from llmplan.errors import ConfigError, suggest
from llmplan.optimizer.planner import MIN_VERIFY_REQUESTS, SearchSpace


@dataclasses.dataclass(frozen=True)
class Rule:
    ok: Callable[[Any], bool]
    needs: str            # "> 0", "an integer >= 1", ...


POSITIVE = Rule(lambda v: v > 0, "> 0")
NON_NEGATIVE = Rule(lambda v: v >= 0, ">= 0")
AT_LEAST_1 = Rule(lambda v: v >= 1, ">= 1")
FRACTION = Rule(lambda v: 0 < v <= 1, "in (0, 1]")
HALF_OPEN_FRACTION = Rule(lambda v: 0 <= v < 1, "in [0, 1)")

#: the most requests one run generates: 1e6 synthetic requests take ~5 s to draw on one core,
#: and length statistics need far fewer (plan uses 2,000 by default)
MAX_REQUESTS = 1_000_000
#: the most replicas one `simulate` run holds: the planner's own replica limit (its default
#: search.max_replicas); the event loop's cost grows with replicas x load (64 replicas ~1 min)
MAX_REPLICAS = SearchSpace().max_replicas

#: key pattern ("*" = any mapping key, "[]" = every list element) -> rule; None values pass
RANGES: dict[str, Rule] = {
    "seed": NON_NEGATIVE,
    "workload.rate_rps": POSITIVE,
    "workload.cv": POSITIVE,
    "workload.concurrency": AT_LEAST_1,
    "workload.think_time_ms": NON_NEGATIVE,
    "workload.num_requests": Rule(lambda v: 0 <= v <= MAX_REQUESTS, f"in [0, {MAX_REQUESTS:,}]"),
    "workload.prefix_block_tokens": AT_LEAST_1,
    "workload.shared_prefix_tokens": NON_NEGATIVE,
    "workload.num_shared_prefixes": AT_LEAST_1,
    "workload.seed": NON_NEGATIVE,
    **{f"workload.{n}_tokens.{k}": r for n in ("input", "output")
       for k, r in (("mean_tokens", POSITIVE), ("min_tokens", AT_LEAST_1), ("max_tokens", AT_LEAST_1),
                    ("cv", NON_NEGATIVE), ("sigma", NON_NEGATIVE))},
    **{f"slo.{m}_p{p}_ms": POSITIVE for m in ("ttft", "tpot") for p in (50, 90, 95, 99)},
    "slo.ttft_mean_ms": POSITIVE, "slo.tpot_mean_ms": POSITIVE,
    "search.tp[]": AT_LEAST_1, "search.pp[]": AT_LEAST_1, "search.ep[]": AT_LEAST_1, "search.dp[]": AT_LEAST_1,
    "search.max_batch[]": AT_LEAST_1, "search.max_replicas": AT_LEAST_1,
    "search.max_load": FRACTION, "search.finalists": NON_NEGATIVE, "search.alternatives": NON_NEGATIVE,
    "search.confidence": Rule(lambda v: 0 < v < 1, "in (0, 1) (null = the point prediction)"),
    # the planner's own floor (optimizer.planner.check_space): fewer leave no stable p90/p99
    "search.verify_requests": Rule(lambda v: v >= MIN_VERIFY_REQUESTS, f">= {MIN_VERIFY_REQUESTS}"),
    "engine.max_num_seqs": AT_LEAST_1, "engine.max_num_batched_tokens": AT_LEAST_1, "engine.block_size": AT_LEAST_1,
    "engine.gpu_memory_utilization": FRACTION, "engine.watermark": HALF_OPEN_FRACTION,
    "engine.host_overhead_ms": NON_NEGATIVE, "engine.host_overhead_per_seq_ms": NON_NEGATIVE,
    "engine.ttft_per_request_ms": NON_NEGATIVE, "engine.ttft_per_prompt_token_ms": NON_NEGATIVE,
    "engine.eager_step_ms_per_layer": NON_NEGATIVE,
    "engine.activation_reserve_gb": NON_NEGATIVE,
    "engine.batch_wait_timeout_iters": NON_NEGATIVE, "engine.batch_wait_max_tokens_ratio": NON_NEGATIVE,
    "deployment.tp": AT_LEAST_1, "deployment.pp": AT_LEAST_1, "deployment.ep": AT_LEAST_1, "deployment.dp": AT_LEAST_1,
    "deployment.replicas": Rule(lambda v: 1 <= v <= MAX_REPLICAS, f"in [1, {MAX_REPLICAS}]"),
    **{f"deployment.{pool}.{k}": AT_LEAST_1 for pool in ("prefill", "decode")
       for k in ("tp", "pp", "ep", "max_num_seqs", "max_num_batched_tokens")},
    **{f"deployment.{pool}.workers": Rule(lambda v: 1 <= v <= MAX_REPLICAS, f"in [1, {MAX_REPLICAS}]")
       for pool in ("prefill", "decode")},
    "deployment.kv_transfer.latency_us": NON_NEGATIVE,
    "deployment.kv_transfer.handoff_ms": NON_NEGATIVE,
    "gpu.max_gpus.*": NON_NEGATIVE, "fleet.gpus.*": AT_LEAST_1, "gpu.usd_per_hour.*": POSITIVE,
    "gpu.spec_overrides.*.*": POSITIVE,
    "whatif.slo_scale": POSITIVE, "whatif.rate_scale": POSITIVE, "whatif.price_scale.*": POSITIVE,
    "whatif.gpu_scale.*.*": POSITIVE,
    "whatif.curve.scales[]": POSITIVE,
}

#: keys whose values, or whose mapping keys (".*"), name catalog GPUs
GPU_NAMES = ("gpu.candidates", "deployment.gpu", "deployment.prefill.gpu", "deployment.decode.gpu", "whatif.add_gpus")
GPU_KEYED = ("gpu.max_gpus", "gpu.usd_per_hour", "gpu.spec_overrides", "gpu.topology", "whatif.gpu_scale",
             "whatif.price_scale", "fleet.gpus")

#: lists that must not be empty
NON_EMPTY = ("search.tp", "search.pp", "search.ep", "search.precision", "search.max_batch", "gpu.candidates")

KV_CACHE_DTYPES = ("auto", "bf16", "fp8")

#: engines the simulator models (conf/engine/*.yaml: vllm_v0 is vLLM with name vllm)
ENGINES = ("vllm", "sglang", "trtllm")


def _choices() -> dict[str, tuple[str, ...]]:
    """Named options -> what exists (imported lazily: the simulator's own tables)."""
    from llmplan.sim.router import ROUTERS
    from llmplan.sim.disaggregated import FIRST_TOKEN_AT
    from llmplan.sim.ep_comm import MOE_ALL2ALL
    from llmplan.sim.kv_transfer import PLACEMENTS
    from llmplan.sim.workload import ARRIVALS, LENGTH_KINDS, TRACE_FORMATS

    return {
        "workload.arrival": ARRIVALS, "workload.trace_format": TRACE_FORMATS,
        "workload.input_tokens.kind": LENGTH_KINDS, "workload.output_tokens.kind": LENGTH_KINDS,
        "search.kv_cache_dtype": KV_CACHE_DTYPES, "deployment.kv_cache_dtype": KV_CACHE_DTYPES,
        "deployment.router": tuple(ROUTERS), "output.requests_format": ("csv", "parquet"),
        "deployment.mode": ("aggregated", "disagg"), "deployment.kv_transfer.placement": tuple(PLACEMENTS),
        "deployment.first_token_at": FIRST_TOKEN_AT, "engine.moe_all2all": MOE_ALL2ALL,
        # the engines modelled (sim/kv_budget.py FRACTION_FIELDS; another name fell back to vLLM's
        # memory rule without a word) and the measured kernel sets that calibrate them
        "engine.name": ENGINES, "engine.kernel_backend": ENGINES,
    }


def walk(node: Any, key: str = "", pattern: str = "") -> Iterator[tuple[str, str, Any]]:
    """(key as typed, rule pattern, value) for every leaf of a config tree."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            sub = f"{key}.{f.name}" if key else f.name
            yield from walk(getattr(node, f.name), sub, f"{pattern}.{f.name}" if pattern else f.name)
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{key}.{k}", f"{pattern}.*")
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from walk(v, key, f"{pattern}[]")
    else:
        yield key, pattern, node


def _node(app: Any, key: str) -> Any:
    for part in key.split("."):
        app = getattr(app, part)
    return app


def _check_gpu(name: str, key: str) -> None:
    from llmplan.errors import UserError
    from llmplan.hardware_catalog.loader import get_gpu

    try:
        get_gpu(name)
    except UserError as exc:  # the catalog names its own key (`gpu`); name the one the user typed
        raise ConfigError(str(exc), key=key, fix=exc.fix) from None


def check_gpu_names(app: Any) -> None:
    for key in GPU_NAMES:
        value = _node(app, key)
        for name in [value] if isinstance(value, str) else value or []:
            _check_gpu(str(name), key)
    for key in GPU_KEYED:
        for name in _node(app, key):
            _check_gpu(str(name), f"{key}.{name}")


def check_values(app: Any) -> None:
    """ConfigError for the first value out of range, not finite, or naming nothing that exists."""
    check_gpu_names(app)
    for key in NON_EMPTY:
        head, _, leaf = key.partition(".")
        if not getattr(getattr(app, head), leaf):
            raise ConfigError("must not be empty", key=key, fix=f"list at least one value, e.g. {key}=[...]")
    check_node(app)
    check_arrival_keys(app.workload)
    check_model_names(app)


def check_model_names(app: Any) -> None:
    """A model named outside `model=` (the draft of speculative decoding) is checked under its own
    key: the catalog's error names `model`, which the user did not type."""
    from llmplan.errors import UserError
    from llmplan.model_catalog.loader import load_model

    name = getattr(getattr(app, "speculative", None), "draft_model", None)
    if name:
        try:
            load_model(str(name))
        except UserError as exc:
            raise ConfigError(str(exc), key="speculative.draft_model", fix=exc.fix) from None


#: workload keys that only one family of arrival processes reads, with the value that means
#: "not set" (the WorkloadSpec default): another value under another arrival would be ignored
_ARRIVAL_ONLY = (("concurrency", 16, ("closed_loop",), "workload=closed_loop"),
                 ("think_time_ms", 0.0, ("closed_loop",), "workload=closed_loop"),
                 ("cv", 1.0, ("gamma",), "workload.arrival=gamma (or workload=bursty_chat)"))


def check_arrival_keys(wl: Any, key: str = "workload") -> None:
    """A workload key the chosen arrival process never reads is refused, not silently dropped
    (workload.concurrency=64 on Poisson arrivals would plan 20 req/s, not 64 users)."""
    for name, unset, arrivals, fix in _ARRIVAL_ONLY:
        value = getattr(wl, name)
        if wl.arrival not in arrivals and value != unset:
            raise ConfigError(f"{name}={value:g} applies to {' / '.join(arrivals)} arrivals only; "
                              f"arrival={wl.arrival} would ignore it", key=f"{key}.{name}",
                              fix=f"use {fix}, or drop {key}.{name}")
    if wl.arrival == "closed_loop" and wl.rate_rps is not None:
        raise ConfigError(f"a closed loop of {wl.concurrency} clients sets its own rate; rate_rps={wl.rate_rps:g} "
                          "would be ignored", key=f"{key}.rate_rps",
                          fix=f"drop {key}.rate_rps (set {key}.concurrency), or use an open-loop workload (workload=chat)")


def check_node(node: Any, key: str = "", pattern: str = "") -> None:
    """check_values' range, finiteness and choice checks for a config tree, or for a subtree
    typed under ``key`` and ruled as ``pattern`` (a ``colocate.models`` entry's merged
    workload / slo: key="colocate.models[0].workload", pattern="workload")."""
    choices = _choices()
    for key, pattern, value in walk(node, key, pattern):
        if value is None or isinstance(value, (bool, str)):
            if isinstance(value, str) and pattern in choices and value not in choices[pattern]:
                raise ConfigError(f"unknown value '{value}'; {suggest(value, choices[pattern])}", key=key,
                                  fix="one of: " + ", ".join(choices[pattern]))
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"must be a finite number, got {value}", key=key,
                              fix="give a number" + (" or null (no target)" if pattern.startswith("slo.") else ""))
        rule = RANGES.get(pattern)
        if rule is not None and isinstance(value, (int, float)) and not rule.ok(value):
            shown = value if isinstance(value, int) else f"{value:g}"  # 2000000, not 2e+06
            raise ConfigError(f"must be {rule.needs}, got {shown}", key=key, fix=f"give {key} a value {rule.needs}")

"""Workloads: what requests arrive, when, and how long they are.

:class:`WorkloadSpec` is the configuration schema (also registered as a Hydra structured
config, so its fields use only OmegaConf-compatible types). :func:`generate_workload`
turns a spec into a :class:`Workload`: a list of :class:`Request` plus how they arrive
(open loop at given times, or closed loop with N clients).

Randomness: one ``numpy.random.Generator`` is passed in and split into independent
streams for arrivals, lengths and prefixes, so changing the rate keeps the lengths
(common random numbers) and the arrival pattern only stretches.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np

from llmplan.errors import UserError, suggest
from llmplan.sim.requests import DATA_DIR, SYNTHETIC_PREFIX_BLOCK_TOKENS, Request, Workload, resolve_data_path
from llmplan.sim.traces import check_text_file, read_trace


ARRIVALS = ("poisson", "gamma", "closed_loop", "trace", "offline")
LENGTH_KINDS = ("fixed", "uniform", "lognormal", "empirical")
TRACE_FORMATS = ("auto", "azure", "mooncake", "csv", "jsonl")



@dataclass
class LengthSpec:
    """A token-length distribution. ``None`` fields are taken from the workload preset."""

    # fixed | uniform | lognormal | empirical (None: the preset's)
    kind: Optional[str] = None
    # mean length (fixed: the length; lognormal: mean before clipping), tokens
    mean_tokens: Optional[float] = None
    # smallest length drawn (uniform lower bound; clip for the others), tokens
    min_tokens: Optional[int] = None
    # largest length drawn (uniform upper bound; clip for the others), tokens
    max_tokens: Optional[int] = None
    # lognormal coefficient of variation (std / mean); sigma = sqrt(ln(1 + cv^2))
    cv: Optional[float] = None
    # lognormal sigma of the underlying normal; overrides cv when set
    sigma: Optional[float] = None
    # empirical: a CSV/text file of observed lengths (relative paths: cwd, then sim/data/)
    path: Optional[str] = None
    # empirical: column to read when the file has several (default: the only/first numeric)
    column: Optional[str] = None


@dataclass
class WorkloadSpec:
    """How requests arrive and how long they are. Documented in docs/SIMULATOR.md."""

    # named length preset: chat | summarization | code | None (then lengths must be complete)
    preset: Optional[str] = "chat"
    # arrival process: poisson | gamma | closed_loop | trace | offline (all requests queued at
    # time 0, throughput over the whole run; see sim/offline.py)
    arrival: str = "poisson"
    # open-loop mean arrival rate, requests/s (None: the simulator picks ~80% of capacity;
    # for traces: rescale the trace's timestamps to this mean rate, None keeps them)
    rate_rps: Optional[float] = None
    # gamma arrivals: coefficient of variation of inter-arrival times (1 = Poisson, >1 bursty)
    cv: float = 1.0
    # closed_loop: number of clients, each sends its next request when the last one finishes
    concurrency: int = 16
    # closed_loop: pause between a client's response and its next request, ms
    think_time_ms: float = 0.0
    # requests to generate (traces: the first num_requests rows; 0 = all rows of a trace)
    num_requests: int = 2000
    # prompt length distribution
    input_tokens: LengthSpec = field(default_factory=LengthSpec)
    # generated length distribution (the request stops after exactly this many tokens)
    output_tokens: LengthSpec = field(default_factory=LengthSpec)
    # arrival == trace: file to replay (relative paths: cwd, then sim/data/)
    trace_path: Optional[str] = None
    # trace layout: auto | azure | mooncake | csv | jsonl (see sim/traces.py)
    trace_format: str = "auto"
    # tokens per prefix hash id (None: 512 for mooncake traces, 16 for other traces, 64 synthetic)
    prefix_block_tokens: Optional[int] = None
    # synthetic prefix sharing: leading tokens of each prompt that are a shared system prompt
    shared_prefix_tokens: int = 0
    # synthetic prefix sharing: number of distinct system prompts (picked uniformly per request)
    num_shared_prefixes: int = 1
    # random seed of the workload (arrivals, lengths, prefix choice)
    seed: int = 0
    # simulate (open loop): measure a steady-state window (warm-up and drain excluded) and
    # lengthen the run as the output length and the load need (sim/steady_state.py);
    # false: exactly num_requests, the first and last 5% excluded
    steady_state: bool = True
    # offline: use the engine's own offline batch limits (trtllm-bench / vLLM LLM class /
    # SGLang defaults, sim/offline.py) instead of engine.max_num_seqs and max_num_batched_tokens
    offline_engine_limits: bool = True


# --------------------------------------------------------------------------- presets


@lru_cache(maxsize=1)
def presets() -> dict[str, dict]:
    """The named presets from ``sim/data/workload_presets.json`` (with their sources)."""
    raw = json.loads((DATA_DIR / "workload_presets.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


#: fields that define a length distribution's shape; the preset's caps (min/max_tokens)
#: only bound the preset's own distribution, never one the user changed
_SHAPE_FIELDS = ("kind", "mean_tokens", "cv", "sigma", "path", "column")


def resolve_lengths(spec: WorkloadSpec) -> tuple[LengthSpec, LengthSpec]:
    """Input and output length specs with the preset filled in under the explicit fields.

    The preset's ``min_tokens``/``max_tokens`` are part of the preset's distribution: they
    apply only while the user keeps that distribution. When the user sets any shape field
    (kind, mean_tokens, cv, sigma, path, column), only caps the user set bound the draws,
    so ``kind=fixed mean_tokens=16000`` means 16,000 tokens, not the preset's cap.
    """
    out = []
    for name in ("input_tokens", "output_tokens"):
        own: LengthSpec = getattr(spec, name)
        if spec.preset is not None:
            table = presets()
            if spec.preset not in table:
                raise UserError(f"unknown workload preset '{spec.preset}'", key="workload.preset",
                                fix=suggest(spec.preset, table))
            merged = LengthSpec(**table[spec.preset][name])
            if any(getattr(own, f) is not None for f in _SHAPE_FIELDS):
                merged = replace(merged, min_tokens=None, max_tokens=None)
            for f in LengthSpec.__dataclass_fields__:
                v = getattr(own, f)
                if v is not None:
                    merged = replace(merged, **{f: v})
            own = merged
        out.append(own)
    return out[0], out[1]


# --------------------------------------------------------------------------- validation


def _check(cond: bool, msg: str, key: str, fix: str | None = None) -> None:
    if not cond:
        raise UserError(msg, key=key, fix=fix)


def validate_spec(spec: WorkloadSpec) -> None:
    """Raise :class:`UserError` naming the offending field for any invalid value."""
    _check(spec.arrival in ARRIVALS, f"unknown arrival process '{spec.arrival}'", "workload.arrival",
           suggest(spec.arrival, ARRIVALS))
    _check(spec.rate_rps is None or (math.isfinite(spec.rate_rps) and spec.rate_rps > 0),
           f"arrival rate must be positive, got {spec.rate_rps}", "workload.rate_rps",
           "give requests per second > 0, or null to pick ~80% of capacity")
    _check(spec.cv > 0 and math.isfinite(spec.cv), f"gamma cv must be positive, got {spec.cv}", "workload.cv")
    _check(spec.num_requests >= 0, f"num_requests must be >= 0, got {spec.num_requests}",
           "workload.num_requests")
    _check(spec.num_requests > 0 or spec.arrival != "offline", "an offline run needs at least one request, got 0",
           "workload.num_requests", "set workload.num_requests to the number of requests queued at time 0")
    _check(spec.num_requests > 0 or spec.arrival == "trace", "num_requests must be positive",
           "workload.num_requests", "give workload.num_requests >= 1 (0 = every row of a trace, arrival=trace only)")
    _check(spec.arrival != "offline" or spec.rate_rps is None,
           f"an offline run queues every request at time 0; rate_rps={spec.rate_rps} would be ignored",
           "workload.rate_rps", "set workload.rate_rps=null, or use workload.arrival=poisson for a request rate")
    if spec.arrival == "closed_loop":
        _check(spec.concurrency >= 1, f"closed-loop concurrency must be >= 1, got {spec.concurrency}",
               "workload.concurrency")
        _check(spec.think_time_ms >= 0, "think time must be >= 0", "workload.think_time_ms")
    if spec.arrival == "trace":
        _check(spec.trace_path is not None, "arrival=trace needs a trace file", "workload.trace_path")
    _check(spec.trace_format in TRACE_FORMATS, f"unknown trace format '{spec.trace_format}'",
           "workload.trace_format", suggest(spec.trace_format, TRACE_FORMATS))
    _check(spec.prefix_block_tokens is None or spec.prefix_block_tokens >= 1,
           "prefix_block_tokens must be >= 1", "workload.prefix_block_tokens")
    _check(spec.shared_prefix_tokens >= 0, "shared_prefix_tokens must be >= 0", "workload.shared_prefix_tokens")
    _check(spec.num_shared_prefixes >= 1, "num_shared_prefixes must be >= 1", "workload.num_shared_prefixes")
    if spec.arrival != "trace":
        for name, ls in zip(("input_tokens", "output_tokens"), resolve_lengths(spec)):
            _validate_length(ls, f"workload.{name}")


def _validate_length(ls: LengthSpec, key: str) -> None:
    _check(ls.kind is not None, "length distribution has no kind (and no preset)", f"{key}.kind",
           "set workload.preset or give kind: fixed|uniform|lognormal|empirical")
    _check(ls.kind in LENGTH_KINDS, f"unknown length distribution '{ls.kind}'", f"{key}.kind",
           suggest(str(ls.kind), LENGTH_KINDS))
    if ls.kind in ("fixed", "lognormal"):
        _check(ls.mean_tokens is not None and ls.mean_tokens >= 1,
               f"mean_tokens must be >= 1, got {ls.mean_tokens}", f"{key}.mean_tokens")
    if ls.kind == "lognormal":
        _check(ls.sigma is not None or ls.cv is not None, "lognormal needs cv or sigma", f"{key}.cv")
        _check((ls.sigma or 0) >= 0 and (ls.cv or 0) >= 0, "cv/sigma must be >= 0", f"{key}.cv")
    if ls.kind == "uniform":
        _check(ls.min_tokens is not None and ls.max_tokens is not None, "uniform needs min_tokens and max_tokens",
               f"{key}.min_tokens")
    if ls.min_tokens is not None:
        _check(ls.min_tokens >= 1, f"min_tokens must be >= 1, got {ls.min_tokens}", f"{key}.min_tokens")
    if ls.min_tokens is not None and ls.max_tokens is not None:
        _check(ls.max_tokens >= ls.min_tokens, f"max_tokens {ls.max_tokens} < min_tokens {ls.min_tokens}",
               f"{key}.max_tokens", f"give {key}.max_tokens >= {key}.min_tokens")
    if ls.kind == "fixed":  # a cap below a fixed length would silently change it
        _check(ls.max_tokens is None or ls.mean_tokens <= ls.max_tokens,
               f"fixed length {ls.mean_tokens:g} is above max_tokens {ls.max_tokens}", f"{key}.max_tokens",
               f"raise {key}.max_tokens or lower {key}.mean_tokens")
        _check(ls.min_tokens is None or ls.mean_tokens >= ls.min_tokens,
               f"fixed length {ls.mean_tokens:g} is below min_tokens {ls.min_tokens}", f"{key}.min_tokens",
               f"lower {key}.min_tokens or raise {key}.mean_tokens")
    if ls.kind == "empirical":
        _check(ls.path is not None, "empirical lengths need a file", f"{key}.path")


# --------------------------------------------------------------------------- sampling


def sample_lengths(ls: LengthSpec, n: int, rng: np.random.Generator, key: str = "lengths") -> np.ndarray:
    """``n`` integer lengths >= 1 from a (resolved) :class:`LengthSpec`."""
    lo = ls.min_tokens if ls.min_tokens is not None else 1
    hi = ls.max_tokens if ls.max_tokens is not None else np.iinfo(np.int64).max // 4
    if ls.kind == "fixed":
        x = np.full(n, float(ls.mean_tokens))
    elif ls.kind == "uniform":
        x = rng.integers(int(ls.min_tokens), int(ls.max_tokens) + 1, size=n).astype(float)
    elif ls.kind == "lognormal":
        sigma = ls.sigma if ls.sigma is not None else math.sqrt(math.log1p(float(ls.cv) ** 2))
        mu = math.log(float(ls.mean_tokens)) - sigma * sigma / 2.0
        x = rng.lognormal(mu, sigma, size=n)
    elif ls.kind == "empirical":
        pool = _read_empirical(str(ls.path), ls.column, key)
        x = pool[rng.integers(0, len(pool), size=n)].astype(float)
    else:  # validated earlier
        raise UserError(f"unknown length distribution '{ls.kind}'", key=f"{key}.kind")
    return np.clip(np.rint(x), max(1, lo), hi).astype(np.int64)


def _read_empirical(path: str, column: str | None, key: str) -> np.ndarray:
    import pandas as pd

    p = resolve_data_path(path, f"{key}.path")
    check_text_file(p, f"{key}.path")
    try:
        df = pd.read_csv(p, sep=r"[,;\t]", engine="python", header=None, dtype=str)
        header = pd.to_numeric(df.iloc[0], errors="coerce").isna().any()  # a non-number in row 1
        df = pd.read_csv(p, sep=r"[,;\t]", engine="python", header=0 if header else None)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
        raise UserError(f"cannot read lengths from {p}: {e}", key=f"{key}.path") from e
    if column is not None:
        if column not in map(str, df.columns):
            raise UserError(f"column '{column}' not in {p}", key=f"{key}.column",
                            fix=suggest(column, map(str, df.columns)))
        s = df[column]
    else:
        num = [c for c in df.columns if np.issubdtype(df[c].dtype, np.number)]
        if not num:
            raise UserError(f"no numeric column in {p}", key=f"{key}.path")
        s = df[num[0]]
    vals = s.dropna().to_numpy(dtype=float)
    vals = vals[vals >= 1]
    if len(vals) == 0:
        raise UserError(f"no lengths >= 1 in {p}", key=f"{key}.path")
    return vals.astype(np.int64)


def arrival_times_ms(kind: str, n: int, rate_rps: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """Open-loop arrival times (first at 0). Poisson: exponential gaps; gamma: gaps with
    shape 1/cv^2 (same mean, cv as given). Draws are unit-rate and then scaled, so
    different rates with one seed are time-stretched copies (common random numbers)."""
    if n == 0:
        return np.zeros(0)
    if kind == "poisson":
        gaps = rng.standard_exponential(n - 1)
    elif kind == "gamma":
        k = 1.0 / (cv * cv)
        gaps = rng.standard_gamma(k, n - 1) / k
    else:
        raise ValueError(kind)
    return np.concatenate(([0.0], np.cumsum(gaps))) * (1000.0 / rate_rps)


def _synthetic_hash_ids(n: int, prompt: np.ndarray, spec: WorkloadSpec, block: int,
                        rng: np.random.Generator) -> list[tuple[int, ...]]:
    if spec.shared_prefix_tokens <= 0:
        return [()] * n
    which = rng.integers(0, spec.num_shared_prefixes, size=n)
    nblocks = np.minimum(spec.shared_prefix_tokens, prompt - 1) // block
    cache: dict[tuple[int, int], tuple[int, ...]] = {}
    out = []
    for w, nb in zip(which.tolist(), nblocks.tolist()):
        key = (w, nb)
        ids = cache.get(key)
        if ids is None:
            ids = tuple((w << 24) | b for b in range(nb))
            cache[key] = ids
        out.append(ids)
    return out


def generate_workload(spec: WorkloadSpec, rng: np.random.Generator) -> Workload:
    """Requests for ``spec``. ``rate_rps`` must be set for poisson/gamma (the simulator
    fills it in when None). Raises :class:`UserError` on invalid specs or traces."""
    validate_spec(spec)
    r_arrival, r_len, r_prefix = rng.spawn(3)
    if spec.arrival == "trace":
        return read_trace(spec.trace_path, spec.trace_format, num_requests=spec.num_requests,
                          rate_rps=spec.rate_rps, prefix_block_tokens=spec.prefix_block_tokens)
    n = spec.num_requests
    ls_in, ls_out = resolve_lengths(spec)
    prompt = sample_lengths(ls_in, n, r_len, "workload.input_tokens")
    output = sample_lengths(ls_out, n, r_len, "workload.output_tokens")
    block = spec.prefix_block_tokens or SYNTHETIC_PREFIX_BLOCK_TOKENS
    hashes = _synthetic_hash_ids(n, prompt, spec, block, r_prefix)
    closed = spec.arrival == "closed_loop"
    if closed or spec.arrival == "offline":
        arrivals = np.zeros(n)
    else:
        if spec.rate_rps is None:
            raise UserError("open-loop arrivals need rate_rps", key="workload.rate_rps",
                            fix="set a rate, or call sim.serving.simulate_serving which picks one")
        arrivals = arrival_times_ms(spec.arrival, n, spec.rate_rps, spec.cv, r_arrival)
    reqs = [Request(a, p, o, h) for a, p, o, h in zip(arrivals.tolist(), prompt.tolist(), output.tolist(), hashes)]
    return Workload(reqs, prefix_block_tokens=block,
                    closed_loop_concurrency=spec.concurrency if closed else None,
                    think_time_ms=spec.think_time_ms if closed else 0.0,
                    name=spec.preset or spec.arrival, offline=spec.arrival == "offline")


def mean_lengths(spec: WorkloadSpec) -> tuple[float, float]:
    """Expected (input, output) tokens of a synthetic spec, from a fixed-seed sample."""
    ls_in, ls_out = resolve_lengths(spec)
    rng = np.random.default_rng(12345)
    return (float(sample_lengths(ls_in, 20000, rng).mean()), float(sample_lengths(ls_out, 20000, rng).mean()))

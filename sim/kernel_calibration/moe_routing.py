"""Expected per-GPU routing load of a fused-MoE call under the measured tables' routing.

The MoE tables (``moe.csv.gz``) were measured by aiconfigurator's collectors
(ai-dynamo/aiconfigurator, ``collector/helper.py``: ``balanced_logits``,
``power_law_logits_v3`` / ``_generate_power_law_distribution``; used by the vLLM, SGLang and
TensorRT-LLM ``collect_moe.py``), which route synthetic tokens in one of two ways:

* ``balanced`` (skew 0): token ``i``'s ``j``-th expert is ``(i + j * stride) mod E`` with
  ``stride = ceil(E / topk)`` when ``T >= stride``, else ``(floor(i * stride / T) + j * stride)
  mod E``: every expert gets ``T * topk / E`` tokens (floor or ceil), or, for few tokens,
  ``T * topk`` distinct experts get one token each;
* ``power_law_<alpha>``: a token count per expert drawn from a power law of exponent alpha on
  ``[1, 0.8 T]`` (``[0.01, 2]`` when ``T * topk <= E``), scaled to ``T * topk`` pairs and
  rounded; the expert-parallel rank with the most pairs is moved to rank 0, the rank timed.
  The collectors average five such draws per measurement.

The rank-0 GPU (experts ``0 .. E/EP - 1``) therefore sees a number of routed (token, expert)
pairs, of distinct experts touched and of row tiles that differs from an even
``T * topk / EP`` split: for few tokens the balanced routing touches ``T * topk`` experts where
independent uniform choices touch fewer; under a power law the timed rank carries up to the
whole load of its hottest experts. :func:`routing_load` gives those expected quantities; the
kernel model's work terms (:func:`llmplan.sim.kernel_calibration.features.moe`) are built on
them. Power-law expectations are averaged over :data:`DRAWS` draws from a generator seeded by
the shape (deterministic, independent of call order).
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from typing import Any

import numpy as np

#: rows of one M tile of the grouped expert GEMM (tile work is counted in these)
TILE_M = 64
#: power-law draws averaged per shape (the collectors average 5 per measurement)
DRAWS = 32


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "little")


def _power_law(u: np.ndarray, alpha: float, xmin: float, xmax: float) -> np.ndarray:
    """Inverse CDF of the density ``x^-alpha`` on ``[xmin, xmax]`` at uniforms ``u``."""
    if abs(alpha - 1.0) < 1e-9:
        return xmin * (xmax / xmin) ** u
    a = 1.0 - alpha
    return ((xmax ** a - xmin ** a) * u + xmin ** a) ** (1.0 / a)


def _local(experts: int, ep: int) -> int:
    """Experts on rank 0: ``ceil(E / EP)`` (an uneven split gives the first ranks one more)."""
    return -(-experts // ep)


def _tiles(loads: np.ndarray) -> np.ndarray:
    return np.ceil(loads / TILE_M)


def _balanced(tokens: int, experts: int, topk: int, ep: int) -> tuple[float, float, float]:
    local = _local(experts, ep)
    stride = math.ceil(experts / topk)
    if tokens < stride:
        # few tokens: enumerate the (at most ~E + topk) routed pairs
        i = np.arange(tokens, dtype=np.int64)[:, None]
        j = np.arange(topk, dtype=np.int64)[None, :]
        e = (np.floor(i * stride / tokens).astype(np.int64) + j * stride) % experts
        # a token that lists an expert twice keeps it once (top-k over its router logits)
        e = np.unique(e + experts * i)
        n = np.bincount(e % experts, minlength=experts)[:local].astype(np.float64)
    else:
        # slot j sends tokens 0..T-1 to experts j*stride + i (mod E): expert e gets the
        # tokens i < T with i = e - j*stride (mod E)
        e = np.arange(local, dtype=np.int64)[:, None]
        j = np.arange(topk, dtype=np.int64)[None, :]
        r = (e - j * stride) % experts
        n = np.where(r < tokens, (tokens - 1 - r) // experts + 1, 0).sum(axis=1).astype(np.float64)
    return float(n.sum()), float((n > 0).sum()), float(_tiles(n).sum())


def _power(tokens: int, experts: int, topk: int, ep: int, alpha: float) -> tuple[float, float, float]:
    local = _local(experts, ep)
    pairs = tokens * topk
    rng = np.random.default_rng(_seed("moe-routing", tokens, experts, topk, ep, f"{alpha:.6g}"))
    u = rng.random((DRAWS, experts))
    if pairs > experts:
        x = _power_law(u, alpha, 1.0, tokens * 0.8)
    else:
        x = _power_law(u, alpha, 0.01, 2.0)
    n = np.round(x / x.sum(axis=1, keepdims=True) * pairs)
    # the collector then moves the rounding difference: a missing pair each to the largest
    # experts (in order, cycling), a surplus pair off the largest (its smallest are empty)
    delta = pairs - n.sum(axis=1)
    rows = np.arange(DRAWS)
    pos = np.maximum(delta, 0).astype(np.int64)
    n += (pos // experts)[:, None]
    extra = pos % experts
    k = int(extra.max())
    if k > 0:
        # the k largest experts of each draw, largest first (the collector sorts the rounded
        # counts; ties between equal counts go to the larger draw)
        top = np.argpartition(-x, k - 1, axis=1)[:, :k] if k < experts else np.tile(np.arange(experts), (DRAWS, 1))
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(x, top, axis=1), axis=1, kind="stable"), axis=1)
        n[rows[:, None], top] += np.arange(k)[None, :] < extra[:, None]
    n[rows, np.argmax(n, axis=1)] += np.minimum(delta, 0)
    # a token has each expert at most once: no expert holds more than every token
    n = np.minimum(n, tokens)
    if ep * local > experts:       # ranks of an uneven split: the last ones hold fewer experts
        n = np.concatenate([n, np.zeros((DRAWS, ep * local - experts))], axis=1)
    g = n.reshape(DRAWS, ep, local)
    busiest = np.argmax(g.sum(axis=2), axis=1)
    rank0 = g[np.arange(DRAWS), busiest]
    return (float(rank0.sum(axis=1).mean()), float((rank0 > 0).sum(axis=1).mean()),
            float(_tiles(rank0).sum(axis=1).mean()))


#: token counts up to this are evaluated exactly; above it, on a grid of 32 steps per octave
#: (every token count of the measured tables lies on it) with linear interpolation between
#: grid points, so a simulation's many distinct batch sizes cost a bounded number of evaluations
EXACT_TOKENS = 256
STEPS_PER_OCTAVE = 32


@lru_cache(maxsize=1 << 16)
def routing_load(tokens: int, experts: int, topk: int, ep: int, skew: float) -> tuple[float, float, float]:
    """(routed pairs, distinct experts touched, M tiles of ``TILE_M`` rows) on the timed rank
    (rank 0 of ``ep``; the busiest one under a power law) for ``tokens`` tokens routed to
    ``topk`` of ``experts`` experts; ``skew`` 0 is the balanced routing, else the power-law
    exponent. Each at least 1 (a call runs at least one expert tile)."""
    tokens = max(int(tokens), 1)
    if tokens <= EXACT_TOKENS:
        return _routing_exact(tokens, experts, topk, ep, skew)
    step = 2 ** (tokens.bit_length() - 1) // STEPS_PER_OCTAVE
    lo = tokens - tokens % step
    a = _routing_exact(lo, experts, topk, ep, skew)
    if lo == tokens:
        return a
    b = _routing_exact(lo + step, experts, topk, ep, skew)
    w = (tokens - lo) / step
    return tuple(float(u + w * (v - u)) for u, v in zip(a, b))     # type: ignore[return-value]


@lru_cache(maxsize=1 << 16)
def _routing_exact(tokens: int, experts: int, topk: int, ep: int, skew: float) -> tuple[float, float, float]:
    experts, topk, ep = max(int(experts), 1), max(int(topk), 1), max(int(ep), 1)
    topk = min(topk, experts)
    if skew > 0:
        a, t, n = _power(tokens, experts, topk, ep, float(skew))
    else:
        a, t, n = _balanced(tokens, experts, topk, ep)
    return max(a, 1.0), max(t, 1.0), max(n, 1.0)


def routing_load_arrays(tokens: Any, experts: Any, topk: Any, ep: Any, skew: Any
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`routing_load` for every row of equal-length arrays (each distinct shape once)."""
    cols = [np.asarray(v, dtype=np.float64).ravel() for v in (tokens, experts, topk, ep, skew)]
    n = max(len(c) for c in cols)
    cols = [np.broadcast_to(c, (n,)) for c in cols]
    keys = np.column_stack(cols)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    vals = np.array([routing_load(int(t), int(e), int(k), int(p), float(s)) for t, e, k, p, s in uniq])
    vals = vals.reshape(len(uniq), 3)[np.asarray(inv).ravel()]
    return vals[:, 0], vals[:, 1], vals[:, 2]


# ---------------------------------------------------------------------------------------------
# SGLang Triton collector: remote slots of the timed rank's tokens computed on local expert 0
# ---------------------------------------------------------------------------------------------
def _balanced_rank0_tokens(tokens: int, experts: int, topk: int, ep: int) -> float:
    """Tokens of the balanced routing with at least one of their ``topk`` experts on rank 0."""
    local = _local(experts, ep)
    stride = math.ceil(experts / topk)
    j = np.arange(topk, dtype=np.int64)[None, :]
    if tokens < stride:
        i = np.arange(tokens, dtype=np.int64)[:, None]
        e = (np.floor(i * stride / tokens).astype(np.int64) + j * stride) % experts
        return float((e < local).any(axis=1).sum())
    # token i's experts depend on i mod E only
    i = np.arange(experts, dtype=np.int64)[:, None]
    hit = ((i + j * stride) % experts < local).any(axis=1)
    return float((tokens // experts) * hit.sum() + hit[: tokens % experts].sum())


@lru_cache(maxsize=1 << 16)
def collector_clamped_pairs(tokens: int, experts: int, topk: int, ep: int, skew: float) -> float:
    """Routed slots that aiconfigurator's SGLang Triton MoE collector computes on local expert 0
    besides the rank-0 pairs of :func:`routing_load`.

    With expert parallelism the collector (ai-dynamo/aiconfigurator ``collector/sglang/collect_moe.py``,
    commit e23be5a79 "upgrade the SGLang collector to 0.5.14": ``build_rank0_workloads`` ->
    ``helper.build_rank0_local_workload``, then ``topk_ids.clamp(min=0)`` in ``benchmark_config``)
    keeps the tokens with at least one expert on rank 0, sets their remote experts' ids to -1 and
    weights to 0, and clamps -1 to 0 because "the Triton fused_moe kernel indexes weight tensors
    by expert ID without masking": every remote slot of those tokens runs as a (zero-weighted)
    pair of local expert 0. The timed kernel therefore does ``T0 x topk`` pairs (``T0`` tokens
    hit rank 0), not the rank-0 pairs alone. Balanced routing: ``T0`` exact; power law: the
    collector fills experts' tokens column-major in descending count order
    (``helper._assign_experts_from_counts``), so the busiest rank's experts cover nearly
    disjoint token ranges and ``T0`` is taken as ``min(T, rank-0 pairs)``."""
    tokens, experts, topk, ep = max(int(tokens), 1), max(int(experts), 1), max(int(topk), 1), max(int(ep), 1)
    topk = min(topk, experts)
    if ep <= 1:
        return 0.0
    local_pairs = routing_load(tokens, experts, topk, ep, skew)[0]
    if skew > 0:
        t0 = min(float(tokens), local_pairs)
    else:
        t0 = _balanced_rank0_tokens(tokens, experts, topk, ep)
    return max(t0 * topk - local_pairs, 0.0)


def collector_clamped_pairs_arrays(tokens: Any, experts: Any, topk: Any, ep: Any, skew: Any) -> np.ndarray:
    """:func:`collector_clamped_pairs` for every row of equal-length arrays (each distinct shape once)."""
    cols = [np.asarray(v, dtype=np.float64).ravel() for v in (tokens, experts, topk, ep, skew)]
    n = max(len(c) for c in cols)
    keys = np.column_stack([np.broadcast_to(c, (n,)) for c in cols])
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    vals = np.array([collector_clamped_pairs(int(t), int(e), int(k), int(p), float(s)) for t, e, k, p, s in uniq])
    return vals[np.asarray(inv).ravel()]

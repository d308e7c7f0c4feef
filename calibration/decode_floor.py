"""The memory-traffic floor of a served row's TPOT: below it, N sequences cannot have run.

A decode step of N running sequences reads, on the replica's GPUs together, at least the
weights every token needs (all non-expert weights; of the routed experts at least the top-k of
each MoE layer: every token picks top-k distinct experts) and the KV cache of the N sequences
(sliding-window layers capped at the window). Spread perfectly over all ``gpus`` at the
catalog's peak HBM bandwidth, that is a lower bound of one decode step, and the mean TPOT of a
closed loop whose N clients all run is at least that step (prefill chunks and host time only add;
one token per sequence and step: the served rows replay no speculative decoding, which would
divide the floor by its accepted tokens per step).

A measured mean TPOT below the floor of N sequences at the mean decode context ``isl + osl/2``
means the server did not run N sequences at once (it admitted fewer, or the outputs ended
before ``osl`` tokens: EOS without ``ignore_eos``), which the rows do not record. The replay
runs N and cannot reproduce such a row. Computed from the measured row, the model and the GPU
specification only, never from a prediction.
"""

from __future__ import annotations

from typing import Any

from llmplan.model_catalog.derived import bytes_per_element, kv_bytes_sequence, param_breakdown, weight_bytes, weight_dtypes

#: label of the regime (calibration.serving_regimes flags)
BELOW_DECODE_FLOOR = "below decode floor"


def min_weight_bytes(model: Any, precision: str) -> float:
    """Weights one decode step must read on the whole replica: everything but the routed
    experts, plus top_k / num_experts of those (the fewest one token touches per layer)."""
    total = weight_bytes(model, precision)
    if model.moe is None:
        return total
    routed = param_breakdown(model).routed_experts * bytes_per_element(weight_dtypes(model, precision)["routed_experts"])
    routed = min(routed, total)
    return total - routed + routed * model.moe.top_k / model.moe.num_experts


def decode_floor_ms(case: Any) -> float:
    """Lower bound (ms) of one decode step of ``case.concurrency`` sequences at the mean decode
    context, on the case's replica (:class:`calibration.serving_rows.ServingCase`)."""
    dep = case.dep
    ctx = case.isl + case.osl // 2
    kv = case.concurrency * kv_bytes_sequence(dep.model, dep.prec.kv_cache, ctx)
    per_gpu = (min_weight_bytes(dep.model, dep.prec.weights) + kv) / max(1, dep.par.gpus)
    return per_gpu / (dep.gpu.hbm_bw_gbps * 1e9) * 1e3


def below_decode_floor(case: Any) -> bool:
    """True when the measured mean TPOT is below :func:`decode_floor_ms`."""
    return case.measured_tpot_ms < decode_floor_ms(case)

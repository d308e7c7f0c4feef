"""Build a :class:`~sim.disaggregated.DisaggSpec` from two :class:`~sim.deployment.Deployment`
(one per pool), the way the aggregated simulator builds a replica: :func:`sim.deployment.build`
gives each pool's step model and memory plan (so each pool has its own GPU type, TP/PP/EP,
precision and engine limits), :func:`sim.deployment.replica_limits` its token budget and
max length, and :func:`sim.kv_transfer.pool_link` the link between the pools.
"""

from __future__ import annotations

from typing import Optional

from llmplan.errors import UserError
from llmplan.sim.deployment import Deployment, build, replica_limits
from llmplan.sim.disaggregated import DisaggSpec, PoolSpec, kv_link_transfer
from llmplan.sim.replica import ReplicaSpec


def pool_from_deployment(dep: Deployment, workers: int, longest_request_tokens: int,
                         calibration: Optional[str] = None) -> PoolSpec:
    """One pool of ``workers`` workers, each one replica of ``dep`` (``dep.replicas`` is ignored)."""
    step, mem = build(dep, calibration)
    engine, max_len = replica_limits(dep.engine, dep.model, longest_request_tokens)
    label = f"{dep.gpu.key} TP{dep.par.tp} PP{dep.par.pp}" + (f" EP{dep.par.ep}" if dep.par.ep > 1 else "")
    return PoolSpec(workers, ReplicaSpec(step, engine, mem.kv_capacity_tokens, max_len), tp=dep.par.tp,
                    gpus_per_worker=dep.par.gpus, label=label)


def disagg_from_deployments(prefill: Deployment, decode: Deployment, prefill_workers: int, decode_workers: int,
                            longest_request_tokens: int, calibration: Optional[str] = None,
                            placement: str = "auto", latency_us: Optional[float] = None, layerwise: bool = False,
                            first_token_at: str = "decode", handoff_ms: float = 0.0,
                            request_terms: Optional[str] = None) -> DisaggSpec:
    """xPyD deployment: ``prefill_workers`` x ``prefill``, ``decode_workers`` x ``decode``.
    Both must serve the same model with the same KV dtype (the KV moves as it is).
    ``handoff_ms``: :attr:`DisaggSpec.handoff_ms` (``sim.disagg_handoff.handoff_ms`` has the fit);
    ``request_terms``: :attr:`DisaggSpec.request_terms`, None = the form the decode engine's fitted hand-off
    was made with (``sim.disagg_handoff.request_terms``), so the hand-off and the terms stay paired."""
    for key, w in (("prefill.workers", prefill_workers), ("decode.workers", decode_workers)):
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise UserError(f"the pool needs at least one worker, got {w!r}", key=key,
                            fix="set it to an integer >= 1 (xPyD: x prefill, y decode workers)")
    if prefill.model.key != decode.model.key:
        raise UserError(f"the prefill pool serves {prefill.model.key} but the decode pool {decode.model.key}",
                        key="decode.model", fix="both pools must serve the same model")
    if prefill.prec.kv_cache != decode.prec.kv_cache:
        raise UserError(f"KV dtype {prefill.prec.kv_cache} on the prefill pool but {decode.prec.kv_cache} on the "
                        f"decode pool", key="decode.kv_cache_dtype",
                        fix="use one KV dtype on both pools (the KV is transferred as it is)")
    p = pool_from_deployment(prefill, prefill_workers, longest_request_tokens, calibration)
    d = pool_from_deployment(decode, decode_workers, longest_request_tokens, calibration)
    xfer = kv_link_transfer(prefill.model, prefill.prec.kv_cache, prefill.gpu, decode.gpu, p, d, placement,
                            latency_us, layerwise)
    if request_terms is None:
        from llmplan.sim.disagg_handoff import request_terms as fitted_request_terms
        request_terms = fitted_request_terms(decode.engine.name)
    return DisaggSpec(p, d, xfer, first_token_at, handoff_ms=handoff_ms, request_terms=request_terms)

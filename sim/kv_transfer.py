"""KV-cache transfer between a prefill pool and a decode pool (disaggregated serving).

A prefilled request's KV (full-attention K/V or MLA latent per token and layer, DSA indexer
keys, the fixed-size linear-attention state) moves from the prefill GPUs that hold it to the
decode GPUs that will attend to it. Three pieces, each a pure function of its inputs:

* :func:`request_kv_payload` -- bytes one request moves: in total, per sending prefill GPU and
  per receiving decode GPU, from ``model_catalog.derived`` (sliding-window layers capped at the
  window, as the engines' hybrid allocators keep only the window's blocks).
* :func:`pool_link` -- the link between the pools: NVLink when both pools sit in one scale-up
  domain (same GPU type, ``prefill_gpus + decode_gpus <= scaleup_domain_size``: an HGX box of 8,
  an NVL72 rack), else the scale-out network at each side's ``scaleout_bw_gbps`` per GPU. A
  figure the catalog marks unknown (``GPUSpec.unknown``) or zero is refused with a UserError
  naming it: the answer would rest on a stand-in.
* :func:`transfer_ms` / :func:`exposed_transfer_ms` -- alpha-beta time of one transfer: the
  request's TP shards move in parallel, one stream per GPU, so the time is
  ``latency + max(per_sender / send_bw, per_receiver / recv_bw)``. With ``layerwise`` the
  transfer of layer i starts when prefill has produced it (layers finish evenly over the
  prefill), each layer a transfer of its own (one latency each), and only the tail after the
  prefill is exposed (Mooncake / SGLang / vLLM NIXL layer-wise send).

Contention: :func:`fifo_completion_ms` and :class:`LinkOccupancy` -- transfers sharing one link
are served first come first served, one at a time, each occupying the link for its whole
duration (latency included: a conservative choice; engines post transfers asynchronously but
the NIC bandwidth is the shared resource).

Per-transfer latencies are :mod:`sim.links`' start-up latencies (NVLink 8 us, network 25 us).
Connector set-up costs of real engines (NIXL descriptor exchange, metadata RPCs: often a few
ms) are NOT included; pass ``latency_us`` to :func:`pool_link` to add a measured figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from llmplan.errors import UserError
from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.derived import (
    kv_bytes_per_token,
    kv_bytes_per_token_tp,
    kv_bytes_sequence,
    state_bytes_per_sequence,
)
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.links import NETWORK_ALPHA_US, NVLINK_ALPHA_US

PLACEMENTS = ("auto", "same_domain", "network")


@dataclass(frozen=True)
class PoolLink:
    """The path a request's KV takes from a prefill GPU to a decode GPU."""

    kind: str              # nvlink | xgmi | network
    send_bw_gbps: float    # per sending prefill GPU, unidirectional GB/s
    recv_bw_gbps: float    # per receiving decode GPU, unidirectional GB/s
    latency_us: float      # per transfer (alpha)
    note: str = ""


@dataclass(frozen=True)
class KVPayload:
    """Bytes one request's KV moves from the prefill pool to the decode pool."""

    total_bytes: float         # distinct bytes (one copy of the KV and state)
    per_sender_bytes: float    # sent by each prefill GPU of the request's TP group
    per_receiver_bytes: float  # received by each decode GPU of the request's TP group
    layers: int                # layers that carry KV or state (units of layer-wise pipelining)


def _check_int(value: object, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"must be an integer >= {minimum}, got {value!r}", key=key)
    return value


def request_kv_payload(model: ModelSpec, kv_dtype: str, prompt_tokens: int, prefill_tp: int = 1,
                       decode_tp: int = 1, state_dtype: str = "bf16") -> KVPayload:
    """KV bytes of a request of ``prompt_tokens`` tokens moved from a ``prefill_tp``-way TP group
    to a ``decode_tp``-way one (the attention TP of the decode rank that takes the request).

    Each decode GPU receives what it holds: its K/V heads (``ceil(kv_heads / decode_tp)``, so
    KV heads replicated beyond their count are received by every replica), the full MLA latent
    and DSA indexer keys (replicated on every rank), its share of the linear-attention state.
    The senders share that traffic evenly: ``per_sender = per_receiver * decode_tp / prefill_tp``.
    """
    _check_int(prompt_tokens, "prompt_tokens", 0)
    _check_int(prefill_tp, "prefill.tp", 1)
    _check_int(decode_tp, "decode.tp", 1)
    total_kv = kv_bytes_sequence(model, kv_dtype, prompt_tokens)
    per_token = kv_bytes_per_token(model, kv_dtype)
    # fraction of the (window-capped) KV one decode GPU holds: exact when all layers share one geometry
    shard = kv_bytes_per_token_tp(model, kv_dtype, decode_tp) / per_token if per_token else 0.0
    state_total = state_bytes_per_sequence(model, state_dtype, tp=1)
    state_rank = state_bytes_per_sequence(model, state_dtype, tp=decode_tp)
    per_receiver = total_kv * shard + state_rank
    return KVPayload(total_bytes=total_kv + state_total, per_sender_bytes=per_receiver * decode_tp / prefill_tp,
                     per_receiver_bytes=per_receiver, layers=model.num_layers)


def _scaleout(gpu: GPUSpec, side: str) -> float:
    if gpu.scaleout_bw_gbps <= 0 or "scaleout_bw_gbps" in gpu.unknown:
        raise UserError(f"the scale-out network bandwidth of {gpu.key} is unknown in the GPU catalog, so the KV "
                        f"transfer from the prefill pool to the decode pool cannot be timed",
                        key=f"{side}.gpu ({gpu.key}).scaleout_bw_gbps",
                        fix=f"give it, e.g. gpu.spec_overrides='{{{gpu.key}: {{scaleout_bw_gbps: 50}}}}' (GB/s per GPU), "
                            "or place both pools in one scale-up domain")
    return gpu.scaleout_bw_gbps


def pool_link(prefill_gpu: GPUSpec, decode_gpu: GPUSpec, prefill_gpus: int, decode_gpus: int,
              placement: str = "auto", latency_us: float | None = None) -> PoolLink:
    """Link between a prefill pool of ``prefill_gpus`` GPUs and a decode pool of ``decode_gpus``.

    ``placement``: ``auto`` uses the scale-up fabric when both pools fit in one domain of the
    same GPU type, else the network; ``same_domain`` requires the fabric (UserError if the pools
    cannot share one); ``network`` forces the scale-out network. ``latency_us`` overrides the
    per-transfer latency."""
    if placement not in PLACEMENTS:
        raise UserError(f"unknown placement {placement!r}", key="kv_transfer.placement",
                        fix="one of " + ", ".join(PLACEMENTS))
    _check_int(prefill_gpus, "prefill.gpus", 1)
    _check_int(decode_gpus, "decode.gpus", 1)
    if latency_us is not None and not (isinstance(latency_us, (int, float)) and latency_us >= 0):
        raise UserError(f"must be a number >= 0, got {latency_us!r}", key="kv_transfer.latency_us")
    same_type = prefill_gpu.key == decode_gpu.key
    fits = (same_type and prefill_gpu.scaleup_bw_gbps > 0
            and prefill_gpus + decode_gpus <= prefill_gpu.scaleup_domain_size)
    if placement == "same_domain" and not fits:
        why = ("the pools use different GPU types" if not same_type else
               f"{prefill_gpu.key} has no scale-up fabric" if prefill_gpu.scaleup_bw_gbps <= 0 else
               f"{prefill_gpus} + {decode_gpus} GPUs exceed its scale-up domain of {prefill_gpu.scaleup_domain_size}")
        fix = ("use placement=network (or auto), or smaller pools" if same_type and prefill_gpu.scaleup_bw_gbps > 0
               else "use placement=network (or auto)")  # smaller pools help only when the domain is too small
        raise UserError(f"the prefill and decode pools cannot share one scale-up domain: {why}",
                        key="kv_transfer.placement", fix=fix)
    if fits and placement != "network":
        if "scaleup_bw_gbps" in prefill_gpu.unknown:
            raise UserError(f"the scale-up bandwidth of {prefill_gpu.key} is unknown in the GPU catalog",
                            key=f"prefill.gpu ({prefill_gpu.key}).scaleup_bw_gbps",
                            fix=f"give it, e.g. gpu.spec_overrides='{{{prefill_gpu.key}: {{scaleup_bw_gbps: 400}}}}' "
                                "(GB/s per GPU), or use placement=network")
        kind = "xgmi" if prefill_gpu.vendor == "amd" else "nvlink"
        bw = prefill_gpu.scaleup_bw_gbps
        return PoolLink(kind, bw, bw, NVLINK_ALPHA_US if latency_us is None else float(latency_us),
                        f"both pools in one {prefill_gpu.key} scale-up domain of {prefill_gpu.scaleup_domain_size}")
    send, recv = _scaleout(prefill_gpu, "prefill"), _scaleout(decode_gpu, "decode")
    return PoolLink("network", send, recv, NETWORK_ALPHA_US if latency_us is None else float(latency_us),
                    f"scale-out network: {prefill_gpu.key} {send:g} GB/s -> {decode_gpu.key} {recv:g} GB/s per GPU")


def _wire_ms(payload: KVPayload, link: PoolLink) -> float:
    """Bandwidth part of a transfer: the slower of the sending and the receiving side."""
    return max(payload.per_sender_bytes / (link.send_bw_gbps * 1e9),
               payload.per_receiver_bytes / (link.recv_bw_gbps * 1e9)) * 1e3


def transfer_ms(payload: KVPayload, link: PoolLink) -> float:
    """Time of the whole request's KV as one transfer: latency plus the bandwidth term
    (0 for an empty payload)."""
    if payload.per_receiver_bytes <= 0 and payload.per_sender_bytes <= 0:
        return 0.0
    return link.latency_us / 1e3 + _wire_ms(payload, link)


def exposed_transfer_ms(payload: KVPayload, link: PoolLink, prefill_ms: float, layerwise: bool = False) -> float:
    """Time from the end of the request's prefill until its KV is complete on the decode side.

    Without ``layerwise`` the KV moves after prefill: :func:`transfer_ms`. With it, layer i
    (of ``payload.layers``) is ready at ``prefill_ms * i / layers`` and its transfer
    (one latency plus 1/layers of the bytes) starts when both it and the previous layer's
    transfer are done; the tail beyond ``prefill_ms`` is returned. That recurrence,
    ``done_i = max(done_(i-1), prefill_ms * i / n) + per_layer``, ends at
    ``max(prefill_ms + per_layer, prefill_ms / n + n * per_layer)`` (its terms are linear
    in the layer where the link last waited, so one of the two ends is the largest)."""
    if prefill_ms < 0 or not math.isfinite(prefill_ms):
        raise UserError(f"must be a finite number >= 0, got {prefill_ms!r}", key="prefill_ms")
    if not layerwise:
        return transfer_ms(payload, link)
    if payload.per_receiver_bytes <= 0 and payload.per_sender_bytes <= 0:
        return 0.0
    n = max(1, payload.layers)
    per_layer = link.latency_us / 1e3 + _wire_ms(payload, link) / n
    return max(per_layer, prefill_ms / n + n * per_layer - prefill_ms)


def fifo_completion_ms(ready_ms: Sequence[float], duration_ms: Sequence[float], link_free_ms: float = 0.0) -> list[float]:
    """Completion times of transfers sharing one link, first come first served.

    Transfer j becomes ready at ``ready_ms[j]`` and holds the link for ``duration_ms[j]``;
    ties in ready time keep input order. Returns the completion times in input order."""
    if len(ready_ms) != len(duration_ms):
        raise UserError(f"{len(ready_ms)} ready times but {len(duration_ms)} durations", key="transfers")
    for j, d in enumerate(duration_ms):
        if d < 0 or not math.isfinite(d):
            raise UserError(f"transfer {j}: duration must be a finite number >= 0, got {d!r}", key="duration_ms")
    link = LinkOccupancy(link_free_ms)
    done = [0.0] * len(ready_ms)
    for j in sorted(range(len(ready_ms)), key=lambda j: (ready_ms[j], j)):
        done[j] = link.reserve(ready_ms[j], duration_ms[j])
    return done


class LinkOccupancy:
    """One shared link for the discrete-event simulator: call :meth:`reserve` in event order
    (ready times non-decreasing gives FIFO); it returns when the transfer completes."""

    def __init__(self, free_at_ms: float = 0.0) -> None:
        self.free_at_ms = float(free_at_ms)
        self.busy_ms = 0.0  # total occupied time (utilisation = busy_ms / horizon)

    def reserve(self, ready_ms: float, duration_ms: float) -> float:
        start = max(self.free_at_ms, float(ready_ms))
        self.free_at_ms = start + float(duration_ms)
        self.busy_ms += float(duration_ms)
        return self.free_at_ms


def reserve_transfer(sender: LinkOccupancy, receiver: LinkOccupancy, ready_ms: float, duration_ms: float) -> float:
    """A transfer that needs both ends free (the prefill worker's NICs and the decode worker's):
    it starts when it is ready and both are idle, holds both for ``duration_ms`` and returns
    its completion time (xPyD: one LinkOccupancy per prefill worker and per decode worker)."""
    start = max(float(ready_ms), sender.free_at_ms, receiver.free_at_ms)
    for end in (sender, receiver):
        end.free_at_ms = start + float(duration_ms)
        end.busy_ms += float(duration_ms)
    return start + float(duration_ms)

"""KV transfer between prefill and decode pools: bytes, link choice, timing, FIFO contention.
Every expected number is computed by hand in the comment beside it."""

from __future__ import annotations

import pytest

from llmplan.errors import UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.sim.kv_transfer import (
    KVPayload,
    LinkOccupancy,
    PoolLink,
    exposed_transfer_ms,
    fifo_completion_ms,
    pool_link,
    request_kv_payload,
    reserve_transfer,
    transfer_ms,
)


@pytest.fixture(scope="module")
def llama70b():
    return load_model("llama3_1_70b")


def test_gqa_payload_sharded_over_tp(llama70b):
    # Llama-3.1-70B: 80 layers x K,V x 8 KV heads x 128 x 2 B = 327,680 B/token; 1000 tokens
    p = request_kv_payload(llama70b, "bf16", 1000, prefill_tp=4, decode_tp=4)
    assert p.total_bytes == pytest.approx(327_680_000)
    assert p.per_receiver_bytes == pytest.approx(81_920_000)   # 2 of 8 KV heads per GPU
    assert p.per_sender_bytes == pytest.approx(81_920_000)
    assert p.layers == 80
    # TP8 prefill -> TP2 decode: each decode GPU holds 4 heads (163.84 MB); 8 senders share 2 x 163.84 MB
    q = request_kv_payload(llama70b, "bf16", 1000, prefill_tp=8, decode_tp=2)
    assert q.per_receiver_bytes == pytest.approx(163_840_000)
    assert q.per_sender_bytes == pytest.approx(40_960_000)
    # fp8 KV halves everything
    assert request_kv_payload(llama70b, "fp8", 1000).total_bytes == pytest.approx(163_840_000)


def test_kv_heads_replicated_beyond_their_count(llama70b):
    # TP16 decode: 8 KV heads -> ceil(8/16) = 1 head per GPU, i.e. 1/8 of the KV per receiver
    p = request_kv_payload(llama70b, "bf16", 1000, prefill_tp=8, decode_tp=16)
    assert p.per_receiver_bytes == pytest.approx(327_680_000 / 8)
    assert p.per_sender_bytes == pytest.approx(327_680_000 / 8 * 16 / 8)


def test_mla_latent_goes_whole_to_every_decode_rank():
    ds = load_model("deepseek_v3")
    # MLA: (kv_lora 512 + rope 64) x 2 B x 61 layers = 70,272 B/token; replicated on every rank
    p = request_kv_payload(ds, "bf16", 2000, prefill_tp=8, decode_tp=8)
    assert p.total_bytes == pytest.approx(70_272 * 2000)
    assert p.per_receiver_bytes == pytest.approx(70_272 * 2000)
    assert p.per_sender_bytes == pytest.approx(70_272 * 2000)
    # attention-DP decode rank (TP1) fed by a TP8 prefill group: senders split the one copy
    q = request_kv_payload(ds, "bf16", 2000, prefill_tp=8, decode_tp=1)
    assert q.per_sender_bytes == pytest.approx(70_272 * 2000 / 8)


def test_linear_attention_state_is_moved_once_per_request():
    qwen = load_model("qwen3_5_397b_a17b")
    from llmplan.model_catalog.derived import kv_bytes_sequence, state_bytes_per_sequence
    p0 = request_kv_payload(qwen, "bf16", 0)
    assert p0.total_bytes == pytest.approx(state_bytes_per_sequence(qwen, "bf16"))
    assert p0.total_bytes > 0  # the recurrent state moves even for an empty prompt
    p = request_kv_payload(qwen, "bf16", 4096)
    assert p.total_bytes == pytest.approx(kv_bytes_sequence(qwen, "bf16", 4096) + p0.total_bytes)


def test_link_nvlink_inside_one_domain_else_network():
    h100, h200, gb200 = get_gpu("h100_sxm"), get_gpu("h200_sxm"), get_gpu("gb200")
    # 1P1D with TP4 each = 8 GPUs: one HGX H100 box, NVLink 450 GB/s, 8 us
    assert pool_link(h100, h100, 4, 4) == PoolLink("nvlink", 450.0, 450.0, 8.0, pool_link(h100, h100, 4, 4).note)
    # 8 + 8 GPUs do not fit in a box of 8: network at 50 GB/s per GPU, 25 us
    net = pool_link(h100, h100, 8, 8)
    assert (net.kind, net.send_bw_gbps, net.recv_bw_gbps, net.latency_us) == ("network", 50.0, 50.0, 25.0)
    # NVL72: 32 + 32 GPUs share one rack's NVLink at 900 GB/s
    nvl = pool_link(gb200, gb200, 32, 32)
    assert (nvl.kind, nvl.send_bw_gbps) == ("nvlink", 900.0)
    assert pool_link(gb200, gb200, 40, 40).kind == "network"
    # heterogeneous pools never share a fabric
    het = pool_link(h100, h200, 1, 1)
    assert het.kind == "network"
    assert pool_link(h100, h100, 4, 4, placement="network").kind == "network"
    assert pool_link(h100, h100, 4, 4, latency_us=2000.0).latency_us == 2000.0


def test_link_errors_name_the_missing_figure():
    h100, l40s = get_gpu("h100_sxm"), get_gpu("l40s")
    with pytest.raises(UserError) as e:
        pool_link(l40s, l40s, 1, 1)  # no fabric; its scale-out bandwidth is marked unknown
    assert "scaleout_bw_gbps" in e.value.key and "l40s" in e.value.key
    with pytest.raises(UserError) as e:
        pool_link(h100, l40s, 1, 1)
    assert e.value.key.startswith("decode.gpu")
    with pytest.raises(UserError) as e:
        pool_link(h100, h100, 8, 8, placement="same_domain")
    assert e.value.key == "kv_transfer.placement"
    with pytest.raises(UserError):
        pool_link(h100, h100, 0, 4)
    with pytest.raises(UserError):
        pool_link(h100, h100, 4, 4, placement="nvlink")
    with pytest.raises(UserError):
        request_kv_payload(load_model("llama3_1_8b"), "bf16", -1)


def test_transfer_time_alpha_beta(llama70b):
    h100 = get_gpu("h100_sxm")
    p = request_kv_payload(llama70b, "bf16", 1000, prefill_tp=4, decode_tp=4)
    # network: 81.92 MB / 50 GB/s = 1.6384 ms + 0.025 ms
    assert transfer_ms(p, pool_link(h100, h100, 8, 8)) == pytest.approx(1.6634)
    # NVLink: 81.92 MB / 450 GB/s = 0.182044 ms + 0.008 ms
    assert transfer_ms(p, pool_link(h100, h100, 4, 4)) == pytest.approx(0.190044, rel=1e-5)
    # the slower side bounds it: sender 100 MB at 10 GB/s (10 ms) vs receiver 50 MB at 50 GB/s (1 ms)
    link = PoolLink("network", 10.0, 50.0, 0.0)
    assert transfer_ms(KVPayload(200e6, 100e6, 50e6, 10), link) == pytest.approx(10.0)
    assert transfer_ms(KVPayload(0.0, 0.0, 0.0, 10), link) == 0.0


def test_layerwise_pipelining_hides_transfer_behind_prefill():
    link = PoolLink("network", 1.0, 1.0, 0.0)  # 1 GB/s, no latency
    p = KVPayload(4e6, 4e6, 4e6, 4)            # 4 MB = 4 ms, 1 ms per layer
    # prefill 8 ms: layers ready at 2,4,6,8; each takes 1 ms -> last done at 9: 1 ms exposed
    assert exposed_transfer_ms(p, link, 8.0, layerwise=True) == pytest.approx(1.0)
    # prefill 2 ms: ready .5,1,1.5,2 -> done 1.5,2.5,3.5,4.5: 2.5 ms exposed (link-bound)
    assert exposed_transfer_ms(p, link, 2.0, layerwise=True) == pytest.approx(2.5)
    # not pipelined: the whole 4 ms after prefill
    assert exposed_transfer_ms(p, link, 8.0) == pytest.approx(4.0)
    # each layer pays the latency: 4 x (0.5 + 1) after a 0-ms prefill = 6 ms
    slow = PoolLink("network", 1.0, 1.0, 500.0)
    assert exposed_transfer_ms(p, slow, 0.0, layerwise=True) == pytest.approx(6.0)
    with pytest.raises(UserError):
        exposed_transfer_ms(p, link, -1.0)


def test_fifo_contention():
    # ready 0, 1, 1.5; durations 2, 2, 1: served 0-2, 2-4, 4-5
    assert fifo_completion_ms([0.0, 1.0, 1.5], [2.0, 2.0, 1.0]) == pytest.approx([2.0, 4.0, 5.0])
    # input order is not service order: the later-ready transfer waits for nobody
    assert fifo_completion_ms([5.0, 0.0], [1.0, 3.0]) == pytest.approx([6.0, 3.0])
    # idle gap: a transfer ready after the link frees starts at its ready time
    assert fifo_completion_ms([0.0, 10.0], [1.0, 1.0]) == pytest.approx([1.0, 11.0])
    # ties keep input order; a busy link delays the first
    assert fifo_completion_ms([0.0, 0.0], [1.0, 2.0], link_free_ms=3.0) == pytest.approx([4.0, 6.0])
    link = LinkOccupancy()
    assert link.reserve(0.0, 2.0) == 2.0 and link.reserve(0.5, 1.0) == 3.0 and link.busy_ms == 3.0
    with pytest.raises(UserError):
        fifo_completion_ms([0.0], [1.0, 2.0])
    with pytest.raises(UserError):
        fifo_completion_ms([0.0], [-1.0])


def test_transfer_needs_both_ends_free():
    p0, p1, d0 = LinkOccupancy(), LinkOccupancy(), LinkOccupancy()
    # P0 -> D0 at t=0 for 2 ms; P1 -> D0 ready at 1 waits for D0 (free at 2): 2-5
    assert reserve_transfer(p0, d0, 0.0, 2.0) == 2.0
    assert reserve_transfer(p1, d0, 1.0, 3.0) == 5.0
    # P0 is free at 2 but D0 only at 5: the next P0 -> D0 transfer ready at 2.5 runs 5-6
    assert reserve_transfer(p0, d0, 2.5, 1.0) == 6.0
    assert (p0.free_at_ms, p1.free_at_ms, d0.free_at_ms) == (6.0, 5.0, 6.0)
    assert d0.busy_ms == 6.0 and p0.busy_ms == 3.0

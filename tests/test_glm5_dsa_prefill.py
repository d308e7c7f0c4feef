"""GLM-5 DSA sparse-MLA prefill (FlashMLA flash_mla_sparse_fwd): heads padded to the kernel's
multiple, every index slot walked; checked against the measured glm5_dsa_attn_module rows."""
from __future__ import annotations

import csv
import gzip
import statistics
from pathlib import Path

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernels import DSA_PREFILL_ETA_COMPUTE, RooflineKernelModel

MEASUREMENTS = Path(__file__).resolve().parents[2] / "shared" / "measurements"
MLA = (2048, 512, 64, "fp8")  # index_topk, kv_lora_rank, qk_rope_head_dim, kv dtype (GLM-5)


def _attn(gpu: str, batch: int, q: int, ctx: int, heads: int):
    topk, rank, rope, kvd = MLA
    return RooflineKernelModel(get_gpu(gpu)).dsa_attention(batch, q, ctx + q, topk, heads, rank, rope, kvd)


def test_prefill_heads_pad_to_64_on_hopper_and_128_on_blackwell():
    # a TP 8 rank of GLM-5 holds 8 of 64 heads; the kernel runs 64 (Hopper) / 128 (Blackwell)
    assert _attn("h200_sxm", 1, 4096, 0, 8).flops == pytest.approx(_attn("h200_sxm", 1, 4096, 0, 64).flops)
    assert _attn("b200", 1, 4096, 0, 8).flops == pytest.approx(2 * _attn("h200_sxm", 1, 4096, 0, 8).flops)
    assert _attn("h200_sxm", 1, 4096, 0, 128).flops == pytest.approx(2 * _attn("h200_sxm", 1, 4096, 0, 8).flops)


def test_prefill_walks_every_index_slot_whatever_the_context():
    short, long_ = _attn("h200_sxm", 1, 512, 0, 8), _attn("h200_sxm", 1, 512, 60_000, 8)
    assert short.flops == pytest.approx(long_.flops) == pytest.approx(2.0 * 512 * 64 * 2048 * (2 * 512 + 64))
    assert _attn("h200_sxm", 1, 2048, 0, 8).latency_ms == pytest.approx(
        2 * _attn("h200_sxm", 1, 1024, 0, 8).latency_ms, rel=0.02)


def test_decode_is_unchanged_by_the_prefill_padding():
    # decode keeps the per-rank heads (its kernel time sits on the measured floor at these batches)
    assert _attn("h200_sxm", 8, 1, 4096, 8).flops == pytest.approx(2.0 * 8 * 8 * 2048 * (2 * 512 + 64))


def _prefill_ratios(folder: str) -> list[float]:
    with gzip.open(MEASUREMENTS / folder / "glm5_dsa_attn_module.csv.gz", "rt") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["isl"]) >= 256 and float(r["latency_ms"]) > 0]
    return [_attn(folder, int(r["batch_size"]), int(r["isl"]), int(r["step"]), 8).latency_ms / float(r["latency_ms"])
            for r in rows]


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "glm5_dsa_attn_module.csv.gz").is_file(),
                    reason="measurements not present")
def test_prefill_matches_the_h200_table_it_was_not_set_on():
    # the table times 64 heads at tp 1, the padded work of a TP 8 rank (8 heads)
    ratios = _prefill_ratios("h200_sxm")
    assert len(ratios) > 100
    assert 0.9 < statistics.median(ratios) < 1.1
    assert statistics.quantiles(ratios, n=10)[0] > 0.75 and statistics.quantiles(ratios, n=10)[-1] < 1.35
    assert 0.5 < DSA_PREFILL_ETA_COMPUTE < 0.7

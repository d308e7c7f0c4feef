"""Sliding-window attention layers are timed with their window (gpt-oss: 128, Gemma 4: 1024,
MiMo-V2-Flash: 128, Llama 4 chunked attention: 8192): each query attends to at most ``window``
keys. The roofline counts the windowed causal pairs, the calibrated model carries the window in
its query like the tables' ``window_size`` column (their window rows answer), and the step model
passes the window for the sliding layers, prefill and decode."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.kernels import RooflineKernelModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

MEASUREMENTS = Path(os.environ.get("LLMPLAN_SHARED_MODELS",
                                   Path(__file__).resolve().parents[2] / "shared" / "models")).parent / "measurements"
GPT_OSS_TP1 = (64, 8, 64)          # heads, KV heads, head dim of gpt-oss-120b on one GPU


def _pairs_by_loop(q_len: int, ctx: int, window: int) -> int:
    """Keys seen by each new query, summed: position p (1-based) sees min(p, window)."""
    return sum(min(p, window) if window else p for p in range(ctx + 1, ctx + q_len + 1))


@pytest.mark.parametrize("q_len,ctx,window", [(1000, 0, 128), (300, 50, 128), (64, 500, 128), (2048, 0, 1024),
                                             (100, 0, 128), (128, 0, 128), (777, 0, 0)])
def test_roofline_flops_count_the_windowed_causal_pairs(q_len, ctx, window):
    k = RooflineKernelModel(get_gpu("h100_sxm"))
    heads, kv_heads, hd = GPT_OSS_TP1
    t = k.attention_prefill(2, q_len, q_len + ctx, heads, kv_heads, hd, "bf16", window)
    assert t.flops == pytest.approx(4.0 * 2 * heads * hd * _pairs_by_loop(q_len, ctx, window))


def test_roofline_window_prefill_is_faster_and_equal_within_the_window():
    k = RooflineKernelModel(get_gpu("h200_sxm"))
    args = (4, 8192, 8192, *GPT_OSS_TP1, "bf16")
    assert k.attention_prefill(*args, 128).latency_ms < 0.2 * k.attention_prefill(*args).latency_ms
    short = (4, 128, 128, *GPT_OSS_TP1, "bf16")
    assert k.attention_prefill(*short, 128) == k.attention_prefill(*short)


def test_roofline_window_decode_reads_only_the_window():
    k = RooflineKernelModel(get_gpu("h200_sxm"))
    heads, kv_heads, hd = GPT_OSS_TP1
    assert k.attention_decode(32, 6000.0, heads, kv_heads, hd, "bf16", 128) == \
        k.attention_decode(32, 128.0, heads, kv_heads, hd, "bf16")
    assert k.attention_decode(32, 100.0, heads, kv_heads, hd, "bf16", 128) == \
        k.attention_decode(32, 100.0, heads, kv_heads, hd, "bf16")


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_calibrated_window_prefill_is_faster_and_equal_within_the_window(backend):
    k = CalibratedKernelModel(get_gpu("h200_sxm"), backend)
    heads, kv_heads, hd = GPT_OSS_TP1
    full = k.attention_prefill(1, 8192, 8192, heads, kv_heads, hd, "bf16").latency_ms
    win = k.attention_prefill(1, 8192, 8192, heads, kv_heads, hd, "bf16", 128).latency_ms
    assert win < 0.5 * full
    # no query sees more than the window: the same work; the fitted window flag (the tables' window
    # kernels, measured separately) may move the time a little, never by the window's factor
    short = (1, 128, 128, heads, kv_heads, hd, "bf16")
    assert k.attention_prefill(*short, 4096).flops == k.attention_prefill(*short).flops
    assert k.attention_prefill(*short, 4096).latency_ms == pytest.approx(k.attention_prefill(*short).latency_ms, rel=0.1)


def _window_rows(gpu: str, table: str, backend: str, window: int, head_dim: int) -> list[dict]:
    import csv
    import gzip

    with gzip.open(MEASUREMENTS / gpu / f"{table}.csv.gz", "rt") as fh:
        return [r for r in csv.DictReader(fh)
                if r["backend"] == backend and r["window_size"] and int(float(r["window_size"])) == window
                and int(r["head_dim"]) == head_dim and int(r["isl" if table == "context_attention" else "step"]) >= 1024
                and r["kv_cache_dtype"] in ("bfloat16", "float16", "bf16", "fp16")]


@pytest.mark.skipif(not (MEASUREMENTS / "h200_sxm" / "context_attention.csv.gz").is_file(),
                    reason="measurements not present")
@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_calibrated_answers_the_measured_window_rows(gpu, backend):
    """The engine's own window-128 rows (gpt-oss head dim 64, prompts of 1,024+ tokens): with the
    window in the query the fitted model lands on them; timed as full attention over the clipped
    keys (the call before the window was passed) it is off by more than half."""
    import statistics

    k = CalibratedKernelModel(get_gpu(gpu), backend)
    pf = _window_rows(gpu, "context_attention", backend, 128, 64)
    assert len(pf) > 50
    with_w, without = [], []
    for r in pf:
        b, s, ctx = int(r["batch_size"]), int(r["isl"]), int(r["step"])
        shape = (int(r["num_heads"]), int(r["num_key_value_heads"]), 64, "bf16")
        ms = float(r["latency_ms"])
        with_w.append(abs(k.attention_prefill(b, s, s + ctx, *shape, 128).latency_ms / ms - 1))
        without.append(abs(k.attention_prefill(b, s, min(s + ctx, s + 128), *shape).latency_ms / ms - 1))
    assert statistics.median(with_w) < 0.10
    assert statistics.median(without) > 0.5

    dc = _window_rows(gpu, "generation_attention", backend, 128, 64)
    assert len(dc) > 50
    err = [abs(k.attention_decode(int(r["batch_size"]), float(r["step"]), int(r["num_heads"]),
                                  int(r["num_key_value_heads"]), 64, "bf16", 128).latency_ms / float(r["latency_ms"]) - 1)
           for r in dc]
    assert statistics.median(err) < 0.10


NO_HOST = EngineProfile(host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0, eager_step_ms_per_layer=0.0)


@pytest.mark.parametrize("calibration", ["spec", None])
def test_step_model_times_the_sliding_layers_with_their_window(calibration):
    m, g = load_model("gpt_oss_120b"), get_gpu("h200_sxm")
    assert m.sliding_window == 128 and m.num_sliding_layers > 0
    step, _ = build(Deployment(m, g, Parallelism(tp=2), Precision(weights="fp4"),
                               EngineProfile(name="vllm", kernel_backend="vllm", host_overhead_ms=0.0,
                                             host_overhead_per_seq_ms=0.0, eager_step_ms_per_layer=0.0)),
                    calibration=calibration, min_kv_tokens=4096)
    # (the step model buckets KV lengths to < 1%, hence rel=0.01 below)
    ops = {o.name: o for o in step.breakdown(StepShape.build([(8192, 0)], [])).ops}
    # per layer: a window-128 layer's prefill is far cheaper than a full layer's
    per_layer_full = ops["attn_prefill"].latency_ms / (m.num_layers - m.num_sliding_layers)
    per_layer_swa = ops["attn_prefill_swa"].latency_ms / m.num_sliding_layers
    assert per_layer_swa < 0.5 * per_layer_full
    k = step.kernels
    heads, (kvh, hd) = step.heads, step._swa_geom
    want = k.attention_prefill(1, 8192, 8192, heads, kvh, hd, step.prec.kv_cache, 128).latency_ms
    assert ops["attn_prefill_swa"].latency_ms == pytest.approx(want * m.num_sliding_layers, rel=0.01)
    # decode: the sliding layers ask the window kernel with the sequence's full context
    ops = {o.name: o for o in step.breakdown(StepShape.build([], [5000] * 16)).ops}
    want = k.attention_decode(16, 5000.0, heads, kvh, hd, step.prec.kv_cache, 128).latency_ms
    assert ops["attn_decode_swa"].latency_ms == pytest.approx(want * m.num_sliding_layers, rel=0.01)

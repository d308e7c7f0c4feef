"""Memory fit: weights per GPU, KV capacity from the engine's own budget, rejection with a reason."""

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.memory import kv_bytes_per_token_per_gpu, plan_memory, weights_per_gpu_bytes
from llmplan.sim.types import EngineProfile, Parallelism, Precision


def test_70b_does_not_fit_one_h100_but_fits_tp4():
    m, g = load_model("llama3_1_70b"), get_gpu("h100_sxm")
    one = plan_memory(m, g, Parallelism(1), Precision(), EngineProfile(), 8192)
    assert not one.fits and "no memory left for the KV cache" in one.reason and "weights 141.1 GB" in one.reason
    four = plan_memory(m, g, Parallelism(4), Precision(), EngineProfile(), 8192)
    assert four.fits and four.weights_gb == pytest.approx(70.6 * 2 / 4, rel=0.03)
    # KV capacity = whole blocks of the per-GPU KV budget / per-GPU KV bytes per token (8 KV heads over 4 GPUs)
    assert kv_bytes_per_token_per_gpu(m, Parallelism(4), "bf16") == 327680 / 4
    per_block = 327680 / 4 * 16
    assert four.kv_capacity_tokens == int(four.kv_gb * 1e9 // per_block) * 16


def test_fp8_halves_weights_and_h200_holds_more_kv():
    m = load_model("llama3_1_70b")
    assert weights_per_gpu_bytes(m, Parallelism(2), "fp8") < 0.55 * weights_per_gpu_bytes(m, Parallelism(2), "bf16")
    h100 = plan_memory(m, get_gpu("h100_sxm"), Parallelism(2), Precision("fp8", "fp8"), EngineProfile(), 8192)
    h200 = plan_memory(m, get_gpu("h200_sxm"), Parallelism(2), Precision("fp8", "fp8"), EngineProfile(), 8192)
    assert h100.fits and h200.kv_capacity_tokens > 2 * h100.kv_capacity_tokens


def test_kv_replicated_when_tp_exceeds_kv_heads_and_mla_latent_replicated():
    m = load_model("qwen3_235b_a22b")  # 4 KV heads
    assert kv_bytes_per_token_per_gpu(m, Parallelism(8), "bf16") == kv_bytes_per_token_per_gpu(m, Parallelism(4), "bf16")
    ds = load_model("deepseek_v3")
    assert kv_bytes_per_token_per_gpu(ds, Parallelism(8), "bf16") == (512 + 64) * 61 * 2


def test_too_few_kv_tokens_rejected_with_reason():
    m, g = load_model("llama3_1_8b"), get_gpu("l4")
    p = plan_memory(m, g, Parallelism(1), Precision(), EngineProfile(), 10_000_000)
    assert not p.fits and "KV cache holds" in p.reason


def test_memory_uses_physical_bytes_not_marketed_gb():
    """The same deployment gains exactly the 80 GiB - 80 GB difference of KV memory."""
    from dataclasses import replace

    m, g = load_model("llama3_1_70b"), get_gpu("a100_sxm")
    real = plan_memory(m, g, Parallelism(2), Precision(), EngineProfile(), 1)
    marketed = plan_memory(m, replace(g, memory_bytes=int(g.hbm_gb * 1e9)), Parallelism(2), Precision(),
                           EngineProfile(), 1)
    assert real.memory_gb == pytest.approx(85.899, abs=1e-3)
    assert real.kv_gb - marketed.kv_gb == pytest.approx(0.9 * (85.899345920 - 80.0), abs=1e-6)
    assert real.fits and not marketed.fits  # the ~7% understatement turned a working deployment away

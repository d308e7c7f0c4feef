"""MLA prefill in the MHA form where the engine runs it that way (sim.calibrated.MLA_PREFILL_MHA):
SGLang's Hopper ``mla_context`` table measures the absorbed form (head dim 576 / v 512), while
SGLang and vLLM serve a prefill without cached prefix as ordinary attention (192 / 128)."""

from __future__ import annotations

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import MLA_PREFILL_MHA, SGLANG_MHA_PREFIX_THRESHOLD, CalibratedKernelModel

DSV3 = (512, 128, 64, 128)   # kv_lora_rank, qk_nope, qk_rope, v_head_dim
MHA_HEAD_DIM = (128 + 64 + 128) // 2


def _absorbed_table(m: CalibratedKernelModel, batch: int, q: int, kv: int, heads: int) -> float:
    """The engine's (or its stand-in's) fitted ``mla_context`` figure, bypassing the mapping."""
    query = {"batch": batch, "q_len": q, "kv_len": kv, "num_heads": heads, "kv_dtype": "bf16",
             "qk_nope_dim": 128, "qk_rope_dim": 64, "v_head_dim": 128}
    return m._predict("mla_prefill", None, query, {"batch": batch, "q_len": q, "ctx": kv - q, "num_heads": heads}).latency_ms


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
def test_sglang_prefill_without_prefix_is_timed_as_mha(gpu):
    m = CalibratedKernelModel(get_gpu(gpu), "sglang")
    t = m.mla_prefill(1, 8192, 8192, 16, *DSV3, "bf16")
    mha = m.attention_prefill(1, 8192, 8192, 16, 16, MHA_HEAD_DIM, "bf16")
    assert t.latency_ms == pytest.approx(mha.latency_ms)
    # the absorbed table (about 3.4x the FLOPs) is far slower at a long prompt
    assert t.latency_ms < 0.5 * _absorbed_table(m, 1, 8192, 8192, 16)


def test_mha_form_matches_the_physical_flops_of_the_h200_tables():
    """SGLang's H200 mla_context at 16 heads x 8,192 tokens (1.99 ms measured) runs at ~590 TFLOP/s
    counted in the absorbed form; the MHA-form figure must land near TensorRT-LLM's MHA-form
    mla_context (0.63 ms measured), not near the absorbed one."""
    sgl = CalibratedKernelModel(get_gpu("h200_sxm"), "sglang")
    trt = CalibratedKernelModel(get_gpu("h200_sxm"), "trtllm")
    s = sgl.mla_prefill(1, 8192, 8192, 16, *DSV3, "bf16").latency_ms
    t = trt.mla_prefill(1, 8192, 8192, 16, *DSV3, "bf16").latency_ms
    assert 0.5 < s / t < 1.6
    assert _absorbed_table(sgl, 1, 8192, 8192, 16) / t > 2.5


def test_trtllm_keeps_its_mla_context_table():
    assert "trtllm" not in MLA_PREFILL_MHA
    m = CalibratedKernelModel(get_gpu("h200_sxm"), "trtllm")
    assert m.mla_prefill(2, 4096, 4096, 16, *DSV3, "bf16").latency_ms == pytest.approx(_absorbed_table(m, 2, 4096, 4096, 16))


def test_sglang_short_cached_prefix_uses_the_absorbed_kernel():
    m = CalibratedKernelModel(get_gpu("h200_sxm"), "sglang")
    # 1 chunk of 512 new tokens over 4,096 in KV: 3,584 prefix tokens < SGL_CHUNKED_PREFIX_CACHE_THRESHOLD
    assert not m.mla_prefill_is_mha(1, 512, 4096)
    assert m.mla_prefill(1, 512, 4096, 16, *DSV3, "bf16").latency_ms == pytest.approx(_absorbed_table(m, 1, 512, 4096, 16))
    # a long cached prefix goes back to MHA (MHA_CHUNKED_KV)
    assert m.mla_prefill_is_mha(1, 512, 512 + SGLANG_MHA_PREFIX_THRESHOLD)
    # the step model's 1% KV grid is no prefix
    assert m.mla_prefill_is_mha(1, 8192, 8200)


def test_vllm_prefill_is_always_mha():
    m = CalibratedKernelModel(get_gpu("h200_sxm"), "vllm")
    assert m.mla_prefill_is_mha(1, 512, 4096)
    t = m.mla_prefill(1, 512, 4096, 16, *DSV3, "bf16").latency_ms
    assert t == pytest.approx(m.attention_prefill(1, 512, 4096, 16, 16, MHA_HEAD_DIM, "bf16").latency_ms)

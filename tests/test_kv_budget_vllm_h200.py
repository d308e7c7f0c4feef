"""vLLM's KV budget for a deployment that runs in practice: Llama-3.1-70B with fp8 weights on
one H200 (the served vLLM rows of h200_sxm/e2e_serving.csv run it at TP 1), with the default
``gpu_memory_utilization`` 0.9 of the 140.4 GiB the device reports (sim/kv_budget.py)."""

from __future__ import annotations

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.kv_budget import GIB
from llmplan.sim.memory import plan_memory
from llmplan.calibration.serving_rows import base_engine
from llmplan.sim.types import Parallelism, Precision


def _plan(kv: str, seqs: int = 32):
    from dataclasses import replace

    engine = replace(base_engine("vllm"), max_num_seqs=seqs)
    return plan_memory(load_model("meta-llama/Llama-3.1-70B"), get_gpu("h200_sxm"), Parallelism(1, 1, 1),
                       Precision("fp8", kv), engine, 8192 + 1024)


def test_70b_fp8_fits_one_h200_with_the_vllm_rule():
    m = _plan("bf16")
    assert m.fits, m.reason
    b = m.budget
    assert b.engine == "vllm" and b.fraction == 0.9 and b.fraction_default
    assert b.budget_bytes == pytest.approx(0.9 * get_gpu("h200_sxm").memory_bytes)
    # weights: ~70.6e9 fp8 parameters + bf16 embeddings and lm_head, 65-70 GiB
    assert 65 * GIB < b.weights_bytes < 70 * GIB
    assert b.kv_bytes == pytest.approx(b.budget_bytes - b.weights_bytes - b.activation_bytes - b.cuda_graph_bytes
                                       - b.runtime_bytes)


def test_bf16_cache_holds_20_sequences_of_9216_tokens_and_fp8_twice_as_many():
    """80 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 320 KiB per token in bf16."""
    bf16, fp8 = _plan("bf16"), _plan("fp8")
    assert bf16.kv_bytes_per_token_gpu == 80 * 8 * 128 * 2 * 2
    assert fp8.kv_bytes_per_token_gpu == bf16.kv_bytes_per_token_gpu / 2
    per_seq = 8192 + 1024
    assert 19 <= bf16.kv_capacity_tokens / per_seq < 21
    assert fp8.kv_capacity_tokens == pytest.approx(2 * bf16.kv_capacity_tokens, rel=0.01)
    assert bf16.kv_capacity_tokens < 32 * per_seq <= fp8.kv_capacity_tokens

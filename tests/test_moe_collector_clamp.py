"""SGLang Triton MoE rows timed with the collector's clamped remote slots
(features.moe_clamped_pairs, moe_routing.collector_clamped_pairs): with expert parallelism
aiconfigurator's SGLang collector keeps the tokens with an expert on rank 0 and runs their remote
slots on local expert 0, so those rows carry T0 x topk pairs; queries (the engine) carry none."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration import moe_routing as R
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

GPU = GPUFeatures("h100_sxm", 989.0, 1979.0, 1979.0, 3350.0, 132, 50.0, 450.0, 64.0)


def _rank0_tokens_brute(tokens: int, experts: int, topk: int, ep: int) -> int:
    """Tokens of collector/helper.py balanced_logits routing with an expert on rank 0, token by token."""
    stride = math.ceil(experts / topk)
    local = -(-experts // ep)
    hit = 0
    for i in range(tokens):
        off = i if tokens >= stride else math.floor(i * stride / tokens)
        hit += any((off + j * stride) % experts < local for j in range(topk))
    return hit


@pytest.mark.parametrize("tokens,experts,topk,ep", [(16384, 8, 2, 2), (1000, 8, 2, 8), (300, 128, 8, 16),
                                                    (5, 128, 8, 2), (777, 60, 4, 4), (2048, 512, 22, 256)])
def test_balanced_rank0_tokens_follow_the_collectors_assignment(tokens, experts, topk, ep):
    assert R._balanced_rank0_tokens(tokens, experts, topk, ep) == _rank0_tokens_brute(tokens, experts, topk, ep)


def test_clamped_pairs_are_the_remote_slots_of_rank0_tokens():
    # Mixtral-8x7B shape, balanced: stride 4; EP2 keeps experts 0-3, every token has one of them,
    # so each token's other slot runs on expert 0: T clamped pairs besides the T local ones
    assert R.routing_load(4096, 8, 2, 2, 0.0)[0] == 4096
    assert R.collector_clamped_pairs(4096, 8, 2, 2, 0.0) == 4096
    # EP8 (one local expert): a quarter of the tokens pick it; their other slot is clamped
    assert R.collector_clamped_pairs(4096, 8, 2, 8, 0.0) == 1024 * 2 - R.routing_load(4096, 8, 2, 8, 0.0)[0]
    assert R.collector_clamped_pairs(4096, 8, 2, 1, 0.0) == 0.0
    # power law: T0 = min(T, rank-0 pairs) tokens
    local = R.routing_load(64, 8, 2, 4, 1.2)[0]
    assert R.collector_clamped_pairs(64, 8, 2, 4, 1.2) == pytest.approx(max(min(64.0, local) * 2 - local, 0.0))


def _frame(**over) -> pd.DataFrame:
    row = {"num_tokens": 4096, "hidden": 4096, "inter": 14336, "topk": 2, "num_experts": 8, "moe_tp": 1,
           "moe_ep": 2, "dtype": "bf16", "skew": 0.0, "kernel_source": "sglang_fused_moe_triton",
           "backend_version": "0.5.14", "latency_ms": 1.0}
    row.update(over)
    return pd.DataFrame([row])


@pytest.mark.parametrize("over,clamped", [({}, True), ({"moe_ep": 1}, False), ({"backend_version": "0.5.9"}, False),
                                          ({"kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts"}, False),
                                          ({"dtype": "w4a16_mxfp4"}, False),
                                          # DeepSeek-V3: timed through the framework layer (routing options)
                                          ({"hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256}, False)])
def test_only_raw_triton_rows_with_expert_parallelism_are_clamped(over, clamped):
    c = F.moe_clamped_pairs(_frame(**over))
    assert (c[0] > 0) == clamped


@pytest.mark.parametrize("form", F.MOE_FORMS)
def test_clamped_rows_carry_the_extra_work_and_queries_do_not(form):
    df = _frame()
    row = F.frame_phys("moe", df, GPU, form)
    plain = F.frame_phys("moe", df.assign(backend_version="0.5.9"), GPU, form)
    # 4096 local pairs + 4096 clamped ones: twice the FLOPs of the engine's masked call
    assert row.flops[0] == pytest.approx(2.0 * plain.flops[0])
    q = F.moe(4096.0, 4096.0, 14336.0, 2.0, 8.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 989.0, GPU, F.PY, form=form)
    assert q.flops == pytest.approx(plain.flops[0])
    assert q.t_c == pytest.approx(plain.t_c[0], rel=1e-12)


def test_unclamped_terms_are_bit_identical_to_the_former_ones():
    # clamped = 0 must leave every term as before (shipped calibrations keep their predictions)
    a = F.moe(100.0, 7168.0, 2048.0, 8.0, 256.0, 1.0, 8.0, 1.0, 1.0, 0.0, 1.01, 1979.0, GPU, F.PY)
    assign = 100.0 * 8.0 / 8.0
    local = 32.0
    touched = max(local * (1.0 - (1.0 - 1.0 / local) ** assign), 1.0)
    per = assign / touched
    assert a.q == 1.0 / (per / (math.ceil(per / 64) * 64))
    assert a.waves == math.ceil(touched * math.ceil(per / 64) * math.ceil(2048 / 128) / GPU.sm_count)


@pytest.mark.parametrize("over,clamped", [
    # aiconfigurator's 0.5.10 collector (cb4d907c7) clamped every configuration, the framework-layer
    # ones of 0.5.14 included (DeepSeek-V3), on Triton and Marlin alike
    ({"hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256}, True),
    ({"kernel_source": "sglang_marlin_moe", "dtype": "int4_wo"}, True),
    ({"moe_ep": 1}, False),
    ({"kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts"}, False)])
def test_sglang_0510_rows_are_clamped_for_every_configuration(over, clamped):
    df = _frame(backend_version="0.5.10", **over).assign(backend="sglang")
    c = F.moe_clamped_pairs(df)
    assert (c[0] > 0) == clamped
    if clamped:
        # balanced top-k: every token has an expert on rank 0 at EP 2, so all T x topk slots are issued
        assert c[0] + R.routing_load(4096, int(df["num_experts"][0]), int(df["topk"][0]), 2, 0.0)[0] \
            == pytest.approx(4096 * df["topk"][0])
        assert F.moe_masked_pairs(df).tolist() == [0.0]

"""MoE work terms on constructed shapes: experts touched under uniform routing, the weight
bytes they read, the routed (token, expert) pairs per EP rank and the 64-row tile quantisation
(sim/kernel_calibration/features.moe, form ``uniform``: the work terms calibration files fitted
before the ``routed`` form keep; tests/test_moe_routing.py covers ``routed``). Values are derived
here from the shape, independently of the code's own intermediate variables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmplan.hardware_catalog import get_gpu
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
PEAK = GPU.peak("bf16")


def _moe(tokens, hidden=2048, inter=768, topk=8, experts=128, tp=1, ep=1, wb=2.0, ops=F.PY, matrices=3.0):
    return F.moe(tokens, hidden, inter, topk, experts, tp, ep, wb, 0.0, 0.0, 0.0, PEAK, GPU, ops, matrices,
                 form=F.MOE_FORM_UNIFORM)


def _x(phys: F.Phys, name: str) -> float:
    return float(phys.x[F.FEATURES["moe"].index(name)])


def _touched(tokens, topk, experts, ep):
    local = max(experts / ep, 1.0)
    assign = tokens * topk / ep
    return max(local * (1.0 - (1.0 - 1.0 / local) ** assign), min(local, 1.0))


@pytest.mark.parametrize("tokens", [1, 4, 64, 4096])
def test_weight_bytes_are_the_touched_experts_matrices(tokens):
    hidden, inter, topk, experts = 2048, 768, 8, 128
    p = _moe(tokens, hidden, inter, topk, experts)
    touched = _touched(tokens, topk, experts, 1)
    weights = touched * 3 * hidden * inter * 2.0
    acts = tokens * topk * hidden * 4.0 + tokens * hidden * 4.0
    assert p.nbytes == pytest.approx(weights + acts, rel=1e-12)
    assert p.flops == pytest.approx(2.0 * tokens * topk * hidden * inter * 3, rel=1e-12)


def test_one_token_touches_about_topk_experts_and_many_tokens_touch_all():
    one = _moe(1)
    # 8 routed pairs over 128 experts: 128 * (1 - (127/128)^8) = 7.78 experts read
    assert 2 ** _x(one, "log_touched_frac") * 128 == pytest.approx(128 * (1 - (127 / 128) ** 8), rel=1e-9)
    assert 7.5 < 2 ** _x(one, "log_touched_frac") * 128 < 8.0
    many = _moe(16384)
    assert 2 ** _x(many, "log_touched_frac") == pytest.approx(1.0, abs=1e-12)
    # weight bytes saturate at every expert's matrices once all are touched
    assert many.nbytes - 16384 * 2048 * (8 * 4.0 + 4.0) == pytest.approx(128 * 3 * 2048 * 768 * 2.0, rel=1e-9)


def test_expert_parallelism_splits_routed_pairs_and_local_experts():
    full, ep8 = _moe(512, ep=1), _moe(512, ep=8)
    assert _x(ep8, "log_assign") == pytest.approx(math.log2(512 * 8 / 8))
    assert _x(full, "log_assign") == pytest.approx(math.log2(512 * 8))
    assert _x(ep8, "log_local_experts") == pytest.approx(math.log2(16))
    assert ep8.flops == pytest.approx(full.flops / 8, rel=1e-12)
    # more experts than ranks: never fewer than one local expert, and one is always read
    tiny = _moe(1, experts=8, ep=16)
    assert _x(tiny, "log_local_experts") == 0.0
    assert 2 ** _x(tiny, "log_touched_frac") == pytest.approx(1.0)


def test_tensor_parallel_experts_shrink_the_intermediate_width():
    tp4 = _moe(256, tp=4)
    assert _x(tp4, "log_inter_local") == pytest.approx(math.log2(768 / 4))
    assert tp4.flops == pytest.approx(_moe(256).flops / 4, rel=1e-12)


@pytest.mark.parametrize("tokens", [16, 1024, 8192])
def test_tile_quantisation_is_64_row_padding_of_tokens_per_expert(tokens):
    p = _moe(tokens)
    per = tokens * 8 / _touched(tokens, 8, 128, 1)
    assert 2 ** _x(p, "log_tok_per_expert") == pytest.approx(per, rel=1e-9)
    assert p.q == pytest.approx(math.ceil(per / 64) * 64 / per, rel=1e-9)
    assert p.q >= 1.0


def test_plain_experts_read_two_thirds_of_the_gated_weights():
    gated, plain = _moe(16384, matrices=3.0), _moe(16384, matrices=2.0)
    acts = 16384 * 2048 * (8 * 4.0 + 4.0)
    assert (plain.nbytes - acts) / (gated.nbytes - acts) == pytest.approx(2 / 3, rel=1e-12)


def test_vectorised_and_scalar_paths_agree():
    tokens = np.array([1.0, 7.0, 300.0, 9000.0])
    vec = _moe(tokens, ep=np.array([1.0, 2.0, 8.0, 32.0]), ops=F.NP)
    for i, (t, ep) in enumerate(zip(tokens, [1.0, 2.0, 8.0, 32.0])):
        one = _moe(float(t), ep=ep)
        assert vec.t_m[i] == pytest.approx(one.t_m, rel=1e-12)
        assert vec.q[i] == pytest.approx(one.q, rel=1e-12)
        assert [float(np.broadcast_to(v, tokens.shape)[i]) for v in vec.x] == pytest.approx([float(v) for v in one.x], rel=1e-12)

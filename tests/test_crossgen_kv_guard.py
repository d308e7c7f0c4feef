"""The cross-gen fp8-KV guard (crossgen_kv_guard): a member's fp8-KV MLA decode answer is
bounded by its own 16-bit-KV answer unless the member shares the target's silicon."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration import crossgen_kv_guard as KV
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.crossgen_blend import BlendGroupModel
from llmplan.sim.kernel_calibration.family_model import GroupModel, scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("b200"))
ROWS = pd.DataFrame({"batch": [1, 8, 64, 256, 8, 64], "kv_len": [512, 4096, 16384, 2048, 4096, 16384],
                     "num_heads": [128, 16, 32, 128, 16, 32], "kv_dtype": ["fp8"] * 4 + ["bf16"] * 2})


def _phys(df: pd.DataFrame) -> F.Phys:
    return F.frame_phys("mla_decode", df, GPU)


def test_bf16_kv_terms_rebuilt_from_an_fp8_query():
    got = KV.bf16_kv_phys(_phys(ROWS), GPU)
    want = _phys(ROWS.assign(kv_dtype="bf16"))
    for name in ("t_c", "t_m", "q", "ws_l2", "t_l2", "waves", "flops", "nbytes"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-9)
    np.testing.assert_allclose(F.feature_matrix(got), F.feature_matrix(want), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(KV.fp8_kv_rows(_phys(ROWS)), [True] * 4 + [False] * 2)
    # one shape, with other latent/rope widths than DeepSeek-V3's
    q = {"batch": 8, "kv_len": 4096, "num_heads": 16, "kv_dtype": "fp8", "kv_lora_rank": 256, "qk_rope_dim": 32}
    one = KV.bf16_kv_phys(scalar_phys("mla_decode", GPU, "all", q), GPU)
    ref = scalar_phys("mla_decode", GPU, "all", {**q, "kv_dtype": "bf16"})
    assert one.nbytes == pytest.approx(ref.nbytes, rel=1e-9) and one.t_m == pytest.approx(ref.t_m, rel=1e-9)
    assert one.flops == pytest.approx(ref.flops, rel=1e-9)


class _FlagResidual:
    """A residual ensemble stand-in: +0.2 in log latency on fp8-KV rows (a slow fallback)."""

    n_trees = 1
    col = F.FEATURES["mla_decode"].index("kv_fp8")

    def predict(self, x: np.ndarray) -> np.ndarray:
        return 0.2 * x[:, self.col]

    def predict_one(self, x: np.ndarray) -> float:
        return 0.2 * float(x[self.col])


def _fallback_member() -> GroupModel:
    return GroupModel(BaseParams(8.0, 0.5, 0.5, 0.7, 0.5, 3.0, 0.5, 60.0), _FlagResidual(), 10)


def test_guarded_member_takes_its_16bit_kv_answer_where_smaller():
    m = _fallback_member()
    pooled = GroupModel(m.base, None, 10)
    plain = BlendGroupModel.of(pooled, [(m, 1.0)], True, family="mla_decode", target=GPU)
    guarded = BlendGroupModel.of(pooled, [(m, 1.0)], True, family="mla_decode", guarded=(m,), target=GPU)
    p_plain, p_guard = plain.predict_frame(_phys(ROWS)), guarded.predict_frame(_phys(ROWS))
    as_bf16 = plain.predict_frame(_phys(ROWS.assign(kv_dtype="bf16")))
    fp8 = ROWS["kv_dtype"].eq("fp8").to_numpy()
    np.testing.assert_allclose(p_guard, np.where(fp8, np.minimum(p_plain, as_bf16), p_plain), rtol=1e-12)
    # where the 16-bit-KV answer is smaller (the launch-bound first row), it is taken:
    # the fallback is gone; memory-bound rows read twice the KV bytes in bf16 and keep fp8
    assert p_guard[0] == pytest.approx(as_bf16[0], rel=1e-12) and p_guard[0] < p_plain[0]
    assert np.all(p_guard[fp8] <= p_plain[fp8]) and np.any(p_guard[fp8] == p_plain[fp8])
    np.testing.assert_array_equal(p_guard[~fp8], p_plain[~fp8])
    for i, r in enumerate(ROWS.to_dict("records")):
        ms, _ = guarded.predict_one(scalar_phys("mla_decode", GPU, "all", r))
        assert ms == pytest.approx(p_guard[i], rel=1e-9)
    # other families are never guarded
    assert BlendGroupModel.of(pooled, [(m, 1.0)], True, family="attention_decode", guarded=(m,),
                              target=GPU).guarded == ()


def test_members_with_the_targets_silicon_are_not_guarded():
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    cal = load_calibration(None)
    vendor_of = lambda k: "intel" if k == "b60" else "nvidia"  # noqa: E731

    def pool(gpu: str) -> BlendGroupModel:
        fm = crossgen.crossgen_family(cal, "mla_decode", "sglang", exclude=gpu, target=cal.gpus[gpu],
                                      vendor="nvidia", vendor_of=vendor_of)
        return fm.groups["all"]

    h200 = cal.family_model("h200_sxm", "sglang", "mla_decode").groups["all"]
    # Hopper's fp8-KV path, B200 target (H200's model, its cycle terms moved to B200's clock by
    # crossgen_clock: a copy sharing H200's residual ensemble)
    assert h200.gbt is not None and any(g.gbt is h200.gbt for g in pool("b200").guarded)
    assert not any(g is h200 for g in pool("h100_sxm").guarded)  # the same silicon: its kernels apply

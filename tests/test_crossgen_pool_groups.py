"""Pool-only dtype fallbacks (crossgen.POOL_GROUP_FALLBACK): A100's weight-only / SmoothQuant
GEMMs, measured on no other GPU, are timed by the pooled bf16 kernels, flagged not exact."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration.calib_file import load_calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel, predict_family_frame



def _pool(cal, exclude: str):
    return crossgen.crossgen_family(cal, "gemm", "trtllm", exclude=exclude, target=cal.gpus[exclude],
                                    vendor="nvidia", vendor_of=lambda k: "intel" if k == "b60" else "nvidia")


def test_pool_answers_weight_only_groups_with_bf16_not_exact():
    cal = load_calibration(None)
    pool = _pool(cal, "a100_sxm")
    assert "int8_wo" not in pool.groups and "bf16" in pool.groups
    for dt in ("int8_wo", "int4_wo", "sq"):
        assert pool.resolve_group(dt) == ("bf16", False)
    assert pool.resolve_group("bf16") == ("bf16", True)
    assert pool.resolve_group("no_such_format") == (None, False)
    # a plain family model (measured tier) is unchanged: no such fallback
    plain = FamilyModel("gemm", dict(pool.groups))
    assert plain.resolve_group("int8_wo") == (None, False)


def test_weight_bytes_of_the_format_reach_the_pooled_bf16_kernels():
    """At decode token counts a GEMM is weight-bound: 1-byte (int8) and 0.53-byte (int4)
    weights take less time than bf16 weights on the same pooled kernels."""
    cal = load_calibration(None)
    pool = _pool(cal, "a100_sxm")
    df = pd.DataFrame({"m": [8] * 3, "n": [8192] * 3, "k": [8192] * 3, "dtype": ["bf16", "int8_wo", "int4_wo"],
                       "backend": ["trtllm"] * 3})
    ms, ok = predict_family_frame(pool, df, cal.gpus["a100_sxm"])
    assert ok.all() and np.all(np.isfinite(ms))
    assert ms[0] > ms[1] > ms[2]

"""The MoE feature ``k2_unaligned16`` (features._k2_unaligned16): 1 where the down GEMM's reduction
length inter / TP is not a multiple of 16 elements (Triton's divisibility-16 specialization of
``fused_moe_kernel``'s ``K``), for table rows and queries alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

GPU = GPUFeatures("l40s", 362.0, 733.0, 733.0, 864.0, 142, 96.0, 450.0, 48.0)
KI = F.FEATURES["moe"].index("k2_unaligned16")


@pytest.mark.parametrize("inter,tp,flag", [(512, 32, 0.0), (768, 16, 0.0), (768, 32, 1.0), (704, 8, 1.0),
                                           (704, 4, 0.0), (1536, 1, 0.0), (2688, 1, 0.0), (2880, 1, 0.0),
                                           (1856, 8, 1.0)])
def test_flag_is_inter_per_tp_not_a_multiple_of_16(inter, tp, flag):
    assert F._k2_unaligned16(float(inter) / tp, F.PY) == flag
    assert F._k2_unaligned16(np.array([float(inter) / tp]), F.NP).tolist() == [flag]


def test_rows_and_queries_carry_the_same_flag():
    rows = pd.DataFrame([{"num_tokens": 4096, "hidden": 2816, "inter": 704, "topk": 8, "num_experts": 128,
                          "moe_tp": tp, "moe_ep": 1, "dtype": "fp8", "skew": 0.0, "latency_ms": 1.0}
                         for tp in (4, 8)])
    x = F.feature_matrix(F.frame_phys("moe", rows, GPU))
    assert x[:, KI].tolist() == [0.0, 1.0]
    for i, tp in enumerate((4, 8)):
        q = {"num_tokens": 4096, "hidden": 2816, "inter": 704, "topk": 8, "num_experts": 128, "moe_tp": tp,
             "moe_ep": 1, "dtype": "fp8", "skew": 0.0}
        assert scalar_phys("moe", GPU, "fp8", q).x[KI] == x[i, KI]

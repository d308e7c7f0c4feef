"""The GEMM collectors' weight copies (features.gemm_bench_copies) and the cycled working set
that the base model's warm-L2 share reads (docs/ACCURACY.md "GEMM: the collectors' weight copies")."""

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

# L40S-like figures: 96 MB of L2
GPU = GPUFeatures("l40s", 362.0, 733.0, 733.0, 864.0, 142, 96.0, 0.0, 64.0)
L2 = 96e6


@pytest.mark.parametrize("weight_bytes,want", [(1e6, 5.0), (L2 / 5, 5.0), (L2 / 4.5, 5.0), (L2 / 3.5, 4.0),
                                               (0.45 * L2, 3.0), (0.6 * L2, 2.0), (L2, 1.0), (3 * L2, 1.0)])
def test_trtllm_copies_fill_the_l2_at_most_five(weight_bytes, want):
    # collector/trtllm/collect_gemm.py: max(1, min(5, ceil(L2 / weight bytes)))
    assert F.gemm_bench_copies("trtllm", "bf16", weight_bytes, GPU, F.PY) == want
    assert want == max(1, min(5, math.ceil(L2 / weight_bytes)))


@pytest.mark.parametrize("backend,dtype,want", [("sglang", "bf16", 6.0), ("sglang", "fp8_block", 6.0),
                                                ("vllm", "bf16", 6.0), ("vllm", "fp8", 6.0),
                                                ("vllm", "fp8_block", 1.0), ("vllm", "fp4", 1.0),
                                                ("vllm", "nvfp4", 1.0), ("pooled", "bf16", 6.0)])
def test_other_collectors(backend, dtype, want):
    for w in (1e5, L2 / 3, 10 * L2):
        assert F.gemm_bench_copies(backend, dtype, w, GPU, F.PY) == want


def test_rows_and_queries_agree():
    rows = pd.DataFrame({"backend": ["trtllm", "trtllm", "trtllm", "sglang", "vllm", "vllm"],
                         "dtype": ["bf16", "fp8", "bf16", "bf16", "fp8_block", "bf16"],
                         "m": [1, 16, 4096, 8, 64, 1], "n": [1024, 4096, 8192, 4096, 7168, 65536],
                         "k": [1024, 4096, 2560, 1024, 2048, 8192]})
    table = F.frame_phys("gemm", rows, GPU)
    for i, r in enumerate(rows.to_dict("records")):
        one = scalar_phys("gemm", GPU, r["dtype"], {k: r[k] for k in ("m", "n", "k", "dtype")}, backend=r["backend"])
        assert one.ws_l2 == pytest.approx(table.ws_l2[i], rel=1e-12)
        assert one.x == pytest.approx([v[i] for v in table.x], rel=1e-12)
    # the answering engine, when given, replaces each row's own
    as_vllm = F.frame_phys("gemm", rows, GPU, backend="vllm")
    assert as_vllm.ws_l2[0] > table.ws_l2[0]          # trtllm 5 copies of a 2 MB weight -> vllm 6


def test_cycled_working_set_moves_only_the_l2_terms():
    m, n, k, wb = 8.0, 4096.0, 4096.0, 2.0
    one = F.gemm(m, n, k, wb, 362.0, GPU, F.PY)
    six = F.gemm(m, n, k, wb, 362.0, GPU, F.PY, 6.0)
    single = (m * k * 2 + k * n * wb + m * n * 2) / L2
    assert one.ws_l2 == pytest.approx(single)                      # copies = 1: one call's bytes
    assert six.ws_l2 == pytest.approx(single + 5 * k * n * wb / L2)  # 6 weights, one input and output
    i = F.FEATURES["gemm"].index("log_cycled_ws_over_l2")
    assert six.x[i] == pytest.approx(math.log2(six.ws_l2)) and one.x[i] == pytest.approx(math.log2(single))
    same = [j for j in range(len(one.x)) if j != i]
    assert [six.x[j] for j in same] == [one.x[j] for j in same]     # every other feature unchanged
    assert (six.t_c, six.t_m, six.q, six.waves, six.nbytes) == (one.t_c, one.t_m, one.q, one.waves, one.nbytes)
    # the L40S measurement this models: TRT-LLM bf16 n=8192 k=2560 (42 MB, 3 copies = 126 MB > L2)
    # runs at DRAM speed for m <= 16, as if the weights were cold
    w = 8192 * 2560 * 2.0
    c = F.gemm_bench_copies("trtllm", "bf16", w, GPU, F.PY)
    assert c == 3.0 and c * w > L2


def test_rows_without_engine_keep_a_single_copy():
    rows = pd.DataFrame({"dtype": ["bf16"], "m": [8], "n": [4096], "k": [4096]})
    p = F.frame_phys("gemm", rows, GPU)
    assert p.ws_l2[0] == pytest.approx((8 * 4096 * 2 + 4096 * 4096 * 2 + 8 * 4096 * 2) / L2)
    arr = F.gemm_bench_copies(np.array(["trtllm", "vllm"]), np.array(["bf16", "fp8_block"]),
                              np.array([0.3 * L2, 1e6]), GPU)
    assert arr.tolist() == [4.0, 1.0]

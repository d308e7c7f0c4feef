"""SGLang's GEMM collector builds every weight copy with its own activation buffers
(features.gemm_bench_buffers; docs/ACCURACY.md "GEMM: SGLang's collector cycles its inputs too
(session 13)"): the cycled working set counts one bf16 input per copy (plus the 1-byte quantized
input for fp8 and the output for fp8_block / nvfp4); every other engine shares one input."""

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


@pytest.mark.parametrize("backend,dtype,want", [
    ("sglang", "bf16", (12.0, 1.0)),        # 6 bf16 inputs, shared output
    ("sglang", "fp8", (18.0, 1.0)),         # 6 x (bf16 input + 1-byte quantized input)
    ("sglang", "fp8_block", (12.0, 6.0)),   # 6 inputs and 6 outputs `out`
    ("sglang", "fp4", (12.0, 6.0)),
    ("vllm", "bf16", (2.0, 1.0)), ("vllm", "fp8", (2.0, 1.0)), ("trtllm", "fp8_block", (2.0, 1.0)),
    ("pooled", "bf16", (2.0, 1.0))])
def test_per_copy_buffers_of_each_collector(backend, dtype, want):
    assert F.gemm_bench_buffers(backend, dtype, 6.0, F.PY) == want
    act, out = F.gemm_bench_buffers(np.array([backend]), np.array([dtype]), np.array([6.0]))
    assert (act[0], out[0]) == want


def test_working_set_counts_the_cycled_inputs():
    m, n, k, wb = 1024.0, 64.0, 4096.0, 2.0
    shared = F.gemm(m, n, k, wb, 362.0, GPU, F.PY, 6.0)
    act, out = F.gemm_bench_buffers("sglang", "bf16", 6.0, F.PY)
    per_copy = F.gemm(m, n, k, wb, 362.0, GPU, F.PY, 6.0, act, out)
    assert shared.ws_l2 == pytest.approx((m * k * 2 + 6 * k * n * wb + m * n * 2) / L2, rel=1e-12)
    assert per_copy.ws_l2 == pytest.approx((6 * m * k * 2 + 6 * k * n * wb + m * n * 2) / L2, rel=1e-12)
    # 6 x 8.4 MB inputs = 50 MB: still inside the L40S L2 here, 0.55 of it
    assert 0.5 < per_copy.ws_l2 < 0.6 and shared.ws_l2 < 0.13
    i = F.FEATURES["gemm"].index("log_cycled_ws_over_l2")
    assert per_copy.x[i] == pytest.approx(math.log2(per_copy.ws_l2))
    same = [j for j in range(len(shared.x)) if j != i]
    assert [per_copy.x[j] for j in same] == [shared.x[j] for j in same]
    assert (per_copy.t_c, per_copy.t_m, per_copy.q, per_copy.nbytes) == \
        (shared.t_c, shared.t_m, shared.q, shared.nbytes)


def test_defaults_keep_the_former_working_set_exactly():
    for m, n, k in ((1, 4096, 4096), (3073, 1536, 65536), (16, 64, 7168)):
        old = (m * k * 2.0 + k * n * 2.0 + m * n * 2.0 + 4.0 * k * n * 2.0) / (GPU.l2_mb * 1e6)
        assert F.gemm(m, n, k, 2.0, 362.0, GPU, F.PY, 5.0).ws_l2 == old     # bit for bit


def test_rows_and_queries_agree():
    rows = pd.DataFrame({"backend": ["sglang", "sglang", "sglang", "vllm", "trtllm"],
                         "dtype": ["bf16", "fp8", "fp8_block", "bf16", "bf16"],
                         "m": [512, 16, 2048, 512, 512], "n": [256, 4096, 7168, 256, 256],
                         "k": [8192, 4096, 2048, 8192, 8192]})
    table = F.frame_phys("gemm", rows, GPU)
    for i, r in enumerate(rows.to_dict("records")):
        one = scalar_phys("gemm", GPU, r["dtype"], {k: r[k] for k in ("m", "n", "k", "dtype")}, backend=r["backend"])
        assert one.ws_l2 == pytest.approx(table.ws_l2[i], rel=1e-12)
        assert one.x == pytest.approx([v[i] for v in table.x], rel=1e-12)
    # the same shape: SGLang's six inputs of 8.4 MB against the others' one
    assert table.ws_l2[0] - table.ws_l2[3] == pytest.approx(5 * 512 * 8192 * 2 / L2, rel=1e-9)
    # answered by the vLLM model, an SGLang row is timed under vLLM's shared input
    as_vllm = F.frame_phys("gemm", rows, GPU, backend="vllm")
    assert as_vllm.ws_l2[0] == pytest.approx(table.ws_l2[3], rel=1e-12)

"""SGLang's GEMM collector builds every weight copy with its own activation buffers
(features.gemm_bench_buffers; docs/ACCURACY.md "GEMM: SGLang's collector cycles its inputs too
(session 13)"): the cycled working set counts one bf16 input per copy (plus the 1-byte quantized
input for fp8 and the output for fp8_block / nvfp4); every other engine shares one input. Every
quantized GEMM (fp8, fp8_block, nvfp4) also quantizes its activation on every call
(features.gemm_act_quant): that copy is DRAM traffic and one more buffer of the working set."""

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


# B200-like (fp8 and fp4 tensor cores) and Arc Pro B60-like (no fp8: peaks fall back to bf16)
B200 = GPUFeatures("b200", 2250.0, 4500.0, 9000.0, 8000.0, 148, 126.0, 900.0, 64.0)
B60 = GPUFeatures("b60", 98.3, 98.3, 98.3, 456.0, 20, 18.0, 0.0, 32.0)


@pytest.mark.parametrize("dtype,q", [("bf16", 0.0), ("fp8", 1.0), ("fp8_block", 1.0), ("fp4", 0.5),
                                     ("sq", 0.0), ("int4_wo", 0.0)])
def test_activation_quantized_on_every_call(dtype, q):
    assert F.gemm_act_quant(dtype, B200, F.PY) == q
    assert F.gemm_act_quant(np.array([dtype]), B200)[0] == q
    # L40S: fp8 tensor cores, no fp4 ones; B60: neither (vLLM-XPU runs fp8 weight-only, fp8_gemm_w8a16)
    assert F.gemm_act_quant(dtype, GPU, F.PY) == (q if dtype != "fp4" else 0.0)
    assert F.gemm_act_quant(dtype, B60, F.PY) == 0.0 and F.gemm_act_quant(np.array([dtype]), B60)[0] == 0.0


def test_quantized_activation_traffic_and_working_set():
    m, n, k = 2048.0, 64.0, 4096.0
    plain = F.gemm(m, n, k, 1.0, 733.0, GPU, F.PY, 6.0)
    quant = F.gemm(m, n, k, 1.0, 733.0, GPU, F.PY, 6.0, act_q=1.0)
    # DRAM traffic: bf16 input read, fp8 copy written and read back by the GEMM
    assert quant.nbytes - plain.nbytes == pytest.approx(2 * m * k)
    assert quant.t_m > plain.t_m and quant.t_c == plain.t_c
    # working set: the quantized copy is one more buffer of m x k bytes
    assert (quant.ws_l2 - plain.ws_l2) * L2 == pytest.approx(m * k, rel=1e-9)
    # SGLang fp8 keeps one quantized input per weight copy, already in act_ws: not counted twice
    act, out = F.gemm_bench_buffers("sglang", "fp8", 6.0, F.PY)
    sg = F.gemm(m, n, k, 1.0, 733.0, GPU, F.PY, 6.0, act, out, 1.0)
    assert sg.ws_l2 * L2 == pytest.approx(6 * k * n + 18 * m * k + m * n * 2, rel=1e-9)
    # SGLang fp8_block quantizes into a per-call buffer the copies share
    act, out = F.gemm_bench_buffers("sglang", "fp8_block", 6.0, F.PY)
    sb = F.gemm(m, n, k, 1.0, 733.0, GPU, F.PY, 6.0, act, out, 1.0)
    assert sb.ws_l2 * L2 == pytest.approx(6 * k * n + 12 * m * k + m * k + 6 * m * n * 2, rel=1e-9)


def test_bf16_rows_keep_their_former_terms_exactly():
    rows = pd.DataFrame({"backend": ["vllm", "trtllm"], "dtype": ["bf16", "bf16"], "m": [3, 4097],
                         "n": [7168, 1536], "k": [2048, 65536]})
    p = F.frame_phys("gemm", rows, GPU)
    for i, r in enumerate(rows.to_dict("records")):
        m, n, k = float(r["m"]), float(r["n"]), float(r["k"])
        nbytes = m * k * 2.0 + k * n * 2.0 + m * n * 2.0
        c = F.gemm_bench_copies(r["backend"], "bf16", n * k * 2.0, GPU, F.PY)
        assert p.nbytes[i] == nbytes
        assert p.ws_l2[i] == (nbytes + (c - 1.0) * k * n * 2.0) / (GPU.l2_mb * 1e6)

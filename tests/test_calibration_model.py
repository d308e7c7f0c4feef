"""llmplan.sim.calibrated: tiers, fallbacks, collectives, error bands, speed, scalar == vectorised."""

from __future__ import annotations

import numpy as np
import pytest

from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH, Calibration
from llmplan.calibration.fit import FitOptions, fit_calibration
from llmplan.sim.kernel_calibration.gbt import GBTParams
from llmplan.sim.kernel_calibration.predict import predict_frame
from llmplan.calibration.reader import read_measurements
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel, error_band, kernel_model_for
from llmplan.sim.kernels import Link
from test_calibration_synth import make_measurements_dir

NVLINK = Link("nvlink", 450.0, 8.0)
PCIE = Link("pcie", 32.0, 15.0)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = make_measurements_dir(tmp_path_factory.mktemp("m"), ("h100_sxm", "a100_sxm"))
    meas = read_measurements(root)
    opts = FitOptions(gbt=GBTParams(n_trees=30, depth=4), min_trees=10, rows_per_tree=10, spec_rows=200)
    cal = fit_calibration(meas, opts)
    path = cal.save(root / "cal.json")
    return meas, cal, path


def test_tiers_measured_cross_gen_and_what_if(synth):
    _, cal, _ = synth
    h100 = get_gpu("h100_sxm")
    m = CalibratedKernelModel(h100, "vllm", cal)
    assert m.tier == "measured"
    assert m.gemm(64, 4096, 4096, "bf16").tier == "measured"
    assert m.attention_decode(8, 1000, 32, 8, 128, "bf16").tier == "measured"
    b200 = CalibratedKernelModel(get_gpu("b200"), "vllm", cal)
    assert b200.tier == "cross-gen" and b200.gemm(64, 4096, 4096, "bf16").tier == "cross-gen"
    what_if = CalibratedKernelModel(h100.with_overrides(hbm_bw_gbps=2 * h100.hbm_bw_gbps), "vllm", cal)
    assert what_if.tier == "sibling" and what_if.source_gpu == "h100_sxm"   # same compute silicon
    assert what_if.gemm(64, 4096, 4096, "bf16").tier == "sibling"
    more_sms = CalibratedKernelModel(h100.with_overrides(sm_count=2 * h100.sm_count), "vllm", cal)
    assert more_sms.tier == "cross-gen"
    t_fast = what_if.attention_decode(64, 8000, 32, 8, 128, "bf16").latency_ms
    assert t_fast < m.attention_decode(64, 8000, 32, 8, 128, "bf16").latency_ms * 1.5
    # an engine not measured on this GPU falls back to the GPU's measured engine
    sg = CalibratedKernelModel(h100, "sglang", cal)
    assert sg.gemm(64, 4096, 4096, "bf16").tier == "measured" and sg.gemm(64, 4096, 4096, "bf16").table == "vllm"
    # never-measured families use the roofline
    assert m.memory_op(1e8).tier == "spec"
    assert m.moe(64, 4096, 1024, 8, 64, 1, 1, "bf16").tier == "spec"


def test_extrapolation_flag(synth):
    _, cal, _ = synth
    m = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", cal)
    assert not m.gemm(512, 4096, 4096, "bf16").extrapolated
    assert m.gemm(65536, 4096, 4096, "bf16").extrapolated
    assert m.attention_prefill(1, 512, 4096, 32, 8, 128, "bf16").extrapolated   # prior context never measured


def test_collective_semantics(synth):
    _, cal, _ = synth
    m = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", cal)
    small = m.collective("all_reduce", 64e3, 8, NVLINK)
    big = m.collective("all_reduce", 256e6, 8, NVLINK)
    assert small.tier == "measured" and small.bound == "comm" and not small.extrapolated
    assert big.latency_ms > small.latency_ms
    over_pcie = m.collective("all_reduce", 64e3, 8, PCIE)
    assert over_pcie.tier == "cross-gen" and over_pcie.extrapolated
    assert m.collective("all_reduce", 256e6, 8, PCIE).latency_ms > big.latency_ms
    assert m.collective("all_reduce", 1e6, 1, NVLINK).latency_ms == 0.0
    assert m.collective("p2p", 1e6, 2, NVLINK).latency_ms > 0
    with pytest.raises(ValueError):
        m.collective("broadcast", 1e6, 2, NVLINK)


def test_scalar_path_matches_vectorised_path(synth):
    meas, cal, _ = synth
    gpu = get_gpu("h100_sxm")
    m = CalibratedKernelModel(gpu, "vllm", cal)
    df = meas.family("gemm")
    df = df[df["gpu"] == "h100_sxm"].head(40)
    vec, _ = predict_frame(cal, "gemm", df, cal.gpus["h100_sxm"])
    one = [m.gemm(r.m, r.n, r.k, r.dtype).latency_ms for r in df.itertuples()]
    assert np.allclose(vec, one, rtol=1e-9)
    df = meas.family("attention_decode")
    df = df[df["gpu"] == "h100_sxm"].head(40)
    vec, _ = predict_frame(cal, "attention_decode", df, cal.gpus["h100_sxm"])
    one = [m.attention_decode(r.batch, r.kv_len, r.num_heads, r.num_kv_heads, r.head_dim, r.kv_dtype).latency_ms
           for r in df.itertuples()]
    assert np.allclose(vec, one, rtol=1e-9)


def test_kernel_model_for_and_error_band(synth):
    _, cal, path = synth
    h100, b200 = get_gpu("h100_sxm"), get_gpu("b200")
    assert kernel_model_for(h100, calibration=path).tier == "measured"
    assert kernel_model_for(b200, calibration=path).tier == "cross-gen"
    assert kernel_model_for(h100, calibration=path) is kernel_model_for(h100, calibration=path)
    band = error_band("gemm", "measured", path)
    assert 0 <= band["p50_ape"] <= band["p90_ape"]
    assert error_band("attn_decode", "cross-gen", path)["p90_ape"] >= 0
    assert error_band("memory_op", "spec", path)  # falls back to the tier's pooled figures
    with pytest.raises(Exception, match="tier"):
        error_band("gemm", "no-such-tier", path)


def test_shipped_calibration_tiers():
    assert kernel_model_for(get_gpu("h100_sxm")).tier == "measured"
    assert kernel_model_for(get_gpu("a100_sxm"), backend="sglang").tier == "measured"
    b300 = kernel_model_for(get_gpu("b300"))          # not measured: Blackwell Ultra from the pool
    assert b300.tier == "cross-gen"
    t = b300.gemm(4096, 8192, 8192, "fp8")
    assert t.tier == "cross-gen" and t.latency_ms > 0
    assert b300.mla_decode(32, 4096, 16, 512, 64, "bf16").tier == "cross-gen"
    assert kernel_model_for(get_gpu("h100_sxm")).moe(256, 7168, 2048, 8, 256, 1, 8, "fp8_block").tier == "measured"
    for fam in ("gemm", "attention_prefill", "attention_decode", "moe", "collective"):
        for tier in ("measured", "sibling", "cross-gen", "spec"):
            assert error_band(fam, tier)["p90_ape"] > 0
    assert Calibration.loads(DEFAULT_PATH.read_text()).provenance["attribution"]


def test_shipped_sibling_tier():
    """A100 40GB = A100 80GB's die; a what-if H100 with H200's HBM bandwidth keeps H100's
    fitted compute behaviour and sees its own bandwidth in memory-bound kernels."""
    h100 = kernel_model_for(get_gpu("h100_sxm"))
    a100_40 = kernel_model_for(get_gpu("a100_40gb_sxm"))
    assert a100_40.tier == "sibling" and a100_40.source_gpu == "a100_sxm"
    assert kernel_model_for(get_gpu("h200_sxm")).tier == "measured"      # measured since the 7-GPU fit
    assert kernel_model_for(get_gpu("gb200")).tier == "cross-gen"
    base = get_gpu("h100_sxm")
    fast = kernel_model_for(base.with_overrides(hbm_bw_gbps=4800.0))
    assert fast.tier == "sibling" and fast.source_gpu == "h100_sxm"
    ratio = base.hbm_bw_gbps / 4800.0
    for batch, kv in ((64, 8000), (128, 16000), (256, 8000)):     # memory-bound decode attention
        a, b = h100.attention_decode(batch, kv, 32, 8, 128, "bf16"), fast.attention_decode(batch, kv, 32, 8, 128, "bf16")
        assert b.tier == "sibling"
        assert b.latency_ms / a.latency_ms == pytest.approx(ratio, rel=0.08)
    for m, n, k in ((8192, 8192, 8192), (16384, 16384, 8192)):     # compute-bound GEMMs
        a, b = h100.gemm(m, n, k, "bf16"), fast.gemm(m, n, k, "bf16")
        assert b.latency_ms == pytest.approx(a.latency_ms, rel=0.02)
    what_if = kernel_model_for(base.with_overrides(hbm_bw_gbps=2 * base.hbm_bw_gbps))
    t1, t2 = h100.attention_decode(64, 8000, 32, 8, 128, "bf16"), what_if.attention_decode(64, 8000, 32, 8, 128, "bf16")
    assert t2.latency_ms / t1.latency_ms == pytest.approx(0.5, rel=0.1)
    meas, sib = error_band("attention_decode", "measured"), error_band("attention_decode", "sibling")
    assert sib["p90_ape"] > meas["p90_ape"] and sib["p50_ape"] > meas["p50_ape"]
    assert error_band("gemm:bf16", "sibling")["mape"] < error_band("gemm:bf16", "cross-gen")["mape"]


def test_fp8_moe_uses_block_fp8_group():
    """fp8 MoE queries are timed with the block-fp8 kernels (MiniMax-M2.5's shape, EP4):
    measured on H100 vLLM 0.110 / 0.339 ms at 8 / 64 tokens (per-tensor fp8 path: 3-4x slower)."""
    h = kernel_model_for(get_gpu("h100_sxm"), "vllm")
    for tokens, meas in ((8, 0.110), (64, 0.339)):
        kt = h.moe(tokens, 3072, 1536, 8, 256, 1, 4, "fp8")
        assert kt.latency_ms == pytest.approx(h.moe(tokens, 3072, 1536, 8, 256, 1, 4, "fp8_block").latency_ms)
        assert kt.latency_ms == pytest.approx(meas, rel=0.25) and not kt.extrapolated
    # an engine without a block-fp8 MoE table keeps its fp8 one
    assert kernel_model_for(get_gpu("h100_sxm"), "trtllm").moe(64, 4096, 1536, 8, 128, 1, 4, "fp8").latency_ms > 0

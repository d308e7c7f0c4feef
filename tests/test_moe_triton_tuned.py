"""SGLang's tuned Triton fused-MoE configurations (sim/kernel_calibration/moe_tuned.py): a shape whose
(E / EP, inter / TP, GPU, dtype) has a shipped configuration file runs tuned tiles, any other runs
``get_default_config``; the fit's rows and the queries get the fact from the same data file."""

from __future__ import annotations

import numpy as np
import pytest
import pandas as pd

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration import moe_tuned as T
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel, scalar_phys
from llmplan.sim.kernel_calibration.gbt import GBTModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
NEMOTRON = dict(num_experts=512, inter=2688)     # hidden 1024 / top-22 of 512 (the tables' carrier)


def test_the_file_lists_the_wheels_configurations():
    d = T.triton_default_config
    # sglang 0.5.14 ships E=512,N=2688 / E=64,N=2688 / E=512,N=1344 for H100 (bf16), not E=32,N=2688
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 1, 1) == T.TUNED
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 1, 8) == T.TUNED
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 2, 1) == T.TUNED
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 1, 16) == T.DEFAULT
    # H200 has none for that expert configuration at EP 1
    assert d("sglang", "h200_sxm", "bf16", 512, 2688, 1, 1) == T.DEFAULT
    # block fp8: E=512,N=256,...,dtype=fp8_w8a8,block_shape=[128, 128] (H100)
    assert d("sglang", "h100_sxm", "fp8_block", 512, 2048, 8, 1) == T.TUNED
    assert d("sglang", "h100_sxm", "fp8_block", 512, 2688, 1, 1) == T.DEFAULT
    # A100's table is SGLang 0.5.10 (Mixtral TP2: E=8, N=7168)
    assert d("sglang", "a100_sxm", "bf16", 8, 14336, 2, 1) == T.TUNED
    assert T.covered_version("sglang", "a100_sxm") == "0.5.10"
    assert T.covered_version("sglang", "h100_sxm") == "0.5.14"


def test_not_covered():
    d = T.triton_default_config
    assert d("vllm", "h100_sxm", "bf16", 512, 2688, 1, 1) == T.NOT_COVERED      # vLLM: not listed
    assert d("sglang", "b60", "bf16", 512, 2688, 1, 1) == T.NOT_COVERED         # no file for the GPU
    assert d("sglang", "h100_sxm", "w4a16_mxfp4", 32, 2880, 1, 1) == T.NOT_COVERED
    # a row of another engine version than the file lists for the GPU
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 1, 1, version="0.5.10") == T.NOT_COVERED
    assert d("sglang", "h100_sxm", "bf16", 512, 2688, 1, 1, version="0.5.14") == T.TUNED


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "kernel_source": ["sglang_fused_moe_triton", "sglang_fused_moe_triton", "sglang_flashinfer_cutlass_moe",
                          "vllm_unquantizedfusedmoe_triton_tritonexperts"],
        "backend": ["sglang", "sglang", "sglang", "vllm"], "backend_version": ["0.5.14", "0.5.14", "0.5.14", "0.24.0"],
        "dtype": ["bf16"] * 4, "num_tokens": [64.0] * 4, "hidden": [4096.0] * 4, "inter": [1536.0] * 4,
        "topk": [8.0] * 4, "num_experts": [128.0] * 4, "moe_tp": [1.0] * 4, "moe_ep": [2.0, 16.0, 2.0, 2.0],
        "skew": [0.0] * 4})
# Qwen3-235B's expert configuration: H100 0.5.14 ships E=64,N=1536 (EP 2), not E=8,N=1536 (EP 16)
Q235 = {"num_tokens": 64, "hidden": 4096, "inter": 1536, "topk": 8, "num_experts": 128, "moe_tp": 1,
        "dtype": "bf16", "skew": 0.0}


TI = F.FEATURES["moe"].index("triton_default_cfg")


def test_rows_get_the_fact_as_a_feature():
    assert "triton_default_cfg" in F.FEATURES["moe"]
    assert T.frame_default_config(_frame(), "h100_sxm").tolist() == [T.TUNED, T.DEFAULT, 0.0, 0.0]
    x = F.feature_matrix(F.frame_phys("moe", _frame(), GPU))
    assert x.shape[1] == len(F.FEATURES["moe"])
    assert x[:, TI].tolist() == [T.TUNED, T.DEFAULT, 0.0, 0.0]


def test_query_and_row_share_the_features():
    """A query answered by a Triton group carries the same feature vector as the table row of the
    same shape; a query of another kernel (or none named) carries 0."""
    rows = F.feature_matrix(F.frame_phys("moe", _frame(), GPU))
    for i, ep in ((0, 2), (1, 16)):
        q = {**Q235, "moe_ep": ep}
        x = scalar_phys("moe", GPU, "bf16", q, backend="sglang", kernel="triton").x
        np.testing.assert_allclose(np.array(x, dtype=float), rows[i], rtol=1e-12)
        assert scalar_phys("moe", GPU, "bf16", q, backend="sglang", kernel="flashinfer_cutlass").x[TI] == 0.0
        assert scalar_phys("moe", GPU, "bf16", q, backend="sglang").x[TI] == 0.0


def _gbt_on_default(log_ratio: float) -> GBTModel:
    """One depth-1 tree: the default configuration (feature > 0.5) costs ``exp(log_ratio)``."""
    names = list(F.FEATURES["moe"])
    return GBTModel(names, np.array([[TI]]), np.array([[0.5]]), np.array([[0.0, log_ratio]]), 0.0)


def _model(fm: FamilyModel) -> CalibratedKernelModel:
    return CalibratedKernelModel(get_gpu("h100_sxm"), "sglang",
                                 Calibration({}, {"h100_sxm": GPU}, {"h100_sxm": {"sglang": {"moe": fm}}}))


def test_the_one_query_path_reads_the_fact_for_a_triton_group():
    base = BaseParams(floor_us=10.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)
    gm = GroupModel(base, _gbt_on_default(np.log(2.0)), 100, {"num_tokens": [1.0, 16384.0]})
    plain = GroupModel(base, None, 100, {"num_tokens": [1.0, 16384.0]})
    triton = _model(FamilyModel("moe", {"bf16": gm}, group_kernels={"bf16": ("triton",)}))
    ref = _model(FamilyModel("moe", {"bf16": plain}, group_kernels={"bf16": ("triton",)}))
    t = lambda km, ep: km.moe(64, 1024, 2688, 22, 512, 1, ep, "bf16").latency_ms  # noqa: E731
    assert t(triton, 1) == t(ref, 1)                       # tuned: E=512,N=2688 ships
    assert abs(t(triton, 16) / t(ref, 16) - 2.0) < 1e-12       # E=32,N=2688 does not: the default
    # a group whose kernel the file does not record (an older calibration): not covered, as before
    unknown = _model(FamilyModel("moe", {"bf16": gm}))
    assert t(unknown, 16) == t(_model(FamilyModel("moe", {"bf16": plain})), 16)


def test_masked_remote_pairs_of_the_triton_kernel():
    """Under expert parallelism SGLang's/vLLM's Triton fused_moe_kernel still visits the remote slots
    (blocks of expert -1 write zeros; the top-k sum reads every slot): T x topk x (1 - 1/EP) pairs of
    traffic on Triton rows, none on other kernels, at EP 1, or where the collector clamped them."""
    df = _frame()
    assert F.moe_masked_pairs(df).tolist() == [64 * 8 * 0.5, 64 * 8 * (1 - 1 / 16), 0.0, 64 * 8 * 0.5]
    # the collector clamped these rows' remote slots instead (Mixtral-8x7B; Nemotron-3-Super's shape)
    for h, i, k, e in ((4096.0, 14336.0, 2.0, 8.0), (1024.0, 2688.0, 22.0, 512.0)):
        clamped = df.iloc[[1]].assign(hidden=h, inter=i, topk=k, num_experts=e, moe_ep=8.0)
        assert F.moe_clamped_pairs(clamped)[0] > 0 and F.moe_masked_pairs(clamped).tolist() == [0.0]
    q = {**Q235, "moe_ep": 16}
    tri = scalar_phys("moe", GPU, "bf16", q, backend="sglang", kernel="triton")
    other = scalar_phys("moe", GPU, "bf16", q, backend="sglang", kernel="flashinfer_cutlass")
    extra = 64 * 8 * (1 - 1 / 16) * (4096 + 2 * 1536) * 2.0
    assert abs((tri.nbytes - other.nbytes) - extra) < 1e-6 * extra
    np.testing.assert_allclose(F.frame_phys("moe", df.iloc[[1]], GPU).nbytes, [tri.nbytes], rtol=1e-12)


def test_masked_pairs_only_in_the_masked_work_forms():
    """Models fitted before session 13 (work form ``uniform``, no key in the file) keep predicting
    without the masked pairs; the masked forms add them, in the frame and the query path alike."""
    q = {**Q235, "moe_ep": 16}
    row = _frame().iloc[[1]]
    for form in (F.MOE_FORM_UNIFORM, F.MOE_FORM_ROUTED):
        old = scalar_phys("moe", GPU, "bf16", q, form, backend="sglang", kernel="triton")
        new = scalar_phys("moe", GPU, "bf16", q, form + F.MASKED_SUFFIX, backend="sglang", kernel="triton")
        plain = scalar_phys("moe", GPU, "bf16", q, form, backend="sglang", kernel="flashinfer_cutlass")
        assert old.nbytes == plain.nbytes < new.nbytes
        assert F.frame_phys("moe", row, GPU, form).nbytes[0] == old.nbytes
        assert F.frame_phys("moe", row, GPU, form + F.MASKED_SUFFIX).nbytes[0] == new.nbytes
    assert FamilyModel.from_dict("moe", {"groups": {}}).work_form == F.MOE_FORM_UNIFORM


def test_cross_gen_query_gets_the_facts_the_pooled_rows_get():
    """The cross-gen pool answers a query with its members' dtype groups: where every member's group ran the
    Triton kernel, the query carries the asked engine's tuned-configuration fact and masked pairs, as the
    pooled validation rows do (predict_frame, tier cross-gen), so validation scores what users get."""
    from llmplan.sim.kernel_calibration.predict import predict_frame
    base = BaseParams(floor_us=10.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)
    gm = GroupModel(base, _gbt_on_default(np.log(2.0)), 100, {"num_tokens": [1.0, 16384.0]})
    gpus = {k: GPUFeatures.from_spec(get_gpu(k)) for k in ("h100_sxm", "h200_sxm", "b200")}
    fms = {g: {"sglang": {"moe": FamilyModel("moe", {"bf16": gm}, work_form=F.MOE_FORM_UNIFORM_MASKED,
                                             group_kernels={"bf16": ("triton",)})}} for g in ("h100_sxm", "h200_sxm")}
    cal = Calibration({}, gpus, fms)
    km = CalibratedKernelModel(get_gpu("b200"), "sglang", cal)
    row = _frame().iloc[[1]].assign(backend_version="0.5.14")          # Qwen3-235B's shape at EP 16
    p, used = predict_frame(cal, "moe", row, gpus["b200"], tier="cross-gen")
    kt = km.moe(64, 4096, 1536, 8, 128, 1, 16, "bf16")
    assert km.tier == "cross-gen" and used.tolist() == ["cross-gen"]
    assert kt.latency_ms == pytest.approx(p[0], rel=1e-12)
    assert T.triton_default_config("sglang", "b200", "bf16", 128, 1536, 1, 16) == T.DEFAULT    # the tree's 2x applies


def test_cross_gen_query_of_a_mixed_kernel_pool_takes_the_engines_rule():
    """Members whose dtype group mixes kernel families give the pool no kernel: the query then takes the kernel
    the engine's rule names for the target and the model (moe_kernels.engine_moe_kernel: SGLang bf16 on SM100
    runs Triton for Mixtral), and carries that kernel's facts as the Triton row does; without the model's
    architecture the rule names none and the query carries no facts."""
    from llmplan.sim.kernel_calibration.predict import predict_frame
    base = BaseParams(floor_us=10.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)
    gm = GroupModel(base, _gbt_on_default(np.log(2.0)), 100, {"num_tokens": [1.0, 16384.0]})
    gpus = {k: GPUFeatures.from_spec(get_gpu(k)) for k in ("h100_sxm", "h200_sxm", "b200")}
    fms = {g: {"sglang": {"moe": FamilyModel("moe", {"bf16": gm}, work_form=F.MOE_FORM_UNIFORM_MASKED,
                                             group_kernels={"bf16": ("flashinfer_cutlass", "triton")})}}
           for g in ("h100_sxm", "h200_sxm")}
    cal = Calibration({}, gpus, fms)
    km = CalibratedKernelModel(get_gpu("b200"), "sglang", cal)
    p, _ = predict_frame(cal, "moe", _frame().iloc[[1]].assign(backend_version="0.5.14"), gpus["b200"], tier="cross-gen")
    with_arch = km.moe(64, 4096, 1536, 8, 128, 1, 16, "bf16", architecture="MixtralForCausalLM").latency_ms
    assert with_arch == pytest.approx(p[0], rel=1e-12)
    assert km.moe(64, 4096, 1536, 8, 128, 1, 16, "bf16").latency_ms < 0.6 * p[0]     # no kernel named: no facts

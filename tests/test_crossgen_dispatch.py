"""The cross-gen tier's engine dispatch rules (crossgen_dispatch) and collective-library pool
(crossgen.crossgen_alpha_beta): a member's measurements answer a target only where the target
runs the same kernel / collective library."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration import crossgen
from llmplan.sim.kernel_calibration import crossgen_dispatch as D
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.calib_file import load_calibration
from llmplan.sim.kernel_calibration.family_model import scalar_phys
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.tiers import catalog_vendor
from llmplan.sim.kernels import Link

B200 = GPUFeatures.from_spec(get_gpu("b200"))
H100 = GPUFeatures.from_spec(get_gpu("h100_sxm"))
ROWS = pd.DataFrame({"num_tokens": [1, 37, 512, 8192], "num_heads": [128, 16, 64, 128],
                     "op": ["pre", "post", "pre", "post"], "dtype": ["fp8"] * 4})


def test_trtllm_fp8_absorb_bmm_runs_bf16_on_sm100_only():
    for key in ("b200", "gb200", "b300", "gb300"):
        assert D.runs_instead("mla_bmm", "trtllm", "fp8", GPUFeatures.from_spec(get_gpu(key))) == "bf16"
    for key in ("h100_sxm", "h200_sxm", "l40s", "rtx_pro_6000_server", "a100_sxm", "mi355x"):
        assert D.runs_instead("mla_bmm", "trtllm", "fp8", GPUFeatures.from_spec(get_gpu(key))) is None
    assert D.runs_instead("mla_bmm", "sglang", "fp8", B200) is None      # SGLang's fp8 bmm is its own kernel
    assert D.runs_instead("mla_bmm", "trtllm", "bf16", B200) is None
    assert D.runs_instead("gemm", "trtllm", "fp8", B200) is None


def test_query_rebuilt_in_bf16():
    got = D.rebuild("mla_bmm", F.frame_phys("mla_bmm", ROWS, B200), "fp8", "bf16", B200)
    want = F.frame_phys("mla_bmm", ROWS.assign(dtype="bf16"), B200)
    for name in ("t_c", "t_m", "q", "ws_l2", "t_l2", "waves", "flops", "nbytes"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-9)
    np.testing.assert_allclose(F.feature_matrix(got), F.feature_matrix(want), rtol=1e-9, atol=1e-12)
    # one shape with other latent / nope widths than DeepSeek-V3's
    q = {"num_tokens": 24, "num_heads": 32, "op": "post", "dtype": "fp8", "kv_lora_rank": 256, "qk_nope_dim": 64}
    one = D.rebuild("mla_bmm", scalar_phys("mla_bmm", B200, "fp8", q), "fp8", "bf16", B200)
    ref = scalar_phys("mla_bmm", B200, "bf16", {**q, "dtype": "bf16"})
    for name in ("t_c", "t_m", "flops", "nbytes"):
        assert getattr(one, name) == pytest.approx(getattr(ref, name), rel=1e-9)
    with pytest.raises(ValueError):
        D.rebuild("gemm", one, "fp8", "bf16", B200)


def test_pool_of_an_sm100_target_times_the_bf16_kernel():
    cal = load_calibration(None)
    fm = crossgen.crossgen_family(cal, "mla_bmm", "trtllm", exclude="b200", target=B200, vendor="nvidia",
                                  vendor_of=catalog_vendor)
    assert fm is not None and isinstance(fm.groups["fp8"], D.DispatchedGroupModel)
    got = fm.groups["fp8"].predict_frame(F.frame_phys("mla_bmm", ROWS, B200))
    want = fm.groups["bf16"].predict_frame(F.frame_phys("mla_bmm", ROWS.assign(dtype="bf16"), B200))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # without the rule the fp8 answer is the Hopper-class fp8 block-scaling kernel: slower
    old = crossgen.DISPATCH_RULES
    try:
        crossgen.DISPATCH_RULES = False
        plain = crossgen.crossgen_family(cal, "mla_bmm", "trtllm", exclude="b200", target=B200, vendor="nvidia",
                                         vendor_of=catalog_vendor)
    finally:
        crossgen.DISPATCH_RULES = old
    assert plain is not None and not isinstance(plain.groups["fp8"], D.DispatchedGroupModel)
    assert np.all(plain.groups["fp8"].predict_frame(F.frame_phys("mla_bmm", ROWS, B200)) > 1.2 * got)


def test_members_that_ran_the_other_kernel_leave_the_pool():
    cal = load_calibration(None)
    kw = dict(target=H100, vendor="nvidia", vendor_of=catalog_vendor)
    fm = crossgen.crossgen_family(cal, "mla_bmm", "trtllm", exclude="h100_sxm", **kw)
    b200_fp8 = cal.family_model("b200", "trtllm", "mla_bmm").groups["fp8"]
    members = [m for m, _, _ in fm.groups["fp8"].members] + [m for m, _ in fm.groups["fp8"].dropped]
    assert all(m.base != b200_fp8.base for m in members)
    # the bf16 pool keeps B200 (it runs the same bf16 bmm everywhere)
    bf16 = cal.family_model("b200", "trtllm", "mla_bmm").groups["bf16"]
    assert fm.groups["bf16"].rows >= bf16.rows


def test_query_path_uses_the_rule_for_an_unmeasured_blackwell():
    cal = load_calibration(None)
    for key in ("b300", "gb200"):       # SM100 class, cross-gen: the fp8 query is the bf16 bmm's
        km = CalibratedKernelModel(get_gpu(key), "trtllm", cal)
        fp8, bf16 = km.mla_bmm(64, 128, "fp8"), km.mla_bmm(64, 128, "bf16")
        assert fp8.tier == "cross-gen" and fp8.latency_ms == pytest.approx(bf16.latency_ms, rel=1e-12)
    km = CalibratedKernelModel(get_gpu("h100_pcie"), "trtllm", cal)     # Hopper: the fp8 block-scaling bmm
    assert km.mla_bmm(64, 128, "fp8").latency_ms > 1.5 * km.mla_bmm(64, 128, "bf16").latency_ms


def test_collectives_pool_only_the_targets_library():
    cal = load_calibration(None)
    b60 = GPUFeatures.from_spec(get_gpu("b60"))
    # the Arc Pro B60 (oneCCL): no other measured GPU ran oneCCL -> no pooled parameters
    assert crossgen.crossgen_alpha_beta(cal, b60, "intel", catalog_vendor) == {}
    # without a vendor the former pool (every measured GPU) answers
    assert crossgen.crossgen_alpha_beta(cal, b60)
    l40s = GPUFeatures.from_spec(get_gpu("l40s"))
    with_b60 = crossgen.crossgen_alpha_beta(cal, l40s)
    nvidia = crossgen.crossgen_alpha_beta(cal, l40s, "nvidia", catalog_vendor)
    assert set(nvidia) <= set(with_b60) and any(nvidia[k] != with_b60[k] for k in nvidia)
    assert crossgen.collective_library("Intel") == "oneccl" and crossgen.collective_library(None) is None


def test_b60_collectives_fall_back_to_the_link_model_on_the_query_path():
    cal = load_calibration(None)
    spec = get_gpu("b60")
    km = CalibratedKernelModel(spec, "vllm", cal)
    link = Link("pcie", spec.pcie_bw_gbps, 15.0)
    kt = km.collective("all_gather", 1 << 20, 4, link)
    assert kt.tier == "measured"        # the B60's own oneCCL fit
    # forced cross-gen: the spec link model, said so by the tier
    from llmplan.sim.kernel_calibration.tiers import choose_tier
    choice = choose_tier(cal, GPUFeatures.from_spec(spec), force="cross-gen")
    assert choice.collectives.alpha_beta("nccl", "all_gather", "fp16", 4) is None


def test_rows_naming_another_engines_kernel_take_that_engines_pool():
    old, packed = D.ENGINE_KERNELS[("gdn_decode", "trtllm")], D.ENGINE_KERNELS[("gdn_decode", "sglang")]
    got = D.pool_engines("gdn_decode", "sglang", np.array([old, packed, None, float("nan"), "other"], dtype=object))
    assert got.tolist() == ["trtllm", "sglang", "sglang", "sglang", "sglang"]
    assert D.pool_engines("gdn_decode", "trtllm", np.array([old, packed], dtype=object)).tolist() == ["trtllm", "sglang"]
    assert D.pool_engines("gemm", "sglang", np.array([old], dtype=object)).tolist() == ["sglang"]


def test_labelled_rows_on_the_table_path():
    from llmplan.sim.kernel_calibration.predict import predict_frame
    cal = load_calibration(None)
    a100 = get_gpu("a100_sxm")
    rows = pd.DataFrame({"backend": ["sglang"] * 2, "batch": [64, 64], "seq_len": [1, 1], "num_tokens": [64, 64],
                         "k_heads": [16, 16], "head_k_dim": [128, 128], "v_heads": [32, 32], "head_v_dim": [128, 128],
                         "kernel_source": [D.ENGINE_KERNELS[("gdn_decode", e)] for e in ("trtllm", "sglang")]})
    p, tiers = predict_frame(cal, "gdn_decode", rows, GPUFeatures.from_spec(a100), tier="cross-gen", spec=a100)
    assert tiers.tolist() == ["cross-gen", "cross-gen"]
    q, _ = predict_frame(cal, "gdn_decode", rows.assign(backend="trtllm"), GPUFeatures.from_spec(a100),
                         tier="cross-gen", spec=a100)
    assert p[0] == pytest.approx(q[0], rel=1e-12)        # the unpacked kernel: TensorRT-LLM's pool
    r, _ = predict_frame(cal, "gdn_decode", rows.drop(columns="kernel_source"), GPUFeatures.from_spec(a100),
                         tier="cross-gen", spec=a100)
    assert p[1] == pytest.approx(r[1], rel=1e-12) and p[0] != pytest.approx(r[0], rel=1e-3)


def test_members_whose_table_ran_an_older_kernel_leave_the_engines_pool():
    assert not D.member_runs_engine_kernel("gdn_decode", "sglang", "a100_sxm")
    assert D.member_runs_engine_kernel("gdn_decode", "sglang", "h200_sxm")
    assert D.member_runs_engine_kernel("gdn_decode", "trtllm", "a100_sxm")
    assert D.member_runs_engine_kernel("gemm", "sglang", "a100_sxm")
    cal = load_calibration(None)
    a100 = cal.family_model("a100_sxm", "sglang", "gdn_decode").groups["all"]
    fm = crossgen.crossgen_family(cal, "gdn_decode", "sglang", exclude="h100_sxm", target=H100, vendor="nvidia",
                                  vendor_of=catalog_vendor)
    others = [cal.family_model(k, "sglang", "gdn_decode") for k in sorted(cal.measured) if k not in ("h100_sxm",)]
    rows = [f.groups["all"].rows for f in others if f is not None]
    assert fm.groups["all"].rows == sum(rows) - a100.rows > 0      # the pool's rows: every member but A100's
    # the engine's current kernel is one the label table assigns to that engine
    for (fam, eng), label in D.ENGINE_KERNELS.items():
        assert eng in D.KERNEL_ENGINES[fam][label]


def test_every_catalog_gpu_has_an_architecture():
    """The dispatch rule (runs_instead) and the clock scaling key on crossgen_clock.ARCHITECTURE: a catalog
    GPU missing from it would silently run the dtype's own kernel (a Blackwell target timed with the Hopper
    fp8 block-scaling bmm) and keep its members' clocks, without a word. Every packaged GPU is listed."""
    from llmplan.hardware_catalog.loader import load_catalog
    from llmplan.sim.kernel_calibration.crossgen_clock import ARCHITECTURE
    catalog = load_catalog()
    assert catalog and sorted(k for k in catalog if k not in ARCHITECTURE) == []
    assert all(D.architecture(GPUFeatures.from_spec(g)) == ARCHITECTURE[k] for k, g in catalog.items())


def test_every_catalog_vendor_has_a_collective_library():
    """crossgen_alpha_beta pools every measured GPU for a target whose library is unknown (None): each vendor
    the catalog accepts must name its library, or such a GPU's collectives would silently take the pool of
    another library's GPUs."""
    from llmplan.hardware_catalog import loader
    from llmplan.hardware_catalog.spec import COLLECTIVE_LIBRARY
    assert sorted(loader._VENDORS) == sorted(COLLECTIVE_LIBRARY)
    for vendor in loader._VENDORS:
        assert crossgen.collective_library(vendor) == COLLECTIVE_LIBRARY[vendor]
    for key, spec in loader.load_catalog().items():
        assert crossgen.collective_library(catalog_vendor(key)) == spec.collective_library, key

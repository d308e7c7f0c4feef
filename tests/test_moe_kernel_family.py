"""MoE kernel families (sim/kernel_calibration/moe_kernels.py): the kernel a table row ran, the
engine's rule for a query, the per-family groups of a fit, and their resolution (table path and
one-query path alike)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from llmplan.calibration.fit import _kernel_items
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration import moe_kernels as K
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel, predict_family_frame
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams

GPU = GPUFeatures.from_spec(get_gpu("h100_sxm"))
MEAS = Path(__file__).resolve().parents[1] / ".." / "shared" / "measurements"


@pytest.mark.parametrize("label,family", [
    ("sglang_fused_moe_triton", K.TRITON),
    ("sglang_flashinfer_cutlass_moe", K.FLASHINFER_CUTLASS),
    ("sglang_flashinfer_trtllm_moe", K.FLASHINFER_TRTLLM),
    ("sglang_mxfp4_flashinfer_trtllm_moe", K.FLASHINFER_TRTLLM),
    ("sglang_marlin_moe_situ_as_silu", K.MARLIN),
    ("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", K.FLASHINFER_CUTLASS),
    ("vllm_fp8moe_triton_tritonexperts", K.TRITON),
    ("vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu", K.MARLIN),
    ("vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic", K.TRITON),
    ("vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic", K.FLASHINFER_TRTLLM),
    ("vllm_fused_moe", K.TRITON),
    ("moe_torch_flow_nongated", K.TRTLLM_TORCH_FLOW),
    ("moe_torch_flow_triton_fp8_block", K.TRTLLM_TORCH_FLOW),
    ("vllm_xpu_moe_mxfp4", K.XPU),
    ("something_new", K.OTHER),
])
def test_kernel_family_of_the_table_labels(label, family):
    assert K.kernel_family(label) == family
    assert K.kernel_families(pd.Series([label, label])).tolist() == [family, family]


def test_engine_rule():
    r = K.engine_moe_kernel
    # vLLM oracle/fp8.py: Hopper block fp8 prefers FlashInfer CUTLASS with EP, Triton without
    assert r("vllm", "h100_sxm", "fp8_block", 8) == K.FLASHINFER_CUTLASS
    assert r("vllm", "h200_sxm", "fp8_block", 1) == K.TRITON
    assert r("vllm", "b200", "fp8_block", 8) is None
    assert r("vllm", "h100_sxm", "w4a16_mxfp4", 1, "GptOssForCausalLM") == K.TRITON
    assert r("vllm", "h100_sxm", "w4a16_mxfp4", 1, "KimiK3ForConditionalGeneration") == K.MARLIN
    assert r("vllm", "h100_sxm", "bf16", 1, "Qwen3MoeForCausalLM") is None
    # SGLang: the model cases' backends, else the dtype's default; no architecture: unknown
    assert r("sglang", "h100_sxm", "bf16", 1, "NemotronHForCausalLM") == K.FLASHINFER_CUTLASS
    assert r("sglang", "h100_sxm", "bf16", 8, "Qwen3MoeForCausalLM") == K.TRITON
    assert r("sglang", "b200", "bf16", 8, "Qwen3MoeForCausalLM") == K.FLASHINFER_TRTLLM
    assert r("sglang", "b200", "bf16", 8, "MixtralForCausalLM") == K.TRITON
    assert r("sglang", "h200_sxm", "w4a16_mxfp4", 1, "GptOssForCausalLM") == K.TRITON
    assert r("sglang", "h200_sxm", "w4a16_mxfp4", 1, "KimiK3ForConditionalGeneration") == K.MARLIN
    assert r("sglang", "h100_sxm", "bf16", 1) is None
    assert r("trtllm", "h200_sxm", "w4a16_mxfp4", 1) == K.TRITON
    assert r("trtllm", "h200_sxm", "fp8", 1) is None
    assert r("vllm", "mi300x", "fp8_block", 8) is None


@pytest.mark.skipif(not (MEAS / "h100_sxm" / "moe.csv.gz").exists(), reason="measurements not present")
def test_rule_reproduces_the_h100_tables_kernels():
    df = pd.read_csv(MEAS / "h100_sxm" / "moe.csv.gz")
    fams = K.kernel_families(df["kernel_source"])
    # vLLM fp8_block: every row's kernel from EP alone
    v = (df["backend"] == "vllm") & (df["moe_dtype"] == "fp8_block")
    rule = [K.engine_moe_kernel("vllm", "h100_sxm", "fp8_block", int(ep)) for ep in df.loc[v, "moe_ep_size"]]
    assert v.sum() > 10000 and rule == fams[v.to_numpy()].tolist()
    # SGLang bf16: FlashInfer CUTLASS exactly for the Nemotron-3 (NemotronHForCausalLM) configurations
    nemotron = {(2688, 1856, 6, 128), (2048, 5120, 22, 512), (8192, 5120, 22, 512)}
    s = df[(df["backend"] == "sglang") & (df["moe_dtype"] == "bfloat16")]
    cfg = list(zip(s["hidden_size"], s["inter_size"], s["topk"], s["num_experts"]))
    arch = ["NemotronHForCausalLM" if c in nemotron else "Qwen3MoeForCausalLM" for c in cfg]
    rule = [K.engine_moe_kernel("sglang", "h100_sxm", "bf16", 1, a) for a in arch]
    assert rule == K.kernel_families(s["kernel_source"]).tolist()


def _group(floor_us: float) -> GroupModel:
    base = BaseParams(floor_us=floor_us, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5,
                      l2_bw_sm=60.0)
    return GroupModel(base, None, 100, {"num_tokens": [1.0, 16384.0]})


def _model() -> FamilyModel:
    return FamilyModel("moe", {"w4a16_mxfp4": _group(50.0), "int4_wo": _group(70.0), "fp8_block": _group(10.0)},
                       kernel_groups={"fp8_block/triton": _group(20.0), "fp8_block/flashinfer_cutlass": _group(30.0)},
                       group_kernels={"w4a16_mxfp4": ("triton",), "int4_wo": ("marlin",),
                                      "fp8_block": ("flashinfer_cutlass", "triton")})


def test_resolution_by_kernel_family():
    fm = _model()
    assert fm.resolve_group("fp8_block") == ("fp8_block", True)                 # unknown kernel: as before
    assert fm.resolve_group("fp8_block", "triton") == ("fp8_block/triton", True)
    assert fm.resolve_group("fp8", "flashinfer_cutlass") == ("fp8_block/flashinfer_cutlass", False)
    assert fm.resolve_group("w4a16_mxfp4", "triton") == ("w4a16_mxfp4", True)   # the group ran only it
    # Marlin w4a16 with no Marlin rows of its own dtype: the engine's Marlin int4 group
    assert fm.resolve_group("w4a16_mxfp4", "marlin") == ("int4_wo", False)
    # a kernel no group ran: the dtype chain as before
    assert fm.resolve_group("fp8_block", "flashinfer_trtllm") == ("fp8_block", True)
    # files without kernel records resolve as before whatever the kernel
    old = FamilyModel("moe", {"w4a16_mxfp4": _group(50.0), "int4_wo": _group(70.0)})
    assert old.resolve_group("w4a16_mxfp4", "marlin") == ("w4a16_mxfp4", True)
    back = FamilyModel.from_dict("moe", fm.to_dict())
    assert back.to_dict() == fm.to_dict() and back.group("fp8_block/triton").base.floor_us == 20.0
    assert "kernel_groups" not in old.to_dict() and "group_kernels" not in old.to_dict()


def test_table_rows_take_their_own_kernels_group():
    fm = _model()
    shape = {"num_tokens": 4, "hidden": 7168, "inter": 2048, "topk": 8, "num_experts": 256, "moe_tp": 1,
             "skew": 0.0, "dtype": "fp8_block"}
    rows = pd.DataFrame([{**shape, "moe_ep": 8, "kernel_source": "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"},
                         {**shape, "moe_ep": 8, "kernel_source": "vllm_fp8moe_triton_tritonexperts"},
                         {**shape, "moe_ep": 8}])
    with_k, ok = predict_family_frame(fm, rows, GPU)
    no_k, _ = predict_family_frame(fm, rows.drop(columns="kernel_source"), GPU)
    assert ok.all()
    # floors 30 / 20 / 10 us dominate at 4 tokens: each row answered by its kernel's group; rows without
    # a label and without an engine: the whole dtype group
    assert with_k[0] > with_k[1] > no_k[0] and no_k[0] == no_k[1] == no_k[2] == with_k[2]
    # rows without a label but with their engine take its rule, as a query does (vLLM, H100, EP 8: CUTLASS)
    ruled, _ = predict_family_frame(fm, rows.assign(backend="vllm").drop(columns="kernel_source"), GPU)
    assert ruled[0] == ruled[2] == with_k[0]


def test_kernel_items_only_for_mixed_dtype_groups():
    mixed = pd.DataFrame({"kernel_source": ["vllm_fp8moe_triton_tritonexperts"] * 2
                          + ["vllm_fp8moe_flashinfer_cutlass_flashinferexperts"] * 3, "x": range(5)})
    single = pd.DataFrame({"kernel_source": ["sglang_marlin_moe"] * 2, "x": range(2)})
    items = [("h100_sxm", "vllm", "moe", "fp8_block", mixed), ("h100_sxm", "sglang", "moe", "int4_wo", single),
             ("h100_sxm", "vllm", "gemm", "fp8", mixed)]
    extra, kernels = _kernel_items(items)
    assert [(e[3], len(e[4])) for e in extra] == [("fp8_block/flashinfer_cutlass", 3), ("fp8_block/triton", 2)]
    assert kernels == {("h100_sxm", "vllm", "moe", "fp8_block"): ("flashinfer_cutlass", "triton"),
                       ("h100_sxm", "sglang", "moe", "int4_wo"): ("marlin",)}


def test_the_query_names_its_kernel_from_the_rule():
    """The one-query path: vLLM H100 block fp8 at EP 8 is answered by the FlashInfer CUTLASS group,
    at EP 1 by the Triton group; the roofline-free shipped-file path (no kernel records) is unchanged."""
    def model(fm: FamilyModel) -> CalibratedKernelModel:
        return CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", Calibration({}, {"h100_sxm": GPU},
                                                                               {"h100_sxm": {"vllm": {"moe": fm}}}))

    km = model(_model())
    ep8 = km.moe(4, 7168, 2048, 8, 256, 1, 8, "fp8_block").latency_ms
    ep1 = km.moe(4, 7168, 2048, 8, 256, 1, 1, "fp8_block").latency_ms
    # the FlashInfer CUTLASS group (floor 30 us) at EP 8, the Triton group (20 us) at EP 1
    only = {f: model(FamilyModel("moe", {"fp8_block": _group(f)})) for f in (10.0, 20.0, 30.0)}
    assert ep8 == only[30.0].moe(4, 7168, 2048, 8, 256, 1, 8, "fp8_block").latency_ms
    assert ep1 == only[20.0].moe(4, 7168, 2048, 8, 256, 1, 1, "fp8_block").latency_ms
    # a calibration without kernel records: the whole dtype group, as before
    old = model(FamilyModel("moe", {"fp8_block": _group(10.0)}))
    assert old.moe(4, 7168, 2048, 8, 256, 1, 8, "fp8_block").latency_ms == \
        only[10.0].moe(4, 7168, 2048, 8, 256, 1, 8, "fp8_block").latency_ms < ep1


def test_kernel_items_with_unlabelled_rows():
    """Rows without a kernel_source label (a user's table) do not crash the fit: they stay in the dtype
    group, the labelled rows of a mixed group still get their kernel groups, and a group holding
    unlabelled rows records no kernel families (unknown)."""
    part = pd.DataFrame({"kernel_source": ["sglang_fused_moe_triton", None, "sglang_marlin_moe", "sglang_marlin_moe"],
                         "x": range(4)})
    bare = pd.DataFrame({"x": range(3)})
    extra, kernels = _kernel_items([("h100_sxm", "sglang", "moe", "w4a16_mxfp4", part),
                                    ("h100_sxm", "sglang", "moe", "bf16", bare)])
    assert [(e[3], len(e[4])) for e in extra] == [("w4a16_mxfp4/marlin", 2), ("w4a16_mxfp4/triton", 1)]
    assert kernels == {}


def test_every_nvidia_catalog_gpu_has_a_compute_capability():
    """A GPU missing from GPU_SM gets no MoE kernel rule (whole dtype group) without a word: every NVIDIA
    GPU of the packaged catalog is listed."""
    from llmplan.hardware_catalog.loader import load_catalog
    from llmplan.sim.kernel_calibration.moe_kernels import GPU_SM
    nvidia = sorted(k for k, g in load_catalog().items() if str(g.vendor).lower() == "nvidia")
    assert nvidia and [k for k in nvidia if k not in GPU_SM] == []

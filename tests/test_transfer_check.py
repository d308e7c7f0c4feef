"""Transfer check (calibration/transfer_check.py): measured served rows replayed on another GPU,
and the MXFP4 fused-MoE kernel choice it led to (sim/calibrated.py MXFP4_MOE_GROUP)."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration import transfer_check as tc
from llmplan.calibration import validate_serving as vs
from llmplan.calibration.engine_fit import load_engine_overrides
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.gemm_dtypes import moe_query_dtype
from llmplan.model_catalog.loader import load_model
from llmplan.sim.calibrated import CalibratedKernelModel
from test_validate_serving import row as serving_row


def row(**kw) -> dict:
    """One aggregated row in the e2e_serving.csv layout: vLLM Llama-3.1-8B on H200, 8 clients."""
    base = {"silicon_data_source": "synthetic; silicon_concurrency=8", "backend": "vllm", "backend_version": "0.11.0",
            "system": "h200_sxm", "isl": 512, "osl": 64, "batch_size": 8, "silicon_ttft_ms": 40.0,
            "silicon_tpot_ms": 7.0, "id": "r0"}
    return serving_row(**{**base, **kw})


# ----------------------------------------------------------------------------- physics


def test_expected_range_h200_to_b200_from_catalog_figures():
    h200, b200 = get_gpu("h200_sxm"), get_gpu("b200")
    e = tc.expected_range(h200, b200, "fp8")
    assert e.memory == pytest.approx(h200.hbm_bw_gbps / b200.hbm_bw_gbps)          # 4.8 / 8.0 TB/s
    assert e.compute == pytest.approx(h200.peak_tflops("fp8") / b200.peak_tflops("fp8"))
    assert e.link == pytest.approx(h200.scaleup_bw_gbps / b200.scaleup_bw_gbps)     # NVLink4 vs NVLink5
    assert e.lo == pytest.approx(min(e.memory, e.compute, e.link)) and e.hi == 1.0
    # 4-bit weights: bf16 (W4A16) on Hopper, NVFP4 tensor cores on Blackwell -> a much lower bound
    f = tc.expected_range(h200, b200, "fp4")
    assert f.compute == pytest.approx(h200.peak_tflops("bf16") / b200.peak_tflops("fp4"))
    assert f.lo < e.lo
    # the other way round the target is slower in every resource: the range lies above 1
    back = tc.expected_range(b200, h200, "bf16")
    assert back.lo > 1.0 and back.hi == pytest.approx(max(back.memory, back.compute, back.link))


def test_compute_dtypes_follow_the_gpu():
    assert tc.compute_dtypes(get_gpu("h200_sxm"), "fp4") == ("fp8", "bf16")   # no fp4 tensor cores
    assert tc.compute_dtypes(get_gpu("b200"), "fp4")[0] == "fp4"
    assert tc.compute_dtypes(get_gpu("a100_sxm"), "fp8") == ("bf16",)          # no fp8 on Ampere
    assert tc.weights_label(row()) == "bf16"                                   # empty: the checkpoint's own
    assert tc.weights_label(row(gemm_quant_mode="nvfp4")) == "fp4"


# ----------------------------------------------------------------------------- replay


def test_transfer_rows_replay_through_validate_serving(tmp_path):
    df = pd.DataFrame([row(), row(id="r1", silicon_data_source="synthetic; silicon_concurrency=32", batch_size=32,
                                  osl=128, silicon_ttft_ms=80.0, silicon_tpot_ms=9.0)])
    src = tmp_path / "e2e_serving.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "t.csv"
    assert tc.main(["--measurements", str(src), "--to", "b200", "--out", str(out), "--calibration", "spec",
                    "--engine-profiles", "none", "--no-progress", "--workers", "1"]) == 0
    res = pd.read_csv(out)
    assert list(res["target"]) == ["b200", "b200"] and list(res["source_gpu"]) == ["h200_sxm", "h200_sxm"]
    assert (res["source_status"] == "simulated").all() and (res["target_status"] == "simulated").all()
    # the relabelled replay is the one validate serving runs on a file that says b200
    moved = vs.validate_serving(tc.relabel(df, "b200"), vs.SimOptions(calibration="spec"),
                                load_engine_overrides("none")[0], workers=1)
    assert res["target_pred_tpot_ms"].to_numpy() == pytest.approx(moved["predicted_tpot_ms"].to_numpy())
    # spec roofline, no host time: every ratio lies in the catalog's physical range, below 1
    assert (res["ratio_tpot"] < 1.0).all() and (res["ratio_tpot"] >= res["expected_lo"] * 0.98).all()
    assert (res["ratio_ttft"] < 1.0).all() and res["flag"].isna().all()
    # the B200 holds more KV than the H200 (physical bytes, 180 vs 141 GB)
    assert (res["kv_tokens_target"] > res["kv_tokens_source"]).all() and not res["kv_limited"].any()
    groups = pd.read_csv(tmp_path / "t_groups.csv")
    assert len(groups) == 1 and groups["target_simulated"].iloc[0] == 2


def test_unknown_target_is_a_user_error(tmp_path, capsys):
    src = tmp_path / "e2e_serving.csv"
    pd.DataFrame([row()]).to_csv(src, index=False)
    assert tc.main(["--measurements", str(src), "--to", "no_such_gpu", "--no-progress"]) == 2
    assert "--to" in capsys.readouterr().out


def test_a_target_every_row_was_measured_on_is_a_user_error(tmp_path, capsys):
    src = tmp_path / "e2e_serving.csv"
    pd.DataFrame([row()]).to_csv(src, index=False)   # measured on the H200
    assert tc.main(["--measurements", str(src), "--to", "h200", "--no-progress"]) == 2
    out = capsys.readouterr().out
    assert "--to" in out and "measured on h200_sxm" in out and "Traceback" not in out


def test_relabel_changes_only_the_gpu():
    df = pd.DataFrame([row(), row(id="r1", system="h100_sxm")])
    moved = tc.relabel(df, "b200")
    assert list(moved["system"]) == ["b200", "b200"]
    assert moved.drop(columns="system").equals(df.drop(columns="system"))


# ----------------------------------------------------------------------------- MXFP4 experts


def test_mxfp4_checkpoint_queries_its_own_moe_kernels():
    assert moe_query_dtype(load_model("openai/gpt-oss-120b"), "fp4") == "mxfp4"
    assert moe_query_dtype(load_model("nvidia/DeepSeek-R1-NVFP4"), "fp4") == "fp4"   # NVFP4 stays fp4
    assert moe_query_dtype(load_model("openai/gpt-oss-120b"), "bf16") == "bf16"      # not its own format


@pytest.mark.parametrize("backend, group", [("vllm", "w4a16_mxfp4"), ("trtllm", "w4a8_mxfp4"),
                                            ("sglang", "w4a8_mxfp4")])
def test_mxfp4_moe_group_per_engine_on_blackwell_and_hopper(backend, group):
    b200 = CalibratedKernelModel(get_gpu("b200"), backend)
    assert b200.mxfp4_moe_group() == group
    # Hopper has no fp4 tensor cores: W4A16 for every engine, the group an fp4 query reached there,
    # so the H100/H200 replays do not change
    h200 = CalibratedKernelModel(get_gpu("h200_sxm"), backend)
    assert h200.mxfp4_moe_group() == "w4a16_mxfp4"
    for n in (1, 64, 1024):
        args = (n, 2880, 2880, 4, 128, 1, 1)
        assert h200.moe(*args, "mxfp4").latency_ms == pytest.approx(h200.moe(*args, "fp4").latency_ms)


def test_vllm_mxfp4_on_b200_is_not_timed_with_the_nvfp4_kernel():
    k = CalibratedKernelModel(get_gpu("b200"), "vllm")
    args = (1024, 2880, 2880, 4, 128, 1, 1)
    mx, nv = k.moe(*args, "mxfp4"), k.moe(*args, "fp4")
    # the W4A16 MXFP4 kernel reads the same weight bytes but computes in bf16: slower than W4A4 NVFP4
    assert mx.tier == "measured" and mx.latency_ms > 1.5 * nv.latency_ms


# ----------------------------------------------------------------------------- DSA floor


def test_sparse_mla_floor_is_blackwells_own_on_b200():
    from llmplan.sim.kernels import DSA_ATTN_FLOOR_US, DSA_ATTN_FLOOR_US_BY_GPU, RooflineKernelModel

    args = (4, 1, 2048, 2048, 8, 512, 64, "bf16")   # GLM-5 decode, 4 sequences, 8 heads per GPU
    b200 = RooflineKernelModel(get_gpu("b200")).dsa_attention(*args)
    h100 = RooflineKernelModel(get_gpu("h100_sxm")).dsa_attention(*args)
    assert b200.latency_ms == pytest.approx(DSA_ATTN_FLOOR_US_BY_GPU["b200"] / 1e3)
    assert h100.latency_ms == pytest.approx(DSA_ATTN_FLOOR_US / 1e3)   # H100/H200 unchanged
    assert b200.bound == h100.bound == "latency"


# ----------------------------------------------------------------------------- SGLang graphs per GPU


@pytest.mark.parametrize("gpu, tp, eager", [("h200_sxm", 1, True), ("h200_sxm", 4, False), ("b200", 1, False)])
def test_sglang_graph_max_bs_follows_gpu_memory_and_tp(gpu, tp, eager):
    from llmplan.sim.cuda_graphs import eager_step, sglang_graph_max_bs

    bs = sglang_graph_max_bs(get_gpu(gpu).memory_bytes, tp)
    assert bs == (256 if eager else 512)
    # a decode batch of 384 replays a graph where SGLang captured up to 512, else it runs eagerly
    assert eager_step("sglang", 512, 384, True, bs) is eager
    assert eager_step("sglang", 512, 513, True, bs)                 # above any capture: eager


def test_breakdown_prints_the_row_on_both_gpus(tmp_path, capsys):
    src = tmp_path / "e2e_serving.csv"
    pd.DataFrame([row()]).to_csv(src, index=False)
    assert tc.main(["--measurements", str(src), "--to", "b200", "--breakdown", "r0", "--calibration", "spec",
                    "--engine-profiles", "none"]) == 0
    out = capsys.readouterr().out
    assert "on h200_sxm" in out and "on b200" in out and out.count("decode step") == 2

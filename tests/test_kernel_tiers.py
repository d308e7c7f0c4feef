"""One evaluator of a fitted calibration: the table path (``predict_frame``, used by
``validate kernels`` and the residual statistics) and the query path
(``CalibratedKernelModel``, used by ``plan`` and ``simulate``) give the same prediction
with the same tier, family by family, for a measured, a sibling and a cross-gen GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import (GEMM_FP8_BLOCK_HOST_BOUND, GEMM_FP8_TENSOR_FLOOR, DEFAULT_MOE_SKEW, MOE_FP4_DTYPES,
                                    MLA_PREFILL_MHA, MOE_FP4_STAND_IN, CalibratedKernelModel)
from llmplan.sim.kernel_calibration.calib_file import load_calibration
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.predict import predict_frame
from llmplan.sim.kernel_calibration.tiers import choose_tier
from llmplan.sim.kernels import Link

BACKENDS = ("vllm", "sglang", "trtllm")


def _rows(family: str, backend: str) -> pd.DataFrame:
    """Canonical query rows of a family (the columns the reader produces)."""
    rows: list[dict] = []
    if family == "gemm":
        for dt in ("bf16", "fp8", "fp8_block", "fp4"):
            for m, n, k in ((1, 4096, 4096), (37, 14336, 4096), (512, 2048, 7168), (8192, 8192, 8192)):
                rows.append({"dtype": dt, "m": m, "n": n, "k": k})
    elif family == "attention_prefill":
        for b, s, ctx, h, kvh, d in ((1, 128, 0, 32, 8, 128), (4, 2048, 0, 64, 8, 128), (2, 512, 1024, 16, 16, 64)):
            rows.append({"batch": b, "q_len": s, "kv_len": s + ctx, "num_heads": h, "num_kv_heads": kvh,
                         "head_dim": d, "kv_dtype": "bf16", "attn_dtype": "bf16", "window": 0})
    elif family == "attention_decode":
        for b, kv, h, kvh, d, dt in ((1, 100, 32, 8, 128, "bf16"), (64, 8000, 64, 8, 128, "fp8"),
                                     (256, 2000, 16, 2, 128, "bf16")):
            rows.append({"batch": b, "kv_len": kv, "num_heads": h, "num_kv_heads": kvh, "head_dim": d,
                         "kv_dtype": dt, "window": 0})
    elif family == "moe":
        for dt in ("bf16", "fp8_block", "w4a16_mxfp4"):
            for t, hid, inter, k, e, tp, ep in ((8, 7168, 2048, 8, 256, 1, 8), (512, 4096, 1536, 8, 128, 1, 4),
                                                (4096, 2880, 2880, 4, 32, 2, 1)):
                rows.append({"dtype": dt, "num_tokens": t, "hidden": hid, "inter": inter, "topk": k,
                             "num_experts": e, "moe_tp": tp, "moe_ep": ep, "skew": DEFAULT_MOE_SKEW})
    elif family == "mla_prefill":
        for b, s, h in ((1, 1024, 16), (4, 256, 128)):
            rows.append({"batch": b, "q_len": s, "kv_len": s, "num_heads": h, "kv_dtype": "bf16"})
    elif family == "mla_decode":
        for b, kv, h in ((1, 1000, 16), (64, 8000, 128)):
            rows.append({"batch": b, "kv_len": kv, "num_heads": h, "kv_dtype": "bf16"})
    elif family == "mla_bmm":
        for dt in ("bf16", "fp8"):
            for op in ("pre", "post"):
                for t, h in ((1, 16), (64, 128), (4096, 32)):
                    rows.append({"dtype": dt, "op": op, "num_tokens": t, "num_heads": h})
    elif family in ("gdn_prefill", "gdn_decode"):
        for b, s, hk, dk, hv, dv in ((1, 1024, 16, 128, 32, 128), (8, 256, 4, 128, 8, 128), (64, 1, 2, 128, 4, 128)):
            s = s if family == "gdn_prefill" else 1
            rows.append({"batch": b, "seq_len": s, "num_tokens": b * s, "k_heads": hk, "head_k_dim": dk,
                         "v_heads": hv, "head_v_dim": dv, "conv_dim": 2 * hk * dk + hv * dv})
    elif family == "nccl":
        for op in ("all_gather", "reduce_scatter", "all_reduce", "alltoall"):
            for n in (2, 8):
                for nbytes in (65536.0, 64e6):
                    if op == "all_reduce" and nbytes <= 8 * 2 ** 20:
                        continue    # a query that small is the engine's all-reduce (custom_allreduce rows)
                    rows.append({"op": op, "num_gpus": n, "message_bytes": nbytes, "dtype": "fp16", "mode": "graph"})
    elif family == "custom_allreduce":
        for n in (2, 4, 8):
            for nbytes in (8192.0, 1e6, 4e6):
                rows.append({"op": "all_reduce", "num_gpus": n, "message_bytes": nbytes, "mode": "graph"})
    return pd.DataFrame(rows).assign(backend=backend, family=family)


def _one(m: CalibratedKernelModel, family: str, r, link: Link):
    if family == "gemm":
        return m.gemm(r.m, r.n, r.k, r.dtype)
    if family == "attention_prefill":
        return m.attention_prefill(r.batch, r.q_len, r.kv_len, r.num_heads, r.num_kv_heads, r.head_dim, r.kv_dtype)
    if family == "attention_decode":
        return m.attention_decode(r.batch, r.kv_len, r.num_heads, r.num_kv_heads, r.head_dim, r.kv_dtype)
    if family == "moe":
        return m.moe(r.num_tokens, r.hidden, r.inter, r.topk, r.num_experts, r.moe_tp, r.moe_ep, r.dtype)
    if family == "mla_prefill":
        return m.mla_prefill(r.batch, r.q_len, r.kv_len, r.num_heads, 512, 128, 64, 128, r.kv_dtype)
    if family == "mla_decode":
        return m.mla_decode(r.batch, r.kv_len, r.num_heads, 512, 64, r.kv_dtype)
    if family == "mla_bmm":
        return m.mla_bmm(r.num_tokens, r.num_heads, r.dtype, r.op)
    if family in ("gdn_prefill", "gdn_decode"):
        return m.gated_delta_net(family[4:], r.batch, r.seq_len, r.k_heads, r.head_k_dim, r.v_heads, r.head_v_dim)
    return m.collective(r.op, r.message_bytes, r.num_gpus, link)


def _gpus():
    """(label, GPUSpec) for a measured GPU, a sibling (the same die with 2x memory
    bandwidth) and a cross-gen GPU (twice the SMs), all on an NVLink GPU of the shipped file."""
    cal = load_calibration(None)
    key = "h100_sxm" if "h100_sxm" in cal.measured else sorted(cal.measured)[0]
    base = get_gpu(key)
    return [("measured", base), ("sibling", base.with_overrides(hbm_bw_gbps=2 * base.hbm_bw_gbps)),
            ("cross-gen", base.with_overrides(sm_count=2 * base.sm_count))]


FAMILIES = ("gemm", "attention_prefill", "attention_decode", "moe", "mla_prefill", "mla_decode", "mla_bmm",
            "gdn_prefill", "gdn_decode", "nccl", "custom_allreduce")


@pytest.mark.parametrize("label,spec", _gpus(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("family", FAMILIES)
def test_table_path_equals_query_path(label, spec, family):
    cal = load_calibration(None)
    gf = GPUFeatures.from_spec(spec)
    assert choose_tier(cal, gf).tier == label
    link = Link("nvlink", gf.fabric_bw_gbps, 8.0)
    for backend in BACKENDS:
        df = _rows(family, backend)
        if family == "moe":   # the query path reads "fp8" as the block-scaled group; rows name it
            df = df[df["dtype"] != "fp8"]
        if family == "gemm" and backend in GEMM_FP8_BLOCK_HOST_BOUND:   # query path: fp8 stand-in
            df = df[df["dtype"] != "fp8_block"]
        if family == "gemm" and backend in GEMM_FP8_TENSOR_FLOOR:   # query path: min(fp8, fp8_block)
            df = df[df["dtype"] != "fp8"]
        if family == "moe" and backend in MOE_FP4_STAND_IN:   # query path: fp4 MoE engine stand-in first
            df = df[~df["dtype"].isin(MOE_FP4_DTYPES)]
        if family == "mla_prefill" and backend in MLA_PREFILL_MHA:   # query path: MHA form (attention_prefill)
            continue
        pred, tiers = predict_frame(cal, family, df, gf, spec=spec)
        m = CalibratedKernelModel(spec, backend, cal)
        assert m.tier == label
        got = [_one(m, family, r, link) for r in df.itertuples()]
        assert np.allclose(pred, [k.latency_ms for k in got], rtol=1e-9, atol=0), (family, backend)
        assert list(tiers) == [k.tier for k in got], (family, backend)


def test_every_tier_is_exercised():
    cal = load_calibration(None)
    seen = set()
    for label, spec in _gpus():
        gf = GPUFeatures.from_spec(spec)
        for fam in ("gemm", "attention_decode", "nccl"):
            seen |= set(predict_frame(cal, fam, _rows(fam, "vllm"), gf, spec=spec)[1])
    assert {"measured", "sibling", "cross-gen"} <= seen


def test_forced_cross_gen_ignores_own_and_sibling_parameters():
    cal = load_calibration(None)
    _, spec = _gpus()[0]
    gf = GPUFeatures.from_spec(spec)
    df = _rows("gemm", "vllm")
    auto, t_auto = predict_frame(cal, "gemm", df, gf, spec=spec)
    xg, t_xg = predict_frame(cal, "gemm", df, gf, "cross-gen", spec=spec)
    assert set(t_auto) == {"measured"} and set(t_xg) <= {"cross-gen", "spec"}
    assert not np.allclose(auto, xg)
    with pytest.raises(ValueError):
        choose_tier(cal, gf, force="measured-ish")


def test_validate_reports_the_tier_plan_uses(tmp_path):
    """A GPU without measurements of its own: ``validate kernels`` scores the tier the
    kernel model uses for it (sibling here), not another one."""
    from llmplan.calibration.validate_kernels import validate_kernels
    from llmplan.calibration.reader import read_measurements
    from test_calibration_synth import make_measurements_dir

    root = make_measurements_dir(tmp_path, ("h100_sxm", "h200_sxm"))
    meas = read_measurements(root)
    cal = load_calibration(None)
    for key in ("h100_sxm", "h200_sxm"):
        res = validate_kernels(meas, key, cal, families=["gemm", "attention_decode"], roofline=False)
        used = CalibratedKernelModel(get_gpu(key), "vllm", cal).tier
        tiers = set(res.frame["tier"]) - {"spec"}
        assert tiers == {used}, (key, tiers, used)
        assert f"tier {used}" in res.mode


def test_similarity_weights_and_vendor_pool():
    from llmplan.sim.kernel_calibration import crossgen

    feats = {k: GPUFeatures.from_spec(get_gpu(k)) for k in ("h100_sxm", "h200_sxm", "a100_sxm", "l40s")}
    w = crossgen.similarity_weights(feats["h200_sxm"], [feats["h100_sxm"], feats["a100_sxm"], feats["l40s"]], 0.5)
    assert abs(sum(w) - 1.0) < 1e-12 and w[0] > w[1] and w[0] > w[2]       # nearest figures weigh most
    eq = crossgen.similarity_weights(feats["h200_sxm"], [feats["h100_sxm"], feats["a100_sxm"]], None)
    if crossgen.SIMILARITY_SCALE is None:
        assert eq == [0.5, 0.5]
    # weighted geometric mean: all weight on one GPU gives its parameters back
    from llmplan.sim.kernel_calibration.physics import BaseParams
    a, b = BaseParams.prior(), BaseParams(9.0, 1.0, 0.3, 0.5, 0.2, 4.0, 0.4, 90.0)
    m = crossgen.mean_params([a, b], [0.0, 1.0])
    assert m.floor_us == pytest.approx(9.0) and m.g == pytest.approx(0.2)
    # the cross-gen pool takes the target vendor's measured GPUs when there are any
    cal = load_calibration(None)
    nvidia = crossgen.source_gpus(cal, "gemm", "vllm", vendor="nvidia", vendor_of=lambda k: "nvidia")
    assert set(nvidia) == set(cal.measured)
    none_same = crossgen.source_gpus(cal, "gemm", "vllm", vendor="amd", vendor_of=lambda k: "nvidia")
    assert set(none_same) == set(nvidia)                          # no AMD GPU measured: pool all
    only = sorted(cal.measured)[0]
    one = crossgen.source_gpus(cal, "gemm", "vllm", vendor="x",
                               vendor_of=lambda k: "x" if k == only else "nvidia")
    assert set(one) <= {only}


def test_every_catalog_gpu_gets_one_tier_on_both_paths():
    from llmplan.hardware_catalog.loader import load_catalog

    cal = load_calibration(None)
    df = _rows("gemm", "vllm")
    df = df[df["dtype"] == "bf16"]
    seen = set()
    for key in sorted(load_catalog()):
        spec = get_gpu(key)
        gf = GPUFeatures.from_spec(spec)
        m = CalibratedKernelModel(spec, "vllm", cal)
        _, tiers = predict_frame(cal, "gemm", df, gf, spec=spec)
        assert set(tiers) == {m.tier} == {m.gemm(64, 4096, 4096, "bf16").tier}, key
        seen.add(m.tier)
    assert {"measured", "cross-gen"} <= seen

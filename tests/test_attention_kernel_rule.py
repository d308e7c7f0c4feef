"""The engine's attention-kernel rule (sim/kernel_calibration/attention_kernels.py): the kernel the
engine's table ran per head configuration, majority with stated tie order, coarser levels for unseen
configurations, and the fit records it only for tables that mix kernels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmplan.sim.kernel_calibration import attention_kernels as AK
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel
from llmplan.sim.kernel_calibration.physics import BaseParams


def _rows(spec: list[tuple[int, int, int, str, int, str, int]]) -> tuple[pd.DataFrame, np.ndarray]:
    """(head_dim, q heads, kv heads, kv dtype, window, label, rows)."""
    recs = [{"head_dim": d, "num_heads": q, "num_kv_heads": k, "kv_dtype": kv, "window": w, "kernel_source": lab}
            for d, q, k, kv, w, lab, n in spec for _ in range(n)]
    df = pd.DataFrame(recs)
    return df, AK.attention_kernels(df["kernel_source"].to_numpy())


def test_kv_class_and_keys():
    assert [AK.kv_class(x) for x in ("bf16", "bfloat16", "fp16", "fp8", "FP8_E4M3", "float8_e5m2")] == \
        ["16bit", "16bit", "16bit", "fp8", "fp8", "fp8"]
    assert AK.config_keys(128, 32, 8, "fp8", 4096) == ("d128/q32/k8/fp8/w1", "d128/fp8/w1", "d128/fp8", "d128")
    assert AK.config_keys(64, 8, 1, "bf16", 0) == ("d64/q8/k1/16bit/w0", "d64/16bit/w0", "d64/16bit", "d64")


def test_lookup_majority_and_tie_order():
    df, lab = _rows([(128, 8, 1, "bf16", 0, "flashinfer", 3), (128, 8, 1, "bf16", 0, "trtllm_mha", 3),   # tie
                     (128, 16, 2, "bf16", 0, "trtllm_mha", 4),
                     (256, 8, 1, "bf16", 0, "triton", 2), (256, 8, 1, "bf16", 0, "trtllm_mha", 1),
                     (192, 8, 1, "fp8", 0, "triton", 2), (192, 8, 1, "bf16", 0, "flash", 2),
                     (64, 1, 1, "bf16", 0, None, 5)])
    lk = AK.head_kernel_lookup(df, lab)
    # a tie goes to the kernel most of the table ran (trtllm_mha: 8 rows against flashinfer's 3)
    assert lk["d128/q8/k1/16bit/w0"] == "trtllm_mha"
    assert lk["d256/q8/k1/16bit/w0"] == "triton"           # majority of its own rows
    assert lk["d256"] == "triton" and lk["d128"] == "trtllm_mha"
    # equal table totals (triton 2 + 2 = 4 ... flash 2): head dim 192's tie goes to triton (4 rows in all)
    assert lk["d192"] == "triton" and lk["d192/16bit"] == "flash" and lk["d192/fp8"] == "triton"
    assert not any(k.startswith("d64") for k in lk)        # unlabelled rows count for nothing
    # both kernels equally frequent everywhere: alphabetical
    df2, lab2 = _rows([(128, 8, 1, "bf16", 0, "b", 1), (128, 8, 1, "bf16", 0, "a", 1)])
    assert AK.head_kernel_lookup(df2, lab2)["d128"] == "a"


def test_rule_falls_back_by_level():
    lk = {"d128/q8/k1/16bit/w0": "flashinfer", "d128/16bit/w0": "trtllm_mha", "d128/fp8": "xqa", "d128": "fa"}
    rule = lambda *a: AK.engine_attention_kernel(lk, *a)
    assert rule(128, 8, 1, "bf16", 0) == "flashinfer"          # the configuration itself
    assert rule(128, 32, 8, "bf16", 0) == "trtllm_mha"         # unseen: its head dim, KV dtype and window
    assert rule(128, 32, 8, "fp8", 0) == "xqa"                 # then head dim and KV dtype
    assert rule(128, 32, 8, "bf16", 512) == "fa"               # then head dim
    assert rule(256, 8, 1, "bf16", 0) is None                  # never ran: the whole table
    assert AK.engine_attention_kernel({}, 128, 8, 1, "bf16", 0) is None
    assert AK.engine_attention_kernel(None, 128, 8, 1, "bf16", 0) is None
    df, _ = _rows([(128, 8, 1, "bf16", 0, "other", 1), (128, 32, 8, "fp8", 0, None, 1), (256, 1, 1, "bf16", 0, "x", 1)])
    assert AK.rule_kernels(lk, df).tolist() == ["flashinfer", "xqa", None]   # labels are not read
    assert AK.rule_kernels({}, df).tolist() == [None, None, None]


def test_lookup_round_trips_and_is_absent_for_single_kernel_tables():
    gm = GroupModel(BaseParams(floor_us=10.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5,
                               l2_bw_sm=60.0), None, 10, {})
    plain = FamilyModel("attention_decode", {"all": gm})
    assert "head_kernels" not in plain.to_dict()           # sections of one-kernel tables stay byte-identical
    fm = FamilyModel("attention_prefill", {"all": gm}, kernel_groups={"all/a": gm},
                     head_kernels={"d128": "a", "d64/16bit": "b"})
    back = FamilyModel.from_dict("attention_prefill", fm.to_dict())
    assert back.head_kernels == fm.head_kernels and back.to_dict() == fm.to_dict()


def test_single_token_prefill_takes_the_decode_kernel_vllm_runs():
    """vLLM runs a one-token prefill call on the decode kernel (split_decodes_and_prefills): the rule keeps
    those rows apart (keys with SINGLE_TOKEN), and they do not vote for longer prefills."""
    recs = ([{"q_len": 1, "kernel_source": "dec"}] * 2 + [{"q_len": 16, "kernel_source": "pre"}] * 1
            + [{"q_len": 1024, "kernel_source": "pre"}] * 1)
    df = pd.DataFrame([{"head_dim": 128, "num_heads": 8, "num_kv_heads": 1, "kv_dtype": "fp8", "window": 0, **r}
                       for r in recs])
    lk = AK.head_kernel_lookup(df, AK.attention_kernels(df["kernel_source"].to_numpy()))
    assert lk["d128"] == "pre" and lk["d128" + AK.SINGLE_TOKEN] == "dec"
    assert AK.engine_attention_kernel(lk, 128, 32, 4, "fp8", 0, 1) == "dec"      # unseen configuration, q_len 1
    assert AK.engine_attention_kernel(lk, 128, 32, 4, "fp8", 0, 2) == "pre"
    assert AK.engine_attention_kernel(lk, 128, 32, 4, "fp8", 0) == "pre"         # decode family: no length
    assert AK.engine_attention_kernel({"d128": "pre"}, 128, 8, 1, "fp8", 0, 1) == "pre"   # no one-token record
    assert AK.rule_kernels(lk, df).tolist() == ["dec", "dec", "pre", "pre"]

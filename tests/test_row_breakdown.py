"""calibration.row_breakdown: per-operator decomposition of a served row's prefill and decode steps."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llmplan.calibration import row_breakdown as rb
from llmplan.errors import EXIT_USER_ERROR


def _row(**kw) -> dict:
    r = {"id": "ds", "silicon_data_source": "synthetic; silicon_concurrency=4", "backend": "sglang",
         "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-V3", "system": "h200_sxm",
         "precision": "fp8", "mode": "agg", "isl": 8192, "osl": 1024, "gemm_quant_mode": "fp8",
         "moe_quant_mode": "fp8_block", "batch_size": 4, "tp_size": 8, "pp_size": 1, "attention_dp_size": 1,
         "moe_tp_size": 8, "moe_ep_size": 1, "silicon_ttft_ms": 447.0, "silicon_tpot_ms": 11.3}
    r.update(kw)
    return r


@pytest.fixture()
def csv(tmp_path):
    p = tmp_path / "e2e_serving.csv"
    pd.DataFrame([_row(), _row(id="llama", model_path="meta-llama/Llama-3.1-8B-Instruct", backend="vllm",
                               backend_version="0.12.0", precision=math.nan, gemm_quant_mode=math.nan,
                               moe_quant_mode=math.nan, tp_size=1, moe_tp_size=1, isl=1024, osl=128)]).to_csv(p, index=False)
    return p


def test_breakdown_sums_to_the_step_and_names_the_tables(csv):
    df = rb.read_serving_files([csv])
    case, _ = rb.case_of(df, rb.find_row(df, "ds"), "none")
    b = rb.breakdown_case(case)
    # the operators (host included) add up to the step time the simulator uses
    assert sum(o.latency_ms for o in b.prefill) == pytest.approx(b.prefill_ms, rel=1e-9)
    assert sum(o.latency_ms for o in b.decode) == pytest.approx(b.decode_ms, rel=1e-9)
    names = {o.name: o for o in b.prefill}
    # SGLang runs the MLA prefill in the MHA form: answered by its context-attention table
    assert names["mla_prefill"].engine_table == "sglang"
    assert names["moe_experts"].engine_table == "sglang" and names["moe_experts"].tier == "measured"
    assert {o.name for o in b.decode} >= {"mla_decode", "moe_experts", "host_overhead"}
    # decode: N sequences, far cheaper than one 8k prefill
    assert b.decode_ms < 0.1 * b.prefill_ms
    text = rb.render(b)
    assert "mla_prefill" in text and "measured mean TPOT 11.30 ms" in text


def test_row_by_index_and_cli(csv, capsys):
    assert rb.main(["--measurements", str(csv), "--row", "1", "--engine-profiles", "none"]) == 0
    out = capsys.readouterr().out
    assert "row llama" in out and "attn_decode" in out and "qkv_proj" in out


def test_unknown_row_is_a_user_error(csv, capsys):
    assert rb.main(["--measurements", str(csv), "--row", "nope"]) == EXIT_USER_ERROR
    assert "--row" in capsys.readouterr().err

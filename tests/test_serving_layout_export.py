"""Served rows whose columns hold the ``T x E`` export (``tp_size = moe_tp_size x moe_ep_size``)
over more GPUs than one NVLink domain are read as ``T`` GPUs with EP ``E``, with or without a
layout ``id`` (calibration.serving_rows.product_layout)."""

from __future__ import annotations

from llmplan.calibration import serving_rows as sr


def _row(**kw) -> dict:
    r = {"id": "dsr1_h200_trtllm_fp8_agg_1024x1024_c4_cfg181", "backend": "trtllm", "backend_version": "1.1.0rc2.post2",
         "silicon_data_source": "db-dump; config_id=181; silicon_concurrency=4", "model_path": "deepseek-ai/DeepSeek-V3",
         "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024, "gemm_quant_mode": "fp8",
         "moe_quant_mode": "fp8", "batch_size": 4, "tp_size": 64, "pp_size": 1, "attention_dp_size": 1,
         "moe_tp_size": 8, "moe_ep_size": 8, "silicon_ttft_ms": 313.3, "silicon_tpot_ms": 13.8}
    r.update(kw)
    return r


def _par(**kw):
    m = sr.map_row(_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case.dep.par


def test_64_gpu_export_without_layout_id_is_read_as_8_gpus_ep8():
    p = _par()
    assert (p.tp, p.pp, p.ep, p.dp) == (8, 1, 8, 1) and p.stage_gpus == 8


def test_attention_dp_variant_of_the_export():
    p = _par(tp_size=1, attention_dp_size=64)
    assert (p.tp, p.ep, p.dp) == (1, 8, 8) and p.stage_gpus == 8


def test_same_signature_inside_one_domain_keeps_the_columns():
    # 8 GPUs: tp 8 over moe_tp 2 x moe_ep 4 is an ordinary TensorRT-LLM layout
    p = _par(tp_size=8, moe_tp_size=2, moe_ep_size=4)
    assert (p.tp, p.ep, p.moe_tp) == (8, 4, 2)
    assert sr.product_layout(_row(tp_size=8, moe_tp_size=2, moe_ep_size=4), 8) is None
    assert sr.product_layout(_row(), 8) == (8, 8)
    assert sr.product_layout(_row(), 72) is None   # an NVL72 domain holds 64 GPUs

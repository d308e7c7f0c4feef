"""calibration/trtllm_moe_evidence.py: shared-shape ratios, exact-shape medians, fitted rows, errors."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration import trtllm_moe_evidence as ev
from llmplan.errors import EXIT_USER_ERROR


def _row(backend: str, source: str, dtype: str, tokens: int, ms: float, tp: int = 1, ep: int = 8,
         shape: tuple[int, int, int, int] = (1024, 2688, 22, 512), dist: str = "power_law_1.01") -> dict:
    h, i, k, e = shape
    return {"backend": backend, "kernel_source": source, "moe_dtype": dtype, "num_tokens": tokens, "hidden_size": h,
            "inter_size": i, "topk": k, "num_experts": e, "moe_tp_size": tp, "moe_ep_size": ep, "distribution": dist,
            "latency_ms": ms}


def test_shared_shape_ratios_pair_only_identical_shapes():
    rows = [_row("trtllm", "t", "bfloat16", 4, 0.10), _row("trtllm", "t", "bfloat16", 2048, 1.0),
            _row("sglang", "s", "bfloat16", 4, 0.12), _row("sglang", "s", "bfloat16", 2048, 5.0),
            # a shape TensorRT-LLM never measured (other layout): not paired
            _row("sglang", "s", "bfloat16", 4, 9.0, tp=8, ep=1),
            # same shape, other routing: not paired
            _row("sglang", "s", "bfloat16", 4, 9.0, dist="balanced")]
    out = ev.shared_shape_ratios(pd.DataFrame(rows))
    assert len(out) == 1
    r = out.iloc[0]
    assert r["shapes"] == 2
    assert r["ratio_decode"] == pytest.approx(1.2)
    assert r["ratio_prefill"] == pytest.approx(5.0)
    assert r["ratio_all"] == pytest.approx((1.2 + 5.0) / 2)


def test_measured_at_shape_takes_medians_of_the_listed_layouts():
    shape = (7168, 2048, 8, 256)
    rows = [_row("sglang", "s", "fp8_block", 4, ms, tp=8, ep=1, shape=shape) for ms in (0.05, 0.07, 0.30)]
    rows.append(_row("sglang", "s", "fp8_block", 4, 1.0, tp=2, ep=2, shape=shape))   # layout not listed
    rows.append(_row("sglang", "s", "bfloat16", 4, 1.0, tp=8, ep=1, shape=shape))    # other dtype
    out = ev.measured_at_shape(pd.DataFrame(rows), *shape)
    assert len(out) == 1
    assert out.iloc[0][4] == pytest.approx(0.07)


def test_fitted_rows_are_the_kernel_model_answers():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.calibrated import kernel_model_for

    out = ev.fitted_at_shape("h200_sxm", 7168, 2048, 8, 256, engines=("trtllm",))
    row = out[(out["moe_tp"] == 8) & (out["ep"] == 1)].iloc[0]
    km = kernel_model_for(get_gpu("h200_sxm"), "trtllm")
    assert row[64] == pytest.approx(km.moe(64, 7168, 2048, 8, 256, 8, 1, "fp8").latency_ms)
    # TensorRT-LLM's own (non-gated Nemotron) table answers, extrapolated to this shape
    assert row["table"] == "trtllm" and bool(row["extrapolated"])


def test_missing_table_is_a_user_error(tmp_path, capsys):
    (tmp_path / "h200_sxm").mkdir()
    assert ev.main(["--measurements", str(tmp_path), "--gpu", "h200_sxm"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "no moe table" in err and "Traceback" not in err

"""calibration/vllm_mxfp4_moe_evidence.py: throughput arithmetic, row selection, the Marlin transfer."""

from __future__ import annotations

import pandas as pd
import pytest

from llmplan.calibration import vllm_mxfp4_moe_evidence as ev
from llmplan.errors import EXIT_USER_ERROR

MARLIN, TRITON = "vllm_marlin_src", "vllm_triton_src"


def _row(source: str, tokens: int, ms: float, shape: tuple[int, int, int, int], tp: int = 1, ep: int = 1,
         backend: str = "vllm", dtype: str = ev.DTYPE, dist: str = ev.DISTRIBUTION) -> dict:
    h, i, k, e = shape
    return {"backend": backend, "kernel_source": source, "moe_dtype": dtype, "num_tokens": tokens, "hidden_size": h,
            "inter_size": i, "topk": k, "num_experts": e, "moe_tp_size": tp, "moe_ep_size": ep, "distribution": dist,
            "latency_ms": ms}


def test_throughput_counts_gated_flops_per_routed_pair_and_local_experts():
    df = pd.DataFrame([_row(TRITON, 1024, 2.0, (1000, 500, 4, 128), tp=2, ep=4)])
    r = ev.with_throughput(df).iloc[0]
    # 1,024 tokens x top-4 = 4,096 pairs over 128 / 4 = 32 local experts
    assert r["tokens_per_expert"] == pytest.approx(128.0)
    # 6 x 1,000 x (500 / 2) x 4,096 flops in 2 ms
    assert r["tflops"] == pytest.approx(6 * 1000 * 250 * 4096 / 2.0e9)


def test_throughput_table_keeps_vllm_mxfp4_single_gpu_rows_and_takes_medians():
    shape = (2880, 2880, 4, 128)
    rows = [_row(TRITON, 1024, ms, shape) for ms in (1.0, 2.0, 9.0)]
    rows += [_row(TRITON, 1024, 0.1, shape, tp=2),                 # another layout
             _row(TRITON, 1024, 0.1, shape, dist="power_law_1.2"),  # another routing
             _row(TRITON, 1024, 0.1, shape, dtype="fp8_block"),     # another dtype
             _row(TRITON, 1024, 0.1, shape, backend="sglang"),      # another engine
             _row(TRITON, 100, 0.1, shape)]                         # a token count not printed
    out = ev.throughput_table(pd.DataFrame(rows))
    assert len(out) == 1
    assert out.iloc[0]["latency_ms"] == pytest.approx(2.0)


def test_marlin_transfer_scales_by_the_throughput_ratio_of_equal_token_counts():
    t_shape, m_shape = (2880, 2880, 4, 128), (3584, 3072, 16, 896)
    rows = [_row(TRITON, 8192, 3.0, t_shape), _row(MARLIN, 8192, 45.0, m_shape),
            _row(TRITON, 1024, 1.0, t_shape)]   # no Marlin row at 1,024: left out
    table = ev.throughput_table(pd.DataFrame(rows))
    out = ev.marlin_transfer(table, TRITON, MARLIN)
    assert list(out["num_tokens"]) == [8192]
    r = out.iloc[0]
    t_tflops = 6 * 2880 * 2880 * 8192 * 4 / 3.0e9
    m_tflops = 6 * 3584 * 3072 * 8192 * 16 / 45.0e9
    assert r["target_tflops"] == pytest.approx(t_tflops)
    assert r["marlin_tflops"] == pytest.approx(m_tflops)
    assert r["at_marlin_ms"] == pytest.approx(3.0 * t_tflops / m_tflops)


def test_cli_without_mxfp4_rows_exits_2_naming_the_gpu(tmp_path, capsys):
    folder = tmp_path / "h200_sxm"
    folder.mkdir()
    pd.DataFrame([_row(TRITON, 8, 0.1, (2880, 2880, 4, 128), dtype="fp8_block")]).to_csv(folder / "moe.csv", index=False)
    assert ev.main(["--measurements", str(tmp_path), "--gpu", "h200_sxm"]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "--gpu" in err and "w4a16_mxfp4" in err

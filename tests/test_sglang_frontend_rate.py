"""Delivered output-token rate of the SGLang generator runs (calibration/sglang_frontend_rate.py): the
Llama-3.1-8B N = 512 rows deliver about the same tokens/s at TP 2, 4 and 8 (a front-end ceiling)."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import sglang_frontend_rate as fr

GEN = "source_file=/u/aic/data/h200_sxm/sglang/0.5.6.post2/meta-llama_Llama-3.1-8B-Instruct.csv; silicon_concurrency=512"
#: measured rows (../shared/measurements/h200_sxm/e2e_serving.csv): tp, isl, osl, TTFT ms, TPOT ms at N = 512
LLAMA_N512 = [(2, 1000, 500, 1396.55, 33.73), (2, 1000, 1000, 2082.57, 31.52), (2, 1000, 2000, 3599.55, 34.28),
              (4, 1000, 500, 1825.88, 25.49), (4, 1000, 1000, 2215.55, 24.88), (4, 1000, 2000, 6349.60, 29.98),
              (4, 2000, 500, 1868.39, 34.27), (4, 2000, 1000, 3017.25, 28.66),
              (8, 1000, 500, 1991.87, 22.79), (8, 1000, 1000, 3177.46, 22.97), (8, 1000, 2000, 7978.08, 29.38),
              (8, 2000, 500, 2903.28, 28.04), (8, 2000, 1000, 3939.60, 25.63)]


def _row(tp, isl, osl, ttft, tpot, n=512, source=GEN, backend_version="0.5.6.post2"):
    return {"silicon_data_source": source, "backend": "sglang", "backend_version": backend_version, "mode": "agg",
            "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "tp_size": tp, "isl": isl,
            "osl": osl, "batch_size": n, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot}


def test_delivered_rate_is_littles_law_over_the_clients_e2e():
    # 512 clients, 1,000 outputs, E2E = 3,177.46 + 999 x 22.97 ms = 26.124 s
    assert fr.delivered_output_tokens_per_s(1000, 1000, 512, 3177.46, 22.97) == pytest.approx(19598.5, rel=1e-4)
    assert math.isnan(fr.delivered_output_tokens_per_s(1000, 2, 4, 0.0, 0.0))


def test_only_generator_sglang_rows_are_grouped_at_their_largest_concurrency():
    rows = [_row(8, 1000, 1000, 3177.46, 22.97), _row(8, 1000, 100, 915.51, 34.08, n=448),
            dict(_row(8, 1000, 1000, 3177.46, 22.97), backend="vllm",
                 silicon_data_source=GEN.replace("/sglang/", "/vllm/")),
            _row(8, 1000, 1000, 300.0, 20.0, source="db-dump/2026-04-27; config_id=81; silicon_concurrency=4")]
    (g,) = fr.delivered_rates(rows)
    assert (g["tp"], g["concurrency"], g["rows"]) == (8, 512, 1)
    assert g["max_tokens_per_s"] == pytest.approx(19598.5, rel=1e-4)


def test_llama_at_512_clients_delivers_a_flat_rate_across_tp():
    """The replay's decode step of 512 sequences shrinks about 2x from TP 2 to TP 8; the delivered
    rate does not follow: every TP size's best row lies within 15-20k tokens/s."""
    groups = {g["tp"]: g for g in fr.delivered_rates([_row(*r) for r in LLAMA_N512])}
    assert sorted(groups) == [2, 4, 8]
    best = [groups[tp]["max_tokens_per_s"] for tp in (2, 4, 8)]
    assert all(15000 < b < 20000 for b in best)
    assert max(best) / min(best) < 1.3

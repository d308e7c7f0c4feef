"""Decode stall per prompt from osl pairs (calibration/sglang_prompt_stall.py): the closed-loop algebra,
the pairing rule, and the measured Qwen3.5-397B / DeepSeek-V3 rows of ../shared/measurements."""

from __future__ import annotations

import math

import pytest

from llmplan.calibration import sglang_prompt_stall as ps


def _row(model, osl, n, ttft, tpot, isl=1024, tp=8, version="0.5.9", **extra):
    r = {"backend": "sglang", "backend_version": version, "model_path": model, "system": "h200_sxm",
         "precision": "fp8", "mode": "agg", "tp_size": tp, "moe_ep_size": 8, "attention_dp_size": 1, "isl": isl,
         "osl": osl, "batch_size": n, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot}
    r.update(extra)
    return r


#: measured (../shared/measurements/h200_sxm/e2e_serving.csv, SGLang 0.5.9 TP 8 InferenceX rows):
#: N, (TTFT, TPOT) at 1k/1k, (TTFT, TPOT) at 1k/8k
QWEN35 = {4: ((307.790672, 10.080635), (308.778558, 9.418766)),
          8: ((233.475447, 11.467447), (303.912249, 10.527036)),
          32: ((377.073499, 22.081943), (341.330456, 16.518291)),
          64: ((434.795837, 30.555850), (325.740104, 20.048390))}


def test_prompt_rate_is_littles_law():
    # 4 clients, E2E = 307.79 + 1,023 x 10.080635 ms = 10.62028 s -> 0.37664 prompts/s
    assert ps.prompts_per_s(4, 1024, 307.790672, 10.080635) == pytest.approx(4 / 10.620280, rel=1e-6)
    assert math.isnan(ps.prompts_per_s(4, 1, 0.0, 5.0))


def test_stall_solves_both_rows_with_one_decode_step():
    # a synthetic engine: D = 10 ms, S = 100 ms; TPOT = D / (1 - lambda S) with lambda = N / E2E
    d, s, n = 10.0, 0.100, 8

    def row(osl):
        tpot = d
        for _ in range(200):  # fixed point of TPOT = D / (1 - lambda(TPOT) S)
            lam = n / ((300.0 + (osl - 1) * tpot) / 1000.0)
            tpot = d / (1.0 - lam * s)
        return _row("m", osl, n, 300.0, tpot)

    assert ps.decode_stall_per_prompt_ms(row(1024), row(8192)) == pytest.approx(100.0, rel=1e-6)
    # equal TPOTs: no stall difference to read
    a, b = _row("m", 1024, 8, 300.0, 10.0), _row("m", 8192, 8, 300.0, 10.0)
    assert ps.decode_stall_per_prompt_ms(a, b) == pytest.approx(0.0, abs=1e-9)


def test_missing_stall_uses_the_long_row_as_the_replays_decode_reference():
    a = _row("m", 1024, 8, 233.475447, 11.467447, predicted_tpot_ms=11.467447 * 0.9)
    b = _row("m", 8192, 8, 303.912249, 10.527036, predicted_tpot_ms=10.527036 * 0.9)
    assert ps.missing_stall_per_prompt_ms(a, b) == pytest.approx(0.0, abs=1e-9)   # same ratio: nothing missing
    a["predicted_tpot_ms"] = 11.467447 * 0.8
    lam = ps.prompts_per_s(8, 1024, 233.475447, 11.467447)
    assert ps.missing_stall_per_prompt_ms(a, b) == pytest.approx(1000.0 * (1 - 0.8 / 0.9) / lam, rel=1e-9)


def test_pairs_share_the_deployment_and_take_the_extreme_osls():
    rows = [_row("q", 1024, 8, 1.0, 10.0), _row("q", 8192, 8, 1.0, 9.0), _row("q", 2048, 8, 1.0, 9.5),
            _row("q", 1024, 8, 2.0, 20.0),                  # a repeat of osl 1,024: the first counts
            _row("q", 1024, 16, 1.0, 10.0),                 # other N: no partner
            _row("q", 8192, 8, 1.0, 9.0, tp=4),             # other TP: no partner
            _row("q", 8192, 8, 1.0, 9.0, isl=8192)]         # other isl: no partner
    (pair,) = ps.osl_pairs(rows)
    assert (pair[0]["osl"], pair[1]["osl"], pair[0]["silicon_tpot_ms"]) == (1024, 8192, 10.0)


def test_measured_qwen35_prompts_stall_decodes_far_longer_than_deepseek_v3():
    """Same harness (InferenceX), engine (SGLang 0.5.9), GPU and TP: a Qwen3.5-397B prompt costs the running
    decodes 140-207 ms, a DeepSeek-V3 prompt 8-58 ms (whose longer-context 1k/8k decode biases it low)."""
    q = [ps.decode_stall_per_prompt_ms(_row("q35", 1024, n, *s), _row("q35", 8192, n, *l))
         for n, (s, l) in sorted(QWEN35.items())]
    assert q == pytest.approx([199.9, 140.5, 207.1, 194.9], abs=0.1)
    dsv3 = ps.decode_stall_per_prompt_ms(_row("ds", 1024, 8, 244.861349, 12.472418),
                                         _row("ds", 8192, 8, 242.295009, 12.201982))
    assert dsv3 == pytest.approx(40.4, abs=0.1)
    assert min(q) > 2 * dsv3


def test_table_reports_missing_only_with_predictions():
    rows = [_row("q35", 1024, 4, 307.790672, 10.080635), _row("q35", 8192, 4, 308.778558, 9.418766)]
    (e,) = ps.stall_table(rows)
    assert e["stall_ms"] == pytest.approx(199.9, abs=0.1) and math.isnan(e["missing_ms"])
    rows[0]["predicted_tpot_ms"], rows[1]["predicted_tpot_ms"] = 9.312109, 9.245130   # the 2a3e115 replay
    (e,) = ps.stall_table(rows)
    assert e["missing_ms"] == pytest.approx(156.4, abs=0.1)


def test_repeated_measurements_under_another_layout_label_count_once():
    rows = [_row("q35", 1024, 4, 307.790672, 10.080635), _row("q35", 8192, 4, 308.778558, 9.418766),
            _row("q35", 1024, 4, 307.79, 10.08, tp=64), _row("q35", 8192, 4, 308.78, 9.42, tp=64)]
    assert len(ps.drop_repeats(rows)) == 2
    (e,) = ps.stall_table(rows)
    assert e["tp"] == 8

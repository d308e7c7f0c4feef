"""calibration/kernel_bands: grouped K-fold over the few-configuration families (every group held
out exactly once, fold 0 = the residual split), in-range rows only, only their entries rewritten."""

from __future__ import annotations

import numpy as np
import pandas as pd

from llmplan.calibration import kernel_bands as KB
from llmplan.calibration.splits import Split, held_out_mask
from llmplan.sim.kernel_calibration.calib_file import Calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel
from llmplan.sim.kernel_calibration.physics import BaseParams

SPLIT = Split("grouped", 0.2, 0)


def _mla(heads=(1, 2, 4, 8, 16, 32, 64, 128, 3, 5, 6, 7, 12, 24, 48, 96)) -> pd.DataFrame:
    rows = [{"gpu": "h100_sxm", "backend": "sglang", "batch": b, "kv_len": 1024 * b, "num_heads": h,
             "latency_ms": 0.01 * h * b} for h in heads for b in (1, 4, 16)]
    return pd.DataFrame(rows)


def test_folds_partition_the_groups_and_fold0_is_the_residual_split():
    df = _mla()
    masks = [KB.fold_mask("mla_decode", df, SPLIT, k) for k in range(KB.n_folds(SPLIT))]
    assert KB.n_folds(SPLIT) == 5
    assert np.array_equal(masks[0], held_out_mask("mla_decode", df, SPLIT))
    total = np.sum(masks, axis=0)
    assert (total == 1).all()                     # every row (and so every group) held out exactly once
    for m in masks:                               # whole groups: a head count is on one side only
        assert not set(df.num_heads[m]) & set(df.num_heads[~m])


def _cal(lo_heads: float, hi_heads: float) -> Calibration:
    base = BaseParams(1.0, 0.0, 0.5, 0.5, 1.0, 2.0, 1.0, 1.0)
    gm = GroupModel(base, None, 10, {"batch": [1.0, 16.0], "kv_len": [1024.0, 16384.0],
                                     "num_heads": [lo_heads, hi_heads]})
    fm = FamilyModel("mla_decode", {"all": gm})
    return Calibration(measured={"h100_sxm": {"sglang": {"mla_decode": fm}}})


def test_in_fitted_range_is_the_extrapolated_rule():
    df = _mla(heads=(2, 8, 64, 128))
    ok = KB.in_fitted_range(_cal(2.0, 64.0), "mla_decode", df)
    assert ok.tolist() == [h != 128 for h in df.num_heads]
    # another engine's rows (no model of its own in this calibration) are kept
    other = df.assign(backend="trtllm")
    assert KB.in_fitted_range(_cal(2.0, 64.0), "mla_decode", other).all()
    # collectives have no ranges
    assert KB.in_fitted_range(_cal(2.0, 64.0), "moe_a2a", df).all()


def test_replace_band_stats_touches_only_the_band_families():
    old = {"gemm": {"p90_ape": 0.1}, "gemm@h100_sxm": {"p90_ape": 0.11}, "moe": {"p90_ape": 0.3},
           "moe:fp8": {"p90_ape": 0.2}, "moe@b200": {"p90_ape": 0.4}, "mla_decode@l40s": {"p90_ape": 0.5},
           "all": {"p90_ape": 0.2}}
    new = {"moe": {"p90_ape": 0.35}, "mla_decode": {"p90_ape": 0.15}}
    out = KB.replace_band_stats(old, new)
    assert out == {"all": {"p90_ape": 0.2}, "gemm": {"p90_ape": 0.1}, "gemm@h100_sxm": {"p90_ape": 0.11},
                   "mla_decode": {"p90_ape": 0.15}, "moe": {"p90_ape": 0.35}}
    assert list(out) == sorted(out)


def test_band_of_reads_the_extrapolated_figures_only_for_extrapolated_queries():
    from llmplan.calibration.validate_kernels import row_bands
    from llmplan.sim.calibrated import band_of

    cal = Calibration(residuals={"measured": {
        "mla_decode": {"p50_ape": 0.05, "p90_ape": 0.15, "mape": 0.07, "rows": 5000,
                       "p50_ape_extrapolated": 0.3, "p90_ape_extrapolated": 0.9, "mape_extrapolated": 0.4,
                       "rows_extrapolated": 800},
        "mla_decode@b200": {"p50_ape": 0.06, "p90_ape": 0.2, "mape": 0.08, "rows": 900,
                            "p50_ape_extrapolated": 0.2, "p90_ape_extrapolated": 0.7, "mape_extrapolated": 0.3,
                            "rows_extrapolated": 30},
        "gemm": {"p50_ape": 0.03, "p90_ape": 0.1, "mape": 0.05, "rows": 9000}}})
    assert band_of(cal, "mla_decode", "measured", "b200")["p90_ape"] == 0.2
    # 30 extrapolated rows on b200 (< MIN_BAND_ROWS): the pooled extrapolated figure
    assert band_of(cal, "mla_decode", "measured", "b200", extrapolated=True)["p90_ape"] == 0.9
    assert band_of(cal, "mla_decode", "measured", "b200", extrapolated=True)["rows"] == 800
    # a family without extrapolated figures keeps its band
    assert band_of(cal, "gemm", "measured", "b200", extrapolated=True)["p90_ape"] == 0.1
    # the sibling tier widens the extrapolated figure like the in-range one
    assert abs(band_of(cal, "mla_decode", "sibling", "b200", extrapolated=True)["p90_ape"] - (1.9 * 1.075 - 1)) < 1e-12
    tiers = np.array(["measured", "measured", "none"])
    assert row_bands(cal, "mla_decode", tiers, "b200", None, np.array([False, True, False]))[:2].tolist() == [0.2, 0.9]


def test_cli_refuses_an_index_away_from_the_sections(tmp_path, capsys):
    from llmplan.calibration import kernel_bands_cli

    idx = tmp_path / "cal" / "index.json"
    idx.parent.mkdir()
    idx.write_text("{}", encoding="utf-8")
    assert kernel_bands_cli.main(["--measurements", str(tmp_path), "--calibration", str(idx),
                                  "--out", str(tmp_path / "elsewhere.json")]) == 2
    assert "not beside the calibration's sections" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere.json").exists()

"""The GEMM error decomposition (calibration/gemm_error_decompose.py): group statistics, the
excess over the 5% target, and the m <= 16 scatter estimate of a measurement table."""

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import gemm_error_decompose as D


def _rows():
    # two engines: one 10% too slow on every row, one exact
    return pd.DataFrame({"backend": ["a"] * 4 + ["b"] * 4, "dtype": ["bf16"] * 8,
                         "m": [1, 16, 17, 5000, 1, 16, 17, 5000], "n": [64] * 8, "k": [128] * 8,
                         "measured_ms": [1.0] * 8, "predicted_ms": [1.1] * 4 + [1.0] * 4})


def test_breakdown_per_engine_and_excess():
    f = D.prepare(_rows())
    assert f["m_bucket"].tolist()[:4] == ["1-16", "1-16", "17-64", ">4096"]
    b = D.breakdown(f, ["backend"])
    assert b.loc["a", "rows"] == 4 and b.loc["a", "mape_pct"] == pytest.approx(10.0)
    assert b.loc["a", "bias"] == pytest.approx(math.log(1.1))
    assert b.loc["a", "share"] == pytest.approx(1.0) and b.loc["b", "share"] == pytest.approx(0.0)
    # engine a: 5 points above the target on half the rows = 2.5 points of the table's 5% MAPE
    assert b.loc["a", "excess_pts"] == pytest.approx(2.5) and b.loc["b", "excess_pts"] == 0.0


def test_scatter_of_iid_noise_is_recovered():
    rng = np.random.default_rng(0)
    rows = []
    for n in range(200):
        base = rng.uniform(0.005, 0.05)
        for m in range(1, 17):
            rows.append({"backend": "x", "dtype": "bf16", "n": 64 + n, "k": 4096, "m": m,
                         "latency_ms": base * math.exp(rng.normal(0.0, 0.05))})
    s = D.table_scatter(pd.DataFrame(rows))
    assert len(s) == 1 and s["triples"].iloc[0] == 200 * 14
    assert s["noise_sd_pct"].iloc[0] == pytest.approx(5.0, abs=0.3)
    assert s["noise_robust_pct"].iloc[0] == pytest.approx(5.0, abs=0.4)
    assert s["noise_ape_pct"].iloc[0] == pytest.approx(5.0 * math.sqrt(2 / math.pi), abs=0.3)


def test_a_kernel_switch_shows_in_the_sd_not_in_the_robust_scatter():
    rows = []
    for n in range(100):
        for m in range(1, 17):       # 31 us up to m = 4, then 5 us: split-K switched on (L40S, n = 64)
            rows.append({"backend": "x", "dtype": "bf16", "n": 64 + n, "k": 7168, "m": m,
                         "latency_ms": 0.031 if 2 <= m <= 4 else 0.005})
    s = D.table_scatter(pd.DataFrame(rows))
    assert s["noise_robust_pct"].iloc[0] == 0.0 and s["noise_sd_pct"].iloc[0] > 30.0

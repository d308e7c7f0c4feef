"""Where the cross-gen error sits and the oracle bounds of a per-GPU offset (calibration/crossgen_decompose.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import crossgen_decompose as D


def test_regimes_from_physical_terms():
    got = D.regimes(np.array([1.0, 10.0, 30.0, 100.0]), np.array([2.0, 20.0, 10.0, 10.0]), np.ones(4))
    assert got.tolist() == ["latency", "memory", "balanced", "compute"]
    # the quantization factor counts on the compute side
    assert D.regimes(np.array([10.0]), np.array([15.0]), np.array([2.0])).tolist() == ["balanced"]


def _frame(factor_a: float, factor_b: float) -> pd.DataFrame:
    n = 40
    meas = np.linspace(0.01, 1.0, n)
    fac = np.where(np.arange(n) < n // 2, factor_a, factor_b)
    return pd.DataFrame({"measured_ms": meas, "predicted_ms": meas * fac, "backend": ["vllm"] * n,
                         "dtype": np.where(np.arange(n) < n // 2, "bf16", "fp8"),
                         "regime": np.where(np.arange(n) % 2 == 0, "memory", "compute")})


def test_a_constant_factor_is_all_bias_and_the_gpu_oracle_removes_it():
    d = D.decompose(_frame(1.25, 1.25), "gemm")
    assert d.rows == 40 and d.mape == pytest.approx(0.25)
    assert d.bias == pytest.approx(math.log(1.25))
    assert d.oracle_gpu == pytest.approx(0.0, abs=1e-12)
    assert d.by_regime["memory"] == (20, pytest.approx(0.25), pytest.approx(math.log(1.25)))


def test_per_dtype_offsets_need_the_engine_dtype_oracle():
    d = D.decompose(_frame(1.5, 0.75), "gemm")
    assert d.oracle_gpu > 0.2                  # one offset cannot fix both groups
    assert d.oracle_engine_dtype == pytest.approx(0.0, abs=1e-12)
    assert d.oracle_engine_dtype_regime == pytest.approx(0.0, abs=1e-12)
    lines = D.markdown({"x": [d]})
    assert lines[2].startswith("| x | gemm | 40 | ")


def test_attention_groups_by_kv_dtype():
    f = _frame(1.5, 0.75).rename(columns={"dtype": "kv_dtype"})
    d = D.decompose(f, "attention_decode")
    assert d.oracle_engine_dtype == pytest.approx(0.0, abs=1e-12)


def test_report_decompose_on_synthetic_tables(tmp_path, capsys):
    from test_calibration_synth import make_measurements_dir

    from llmplan.calibration import crossgen_report as R

    root = make_measurements_dir(tmp_path, ("h100_sxm", "a100_sxm"))
    assert R.main(["--measurements", str(root), "--gpus", "h100_sxm", "--no-twin", "--max-rows", "300",
                   "--decompose"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| GPU | family | rows | MAPE | bias | oracle GPU |")
    gemm = [ln for ln in out if ln.startswith("| h100_sxm (no h200_sxm) | gemm |")]
    assert len(gemm) == 1
    cells = [c.strip() for c in gemm[0].strip("|").split("|")]
    assert int(cells[2]) > 0
    mape, bias, oracles = float(cells[3]), float(cells[4]), [float(c) for c in cells[5:8]]
    assert mape > 0 and math.isfinite(bias) and all(math.isfinite(o) and o >= 0 for o in oracles)

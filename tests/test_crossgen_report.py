"""The cross-gen leave-one-GPU-out report (calibration/crossgen_report.py)."""

from __future__ import annotations

import math

from llmplan.calibration import crossgen_report as R
from llmplan.sim.kernel_calibration.calib_file import load_calibration


def test_twins_are_the_gpus_with_the_same_silicon():
    cal = load_calibration(None)
    assert R.twins(cal, "h100_sxm") == ["h200_sxm"]
    assert R.twins(cal, "h200_sxm") == ["h100_sxm"]
    assert R.twins(cal, "l40s") == []
    pool = R.pool_without(cal, R.twins(cal, "h100_sxm"))
    assert "h200_sxm" not in pool.measured and "h200_sxm" not in pool.collectives
    assert "h100_sxm" in pool.measured          # the scored GPU itself is left out by the tier


def test_markdown_marks_cells_worse_than_the_roofline():
    rows = {"a": {"gemm": R.Cell(0.2, 0.3), "moe": R.Cell(0.5, 0.4)}, "b": {"gemm": R.Cell(0.1, float("nan"))}}
    lines = R.markdown(rows)
    assert lines[2].startswith("| a | 20.0 (30.0) | - | - | **50.0 (40.0)** |")
    assert lines[3].startswith("| b | 10.0 (nan) |")
    assert lines[-1].startswith("mean over 3 cells 26.7% (roofline 35.0%); worse than the roofline in 1")


def test_report_on_synthetic_tables(tmp_path, capsys):
    from test_calibration_synth import make_measurements_dir

    root = make_measurements_dir(tmp_path, ("h100_sxm", "a100_sxm"))
    assert R.main(["--measurements", str(root), "--gpus", "h100_sxm", "--no-twin", "--max-rows", "500"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = [ln for ln in out if ln.startswith("| h100_sxm (no h200_sxm) |")]
    assert len(row) == 1
    gemm = row[0].split("|")[2].strip().strip("*")
    mape, roof = gemm.split(" (")
    assert math.isfinite(float(mape)) and float(mape) > 0 and float(roof.rstrip(")")) > 0


def test_unknown_gpu_exits_2(tmp_path, capsys):
    assert R.main(["--measurements", str(tmp_path), "--gpus", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "fix:" in err

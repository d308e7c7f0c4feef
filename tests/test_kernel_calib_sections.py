"""Calibration files: an index plus one section per measured GPU, read lazily and verified;
saving is byte-identical for the same fit; version-1 (inline) files still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmplan.calibration.fit import FitOptions, fit_calibration
from llmplan.calibration.reader import read_measurements
from llmplan.errors import UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration.calib_file import Calibration, LazySections, load_calibration
from llmplan.sim.kernel_calibration.gbt import GBTParams
from test_calibration_synth import make_measurements_dir

FAST = FitOptions(gbt=GBTParams(n_trees=20, depth=4), min_trees=5, rows_per_tree=10, residuals=False)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = make_measurements_dir(tmp_path_factory.mktemp("m"), ("h100_sxm", "a100_sxm"))
    return fit_calibration(read_measurements(root), FAST)


def test_sections_are_read_only_when_needed(fitted, tmp_path):
    path = fitted.save(tmp_path / "cal.json")
    index = json.loads(path.read_text())
    assert "measured" not in index and set(index["sections"]) == {"a100_sxm", "h100_sxm"}
    cal = Calibration.loads(path.read_text(), str(path), tmp_path)
    assert isinstance(cal.measured, LazySections) and cal.measured.loaded() == []
    m = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", cal)
    t = m.gemm(64, 4096, 4096, "bf16")
    assert t.tier == "measured" and cal.measured.loaded() == ["h100_sxm"]
    ref = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", fitted).gemm(64, 4096, 4096, "bf16")
    assert t.latency_ms == pytest.approx(ref.latency_ms, rel=1e-12)
    # the cross-gen tier pools every measured GPU: it reads them all
    CalibratedKernelModel(get_gpu("mi300x"), "vllm", cal).gemm(64, 4096, 4096, "bf16")
    assert cal.measured.loaded() == ["a100_sxm", "h100_sxm"]


def test_save_is_byte_identical_and_round_trips(fitted, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    fitted.save(a / "cal.json")
    fitted.save(b / "cal.json")
    names = sorted(p.name for p in a.iterdir())
    assert names == ["cal.a100_sxm.json", "cal.h100_sxm.json", "cal.json"]
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes()
    back = load_calibration(a / "cal.json")
    assert back.dumps() == fitted.dumps()


def test_tampered_or_missing_section_is_a_clear_error(fitted, tmp_path):
    path = fitted.save(tmp_path / "cal.json")
    sec = tmp_path / "cal.h100_sxm.json"
    sec.write_text(sec.read_text().replace("1", "2", 1))
    cal = Calibration.loads(path.read_text(), str(path), tmp_path)
    with pytest.raises(UserError, match="checksum"):
        cal.measured["h100_sxm"]
    sec.unlink()
    with pytest.raises(UserError, match="cannot be read"):
        Calibration.loads(path.read_text(), str(path), tmp_path).measured["h100_sxm"]


def test_version_1_inline_file_still_loads(fitted, tmp_path):
    p = tmp_path / "v1.json"
    p.write_text(fitted.dumps())
    assert json.loads(p.read_text())["version"] == 1
    cal = load_calibration(p)
    assert not isinstance(cal.measured, LazySections) and sorted(cal.measured) == ["a100_sxm", "h100_sxm"]
    a = CalibratedKernelModel(get_gpu("a100_sxm"), "vllm", cal).attention_decode(8, 1000, 32, 8, 128, "bf16")
    b = CalibratedKernelModel(get_gpu("a100_sxm"), "vllm", fitted).attention_decode(8, 1000, 32, 8, 128, "bf16")
    assert np.isclose(a.latency_ms, b.latency_ms, rtol=1e-12)


def test_without_gpu_keeps_sections_lazy(fitted, tmp_path):
    path = fitted.save(tmp_path / "cal.json")
    cal = Calibration.loads(path.read_text(), str(path), tmp_path)
    rest = cal.without_gpu("h100_sxm")
    assert list(rest.measured) == ["a100_sxm"] and isinstance(rest.measured, LazySections)
    assert rest.measured.loaded() == []


def test_fit_is_identical_with_one_or_two_worker_processes(tmp_path):
    from dataclasses import replace

    root = make_measurements_dir(tmp_path, ("h100_sxm", "a100_sxm"))
    meas = read_measurements(root)
    one = fit_calibration(meas, replace(FAST, workers=1)).dumps()
    two = fit_calibration(meas, replace(FAST, workers=2)).dumps()
    assert one == two

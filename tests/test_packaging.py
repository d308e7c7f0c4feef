"""The wheel installs one namespace, ``llmplan``, with every sub-package inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # build from a clean copy: a stale build/ folder in the checkout could leak old files
    src = tmp_path_factory.mktemp("src") / "llmplan"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", ".venv", ".ci-venv",
                                                             "llmplan-out", "__pycache__", ".hypothesis", "outputs", "multirun"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = out.glob("*.whl")
    return whl


def test_wheel_has_exactly_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"llmplan"}


def test_wheel_carries_every_sub_package_and_its_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for sub in ("sim", "optimizer", "calibration", "hardware_catalog", "model_catalog", "cli", "conf"):
        assert any(n.startswith(f"llmplan/{sub}/") for n in names), sub
    assert "llmplan/sim/kernel_calibration/data/default_calibration.json" in names
    assert "llmplan/hardware_catalog/data/gpus.yaml" in names
    assert "llmplan/conf/plan.yaml" in names
    assert not any(n.endswith((".pyc", ".pkl", ".pickle")) for n in names)


def test_wheel_carries_every_source_and_data_file_of_the_repository(wheel):
    """Nothing of the checkout is lost on the way to the wheel: every module and every data file
    of each mapped folder is installed (a sub-package missing from pyproject fails here)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    mapping = {"llmplan": "llmplan", "sim": "llmplan/sim", "optimizer": "llmplan/optimizer",
               "calibration": "llmplan/calibration", "hardware_catalog": "llmplan/hardware_catalog",
               "model_catalog": "llmplan/model_catalog", "conf": "llmplan/conf"}
    missing = []
    for folder, target in mapping.items():
        for f in (ROOT / folder).rglob("*"):
            if not f.is_file() or "__pycache__" in f.parts or f.suffix in (".pyc",):
                continue
            if f.suffix not in (".py", ".yaml", ".json", ".csv", ".jsonl", ".md", ".gz"):
                continue
            rel = f.relative_to(ROOT / folder).as_posix()
            if f"{target}/{rel}" not in names:
                missing.append(f"{folder}/{rel}")
    assert not missing, "not in the wheel: " + ", ".join(sorted(missing)[:20])

"""``llmplan calibrate`` and ``llmplan validate kernels``: runs and bad input (exit 2)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llmplan.cli import main
from test_calibration_synth import make_measurements_dir


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_measurements_dir(tmp_path_factory.mktemp("m"), ("h100_sxm", "a100_sxm"))


def test_calibrate_writes_json_and_validate_reads_it(data, tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--measurements", str(data), "--out", str(out), "--quiet", "--no-residuals",
                 "--fit-date", "2025-02-03"]) == 0
    d = json.loads(out.read_text())
    assert d["format"] == "llmplan-kernel-calibration" and d["provenance"]["fit_date"] == "2025-02-03"
    assert set(d["sections"]) == {"a100_sxm", "h100_sxm"}
    assert (tmp_path / d["sections"]["h100_sxm"]["file"]).is_file()
    csv = tmp_path / "rows.csv"
    assert main(["validate", "kernels", "--measurements", str(data), "--gpu", "h100", "--calibration", str(out),
                 "--out", str(csv), "--family", "gemm,decode", "--quiet"]) == 0
    rows = pd.read_csv(csv)
    assert {"measured_ms", "predicted_ms", "tier", "m", "n", "k", "gemm_dtype"} <= set(rows.columns)
    assert set(rows["family"]) == {"gemm", "attention_decode"}
    text = capsys.readouterr().out
    assert "gemm" in text and "MAPE" in text


def test_validate_split_and_holdout_run(data, capsys):
    assert main(["validate", "kernels", "--measurements", str(data), "--gpu", "a100_sxm",
                 "--split", "random:0.5:1", "--family", "gemm", "--quiet", "--no-roofline"]) == 0
    assert main(["validate", "kernels", "--measurements", str(data), "--gpu", "h100_sxm",
                 "--holdout-gpu", "h100_sxm", "--family", "nccl", "--quiet"]) == 0
    assert "cross-gen" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["--gpu", "not_a_gpu"], "unknown GPU 'not_a_gpu'"),
    (["--gpu", "h100_sxm", "--split", "half:0.5:0"], "bad split 'half:0.5:0'"),
    (["--gpu", "h100_sxm", "--split", "random:2:0"], "not in (0, 1)"),
    (["--gpu", "l40s"], "no measurements for GPU l40s"),
    (["--gpu", "h100_sxm", "--family", "gemmm"], "unknown family 'gemmm'"),
    (["--gpu", "h100_sxm", "--calibration", "/nonexistent/cal.json"], "not found"),
    (["--gpu", "h100_sxm", "--holdout-gpu", "b200"], "has no measurements"),
])
def test_validate_bad_input_exits_2(data, capsys, argv, needle):
    assert main(["validate", "kernels", "--measurements", str(data), *argv]) == 2
    assert needle in capsys.readouterr().err


def test_calibrate_bad_input_exits_2(data, tmp_path, capsys):
    assert main(["calibrate", "--measurements", str(tmp_path / "none"), "--out", str(tmp_path / "c.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["calibrate", "--measurements", str(data), "--out", str(tmp_path / "c.pkl")]) == 2
    assert "never pickle" in capsys.readouterr().err
    assert main(["calibrate", "--measurements", str(data), "--out", str(tmp_path / "c.json"),
                 "--gpus", "nope_gpu"]) == 2
    assert "unknown GPU" in capsys.readouterr().err
    assert main(["calibrate", "--measurements", str(data), "--out", str(tmp_path / "c.json"),
                 "--fit-date", "yesterday"]) == 2


def test_validate_dispatch(capsys):
    assert main(["validate"]) == 2
    assert main(["validate", "kernel"]) == 2
    assert "did you mean kernels" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["validate", "kernels", "--gpu", "h100_sxm"])      # argparse: --measurements missing
    assert exc.value.code == 2


def test_calibrate_unwritable_out_exits_2_before_fitting(data, tmp_path, capsys, monkeypatch):
    import llmplan.calibration.fit as fit

    def no_fit(*a, **k):  # the check must come first: a fit takes minutes on real data
        raise AssertionError("fitted before checking --out")

    monkeypatch.setattr(fit, "fit_calibration", no_fit)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for out, needle in ((blocker / "sub" / "c.json", "is a file"), (tmp_path, "is a directory")):
        assert main(["calibrate", "--measurements", str(data), "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err


def test_calibration_file_has_no_absolute_machine_path(data, tmp_path):
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--measurements", str(data), "--out", str(out), "--quiet", "--no-residuals"]) == 0
    text = out.read_text()
    d = json.loads(text)
    assert str(data) not in text and str(tmp_path) not in text
    assert d["provenance"]["measurements"] == data.name
    assert all(not e["path"].startswith("/") for e in d["provenance"]["data"])


def test_validate_reads_only_the_asked_gpu_and_notes_unknown_folders(data, tmp_path, capsys):
    import shutil

    root = tmp_path / "m"
    shutil.copytree(data, root)
    shutil.copytree(root / "a100_sxm", root / "my_mystery_gpu")
    assert main(["validate", "kernels", "--measurements", str(root), "--gpu", "h100_sxm", "--family", "gemm",
                 "--quiet", "--no-roofline"]) == 0
    out = capsys.readouterr().out
    assert "my_mystery_gpu" in out and "skipped" in out
    # a holdout refit reads every GPU folder: the unknown one is skipped, and said so
    assert main(["validate", "kernels", "--measurements", str(root), "--gpu", "h100_sxm", "--holdout-gpu",
                 "h100_sxm", "--family", "gemm", "--quiet", "--no-roofline"]) == 0
    assert "my_mystery_gpu" in capsys.readouterr().out
    # calibrate (everything asked for) still refuses a folder it cannot place
    assert main(["calibrate", "--measurements", str(root), "--out", str(tmp_path / "c.json"), "--quiet"]) == 2
    assert "my_mystery_gpu" in capsys.readouterr().err


def test_validate_reports_band_coverage(data, capsys):
    assert main(["validate", "kernels", "--measurements", str(data), "--gpu", "h100_sxm", "--split",
                 "grouped:0.5:0", "--family", "gemm", "--quiet", "--no-roofline"]) == 0
    out = capsys.readouterr().out
    assert "coverage" in out and "band p90" in out

"""calibration/crossgen_bands.py: only the cross-gen residual statistics of an index are rescored."""

from __future__ import annotations

import json

from llmplan.calibration import crossgen_bands as B
from llmplan.calibration import fit
from llmplan.sim.kernel_calibration.calib_file import _dumps


def test_only_the_cross_gen_entry_is_replaced(monkeypatch):
    calls = []

    def fake(cal, meas, tier, method, max_rows=None, extra=()):
        calls.append((tier, method, max_rows))
        return {"gemm": {"rows": 3, "mape": 0.2, "p50_ape": 0.1, "p90_ape": 0.4, "method": method}}

    monkeypatch.setattr(fit, "residual_stats", fake)
    index = {"format": "x", "sections": {"h100_sxm": {"file": "f.json", "sha256": "ab"}},
             "provenance": {"options": {"crossgen_rows": 123}},
             "residuals": {"measured": {"gemm": {"p90_ape": 0.05}}, "cross-gen": {"gemm": {"p90_ape": 0.9}}}}
    text = B.refreshed_index(_dumps(index), object(), object())
    out = json.loads(text)
    assert calls == [("cross-gen", "leave-one-GPU-out", 123)]
    assert out["residuals"]["cross-gen"]["gemm"]["p90_ape"] == 0.4
    assert {k: v for k, v in out.items() if k != "residuals"} == {k: v for k, v in index.items() if k != "residuals"}
    assert out["residuals"]["measured"] == index["residuals"]["measured"]
    assert text == B.refreshed_index(_dumps(index), object(), object())      # deterministic


def test_out_must_sit_beside_the_sections(tmp_path, capsys):
    cal = tmp_path / "a" / "cal.json"
    cal.parent.mkdir()
    cal.write_text("{}", encoding="utf-8")
    assert B.main(["--measurements", str(tmp_path), "--calibration", str(cal),
                   "--out", str(tmp_path / "elsewhere.json")]) == 2
    assert "beside the calibration" in capsys.readouterr().err
    assert B.main(["--measurements", str(tmp_path), "--calibration", str(cal), "--out", str(cal.parent / "x.txt")]) == 2

"""Per-family fit effort (``FitOptions.family_caps``): each family's ensembles follow its own
row and tree caps, the others keep the defaults, and the caps are recorded in the provenance."""

from __future__ import annotations

import json

from llmplan.calibration.fit import FAMILY_CAPS, FamilyCaps, FitOptions, fit_calibration
from llmplan.calibration.reader import read_measurements
from llmplan.sim.kernel_calibration.gbt import GBTParams
from test_calibration_synth import make_measurements_dir


def _opts(caps: tuple[tuple[str, FamilyCaps], ...]) -> FitOptions:
    return FitOptions(residuals=False, gbt=GBTParams(n_trees=12, depth=3), min_trees=4, rows_per_tree=1000,
                      family_caps=caps, fit_date="2025-01-01")


def _trees(cal, family: str) -> dict[str, int]:
    fm = cal.measured["h100_sxm"]["vllm"][family]
    return {g: m.gbt.n_trees for g, m in fm.groups.items() if m.gbt is not None}


def test_family_caps_apply_to_their_family_only(tmp_path):
    meas = read_measurements(make_measurements_dir(tmp_path, ("h100_sxm",)))
    plain = fit_calibration(meas, _opts(()))
    # rows / 1000 trees, clipped up to min_trees = 4: every default ensemble has 4 trees
    assert set(_trees(plain, "attention_prefill").values()) == {4}
    big = FamilyCaps(max_rows_base=100_000, max_rows_gbt=100_000, n_trees=9, rows_per_tree=1)
    capped = fit_calibration(meas, _opts((("attention_prefill", big),)))
    # one tree per row (72 rows), clipped to the family's own n_trees = 9 (not the default 12)
    assert set(_trees(capped, "attention_prefill").values()) == {9}
    assert _trees(capped, "attention_decode") == _trees(plain, "attention_decode")
    prov = json.loads(capped.dumps())["provenance"]["options"]["family_caps"]
    assert prov == {"attention_prefill": {"max_rows_base": 100_000, "max_rows_gbt": 100_000, "n_trees_max": 9,
                                          "rows_per_tree": 1}}


def test_caps_fall_back_to_the_defaults():
    opts = FitOptions(max_rows_base=123, max_rows_gbt=456, gbt=GBTParams(n_trees=7), rows_per_tree=11,
                      family_caps=(("gemm", FamilyCaps(1, 2, 3, 4)),))
    assert opts.caps("moe") == FamilyCaps(123, 456, 7, 11)
    assert opts.caps("gemm") == FamilyCaps(1, 2, 3, 4)
    # the shipped defaults give GEMM and attention more effort than the other families
    d = FitOptions()
    for fam in ("gemm", "attention_prefill", "attention_decode"):
        assert fam in dict(FAMILY_CAPS)
        c = d.caps(fam)
        assert c.max_rows_gbt > d.max_rows_gbt and c.n_trees > d.gbt.n_trees
    assert d.caps("moe") == FamilyCaps(d.max_rows_base, d.max_rows_gbt, d.gbt.n_trees, d.rows_per_tree)

"""A calibration file's residual trees index the feature vector by position: a file is read only where its
trees' feature names are the leading names of this version's list (FamilyModel.from_dict), so a file fitted
before features were appended (MoE before session 13: 16 of 18) keeps predicting as fitted, and one whose
names differ is refused with the key and the fix instead of reading other features without a word."""

from __future__ import annotations

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.family_model import FamilyModel, GroupModel
from llmplan.sim.kernel_calibration.gbt import GBTModel
from llmplan.sim.kernel_calibration.physics import BaseParams

BASE = BaseParams(floor_us=10.0, wave_us=0.5, eta_c=0.5, eta_m=0.8, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)


def _file(names: list[str], shared: bool = False) -> dict:
    gbt = GBTModel(list(names), np.array([[1]]), np.array([[0.5]]), np.array([[0.0, 0.1]]), 0.0)
    gm = GroupModel(BASE, None if shared else gbt, 10, {})
    return FamilyModel("moe", {"bf16": gm}, gbt if shared else None).to_dict()


def test_older_files_with_fewer_trailing_features_load_and_predict_as_fitted():
    old = list(F.FEATURES["moe"])[:16]          # a file fitted before triton_default_cfg / k2_unaligned16
    fm = FamilyModel.from_dict("moe", _file(old))
    assert fm.groups["bf16"].gbt.feature_names == old
    x = np.zeros((2, len(F.FEATURES["moe"])))
    x[1, 1] = 1.0                                 # the tree's split feature (index 1) is read at its place
    assert fm.groups["bf16"].gbt.predict(x).tolist() == [0.0, 0.1]
    assert FamilyModel.from_dict("moe", _file(list(F.FEATURES["moe"]))).groups["bf16"].gbt is not None


@pytest.mark.parametrize("shared", [False, True])
def test_files_whose_features_differ_are_refused(shared):
    names = list(F.FEATURES["moe"])
    names[1], names[2] = names[2], names[1]       # same features, other positions
    with pytest.raises(UserError) as e:
        FamilyModel.from_dict("moe", _file(names, shared))
    assert e.value.key == "calibration" and "calibrate" in (e.value.fix or "")
    with pytest.raises(UserError):
        FamilyModel.from_dict("moe", _file(list(F.FEATURES["moe"]) + ["a_future_feature"], shared))

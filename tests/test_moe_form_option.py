"""The MoE work form of a fit is an option (FitOptions.moe_form, `llmplan calibrate --moe-form`,
`llmplan validate kernels --moe-form`): the default is the shipped calibration's form, so
`llmplan calibrate` with the defaults reproduces the shipped file; a ``routed`` fit fits its base
on the routed terms and records the form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration.cli_validate import kernels_main
from llmplan.calibration.fit import FitOptions, fit_group
from llmplan.errors import UserError
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH
from llmplan.sim.kernel_calibration.family_model import FamilyModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.physics import BaseParams, predict_us

GPU = GPUFeatures("h100_sxm", 989.0, 1979.0, 1979.0, 3350.0, 132, 50.0, 450.0, 64.0)


def _rows(tokens: list[int]) -> pd.DataFrame:
    n = len(tokens)
    return pd.DataFrame({"num_tokens": tokens, "hidden": [7168] * n, "inter": [2048] * n, "topk": [8] * n,
                         "num_experts": [256] * n, "moe_tp": [1] * n, "moe_ep": [8] * n, "dtype": ["fp8_block"] * n,
                         "skew": [0.0] * n, "kernel_source": ["sglang_fused_moe_triton"] * n,
                         "gpu": ["h100_sxm"] * n, "backend": ["sglang"] * n})


def test_default_form_is_the_shipped_calibrations():
    # session 13: the default counts the Triton kernels' masked remote pairs (features.moe_masked_pairs)
    assert FitOptions().moe_form == F.MOE_FORM == F.MOE_FORM_UNIFORM_MASKED
    # the shipped sections were fitted with ``uniform`` (no work_form key) until the refit on this
    # code, which records the default; never another form
    sections = sorted(DEFAULT_PATH.parent.glob("default_calibration.*.json"))
    assert len(sections) >= 7
    for section in sections:
        text = section.read_text()
        assert '"work_form"' not in text or f'"work_form":"{F.MOE_FORM}"' in text, section.name
    # a uniform model writes no key (older files stay byte-identical), any other form records itself
    assert "work_form" not in FamilyModel("moe", {}, work_form=F.MOE_FORM_UNIFORM).to_dict()
    assert FamilyModel("moe", {}).to_dict()["work_form"] == F.MOE_FORM_UNIFORM_MASKED
    assert FamilyModel("moe", {}, work_form=F.MOE_FORM_ROUTED).to_dict()["work_form"] == F.MOE_FORM_ROUTED


def test_a_routed_fit_recovers_routed_truth_that_the_uniform_terms_miss():
    truth = BaseParams(floor_us=8.0, wave_us=0.3, eta_c=0.55, eta_m=0.75, g=0.5, p=3.0, l2_cap=0.5, l2_bw_sm=60.0)
    tokens = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    df = _rows(tokens)
    df = df.assign(latency_ms=predict_us(truth, F.frame_phys("moe", df, GPU, F.MOE_FORM_ROUTED)) / 1e3)
    routed = fit_group("moe", df, GPU, FitOptions(residuals=False, moe_form=F.MOE_FORM_ROUTED), seed=1, with_gbt=False)
    got = predict_us(routed.base, F.frame_phys("moe", df, GPU, F.MOE_FORM_ROUTED)) / 1e3
    assert np.allclose(got, df["latency_ms"], rtol=0.05)
    uniform = fit_group("moe", df, GPU, FitOptions(residuals=False), seed=1, with_gbt=False)
    assert uniform.base.to_dict() != routed.base.to_dict()   # the option reaches the fit


def test_validate_kernels_refuses_a_form_it_would_ignore(tmp_path):
    with pytest.raises(UserError, match="--moe-form routed applies to a refit"):
        kernels_main(["--measurements", str(tmp_path), "--gpu", "h100_sxm", "--moe-form", "routed"])

"""The cross-gen tier's pooled GEMM model (crossgen_gemm) and its fit (calibration.fit_crossgen)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from llmplan.calibration import fit_crossgen as FC
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.kernel_calibration import crossgen_gemm as CG
from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gbt import GBTParams
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

SMALL = GBTParams(n_trees=40, depth=4, learning_rate=0.2, l2=5.0, subsample=1.0, seed=0)


def test_pools_cover_the_tier_and_its_validation():
    feats = {k: GPUFeatures.from_spec(get_gpu(k)) for k in ("h100_sxm", "h200_sxm", "a100_sxm", "l40s", "b60")}
    vendors = {"h100_sxm": "nvidia", "h200_sxm": "nvidia", "a100_sxm": "nvidia", "l40s": "nvidia", "b60": "intel"}
    ps = FC.pools(vendors, feats)
    nv = ("a100_sxm", "h100_sxm", "h200_sxm", "l40s")
    assert nv in ps                                               # a new NVIDIA GPU (and the B60's pool)
    assert tuple(sorted(vendors)) in ps                           # another vendor: all
    assert ("a100_sxm", "h200_sxm", "l40s") in ps                 # H100 left out
    assert ("a100_sxm", "l40s") in ps                             # H100 and its twin left out
    assert all(len(p) >= 2 and list(p) == sorted(p) for p in ps) and len(set(ps)) == len(ps)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from llmplan.calibration.reader import read_measurements
    from test_calibration_synth import make_measurements_dir

    root = make_measurements_dir(tmp_path_factory.mktemp("m"), ("h100_sxm", "a100_sxm", "l40s"))
    return read_measurements(root, tables=("gemm",))


def test_fit_is_deterministic_and_round_trips(synth, tmp_path):
    d1 = FC.fit_models(synth, rows_per_gpu=500, params=SMALL)
    d2 = FC.fit_models(synth, rows_per_gpu=500, params=SMALL)
    t1, t2 = (json.dumps(d, sort_keys=True) for d in (d1, d2))
    assert t1 == t2
    data = d1["provenance"]["data"]
    assert len(data) == 3 and all(not s["path"].startswith("/") and s["sha256"] for s in data)
    path = tmp_path / "cg.json"
    path.write_text(t1)
    models = CG.load_models(path)
    assert set(models) == set(d1["models"]) and CG.pool_key(["l40s", "a100_sxm"]) in models


def test_pooled_model_predicts_a_gpu_it_never_saw(synth, tmp_path):
    """The synthetic GPUs share one efficiency curve in spec-normalised terms, so the model
    pooled over A100 and L40S predicts H100 better than the ideal reference time alone,
    and the vectorised and scalar paths agree."""
    path = tmp_path / "cg.json"
    path.write_text(json.dumps(FC.fit_models(synth, rows_per_gpu=500, params=SMALL)))
    member = CG.member_for(["l40s", "a100_sxm"], "vllm", "bf16", path)
    assert member is not None
    df = synth.family("gemm")
    df = df[(df["gpu"] == "h100_sxm") & (df["dtype"] == "bf16")].reset_index(drop=True)
    gf = GPUFeatures.from_spec(get_gpu("h100_sxm"))
    phys = F.frame_phys("gemm", df, gf)
    y_us = df["latency_ms"].to_numpy() * 1e3
    pred = np.exp(member.log_us_frame(phys))
    ape = np.abs(pred / y_us - 1.0).mean()
    ape_ideal = np.abs(np.asarray(CG.ideal_us(phys)) / y_us - 1.0).mean()
    assert ape < 0.2 and ape < 0.7 * ape_ideal, (ape, ape_ideal)
    for i, r in enumerate(df.head(10).to_dict("records")):
        copies = F.gemm_bench_copies(r["backend"], r["dtype"], r["n"] * r["k"] * 2.0, gf, F.PY)   # the row's engine
        one = F.gemm(r["m"], r["n"], r["k"], 2.0, gf.peak("bf16"), gf, F.PY, copies)
        assert math.exp(member.log_us_one(one)) == pytest.approx(pred[i], rel=1e-9)
    assert CG.member_for(["l40s", "a100_sxm"], "vllm", "int4_wo", path) is None   # group not fitted
    assert CG.member_for(["l40s", "h200_sxm"], "vllm", "bf16", path) is None      # pool not fitted


def test_blend_takes_the_pooled_model_in_log_space(synth, tmp_path):
    from llmplan.sim.kernel_calibration.crossgen_blend import BlendGroupModel
    from llmplan.sim.kernel_calibration.family_model import GroupModel
    from llmplan.sim.kernel_calibration.physics import BaseParams

    path = tmp_path / "cg.json"
    path.write_text(json.dumps(FC.fit_models(synth, rows_per_gpu=500, params=SMALL)))
    member = CG.member_for(["l40s", "a100_sxm"], "vllm", "bf16", path)
    gm = GroupModel(BaseParams.prior(), None, 1)
    df = synth.family("gemm")
    df = df[(df["gpu"] == "h100_sxm") & (df["dtype"] == "bf16")].reset_index(drop=True)
    phys = F.frame_phys("gemm", df, GPUFeatures.from_spec(get_gpu("h100_sxm")))
    alone = BlendGroupModel.of(gm, [(gm, 1.0)], False).predict_frame(phys)
    both = BlendGroupModel.of(gm, [(gm, 1.0)], False, member, 0.25).predict_frame(phys)
    # log mean moved by 0.25 x the pooled model's difference, capped at POOLED_CAP
    from llmplan.sim.kernel_calibration.crossgen_blend import POOLED_CAP

    diff = member.log_us_frame(phys) - np.log(alone * 1e3)
    want = np.exp(np.log(alone * 1e3) + 0.25 * np.clip(diff, -POOLED_CAP, POOLED_CAP)) / 1e3
    np.testing.assert_allclose(both, want, rtol=1e-12)
    assert not np.allclose(both, alone)

"""Split and holdout logic: parsing, no leakage, holdout removes the whole GPU."""

from __future__ import annotations

import numpy as np
import pytest

from llmplan.calibration.fit import FitOptions, split_measurements, without_gpu
from llmplan.sim.kernel_calibration.gbt import GBTParams
from llmplan.calibration.reader import read_measurements
from llmplan.calibration.splits import GROUP_COLUMNS, Split, group_ids, parse_split, held_out_mask
from llmplan.calibration.validate_kernels import validate_kernels
from llmplan.errors import UserError
from test_calibration_synth import make_measurements_dir


@pytest.mark.parametrize("text,expect", [("random:0.5:3", Split("random", 0.5, 3)),
                                         ("grouped:0.25:0", Split("grouped", 0.25, 0)),
                                         ("grouped:0.5", Split("grouped", 0.5, 0))])
def test_parse_split(text, expect):
    assert parse_split(text) == expect


@pytest.mark.parametrize("bad", ["", "random", "half:0.5:1", "random:1.5:0", "random:0:0", "grouped:x:1",
                                 "random:0.5:seed", "grouped:0.5:1:2"])
def test_parse_split_rejects_bad_strings(bad):
    with pytest.raises(UserError) as exc:
        parse_split(bad)
    assert exc.value.key == "split" and "random:" in (exc.value.fix or "")


@pytest.fixture(scope="module")
def meas(tmp_path_factory):
    return read_measurements(make_measurements_dir(tmp_path_factory.mktemp("m"), ("h100_sxm", "a100_sxm")))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grouped_split_never_shares_a_group(meas, seed):
    split = Split("grouped", 0.5, seed)
    train, test = split_measurements(meas, split)
    for fam in meas.frames:
        assert len(train.family(fam)) + len(test.family(fam)) == len(meas.family(fam))
        a = set(group_ids(fam, train.family(fam)))
        b = set(group_ids(fam, test.family(fam)))
        assert a and b and not (a & b), fam
    # GEMM groups are whole (n, k) weight shapes, attention groups whole head configurations
    assert GROUP_COLUMNS["gemm"] == ("n", "k")
    assert GROUP_COLUMNS["attention_prefill"] == ("num_heads", "num_kv_heads", "head_dim")
    assert GROUP_COLUMNS["moe"] == ("hidden", "inter", "topk", "num_experts")


def test_grouped_membership_is_the_same_for_every_gpu(meas):
    df = meas.family("gemm")
    m = held_out_mask("gemm", df, Split("grouped", 0.5, 7))
    held = df[m].groupby(["n", "k"]).gpu.nunique()
    assert (held == df["gpu"].nunique()).all()


def test_random_split_fraction_and_determinism(meas):
    df = meas.family("gemm")
    m1 = held_out_mask("gemm", df, Split("random", 0.3, 4))
    m2 = held_out_mask("gemm", df, Split("random", 0.3, 4))
    assert np.array_equal(m1, m2)
    assert 0.2 < m1.mean() < 0.4


def test_holdout_removes_every_row_of_the_gpu(meas):
    rest = without_gpu(meas, "h100_sxm")
    assert "h100_sxm" not in rest.gpu_specs
    assert all((df["gpu"] != "h100_sxm").all() for df in rest.frames.values())
    assert all(s.gpu != "h100_sxm" for s in rest.sources)
    assert sum(len(d) for d in rest.frames.values()) == sum((d["gpu"] == "a100_sxm").sum()
                                                             for d in meas.frames.values())


def test_holdout_validation_predicts_cross_gen_only(meas):
    opts = FitOptions(residuals=False, gbt=GBTParams(n_trees=10, depth=3), min_trees=5, rows_per_tree=50)
    res = validate_kernels(meas, "h100_sxm", holdout_gpu="h100_sxm", opts=opts, roofline=False,
                           families=["gemm", "attention_decode", "nccl"])
    assert set(res.frame["tier"]) == {"cross-gen"}
    assert (res.frame["gpu"] == "h100_sxm").all()
    by = {s.family: s for s in res.scores}
    assert by["gemm"].scored == by["gemm"].rows > 0


def test_split_validation_scores_only_held_out_rows(meas):
    opts = FitOptions(residuals=False, gbt=GBTParams(n_trees=10, depth=3), min_trees=5, rows_per_tree=50)
    split = Split("grouped", 0.5, 0)
    res = validate_kernels(meas, "a100_sxm", split=split, opts=opts, roofline=False, families=["gemm"])
    df = meas.family("gemm")
    held = df[held_out_mask("gemm", df, split) & (df["gpu"] == "a100_sxm").to_numpy()]
    assert len(res.frame) == len(held)
    assert set(map(tuple, res.frame[["n", "k"]].to_numpy())) == set(map(tuple, held[["n", "k"]].to_numpy()))
    assert set(res.frame["tier"]) == {"measured"}

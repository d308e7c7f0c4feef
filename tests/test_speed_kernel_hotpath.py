"""The kernel model's cheaper scalar path gives the floats of the plain evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import CalibratedKernelModel
from llmplan.sim.kernel_calibration.calib_file import load_calibration
from llmplan.sim.kernel_calibration.gbt import GBTModel, GBTParams, fit_gbt
from llmplan.sim.kernels import Link


def _plain_one(g: GBTModel, x: np.ndarray) -> float:
    """The tree walk written out: every tree's leaf by its levels, summed in tree order by numpy."""
    vals = []
    for t in range(g.n_trees):
        leaf = 0
        for lvl in range(g.feats.shape[1]):
            leaf = 2 * leaf + int(x[g.feats[t, lvl]] > g.thresholds[t, lvl])
        vals.append(g.leaves[t, leaf])
    return float(np.array(vals).sum()) + g.bias


def test_gbt_predict_one_equals_the_written_out_walk_on_random_inputs():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(400, 5))
    y = np.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=400)
    g = fit_gbt(x, y, [f"f{i}" for i in range(5)], GBTParams(n_trees=40, depth=4)).rounded()
    queries = rng.normal(size=(300, 5)) * 2
    queries[:20] = g.thresholds.ravel()[:100].reshape(20, 5)    # values exactly on thresholds
    batch = g.predict(queries)
    for i, q in enumerate(queries):
        one = g.predict_one(q)
        assert one == _plain_one(g, q)
        assert one == pytest.approx(batch[i], rel=1e-12, abs=1e-12)
    # queries with the same outcome of every test: answered from the remembered sums
    assert g._memo
    nudged = queries[20:] + 1e-9
    for q in nudged:
        assert g.predict_one(q) == _plain_one(g, q)
    for q in queries:
        assert g.predict_one(q) == _plain_one(g, q)
    # the distinct tests cover every node, each test once
    test_feat, test_thr, node_test = g._tests
    assert len(set(zip(test_feat.tolist(), test_thr.tolist()))) == len(test_feat)
    assert np.array_equal(test_feat[node_test], g.feats.ravel())
    assert np.array_equal(test_thr[node_test], g.thresholds.ravel())
    assert len(test_feat) < g.feats.size


def test_remembered_sums_are_bounded():
    from llmplan.sim.kernel_calibration import gbt as gbt_mod
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 3))
    g = fit_gbt(x, x[:, 0] ** 2, ["a", "b", "c"], GBTParams(n_trees=10, depth=3))
    for q in rng.normal(size=(300, 3)) * 3:
        g.predict_one(q)
        assert len(g._memo) <= gbt_mod._MEMO_SIZE


def test_shipped_ensemble_predict_one_equals_the_written_out_walk():
    fm = load_calibration(None).family_model("h100_sxm", "vllm", "gemm")
    g = next(gm.gbt for gm in fm.groups.values() if gm.gbt is not None and gm.gbt.n_trees)
    rng = np.random.default_rng(3)
    lo, hi = g.thresholds.min(), g.thresholds.max()
    for q in rng.uniform(lo, hi, size=(100, len(g.feature_names))):
        assert g.predict_one(q) == _plain_one(g, q)


def _uncached_predict(km: CalibratedKernelModel, family, dtype, q, rs, prefer=None):
    """The answer of the first candidate with a group, searched afresh (no remembered resolution)."""
    from llmplan.sim.kernel_calibration.family_model import scalar_phys
    for cand in km.choice.candidates(family, km.backend, prefer):
        group, exact = cand.model.resolve_group(dtype)
        if group is None:
            continue
        gm = cand.model.groups[group]
        phys = scalar_phys(family, cand.features, group, q, cand.model.work_form, cand.backend)
        alt = cand.model.shared_gbt if cand.model.shared_gbt is not None and gm.outside_config(family, rs) else None
        ms, bound = gm.predict_one(phys, alt)
        return ms, cand.backend, group, exact
    return None


@pytest.mark.parametrize("gpu,backend", [("h100_sxm", "vllm"), ("h200_sxm", "trtllm"), ("a10g", "sglang")])
def test_remembered_resolution_gives_the_searched_answer(gpu, backend):
    km = CalibratedKernelModel(get_gpu(gpu), backend)
    for dtype in ("bf16", "fp8", "fp8_block", "fp4", "int4"):
        for m in (1, 37, 512):
            shape = {"m": m, "n": 4096, "k": 5120}
            for _ in range(2):       # second time from the remembered resolution
                kt = km._predict("gemm", dtype, {**shape, "dtype": dtype}, shape)
                ref = _uncached_predict(km, "gemm", dtype, {**shape, "dtype": dtype}, shape)
                assert (kt is None) == (ref is None)
                if kt is not None:
                    assert kt.latency_ms == ref[0]
                    assert kt.table == (ref[1] if kt.tier != "cross-gen" else "")
    # keys (family, dtype, prefer, moe_query, attn_query): sim/calibrated.py CalibratedKernelModel._resolve
    assert set(km._resolved) >= {("gemm", "bf16", None, None, None), ("gemm", "fp8", None, None, None)}


def test_memory_op_and_collectives_remembered_answers_equal_fresh_ones():
    km = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm")
    fresh = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm")
    for nbytes in (4096, 4096.0, 3.5e6):
        a, b = km.memory_op(nbytes), km.memory_op(nbytes)
        assert a == b == fresh._roof.memory_op(nbytes)
        assert type(a.bytes) is type(nbytes)          # int and float answers are kept apart
    pcie = Link("pcie", 64.0, 5.0)
    for n in (2, 4, 8, 16):
        one = km.collective("all_reduce", 1 << 20, n, pcie)
        again = km._collective("all_reduce", float(1 << 20), n, pcie)
        assert one == again == fresh._collective("all_reduce", float(1 << 20), n, pcie)

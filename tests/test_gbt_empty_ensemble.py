"""A residual ensemble with no trees (fewer than 8 rows, or n_trees = 0) is the mean residual:
it builds, predicts its bias in both paths, and survives the JSON round trip."""

import numpy as np

from llmplan.sim.kernel_calibration.gbt import GBTModel, GBTParams, fit_gbt


def test_too_few_rows_give_the_mean_residual():
    x = np.arange(10.0).reshape(5, 2)
    y = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    m = fit_gbt(x, y, ["a", "b"], GBTParams(n_trees=20, depth=3))
    assert m.leaves.shape == (0, 8) and m.feats.shape == (0, 3)
    assert np.allclose(m.predict(np.zeros((4, 2))), 0.3)
    assert m.predict_one(np.array([7.0, -1.0])) == m.bias == np.mean(y)


def test_zero_trees_round_trip():
    m = fit_gbt(np.ones((20, 2)), np.full(20, -0.2), ["a", "b"], GBTParams(n_trees=0, depth=4))
    back = GBTModel.from_dict(m.to_dict())     # the file form rounds the bias to 5 digits
    assert back.bias == -0.2 and abs(m.bias + 0.2) < 1e-12
    assert np.allclose(back.predict(np.zeros((3, 2))), -0.2)

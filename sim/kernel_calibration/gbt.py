"""Gradient-boosted oblivious trees in numpy, serialisable to plain JSON.

The measured-tier kernel model corrects a physical base model with a small boosted
ensemble fitted to the log-latency residual. Oblivious trees (every node of one level
uses the same feature and threshold, as in CatBoost) are used because

* a tree is just ``depth`` (feature, threshold) pairs plus ``2**depth`` leaf values, so
  the ensemble is compact in JSON and
* evaluating the whole ensemble for one query is a handful of vectorised numpy calls
  (one comparison of a (trees x depth) array, one dot product, one gather), which keeps a
  scalar kernel-model call in the tens of microseconds.

Training is histogram based: every feature is cut at up to ``n_bins - 1`` thresholds
(midpoints between distinct quantiles of the training values) and each level picks the
(feature, threshold) that maximises the summed squared-loss gain over all current leaves.
Everything is deterministic for a given input and seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


#: remembered single-query sums per ensemble (cleared when full)
_MEMO_SIZE = 1 << 14


@dataclass(frozen=True)
class GBTParams:
    """Hyper-parameters of :func:`fit_gbt` (defaults chosen on the shipped data)."""

    n_trees: int = 160
    depth: int = 6
    learning_rate: float = 0.15
    l2: float = 2.0            # ridge penalty on leaf values (in units of row counts)
    n_bins: int = 48           # thresholds per feature <= n_bins - 1
    subsample: float = 0.8     # rows drawn (without replacement) per tree
    seed: int = 0


@dataclass
class GBTModel:
    """A fitted ensemble. ``feats``/``thresholds``: (trees, depth); ``leaves``: (trees, 2**depth)."""

    feature_names: list[str]
    feats: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    bias: float = 0.0
    _pow2: np.ndarray = field(init=False, repr=False)
    _rows: np.ndarray = field(init=False, repr=False)
    _flat: tuple = field(init=False, repr=False)
    _tests: tuple | None = field(init=False, repr=False, compare=False)
    _memo: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        feats = np.asarray(self.feats, dtype=np.int64)
        # an empty ensemble keeps its depth (reshape(0, -1) cannot infer it)
        self.feats = feats.reshape(0, feats.shape[-1] if feats.ndim == 2 else 0) if len(self.leaves) == 0 \
            else feats.reshape(len(self.leaves), -1)
        self.thresholds = np.asarray(self.thresholds, dtype=np.float64).reshape(self.feats.shape)
        self.leaves = np.asarray(self.leaves, dtype=np.float64)
        depth = self.feats.shape[1]
        # level 0 is the most significant bit of the leaf index
        self._pow2 = (1 << np.arange(depth - 1, -1, -1)).astype(np.int64)
        self._rows = np.arange(len(self.leaves))
        # flat copies for the single-query fast path
        self._flat = (self.feats.ravel(), self.thresholds.ravel(), self.feats.shape, self._pow2.astype(np.float64),
                      self.leaves.ravel(), self._rows * self.leaves.shape[1])
        self._tests = None          # built by the first single query (_distinct_tests)
        self._memo = {}

    @property
    def n_trees(self) -> int:
        return len(self.leaves)

    def predict(self, x: np.ndarray, chunk: int = 8192) -> np.ndarray:
        """Sum of tree outputs (plus bias) for a (rows, features) matrix."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            return np.array([self.predict_one(x)])
        out = np.empty(len(x))
        if self.n_trees == 0:
            out.fill(self.bias)
            return out
        for s in range(0, len(x), chunk):
            xs = x[s:s + chunk]
            bits = xs[:, self.feats] > self.thresholds          # (rows, trees, depth)
            idx = bits.astype(np.int64) @ self._pow2            # (rows, trees)
            out[s:s + chunk] = self.leaves[self._rows, idx].sum(axis=1) + self.bias
        return out

    def predict_one(self, x: np.ndarray) -> float:
        """Fast path for a single feature vector.

        Every node's comparison ``x[feat] > threshold`` is one of the ensemble's distinct
        tests, so the leaves (and their sum) depend only on the outcomes of those tests:
        the sum is remembered per outcome vector (about half the queries of a plan repeat
        one) and computed, on a miss, exactly as before (the same leaves summed by numpy
        in tree order), so a remembered answer is the float the walk gives."""
        if self.n_trees == 0:
            return self.bias
        if self._tests is None:
            self._tests = _distinct_tests(self._flat[0], self._flat[1])
        test_feat, test_thr, node_test = self._tests
        outcome = np.greater(x.take(test_feat), test_thr)
        key = outcome.tobytes()
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        _, _, shape, pw, leaves, offs = self._flat
        idx = outcome.take(node_test).reshape(shape).dot(pw).astype(np.intp)
        out = float(leaves[offs + idx].sum()) + self.bias
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = out
        return out

    def to_dict(self, digits: int = 5) -> dict[str, Any]:
        """Plain-JSON form; leaf values and thresholds rounded to ``digits`` significant digits."""
        return {
            "feature_names": list(self.feature_names),
            "bias": _round(self.bias, digits),
            "feats": self.feats.tolist(),
            "thresholds": [[_round(v, 7) for v in row] for row in self.thresholds],
            "leaves": [[_round(v, digits) for v in row] for row in self.leaves],
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GBTModel":
        n_feat = len(d["feature_names"])
        leaves = np.asarray(d["leaves"], dtype=np.float64)
        if leaves.size == 0:
            leaves = leaves.reshape(0, 1)
        feats = np.asarray(d["feats"], dtype=np.int64)
        if feats.size and (feats.min() < 0 or feats.max() >= n_feat):
            raise ValueError("GBT model refers to a feature index out of range")
        return GBTModel(list(d["feature_names"]), feats, np.asarray(d["thresholds"], dtype=np.float64),
                        leaves, float(d.get("bias", 0.0)))

    def rounded(self, digits: int = 5) -> "GBTModel":
        """The model exactly as it will be after a JSON round trip."""
        return GBTModel.from_dict(self.to_dict(digits))


def _distinct_tests(feats: np.ndarray, thr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (feature, threshold) tests of an ensemble's nodes (a quarter of the nodes in
    the shipped fits) and, per node, which test it is: ``feats == test_feat[node_test]`` and
    ``thr == test_thr[node_test]``, thresholds told apart by their bits."""
    bits = thr.view(np.int64)
    order = np.lexsort((bits, feats))
    f, b = feats[order], bits[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (f[1:] != f[:-1]) | (b[1:] != b[:-1])
    node_test = np.empty(len(order), dtype=np.intp)
    node_test[order] = np.cumsum(new) - 1
    return f[new].copy(), b[new].copy().view(np.float64), node_test


def _round(v: float, digits: int) -> float:
    v = float(v)
    if v == 0.0 or not np.isfinite(v):
        return 0.0 if not np.isfinite(v) else v
    return float(f"{v:.{digits}g}")


def _thresholds(col: np.ndarray, n_bins: int) -> np.ndarray:
    """Cut points for one feature: midpoints between distinct quantile values."""
    uniq = np.unique(col)
    if len(uniq) <= 1:
        return np.zeros(0)
    if len(uniq) > n_bins:
        qs = np.quantile(col, np.linspace(0, 1, n_bins + 1)[1:-1], method="nearest")
        uniq = np.unique(np.concatenate([qs, uniq[[0, -1]]]))
    mids = (uniq[:-1] + uniq[1:]) / 2.0
    return np.unique(np.array([_round(v, 7) for v in mids]))


def fit_gbt(x: np.ndarray, y: np.ndarray, feature_names: list[str],
            params: GBTParams = GBTParams(), weights: np.ndarray | None = None) -> GBTModel:
    """Fit ``y ~ sum of trees(x)`` with squared loss (``y`` is typically a log residual)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n, n_feat = x.shape
    depth = params.depth
    if n < 8 or params.n_trees == 0:
        return GBTModel(feature_names, np.zeros((0, depth), int), np.zeros((0, depth)),
                        np.zeros((0, 1 << depth)), float(np.mean(y)) if n else 0.0)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    bias = float(np.sum(w * y) / np.sum(w))
    cuts = [_thresholds(x[:, j], params.n_bins) for j in range(n_feat)]
    n_cut = max(1, max(len(c) for c in cuts))
    nb = n_cut + 1
    # bin b means: exactly b thresholds lie strictly below the value
    xb = np.zeros((n, n_feat), dtype=np.int64)
    thr_table = np.full((n_feat, n_cut), np.inf)
    for j, c in enumerate(cuts):
        if len(c):
            xb[:, j] = np.searchsorted(c, x[:, j], side="left")
            thr_table[j, :len(c)] = c
    valid = np.isfinite(thr_table)                       # (F, n_cut)
    rng = np.random.default_rng(params.seed)
    pred = np.full(n, bias)
    feats = np.zeros((params.n_trees, depth), dtype=np.int64)
    thrs = np.zeros((params.n_trees, depth))
    leaves = np.zeros((params.n_trees, 1 << depth))
    f_off = (np.arange(n_feat) * nb)[None, :]
    n_sub = max(8, int(round(params.subsample * n)))
    for t in range(params.n_trees):
        rows = np.sort(rng.choice(n, size=n_sub, replace=False)) if n_sub < n else np.arange(n)
        g = (y[rows] - pred[rows]) * w[rows]
        h = w[rows]
        xbr = xb[rows]
        leaf = np.zeros(len(rows), dtype=np.int64)
        for lvl in range(depth):
            n_leaf = 1 << lvl
            idx = (leaf[:, None] * (n_feat * nb) + f_off + xbr).ravel()
            size = n_leaf * n_feat * nb
            gs = np.bincount(idx, weights=np.repeat(g, n_feat), minlength=size).reshape(n_leaf, n_feat, nb)
            hs = np.bincount(idx, weights=np.repeat(h, n_feat), minlength=size).reshape(n_leaf, n_feat, nb)
            gl = np.cumsum(gs, axis=2)[:, :, :n_cut]
            hl = np.cumsum(hs, axis=2)[:, :, :n_cut]
            gt = gs.sum(axis=2)[:, :, None]
            ht = hs.sum(axis=2)[:, :, None]
            gr, hr = gt - gl, ht - hl
            gain = (gl ** 2 / (hl + params.l2) + gr ** 2 / (hr + params.l2)).sum(axis=0)  # (F, n_cut)
            gain = np.where(valid, gain, -np.inf)
            best = int(np.argmax(gain))
            fj, bj = divmod(best, n_cut)
            if not np.isfinite(gain[fj, bj]):
                fj, bj = 0, 0
            feats[t, lvl] = fj
            thrs[t, lvl] = thr_table[fj, bj] if np.isfinite(thr_table[fj, bj]) else np.inf
            leaf = leaf * 2 + (xbr[:, fj] > bj)
        gsum = np.bincount(leaf, weights=g, minlength=1 << depth)
        hsum = np.bincount(leaf, weights=h, minlength=1 << depth)
        vals = params.learning_rate * gsum / (hsum + params.l2)
        leaves[t] = vals
        # apply to all rows with the real-valued thresholds (identical to the binned test)
        full_leaf = (x[:, feats[t]] > thrs[t]).astype(np.int64) @ (1 << np.arange(depth - 1, -1, -1))
        pred += vals[full_leaf]
    thrs = np.where(np.isfinite(thrs), thrs, 1e300)
    return GBTModel(list(feature_names), feats, thrs, leaves, bias)

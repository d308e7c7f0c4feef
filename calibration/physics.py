"""The physically grounded base latency model: launch floor + soft roofline.

    t = floor + ( (q**g * t_c / eta_c)**p + (l2f * t_m / eta_m)**p )**(1/p)
    l2f = 1 / l2_gain   when the working set fits in L2 (warm-L2 benchmarks), else 1

``t_c``/``t_m`` are the ideal compute/DRAM times at the specification peaks and ``q`` the
tile/wave quantization factor (:mod:`calibration.features`). Six parameters per operator
family and dtype: ``floor_us`` (fixed per-call cost: launch, activation quantization for
fp8, block-scale handling for fp8_block), ``eta_c``/``eta_m`` (achieved fraction of
peak compute / bandwidth), ``g`` (how much quantization costs), ``l2_gain`` and ``p``
(sharpness of the compute/memory transition). They are fitted by robust least squares
on log latency, with weak priors so unidentified parameters stay at sensible values.

Because the GPU enters only through peak, bandwidth, SM count and L2 size, the same
parameters fitted across several GPUs predict a GPU that has no measurements (the
cross-gen tier).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from calibration.features import Phys

PARAM_NAMES = ("floor_us", "eta_c", "eta_m", "g", "l2_gain", "p")
#: prior (centre) and bounds of each parameter; log-scale for all but ``g``
PRIOR = {"floor_us": 5.0, "eta_c": 0.6, "eta_m": 0.75, "g": 0.5, "l2_gain": 1.0, "p": 3.0}
BOUNDS = {"floor_us": (0.3, 3000.0), "eta_c": (0.01, 1.5), "eta_m": (0.01, 5.0), "g": (0.0, 1.5),
          "l2_gain": (0.5, 4.0), "p": (1.0, 12.0)}
PRIOR_WEIGHT = 0.02


@dataclass(frozen=True)
class BaseParams:
    floor_us: float
    eta_c: float
    eta_m: float
    g: float
    l2_gain: float
    p: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(f"{getattr(self, k):.7g}") for k in PARAM_NAMES}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "BaseParams":
        return BaseParams(*(float(d[k]) for k in PARAM_NAMES))

    @staticmethod
    def prior() -> "BaseParams":
        return BaseParams(*(PRIOR[k] for k in PARAM_NAMES))


def predict_us(bp: BaseParams, phys: Phys) -> Any:
    """Base latency in microseconds (numpy arrays or Python scalars alike)."""
    tc = (phys.q ** bp.g) * phys.t_c / bp.eta_c
    tm = (1.0 - phys.l2 * (1.0 - 1.0 / bp.l2_gain)) * phys.t_m / bp.eta_m
    return bp.floor_us + (tc ** bp.p + tm ** bp.p) ** (1.0 / bp.p)


def predict_us_scalar(bp: BaseParams, t_c: float, t_m: float, q: float, l2: float) -> float:
    tc = (q ** bp.g) * t_c / bp.eta_c
    tm = (1.0 - l2 * (1.0 - 1.0 / bp.l2_gain)) * t_m / bp.eta_m
    # scale before the power so huge/small times do not overflow
    s = max(tc, tm)
    if s <= 0.0:
        return bp.floor_us
    return bp.floor_us + s * ((tc / s) ** bp.p + (tm / s) ** bp.p) ** (1.0 / bp.p)


def _to_theta(bp: BaseParams) -> np.ndarray:
    return np.array([bp.g if k == "g" else math.log(getattr(bp, k)) for k in PARAM_NAMES])


def _from_theta(theta: np.ndarray) -> BaseParams:
    return BaseParams(*(float(v) if k == "g" else float(math.exp(v)) for k, v in zip(PARAM_NAMES, theta)))


def _log_pred(theta: np.ndarray, tc0: np.ndarray, tm0: np.ndarray, q: np.ndarray, l2: np.ndarray) -> np.ndarray:
    lf, lec, lem, g, ll2, lp = theta
    p = math.exp(lp)
    ltc = g * np.log(q) + np.log(tc0) - lec
    ltm = np.log(tm0) + np.log1p(-l2 * (1.0 - math.exp(-ll2))) - lem
    hi = np.maximum(ltc, ltm)
    lroof = hi + np.log(np.exp(p * (ltc - hi)) + np.exp(p * (ltm - hi))) / p
    return np.logaddexp(lf, lroof)


def fit_base(phys: Phys, latency_us: np.ndarray, init: BaseParams | None = None,
             fixed: dict[str, float] | None = None, max_rows: int = 20000, seed: int = 0) -> BaseParams:
    """Robust least squares of log latency on the base model; ``fixed`` pins parameters."""
    y = np.log(np.asarray(latency_us, dtype=np.float64))
    tc0 = np.maximum(np.broadcast_to(np.asarray(phys.t_c, dtype=np.float64), y.shape), 1e-12)
    tm0 = np.maximum(np.broadcast_to(np.asarray(phys.t_m, dtype=np.float64), y.shape), 1e-12)
    q = np.maximum(np.broadcast_to(np.asarray(phys.q, dtype=np.float64), y.shape), 1.0)
    l2 = np.broadcast_to(np.asarray(phys.l2, dtype=np.float64), y.shape)
    if len(y) > max_rows:
        idx = np.sort(np.random.default_rng(seed).choice(len(y), max_rows, replace=False))
        y, tc0, tm0, q, l2 = y[idx], tc0[idx], tm0[idx], q[idx], l2[idx]
    fixed = dict(fixed or {})
    if not np.any(l2 > 0):
        fixed.setdefault("l2_gain", 1.0)
    start = init or BaseParams.prior()
    if "floor_us" not in fixed and init is None:
        start = BaseParams(float(np.clip(np.exp(np.quantile(y, 0.02)) * 0.8, 0.5, 500.0)),
                           *(getattr(start, k) for k in PARAM_NAMES[1:]))
    theta0 = _to_theta(start)
    prior = _to_theta(BaseParams.prior())
    free = [i for i, k in enumerate(PARAM_NAMES) if k not in fixed]
    for k, v in fixed.items():
        theta0[PARAM_NAMES.index(k)] = v if k == "g" else math.log(v)
    lo = np.array([BOUNDS[k][0] if k == "g" else math.log(BOUNDS[k][0]) for k in PARAM_NAMES])
    hi = np.array([BOUNDS[k][1] if k == "g" else math.log(BOUNDS[k][1]) for k in PARAM_NAMES])
    theta0 = np.clip(theta0, lo + 1e-9, hi - 1e-9)
    w_prior = PRIOR_WEIGHT * math.sqrt(len(y))

    def resid(free_theta: np.ndarray) -> np.ndarray:
        th = theta0.copy()
        th[free] = free_theta
        r = _log_pred(th, tc0, tm0, q, l2) - y
        pr = w_prior * (free_theta - prior[free])
        return np.concatenate([r, pr])

    if not free or len(y) == 0:
        return _from_theta(theta0)
    sol = least_squares(resid, theta0[free], bounds=(lo[free], hi[free]), loss="soft_l1", f_scale=0.1,
                        max_nfev=200, x_scale=1.0)
    th = theta0.copy()
    th[free] = sol.x
    return _from_theta(th)

"""The physically grounded base latency model: launch floor + soft roofline with L2.

    t     = floor + wave_us * waves + ( (q**g * t_c / eta_c)**p + t_mem**p )**(1/p)
    t_mem = (1 - h) * t_m / eta_m + h * t_l2 / l2_bw_sm
    h     = 1 / (1 + (ws_l2 / l2_cap)**4)          (share of traffic served from a warm L2)

``t_c``/``t_m`` are the ideal compute/DRAM times at the specification peaks, ``q`` the
tile/wave quantization factor, ``ws_l2`` the working set over the L2 size and ``t_l2``
the bytes over the SM count, ``waves`` the waves of work units (tiles, CTAs) over the SMs
(:mod:`llmplan.sim.kernel_calibration.features`). Eight parameters per operator family and dtype:
``floor_us`` (fixed per-call cost: launch, activation quantization for fp8, block-scale
handling for fp8_block), ``wave_us`` (fixed cost of each wave: tile prologue/epilogue,
pipeline fill; it does not shrink with a faster GPU's peak), ``eta_c``/``eta_m`` (achieved fraction of peak
compute / DRAM bandwidth), ``g`` (how much quantization costs), ``p`` (sharpness of the
compute/memory transition), ``l2_cap`` (usable share of L2) and ``l2_bw_sm`` (L2 bandwidth
per SM, GB/s: L2 bandwidth scales with the SM count, not with DRAM bandwidth). They are
fitted by robust least squares on log latency with weak priors, so parameters the data
cannot identify stay at sensible values.

Because the GPU enters only through its peak, bandwidth, SM count and L2 size, the same
parameters fitted across several GPUs predict a GPU that has no measurements (the
cross-gen tier).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration.features import Phys

PARAM_NAMES = ("floor_us", "wave_us", "eta_c", "eta_m", "g", "p", "l2_cap", "l2_bw_sm")
#: prior (centre) and bounds of each parameter; log-scale for all but ``g``
PRIOR = {"floor_us": 5.0, "wave_us": 0.5, "eta_c": 0.6, "eta_m": 0.75, "g": 0.5, "p": 3.0, "l2_cap": 0.5, "l2_bw_sm": 60.0}
#: physical ranges: efficiencies at most 100% of peak compute and 125% of DRAM bandwidth
#: (the L2 term carries warm-cache reuse), at most 4 us of fixed cost per wave
BOUNDS = {"floor_us": (0.3, 3000.0), "wave_us": (1e-3, 4.0), "eta_c": (0.01, 1.0), "eta_m": (0.01, 1.25), "g": (0.0, 1.5),
          "p": (1.0, 12.0), "l2_cap": (0.05, 2.0), "l2_bw_sm": (5.0, 1000.0)}
PRIOR_WEIGHT = 0.02


@dataclass(frozen=True)
class BaseParams:
    floor_us: float
    wave_us: float
    eta_c: float
    eta_m: float
    g: float
    p: float
    l2_cap: float
    l2_bw_sm: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(f"{getattr(self, k):.7g}") for k in PARAM_NAMES}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "BaseParams":
        return BaseParams(*(float(d[k]) for k in PARAM_NAMES))

    @staticmethod
    def prior() -> "BaseParams":
        return BaseParams(*(PRIOR[k] for k in PARAM_NAMES))


def predict_us(bp: BaseParams, phys: Phys) -> Any:
    """Base latency in microseconds for numpy arrays."""
    return np.exp(_log_pred(_to_theta(bp), *_arrays(phys)))


def predict_us_scalar(bp: BaseParams, t_c: float, t_m: float, q: float, ws_l2: float, t_l2: float,
                      waves: float) -> tuple[float, str]:
    """The same for one shape in plain Python floats (the kernel model's fast path), with
    the bound that dominates: ``latency`` (fixed costs), ``compute`` or ``memory``."""
    tc = (q ** bp.g) * t_c / bp.eta_c
    r = ws_l2 / bp.l2_cap
    h = 0.0 if r > 1e3 else 1.0 / (1.0 + r ** 4)
    tm = (1.0 - h) * t_m / bp.eta_m + h * t_l2 / bp.l2_bw_sm
    s = max(tc, tm)
    fixed = bp.floor_us + bp.wave_us * waves
    if s <= 0.0:
        return fixed, "latency"
    roof = s * ((tc / s) ** bp.p + (tm / s) ** bp.p) ** (1.0 / bp.p)
    bound = "latency" if fixed >= roof else ("compute" if tc >= tm else "memory")
    return fixed + roof, bound


def _arrays(phys: Phys) -> tuple[np.ndarray, ...]:
    n = len(np.atleast_1d(phys.t_c))
    f = lambda v, lo: np.maximum(np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)), lo)  # noqa: E731
    return (f(phys.t_c, 1e-12), f(phys.t_m, 1e-12), f(phys.q, 1.0), f(phys.ws_l2, 0.0), f(phys.t_l2, 0.0),
            f(phys.waves, 1.0))


def _to_theta(bp: BaseParams) -> np.ndarray:
    return np.array([bp.g if k == "g" else math.log(getattr(bp, k)) for k in PARAM_NAMES])


def _from_theta(theta: np.ndarray) -> BaseParams:
    return BaseParams(*(float(v) if k == "g" else float(math.exp(v)) for k, v in zip(PARAM_NAMES, theta)))


def _log_pred(theta: np.ndarray, tc0: np.ndarray, tm0: np.ndarray, q: np.ndarray, ws: np.ndarray,
              tl2: np.ndarray, waves: np.ndarray) -> np.ndarray:
    lf, lw, lec, lem, g, lp, lcap, lbw = theta
    p = math.exp(lp)
    ltc = g * np.log(q) + np.log(tc0) - lec
    r = np.minimum(ws / math.exp(lcap), 1e3)
    h = np.where(ws > 1e6, 0.0, 1.0 / (1.0 + r ** 4))
    ltm = np.log((1.0 - h) * tm0 * math.exp(-lem) + h * tl2 * math.exp(-lbw) + 1e-30)
    hi = np.maximum(ltc, ltm)
    lroof = hi + np.log(np.exp(p * (ltc - hi)) + np.exp(p * (ltm - hi))) / p
    return np.logaddexp(np.logaddexp(lf, lw + np.log(waves)), lroof)


def fit_base(phys: Phys, latency_us: np.ndarray, init: BaseParams | None = None,
             fixed: dict[str, float] | None = None, max_rows: int = 20000, seed: int = 0,
             weights: np.ndarray | None = None, prior: BaseParams | None = None,
             prior_weight: float = PRIOR_WEIGHT) -> BaseParams:
    """Robust least squares of log latency on the base model; ``fixed`` pins parameters,
    ``weights`` (per row) balance groups such as GPUs in a pooled fit; ``prior`` (default
    :data:`PRIOR`) is the centre the parameters are shrunk towards with ``prior_weight``
    (per parameter, in log units, relative to sqrt(rows))."""
    from scipy.optimize import least_squares  # fitting only: keep prediction imports light

    y = np.log(np.asarray(latency_us, dtype=np.float64))
    arrs = _arrays(phys)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(y) > max_rows:
        idx = np.sort(np.random.default_rng(seed).choice(len(y), max_rows, replace=False))
        y, w, arrs = y[idx], w[idx], tuple(a[idx] for a in arrs)
    sw = np.sqrt(w / w.mean()) if len(w) else w
    fixed = dict(fixed or {})
    if not np.any(arrs[3] < 1e6):
        fixed.setdefault("l2_cap", PRIOR["l2_cap"])
        fixed.setdefault("l2_bw_sm", PRIOR["l2_bw_sm"])
    start = init or prior or BaseParams.prior()
    if "floor_us" not in fixed and init is None and prior is None and len(y):
        start = BaseParams(float(np.clip(np.exp(np.quantile(y, 0.02)) * 0.8, 0.5, 500.0)),
                           *(getattr(start, k) for k in PARAM_NAMES[1:]))
    theta0 = _to_theta(start)
    centre = _to_theta(prior or BaseParams.prior())
    free = [i for i, k in enumerate(PARAM_NAMES) if k not in fixed]
    for k, v in fixed.items():
        theta0[PARAM_NAMES.index(k)] = v if k == "g" else math.log(v)
    lo = np.array([BOUNDS[k][0] if k == "g" else math.log(BOUNDS[k][0]) for k in PARAM_NAMES])
    hi = np.array([BOUNDS[k][1] if k == "g" else math.log(BOUNDS[k][1]) for k in PARAM_NAMES])
    theta0 = np.clip(theta0, lo + 1e-9, hi - 1e-9)
    w_prior = prior_weight * math.sqrt(max(len(y), 1))

    def resid(free_theta: np.ndarray) -> np.ndarray:
        th = theta0.copy()
        th[free] = free_theta
        r = (_log_pred(th, *arrs) - y) * sw
        return np.concatenate([r, w_prior * (free_theta - centre[free])])

    if not free or len(y) == 0:
        return _from_theta(theta0)
    sol = least_squares(resid, theta0[free], bounds=(lo[free], hi[free]), loss="soft_l1", f_scale=0.1,
                        max_nfev=300, x_scale=1.0)
    th = theta0.copy()
    th[free] = sol.x
    return _from_theta(th)

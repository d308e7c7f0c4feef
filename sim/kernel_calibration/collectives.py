"""Collective communication models: measured curves and the alpha-beta model.

* Measured tier: for every measured configuration (engine custom all-reduce per backend and
  launch mode, NCCL per op/dtype, MoE all-to-all per DeepEP mode) a monotone piecewise-linear
  curve of latency over message size (or tokens), after removing isolated spikes. Below the
  smallest measured size the latency is the curve's first value (the fixed per-call cost);
  above the largest the last segment's slope continues (the bandwidth regime). GPU counts
  between measured ones are interpolated in log space.
* Alpha-beta: ``t = alpha + factor(op, n) * bytes / (link_bw * eta)`` with ``alpha`` (us) and
  ``eta`` fitted per (op, dtype, n) on each GPU. A GPU without measurements (cross-gen)
  uses the geometric mean over measured GPUs with its own link bandwidth; a link other than
  the one measured (PCIe, network) uses the GPU's fitted alpha and eta over that link's
  bandwidth plus the link's start-up latency per algorithm step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is needed only when fitting or scoring frames
    import pandas as pd

#: engines use their custom all-reduce for messages up to this size inside NVLink (vLLM's
#: default custom_all_reduce max_size, 8 MiB), NCCL above it
CUSTOM_AR_MAX_BYTES = 8 * 1024 * 1024
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "p2p")


def bus_factor(op: str, n: float) -> float:
    """Bytes each GPU moves over its link per message byte (ring algorithms)."""
    n = max(float(n), 2.0)
    return {"all_reduce": 2.0 * (n - 1) / n, "p2p": 1.0}.get(op, (n - 1) / n)


def ring_steps(op: str, n: float) -> float:
    n = max(float(n), 2.0)
    return {"all_reduce": 2.0 * (n - 1), "p2p": 1.0}.get(op, n - 1)


@dataclass
class Curve:
    """Sorted knots of log2(size) -> log2(latency_ms)."""

    lx: np.ndarray
    ly: np.ndarray

    def predict(self, size: Any) -> Any:
        """Linear interpolation of latency over size between knots (exact for any piecewise
        alpha-beta curve); the last segment's slope continues beyond the largest size."""
        x = np.asarray(size, dtype=np.float64)
        kx, ky = np.exp2(self.lx), np.exp2(self.ly)
        t = np.interp(x, kx, ky)
        slope = (ky[-1] - ky[-2]) / (kx[-1] - kx[-2]) if len(kx) > 1 else ky[-1] / kx[-1]
        return np.where(x > kx[-1], ky[-1] + max(slope, 0.0) * (x - kx[-1]), t)

    def predict_one(self, size: float) -> float:
        return float(self.predict(np.array([size]))[0])

    def inside(self, size: float) -> bool:
        lx = math.log2(max(size, 1e-9))
        return self.lx[0] - 1e-9 <= lx <= self.lx[-1] + 1e-9

    def to_dict(self) -> dict[str, Any]:
        return {"log2_x": [round(float(v), 6) for v in self.lx], "log2_ms": [round(float(v), 6) for v in self.ly]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Curve":
        return Curve(np.asarray(d["log2_x"], dtype=np.float64), np.asarray(d["log2_ms"], dtype=np.float64))

    @staticmethod
    def fit(size: np.ndarray, latency_ms: np.ndarray) -> "Curve":
        """Median-of-3 filter (removes isolated spikes), then the least-squares monotone
        (non-decreasing) fit in log space: latency never falls as the message grows."""
        import pandas as pd
        df = pd.DataFrame({"lx": np.round(np.log2(size), 6), "ly": np.log2(latency_ms)})
        g = df.groupby("lx", sort=True).ly.median()
        lx, ly = g.index.to_numpy(dtype=np.float64), g.to_numpy(dtype=np.float64)
        if len(ly) >= 3:
            med = np.median(np.stack([np.r_[ly[1], ly[:-1]], ly, np.r_[ly[1:], ly[-2]]]), axis=0)
            ly = np.r_[med[0] if ly[0] > ly[1] else ly[0], med[1:-1], ly[-1]]
        return Curve.from_dict(Curve(lx, isotonic(ly)).to_dict())


def isotonic(y: np.ndarray) -> np.ndarray:
    """Pool-adjacent-violators: the closest non-decreasing sequence in least squares."""
    blocks: list[list[float]] = []          # [sum, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks]) if blocks else np.zeros(0)


@dataclass
class CurveSet:
    """Curves keyed by configuration, each over GPU count ``n``: key -> {n: Curve}."""

    curves: dict[str, dict[int, Curve]] = field(default_factory=dict)

    def predict_one(self, key: str, n: int, size: float) -> tuple[float, bool] | None:
        """(latency ms, inside the measured range) or None when the key is unknown."""
        by_n = self.curves.get(key)
        if not by_n:
            return None
        ns = sorted(by_n)
        if n in by_n:
            c = by_n[n]
            return c.predict_one(size), c.inside(size)
        if n < ns[0] or n > ns[-1]:
            return None
        lo = max(v for v in ns if v < n)
        hi = min(v for v in ns if v > n)
        t = (math.log2(n) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        a, b = by_n[lo].predict_one(size), by_n[hi].predict_one(size)
        return 2.0 ** ((1 - t) * math.log2(a) + t * math.log2(b)), False

    def to_dict(self) -> dict[str, Any]:
        return {k: {str(n): c.to_dict() for n, c in sorted(v.items())} for k, v in sorted(self.curves.items())}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "CurveSet":
        return CurveSet({k: {int(n): Curve.from_dict(c) for n, c in v.items()} for k, v in d.items()})


@dataclass(frozen=True)
class AlphaBeta:
    alpha_us: float
    eta: float           # achieved fraction of the link bandwidth (bus bandwidth / link bandwidth)

    def predict_ms(self, op: str, nbytes: float, n: float, link_bw_gbps: float, extra_alpha_us: float = 0.0) -> float:
        beta_us = bus_factor(op, n) * nbytes / (link_bw_gbps * 1e3 * self.eta)
        return (self.alpha_us + extra_alpha_us + beta_us) / 1e3

    def to_dict(self) -> dict[str, float]:
        return {"alpha_us": float(f"{self.alpha_us:.6g}"), "eta": float(f"{self.eta:.6g}")}


def fit_alpha_beta(op: str, n: int, nbytes: np.ndarray, latency_ms: np.ndarray, link_bw_gbps: float) -> AlphaBeta:
    """Least squares on log latency of ``alpha + factor * bytes / (bw * eta)``."""
    from scipy.optimize import least_squares
    y = np.log(latency_ms * 1e3)
    x = bus_factor(op, n) * nbytes / (link_bw_gbps * 1e3)

    def resid(th: np.ndarray) -> np.ndarray:
        return np.log(np.exp(th[0]) + x / np.exp(th[1])) - y

    th0 = np.array([math.log(max(float(np.min(latency_ms)) * 1e3 * 0.8, 0.5)), math.log(0.5)])
    sol = least_squares(resid, th0, bounds=([math.log(0.05), math.log(1e-3)], [math.log(1e5), math.log(4.0)]),
                        loss="soft_l1", f_scale=0.1)
    return AlphaBeta(**AlphaBeta(float(math.exp(sol.x[0])), float(math.exp(sol.x[1]))).to_dict())


def geo_mean(params: list[AlphaBeta]) -> AlphaBeta:
    return AlphaBeta(**AlphaBeta(float(math.exp(np.mean([math.log(p.alpha_us) for p in params]))),
                                 float(math.exp(np.mean([math.log(p.eta) for p in params])))).to_dict())


def custom_key(backend: str, mode: str) -> str:
    return f"{backend}|{mode}"


def nccl_key(op: str, dtype: str) -> str:
    return f"{op}|{dtype}"


def a2a_key(row: Any) -> str:
    return f"{row['comm_backend']}|{row['phase']}|{int(row['hidden'])}|{int(row['topk'])}|" \
           f"{int(row['num_experts'])}|{int(row['sms'])}"


@dataclass
class GPUCollectives:
    """Everything measured about one GPU's collectives."""

    fabric: str                                   # link the measurements ran over
    fabric_bw_gbps: float
    custom_ar: CurveSet = field(default_factory=CurveSet)     # key backend|mode
    nccl: CurveSet = field(default_factory=CurveSet)          # key op|dtype
    moe_a2a: CurveSet = field(default_factory=CurveSet)       # key see a2a_key, n = ep size, x = tokens
    alpha_beta: dict[str, AlphaBeta] = field(default_factory=dict)  # "nccl|op|dtype|n" / "custom|mode|n"

    def to_dict(self) -> dict[str, Any]:
        return {"fabric": self.fabric, "fabric_bw_gbps": self.fabric_bw_gbps,
                "custom_allreduce": self.custom_ar.to_dict(), "nccl": self.nccl.to_dict(),
                "moe_a2a": self.moe_a2a.to_dict(),
                "alpha_beta": {k: v.to_dict() for k, v in sorted(self.alpha_beta.items())}}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GPUCollectives":
        return GPUCollectives(d["fabric"], float(d["fabric_bw_gbps"]), CurveSet.from_dict(d["custom_allreduce"]),
                              CurveSet.from_dict(d["nccl"]), CurveSet.from_dict(d["moe_a2a"]),
                              {k: AlphaBeta(**v) for k, v in d["alpha_beta"].items()})


def fit_gpu_collectives(fabric: str, fabric_bw: float, custom: pd.DataFrame, nccl: pd.DataFrame,
                        a2a: pd.DataFrame) -> GPUCollectives:
    out = GPUCollectives(fabric, fabric_bw)
    for (backend, mode, n), g in custom.groupby(["backend", "mode", "num_gpus"], sort=True) if len(custom) else []:
        key = custom_key(str(backend), str(mode))
        out.custom_ar.curves.setdefault(key, {})[int(n)] = Curve.fit(g["message_bytes"].to_numpy(),
                                                                     g["latency_ms"].to_numpy())
        ab_key = f"custom|{mode}|{int(n)}"
        if ab_key not in out.alpha_beta or backend == "vllm":
            out.alpha_beta[ab_key] = fit_alpha_beta("all_reduce", int(n), g["message_bytes"].to_numpy(),
                                                    g["latency_ms"].to_numpy(), fabric_bw)
    for (op, dtype, n), g in nccl.groupby(["op", "dtype", "num_gpus"], sort=True) if len(nccl) else []:
        out.nccl.curves.setdefault(nccl_key(str(op), str(dtype)), {})[int(n)] = Curve.fit(
            g["message_bytes"].to_numpy(), g["latency_ms"].to_numpy())
        out.alpha_beta[f"nccl|{op}|{dtype}|{int(n)}"] = fit_alpha_beta(
            str(op), int(n), g["message_bytes"].to_numpy(), g["latency_ms"].to_numpy(), fabric_bw)
    if len(a2a):
        keys = a2a.apply(a2a_key, axis=1)
        for (key, ep), g in a2a.assign(_k=keys).groupby(["_k", "ep"], sort=True):
            out.moe_a2a.curves.setdefault(str(key), {})[int(ep)] = Curve.fit(
                g["num_tokens"].to_numpy(dtype=np.float64), g["latency_ms"].to_numpy())
    return out


def pooled_alpha_beta(gpus: list[GPUCollectives]) -> dict[str, AlphaBeta]:
    """Cross-gen parameters: per key, the geometric mean over the GPUs that measured it."""
    keys = sorted({k for g in gpus for k in g.alpha_beta})
    return {k: geo_mean([g.alpha_beta[k] for g in gpus if k in g.alpha_beta]) for k in keys}


def lookup_alpha_beta(table: dict[str, AlphaBeta], kind: str, op: str, dtype: str, n: int, mode: str = "graph"
                      ) -> AlphaBeta | None:
    """Parameters for (op, n), falling back to the nearest measured GPU count and to fp16."""
    prefix = f"custom|{mode}|" if kind == "custom" else f"nccl|{op}|{dtype}|"
    cands = {int(k.rsplit("|", 1)[1]): v for k, v in table.items() if k.startswith(prefix)}
    if not cands and kind == "nccl" and dtype != "fp16":
        return lookup_alpha_beta(table, kind, op, "fp16", n, mode)
    if not cands and kind == "nccl" and op == "p2p":
        return lookup_alpha_beta(table, kind, "all_gather", dtype, n, mode)
    if not cands:
        return None
    best = min(cands, key=lambda v: (abs(math.log2(max(v, 1)) - math.log2(max(n, 1))), v))
    return cands[best]

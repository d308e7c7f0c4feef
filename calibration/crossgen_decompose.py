"""Where the cross-gen tier's error sits on a left-out GPU, and how much a per-GPU offset could remove.

    python -m llmplan.calibration.crossgen_report --measurements DIR --decompose [--no-twin]

For each scored GPU and family (from the per-row frame of ``validate kernels --tier cross-gen``):
the MAPE, the signed bias (median of log(predicted / measured): + = predicted too slow), the
same per regime of the specification roofline (``memory``: q t_c < t_m; ``balanced``: up to 5x;
``compute``: above; ``latency``: the ideal time max(q t_c, t_m) under 5 us, where launch and
pipeline latency dominate), and **oracle bounds**: the MAPE left after removing the scored GPU's
own median log error per GPU, per (engine, dtype) and per (engine, dtype, regime). The oracles
use the scored GPU's measurements, so they are not a model: they bound what any per-GPU
scale offset (a spec-predicted efficiency, an achievable-clock factor) could reach at best,
since a predicted offset can only match or miss the median the oracle subtracts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

#: ideal time (us) under which a kernel counts as latency-bound
LATENCY_US = 5.0
#: q t_c / t_m above which a kernel counts as compute-bound (between 1 and this: balanced)
COMPUTE_RATIO = 5.0
#: the column that splits a family's rows into kernel groups (the "dtype" of the oracle): the
#: compute dtype for GEMMs, MoE and absorb matmuls, the KV-cache dtype for attention
GROUP_COLUMN = {"gemm": "dtype", "moe": "dtype", "mla_bmm": "dtype"}
#: families decomposed (those with a roofline regime)
FAMILIES = ("gemm", "attention_prefill", "attention_decode", "moe", "mla_prefill", "mla_decode", "mla_bmm")
REGIMES = ("latency", "memory", "balanced", "compute")


def regimes(t_c_us: np.ndarray, t_m_us: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Regime name of each row from its physical terms (see the module docstring)."""
    tc = np.asarray(q, dtype=np.float64) * np.asarray(t_c_us, dtype=np.float64)
    tm = np.asarray(t_m_us, dtype=np.float64)
    ratio = tc / np.maximum(tm, 1e-12)
    return np.select([np.maximum(tc, tm) < LATENCY_US, ratio < 1.0, ratio < COMPUTE_RATIO],
                     ["latency", "memory", "balanced"], "compute")


def _mape(log_err: np.ndarray) -> float:
    return float(np.mean(np.abs(np.exp(log_err) - 1.0))) if len(log_err) else float("nan")


def _oracle(frame: pd.DataFrame, keys: list[str]) -> float:
    le = frame["log_err"]
    return _mape((le - le.groupby([frame[k] for k in keys]).transform("median")).to_numpy())


@dataclass(frozen=True)
class Decomposition:
    family: str
    rows: int
    mape: float              # fraction
    bias: float              # median log(predicted / measured)
    oracle_gpu: float        # MAPE after the GPU's median offset
    oracle_engine_dtype: float
    oracle_engine_dtype_regime: float
    by_regime: dict[str, tuple[int, float, float]]   # regime -> (rows, MAPE, bias)


def decompose(frame: pd.DataFrame, family: str) -> Decomposition | None:
    """The decomposition of one family's rows. ``frame`` needs ``measured_ms``, ``predicted_ms``,
    ``backend``, ``regime`` and the family's :data:`GROUP_COLUMN` (default ``kv_dtype``) columns
    (one GPU)."""
    f = frame[(frame["measured_ms"] > 0) & (frame["predicted_ms"] > 0)]
    if not len(f):
        return None
    col = GROUP_COLUMN.get(family, "kv_dtype")
    grp = f[col] if col in f else pd.Series("-", index=f.index)
    f = f.assign(log_err=np.log(f["predicted_ms"].to_numpy(np.float64) / f["measured_ms"].to_numpy(np.float64)),
                 dtype=grp.fillna("-").astype(str), backend=f["backend"].fillna("-").astype(str))
    le = f["log_err"].to_numpy()
    by = {}
    for r in REGIMES:
        m = (f["regime"] == r).to_numpy()
        if m.any():
            by[r] = (int(m.sum()), _mape(le[m]), float(np.median(le[m])))
    return Decomposition(family, len(f), _mape(le), float(np.median(le)), _mape(le - np.median(le)),
                         _oracle(f, ["backend", "dtype"]), _oracle(f, ["backend", "dtype", "regime"]), by)


def with_regimes(frame: pd.DataFrame, family: str, gpu: object) -> pd.DataFrame:
    """``frame`` (one GPU's rows of one family) with a ``regime`` column from the GPU's specification."""
    from llmplan.sim.kernel_calibration import features as F

    phys = F.frame_phys(family, frame.reset_index(drop=True), gpu)
    n = len(frame)
    bc = lambda v: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))  # noqa: E731
    return frame.reset_index(drop=True).assign(regime=regimes(bc(phys.t_c), bc(phys.t_m), bc(phys.q)))


def markdown(rows: dict[str, list[Decomposition]]) -> list[str]:
    """One line per (GPU, family): MAPE %, bias, oracle bounds %, and MAPE % / bias per regime."""
    out = ["| GPU | family | rows | MAPE | bias | oracle GPU | oracle engine+dtype | oracle +regime | "
           + " | ".join(REGIMES) + " |", "|---|---|---:|---:|---:|---:|---:|---:|" + "---|" * len(REGIMES)]
    for gpu, decs in rows.items():
        for d in decs:
            reg = [f"{100 * d.by_regime[r][1]:.1f} ({d.by_regime[r][2]:+.2f}, {d.by_regime[r][0]})"
                   if r in d.by_regime else "-" for r in REGIMES]
            out.append(f"| {gpu} | {d.family} | {d.rows} | {100 * d.mape:.1f} | {d.bias:+.2f} | {100 * d.oracle_gpu:.1f} | "
                       f"{100 * d.oracle_engine_dtype:.1f} | {100 * d.oracle_engine_dtype_regime:.1f} | "
                       + " | ".join(reg) + " |")
    return out

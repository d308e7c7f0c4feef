"""Cost-versus-latency and throughput-versus-interactivity frontiers over the candidates.

:func:`candidate_metrics` turns the evaluated candidates into one row per candidate that
meets the SLOs (verdict ``ok``), serving the whole target rate alone:

* ``replicas`` = ceil(rate / (capacity x max_load)), ``usd_per_hour`` = replicas x $/replica-h;
* ``usd_per_million_output_tokens`` at the replica's SLO capacity ($/replica-h over output
  tokens per hour at capacity);
* ``ttft_ms`` / ``tpot_ms``: predicted at the capacity point, at the SLO percentiles;
* ``output_tokens_per_s_per_gpu`` at capacity, and ``output_tokens_per_s_per_user`` = 1000 / TPOT.

:func:`pareto_front` keeps the non-dominated rows for a set of objectives (a row is dropped
when another is at least as good on every objective and better on one); ties and order are
deterministic (sorted by the objectives, then the candidate name).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from llmplan.optimizer.types import Evaluation, SLOTarget, WorkloadStats

#: frontier name -> ((column, "min"|"max"), ...)
FRONTIERS = {
    "usd_per_hour_vs_ttft": (("usd_per_hour", "min"), ("ttft_ms", "min")),
    "usd_per_hour_vs_tpot": (("usd_per_hour", "min"), ("tpot_ms", "min")),
    "usd_per_mtok_vs_ttft": (("usd_per_million_output_tokens", "min"), ("ttft_ms", "min")),
    "usd_per_mtok_vs_tpot": (("usd_per_million_output_tokens", "min"), ("tpot_ms", "min")),
    "tokens_per_gpu_vs_tokens_per_user": (("output_tokens_per_s_per_gpu", "max"), ("output_tokens_per_s_per_user", "max")),
}
COLUMNS = ["candidate", "gpu", "tp", "pp", "ep", "precision", "max_num_seqs", "gpus_per_replica", "replicas",
           "usd_per_hour", "usd_per_million_output_tokens", "ttft_ms", "tpot_ms",
           "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "capacity_rps_per_replica"]


def candidate_metrics(evals: list[Evaluation], wl: WorkloadStats, max_load: float = 1.0) -> pd.DataFrame:
    rows = []
    for e in evals:
        cap = e.effective_capacity_rps
        if e.verdict != "ok" or not cap > 0 or not math.isfinite(e.tpot_ms) or not e.tpot_ms > 0:
            continue
        c = e.candidate
        tok_s = cap * wl.mean_output_tokens
        reps = max(1, math.ceil(wl.rate_rps / (cap * max_load) - 1e-9))
        rows.append({
            "candidate": c.name, "gpu": c.gpu.key, "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep,
            "precision": c.prec.weights, "max_num_seqs": c.max_num_seqs, "gpus_per_replica": c.gpus_per_replica,
            "replicas": reps, "usd_per_hour": reps * c.usd_per_replica_hour,
            "usd_per_million_output_tokens": c.usd_per_replica_hour / (tok_s * 3600.0) * 1e6,
            "ttft_ms": e.ttft_ms, "tpot_ms": e.tpot_ms,
            "output_tokens_per_s_per_gpu": tok_s / c.gpus_per_replica,
            "output_tokens_per_s_per_user": 1000.0 / e.tpot_ms, "capacity_rps_per_replica": cap,
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def pareto_front(df: pd.DataFrame, objectives: tuple[tuple[str, str], ...], name_col: str = "candidate") -> pd.DataFrame:
    """Non-dominated rows of ``df`` for ``objectives`` ((column, 'min'|'max'), ...), sorted."""
    for col, sense in objectives:
        if sense not in ("min", "max"):
            raise ValueError(f"objective sense must be 'min' or 'max', got {sense!r} for {col}")
    if df.empty:
        return df.copy()
    # minimise everything: negate the maximised columns
    vals = [[(-1.0 if s == "max" else 1.0) * float(r[c]) for c, s in objectives] for _, r in df.iterrows()]
    keep = []
    for i, v in enumerate(vals):
        if any(not math.isfinite(x) for x in v):
            continue
        dominated = any(all(a <= b for a, b in zip(w, v)) and any(a < b for a, b in zip(w, v))
                        for j, w in enumerate(vals) if j != i and all(math.isfinite(x) for x in w))
        if not dominated:
            keep.append(i)
    out = df.iloc[keep].copy()
    keys = [c for c, _ in objectives] + ([name_col] if name_col in out.columns else [])
    asc = [s == "min" for _, s in objectives] + ([True] if name_col in out.columns else [])
    return out.sort_values(keys, ascending=asc, kind="mergesort").reset_index(drop=True)


def frontiers(df: pd.DataFrame) -> pd.DataFrame:
    """All frontiers of :data:`FRONTIERS` stacked, with a ``frontier`` column first."""
    parts = []
    for name, objs in FRONTIERS.items():
        f = pareto_front(df, objs)
        f.insert(0, "frontier", name)
        parts.append(f)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["frontier", *COLUMNS])


def write_csv(front: pd.DataFrame, path: Path) -> None:
    front.to_csv(path, index=False, float_format="%.6g")


def plot(df: pd.DataFrame, slos: list[SLOTarget], path: Path, title: str = "") -> None:
    """Three panels: $/h vs TTFT, $/h vs TPOT (SLO lines dashed), tokens/s/GPU vs tokens/s/user."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    slo = {s.metric: s for s in slos}
    panels = (("ttft_ms", "usd_per_hour_vs_ttft", "TTFT"), ("tpot_ms", "usd_per_hour_vs_tpot", "TPOT"))
    for ax, (col, fname, label) in zip(axes[:2], panels):
        ax.scatter(df[col], df["usd_per_hour"], s=14, color="0.7", label="candidates meeting the SLOs")
        f = pareto_front(df, FRONTIERS[fname])
        ax.plot(f[col], f["usd_per_hour"], "o-", color="C0", label="Pareto frontier")
        s = slo.get(label.lower())
        pct = f" p{s.percentile:g}" if s else ""
        if s:
            ax.axvline(s.limit_ms, color="C3", ls="--", label=f"SLO {s.label}")
        ax.set_xlabel(f"{label}{pct} at capacity (ms)")
        ax.set_ylabel("fleet cost at the target rate ($/h)")
        ax.set_title(f"Cost vs {label}")
        ax.legend(fontsize=7)
    ax = axes[2]
    ax.scatter(df["output_tokens_per_s_per_user"], df["output_tokens_per_s_per_gpu"], s=14, color="0.7",
               label="candidates meeting the SLOs")
    f = pareto_front(df, FRONTIERS["tokens_per_gpu_vs_tokens_per_user"])
    ax.plot(f["output_tokens_per_s_per_user"], f["output_tokens_per_s_per_gpu"], "o-", color="C0", label="Pareto frontier")
    if "tpot" in slo:
        ax.axvline(1000.0 / slo["tpot"].limit_ms, color="C3", ls="--", label=f"SLO {slo['tpot'].label}")
    ax.set_xlabel("output tokens/s per user (1000 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU at capacity")
    ax.set_title("Throughput vs interactivity")
    ax.legend(fontsize=7)
    fig.suptitle(title or "Cost and throughput frontiers")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(evals: list[Evaluation], wl: WorkloadStats, slos: list[SLOTarget], out_dir: Path,
          max_load: float = 1.0, title: str = "") -> pd.DataFrame:
    """pareto.csv and pareto.png in ``out_dir``; returns the stacked frontiers."""
    df = candidate_metrics(evals, wl, max_load)
    front = frontiers(df)
    write_csv(front, out_dir / "pareto.csv")
    if not df.empty:
        plot(df, slos, out_dir / "pareto.png", title)
    return front

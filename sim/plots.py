"""PNG plots of a simulation (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from llmplan.sim.serving import SimResult  # noqa: E402


#: an SLO line on a latency plot: (limit in ms, label), per metric ("ttft", "tpot", "e2e")
SLOLines = dict[str, list[tuple[float, str]]]


def plot_latency_cdfs(result: SimResult, path: str | Path, slo_lines: SLOLines | None = None,
                      title: str | None = None) -> Path:
    """``latency_cdf_figure`` saved as a PNG at ``path``."""
    fig = latency_cdf_figure(result, slo_lines, title)
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def latency_cdf_figure(result: SimResult, slo_lines: SLOLines | None = None, title: str | None = None):
    """Empirical CDFs of TTFT, TPOT and e2e latency over measured, finished requests, with the
    p50/p90/p99 marks (dotted) and each SLO limit of the metric (dashed, labelled)."""
    df = result.requests
    df = df[df["measured"] & df["finished"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9))
    for ax, col, label in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT", "end-to-end")):
        x = np.sort(df[col].dropna().to_numpy())
        if len(x):
            ax.plot(x, np.arange(1, len(x) + 1) / len(x))
            for p in (50, 90, 99):
                ax.axvline(np.percentile(x, p), ls=":", lw=0.8, color="gray")
        for limit_ms, name in (slo_lines or {}).get(col[:-3], []):
            ax.axvline(limit_ms, ls="--", lw=1.2, color="C3", label=f"SLO {name}")
        if (slo_lines or {}).get(col[:-3]):
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(f"{label} over {len(x):,} requests", fontsize=9)
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    fig.suptitle(title or "Simulated latency of the measured requests (dotted: p50 / p90 / p99; dashed: SLO)")
    fig.tight_layout()
    return fig


def plot_timeseries(result: SimResult, path: str | Path) -> Path:
    """KV-cache utilisation, batch size and waiting requests over time, per replica."""
    ts = result.timeseries
    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
    for rep, g in ts.groupby("replica"):
        t = g["time_ms"].to_numpy() / 1000.0
        axes[0].plot(t, g["kv_util"], lw=0.8, label=f"replica {rep}")
        axes[1].plot(t, g["batch_size"], lw=0.8)
        axes[2].plot(t, g["waiting"], lw=0.8)
    axes[0].set_ylabel("KV used (fraction)")
    axes[1].set_ylabel("batch size (seqs)")
    axes[2].set_ylabel("waiting requests")
    axes[2].set_xlabel("simulated time (s)")
    if ts["replica"].nunique() <= 8:
        axes[0].legend(fontsize=7, loc="upper right")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("KV cache, batch and queue over simulated time, per replica")
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def plot_report(result: SimResult, out_dir: str | Path, slo_lines: SLOLines | None = None) -> list[Path]:
    """Both plots into ``out_dir`` (created): ``latency_cdf.png`` (with the SLO lines),
    ``timeseries.png``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return [plot_latency_cdfs(result, d / "latency_cdf.png", slo_lines),
            plot_timeseries(result, d / "timeseries.png")]

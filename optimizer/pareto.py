"""Cost-versus-latency and throughput-versus-interactivity frontiers over the candidates.

:func:`candidate_metrics` turns the evaluated candidates into rows: each candidate that meets
the SLOs (verdict ``ok``) serving the whole target rate alone, with the fewest replicas that
carry it (``ceil(rate / (capacity x max_load))``) and optionally a few more (more replicas,
lower load, lower latency, higher cost: the trade-off the frontier shows):

* ``usd_per_hour`` = replicas x $/replica-h; ``usd_per_million_output_tokens`` = that over
  the output tokens per hour at the target rate (as ``plan.json`` reports it);
* ``ttft_ms`` / ``tpot_ms`` at the SLO percentiles, predicted by the analytical replica model
  at the per-replica load rate / replicas (``latency_basis`` = ``operating_point``); for a
  candidate without a replica model, the prediction at its capacity (``capacity``);
* ``output_tokens_per_s_per_gpu`` = rate x output tokens / GPUs, and
  ``output_tokens_per_s_per_user`` = 1000 / TPOT;
* ``gpu_power_w`` / ``joules_per_output_token``: board power of the option's GPUs and
  energy per generated token at that load (``optimizer/energy.py``, no PUE; NaN when the
  GPU has no TDP figure or no replica model);
* ``meets_slo``: every SLO target is met at its own percentile and limit
  (``optimizer/slo_check.py``, the planner's check; a row can miss when the
  simulator-corrected capacity exceeds the analytical one).

:func:`pareto_front` keeps the non-dominated rows for a set of objectives (a row is dropped
when another is at least as good on every objective and better on one); ties and order are
deterministic (sorted by the objectives, then the candidate name).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from llmplan.optimizer.slo_check import misses, target_values
from llmplan.optimizer.types import Evaluation, SLOTarget, WorkloadStats

#: frontier name -> ((column, "min"|"max"), ...)
FRONTIERS = {
    "usd_per_hour_vs_ttft": (("usd_per_hour", "min"), ("ttft_ms", "min")),
    "usd_per_hour_vs_tpot": (("usd_per_hour", "min"), ("tpot_ms", "min")),
    "usd_per_mtok_vs_ttft": (("usd_per_million_output_tokens", "min"), ("ttft_ms", "min")),
    "usd_per_mtok_vs_tpot": (("usd_per_million_output_tokens", "min"), ("tpot_ms", "min")),
    "tokens_per_gpu_vs_tokens_per_user": (("output_tokens_per_s_per_gpu", "max"), ("output_tokens_per_s_per_user", "max")),
}
COLUMNS = ["mode", "option", "candidate", "gpu", "tp", "pp", "ep", "precision", "max_num_seqs", "gpus_per_replica", "replicas",
           "load_rps_per_replica", "usd_per_hour", "usd_per_million_output_tokens", "ttft_ms", "tpot_ms",
           "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "capacity_rps_per_replica", "latency_basis", "meets_slo", "gpu_power_w", "joules_per_output_token"]


def _percentile(slos: list[SLOTarget], metric: str) -> float | str:
    """The metric's first target's percentile, or "mean" for a mean target (the axis statistic)."""
    return next((s.quantity for s in slos if s.metric == metric), slos[0].percentile if slos else 90.0)


def candidate_metrics(evals: list[Evaluation], wl: WorkloadStats, slos: list[SLOTarget] | None = None,
                      max_load: float = 1.0, extra_replicas: int = 0) -> pd.DataFrame:
    from llmplan.optimizer.energy import pool_power
    from llmplan.optimizer.evaluate import ReplicaAnalyzer
    from llmplan.optimizer.types import Allocation

    slos = slos or []
    tq, pq = _percentile(slos, "ttft"), _percentile(slos, "tpot")
    pcts = sorted({q for q in (tq, pq) if q != "mean"} | {s.percentile for s in slos})  # "mean": always computed
    rows = []
    for e in evals:
        cap = e.effective_capacity_rps
        if e.verdict != "ok" or not cap > 0:
            continue
        c = e.candidate
        n_min = max(1, math.ceil(wl.rate_rps / (cap * max_load) - 1e-9))
        an = e.analyzer if isinstance(e.analyzer, ReplicaAnalyzer) else None
        for n in range(n_min, n_min + (1 + max(0, extra_replicas) if an else 1)):
            share = wl.rate_rps / n
            if an is not None:
                op = an.operating_point(share, pcts)
                if not op.stable:
                    continue
                ttft, tpot, basis = op.ttft_ms[tq], op.tpot_ms[pq], "operating_point"
                values = target_values(op.ttft_ms, op.tpot_ms, slos)
            else:
                ttft, tpot, basis = e.ttft_ms, e.tpot_ms, "capacity"
                # per target at capacity; without them, the binding target's figure per metric
                values = dict(e.at_capacity) or {s.key: e.ttft_ms if s.metric == "ttft" else e.tpot_ms for s in slos}
            if not (math.isfinite(tpot) and tpot > 0):
                continue
            usd_h = n * c.usd_per_replica_hour
            out_tok_s = wl.rate_rps * wl.mean_output_tokens
            power = pool_power(Allocation(e, n, share_rps=share), wl).power_w if an is not None else None
            power = math.nan if power is None else power
            rows.append({
                "mode": "agg", "option": f"{c.name} x{n}", "candidate": c.name, "gpu": c.gpu.key, "tp": c.par.tp, "pp": c.par.pp,
                "ep": c.par.ep, "precision": c.prec.weights, "max_num_seqs": c.max_num_seqs,
                "gpus_per_replica": c.gpus_per_replica, "replicas": n, "load_rps_per_replica": share,
                "usd_per_hour": usd_h, "usd_per_million_output_tokens": usd_h / (out_tok_s * 3600.0) * 1e6,
                "ttft_ms": ttft, "tpot_ms": tpot,
                "output_tokens_per_s_per_gpu": out_tok_s / (n * c.gpus_per_replica),
                "output_tokens_per_s_per_user": 1000.0 / tpot, "capacity_rps_per_replica": cap,
                "latency_basis": basis,
                "meets_slo": all(s.key in values for s in slos) and not misses(values, slos),
                "gpu_power_w": power, "joules_per_output_token": power / out_tok_s,
            })
    return pd.DataFrame(rows, columns=COLUMNS)


def split_row(dis: dict, wl: WorkloadStats, slos: list[SLOTarget], chosen: bool = False) -> dict:
    """A disaggregated split (plan.json ``disaggregated``) as one row (``mode`` = disagg): its
    cost, its simulated TTFT/TPOT at the axis statistic (the screen's pool figures when it was not
    simulated; ``latency_basis`` says which), tokens/s per GPU over both pools and the power of its
    pools (``optimizer/disagg_figures.py``). ``replicas`` = workers of both pools."""
    from llmplan.optimizer.risk import split_figures

    values, basis = split_figures(dis, slos)
    pre, dec = ({p["role"]: p for p in dis["pools"]}[r] for r in ("prefill", "decode"))

    def axis(metric: str) -> float:
        s = next((s for s in slos if s.metric == metric), None)
        v = values.get(s.key) if s else None
        return float(v) if v is not None else float(pre["ttft_ms"] if metric == "ttft" else dec["tpot_ms"])

    ttft, tpot = axis("ttft"), axis("tpot")
    out_tok_s = wl.rate_rps * wl.mean_output_tokens
    usd_h = float(dis["total_usd_per_hour"])
    powers = [(p.get("power") or {}).get("power_w") for p in dis["pools"]]
    power = math.nan if any(x is None for x in powers) else float(sum(powers))
    sim = dis.get("simulated")
    met = bool(sim.get("slo_met")) if sim else all(values.get(s.key, math.inf) <= s.limit_ms for s in slos)
    pool_txt = " + ".join(f"{p['role']} {p['workers']}x {p['gpu']}-tp{p['tp']}-pp{p['pp']}-{p['precision']}"
                          for p in (pre, dec))
    return {"mode": "disagg", "option": f"{dis['xpyd']} {pool_txt}" + (" (chosen)" if chosen else ""),
            "candidate": dis["xpyd"], "gpu": f"{pre['gpu']}/{dec['gpu']}", "tp": f"{pre['tp']}/{dec['tp']}",
            "pp": f"{pre['pp']}/{dec['pp']}", "ep": f"{pre['ep']}/{dec['ep']}",
            "precision": f"{pre['precision']}/{dec['precision']}",
            "max_num_seqs": f"{pre['max_num_seqs']}/{dec['max_num_seqs']}",
            "gpus_per_replica": f"{pre['gpus_per_worker']}/{dec['gpus_per_worker']}",
            "replicas": pre["workers"] + dec["workers"], "load_rps_per_replica": math.nan,
            "usd_per_hour": usd_h, "usd_per_million_output_tokens": usd_h / (out_tok_s * 3600.0) * 1e6,
            "ttft_ms": ttft, "tpot_ms": tpot, "output_tokens_per_s_per_gpu": out_tok_s / dis["total_gpus"],
            "output_tokens_per_s_per_user": 1000.0 / tpot if tpot > 0 else math.nan,
            "capacity_rps_per_replica": math.nan, "latency_basis": f"split_{basis}", "meets_slo": met,
            "gpu_power_w": power, "joules_per_output_token": power / out_tok_s if out_tok_s > 0 else math.nan}


def pareto_front(df: pd.DataFrame, objectives: tuple[tuple[str, str], ...], name_col: str = "option") -> pd.DataFrame:
    """Non-dominated rows of ``df`` for ``objectives`` ((column, 'min'|'max'), ...), sorted."""
    for col, sense in objectives:
        if sense not in ("min", "max"):
            raise ValueError(f"objective sense must be 'min' or 'max', got {sense!r} for {col}")
    if df.empty:
        return df.copy()
    # minimise everything: negate the maximised columns
    vals = [[(-1.0 if s == "max" else 1.0) * float(r[c]) for c, s in objectives] for _, r in df.iterrows()]
    finite = [i for i, v in enumerate(vals) if all(math.isfinite(x) for x in v)]
    keep = _front_2d(vals, finite) if len(objectives) == 2 else [
        i for i in finite if not any(all(a <= b for a, b in zip(vals[j], vals[i])) and vals[j] != vals[i]
                                     for j in finite if j != i)]
    out = df.iloc[keep].copy()
    keys = [c for c, _ in objectives] + ([name_col] if name_col in out.columns else [])
    asc = [s == "min" for _, s in objectives] + ([True] if name_col in out.columns else [])
    return out.sort_values(keys, ascending=asc, kind="mergesort").reset_index(drop=True)


def _front_2d(vals: list[list[float]], idx: list[int]) -> list[int]:
    """Non-dominated indices for two minimised objectives in O(n log n): sorted by the first,
    a row survives when its second is below every row with a smaller first, and is the
    smallest second among rows with its first (equal rows are all kept)."""
    order = sorted(idx, key=lambda i: (vals[i][0], vals[i][1]))
    keep, best_prev, k = [], math.inf, 0
    while k < len(order):
        a = vals[order[k]][0]
        group = [i for i in order[k:] if vals[i][0] == a]
        low = vals[group[0]][1]  # the group's smallest second objective (sorted)
        if low < best_prev:
            keep.extend(i for i in group if vals[i][1] == low)
        best_prev = min(best_prev, low)
        k += len(group)
    return sorted(keep)


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
        ax.scatter(df[col], df["usd_per_hour"], s=14, color="0.7", label="candidates x replicas")
        f = pareto_front(df, FRONTIERS[fname])
        ax.plot(f[col], f["usd_per_hour"], "o-", color="C0", label="Pareto frontier")
        _mark_splits(ax, df, col, "usd_per_hour")
        s = slo.get(label.lower())
        pct = f" {s.key.split('_')[1]}" if s else ""
        if s:
            ax.axvline(s.limit_ms, color="C3", ls="--", label=f"SLO {s.label}")
        ax.set_xlabel(f"{label}{pct} at the target rate (ms)")
        ax.set_ylabel("fleet cost at the target rate ($/h)")
        ax.set_title(f"Cost vs {label}")
        ax.legend(fontsize=7, loc="upper right")
    ax = axes[2]
    ax.scatter(df["output_tokens_per_s_per_user"], df["output_tokens_per_s_per_gpu"], s=14, color="0.7",
               label="candidates x replicas")
    f = pareto_front(df, FRONTIERS["tokens_per_gpu_vs_tokens_per_user"])
    ax.plot(f["output_tokens_per_s_per_user"], f["output_tokens_per_s_per_gpu"], "o-", color="C0", label="Pareto frontier")
    _mark_splits(ax, df, "output_tokens_per_s_per_user", "output_tokens_per_s_per_gpu")
    if "tpot" in slo:
        ax.axvline(1000.0 / slo["tpot"].limit_ms, color="C3", ls="--", label=f"SLO {slo['tpot'].label}")
    ax.set_xlabel("output tokens/s per user (1000 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU at the target rate")
    ax.set_title("Throughput vs interactivity")
    ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(title or "Cost and throughput frontiers")
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.12, top=0.86, wspace=0.25)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _mark_splits(ax, df: pd.DataFrame, x: str, y: str) -> None:
    """Disaggregated splits as orange diamonds, labelled (on the frontier or visibly dominated)."""
    sp = df[df["mode"] == "disagg"] if "mode" in df.columns else df.iloc[0:0]
    if sp.empty:
        return
    ax.scatter(sp[x], sp[y], s=60, marker="D", color="C1", zorder=5, label="disaggregated split")
    for _, r in sp.iterrows():
        ax.annotate(r["candidate"] + (" (chosen)" if "(chosen)" in r["option"] else ""), (r[x], r[y]),
                    textcoords="offset points", xytext=(6, 4), fontsize=7, color="C1")


def write(evals: list[Evaluation], wl: WorkloadStats, slos: list[SLOTarget], out_dir: Path,
          max_load: float = 1.0, title: str = "", extra_replicas: int = 2, png: bool = True,
          split_rows: list[dict] | None = None) -> pd.DataFrame:
    """pareto.csv and (``png``) pareto.png in ``out_dir``; returns the stacked frontiers.
    ``split_rows`` (:func:`split_row`) join the aggregated options on the same frontiers."""
    df = candidate_metrics(evals, wl, slos, max_load, extra_replicas)
    if split_rows:
        df = pd.concat([df, pd.DataFrame(split_rows, columns=COLUMNS)], ignore_index=True) if len(df) else \
            pd.DataFrame(split_rows, columns=COLUMNS)
    front = frontiers(df)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(front, out_dir / "pareto.csv")
    if png and not df.empty:
        plot(df, slos, out_dir / "pareto.png", title)
    return front

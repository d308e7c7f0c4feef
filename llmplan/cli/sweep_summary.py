"""After a sweep (-m): one table of every job, with its status and reason (summary.csv + summary.md).

A job that failed is listed with the reason, never dropped; the figures of a job that ran
come from its plan.json / summary.json / whatif.json.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmplan.cli.chosen_figures import deployment_label, plan_mode
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, EXIT_USER_ERROR

#: job exit code -> status in summary.csv
STATUS = {EXIT_OK: "ok", EXIT_INFEASIBLE: "infeasible", EXIT_USER_ERROR: "bad input"}


@dataclass(frozen=True)
class SweptJob:
    num: int
    overrides: str        # as the user typed them, one value per key (hydra.* settings left out)
    swept: str            # the ones that vary across the sweep
    output_dir: Path
    code: int
    reason: str = ""


def _plan_fields(d: dict) -> dict[str, Any]:
    """plan.json's chosen deployment (its top level: the split when `plan` chose one, pools by role)."""
    offline = {"tokens_per_s": d.get("tokens_per_s"), "target_tokens_per_s": d.get("target_tokens_per_s")} \
        if d.get("mode") == "offline_throughput" else {}
    # a plan that found no deployment has no cost: its plan.json zeros stay out of the table, where
    # a $0.00 row would sort as the cheapest job of the sweep
    chosen = d.get("feasible") is not False
    cost = {k: d.get(k) if chosen else None
            for k in ("total_usd_per_hour", "total_gpus", "usd_per_million_output_tokens")}
    return offline | {"model": d.get("model"), "feasible": d.get("feasible"), "mode": plan_mode(d),
            **cost,
            "deployment": deployment_label(d.get("deployments", [])),
            "binding_constraint": d.get("binding_constraint")}


def _simulate_fields(d: dict) -> dict[str, Any]:
    return {"model": d.get("deployment", {}).get("model"),
            "ttft_p90_ms": (d.get("ttft_ms") or {}).get("p90"), "tpot_p90_ms": (d.get("tpot_ms") or {}).get("p90"),
            "requests_per_s": d.get("requests_per_s"), "output_tokens_per_s": d.get("output_tokens_per_s")}


def _whatif_fields(d: dict) -> dict[str, Any]:
    base, new = d.get("baseline", {}), d.get("whatif", {})
    return {"model": base.get("model"), "scenario": d.get("scenario"),
            "baseline_mode": plan_mode(base), "baseline_usd_per_hour": base.get("total_usd_per_hour"),
            "whatif_mode": plan_mode(new), "whatif_usd_per_hour": new.get("total_usd_per_hour")}


_READERS = {"plan.json": _plan_fields, "summary.json": _simulate_fields, "whatif.json": _whatif_fields}


def job_row(job: SweptJob) -> dict[str, Any]:
    row: dict[str, Any] = {"job": job.num, "swept": job.swept, "overrides": job.overrides,
                           "status": STATUS.get(job.code, "error"), "exit_code": job.code, "reason": job.reason}
    for name, read in _READERS.items():
        f = job.output_dir / name
        if f.is_file():
            d = json.loads(f.read_text())
            row |= read(d)
            if job.code == EXIT_INFEASIBLE and not job.reason:
                row["reason"] = d.get("binding_constraint") or "no deployment meets the targets"
            break
    return row


def summarize(sweep_dir: Path, jobs: list[SweptJob]):
    """Write summary.csv and summary.md (one row per job, failed ones included); the table."""
    import pandas as pd

    df = pd.DataFrame([job_row(j) for j in jobs])
    if "total_gpus" in df.columns:  # counts stay integers next to the empty cells of failed jobs
        df["total_gpus"] = df["total_gpus"].astype("Int64")
    df.to_csv(sweep_dir / "summary.csv", index=False)
    shown = df.astype(object).where(df.notna(), "")  # an empty cell, not "NaN", where a job has no figure
    (sweep_dir / "summary.md").write_text(shown.to_markdown(index=False) if _has_tabulate()
                                          else shown.to_string(index=False))
    return df


def _has_tabulate() -> bool:
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


def report(sweep_dir: Path, jobs: list[SweptJob]) -> None:
    """Summarize and print: the table, then a line per job that did not succeed."""
    df = summarize(sweep_dir, jobs)
    failed = [j for j in jobs if j.code != EXIT_OK]
    print(f"\nSweep summary ({len(jobs)} jobs, {len(jobs) - len(failed)} ok): {sweep_dir / 'summary.csv'}")
    brief = [c for c in ("job", "swept", "status", "mode", "deployment", "total_usd_per_hour", "ttft_p90_ms", "tpot_p90_ms",
                         "whatif_usd_per_hour", "reason") if c in df.columns]
    print(df[brief].astype(object).where(df[brief].notna(), "").to_string(index=False))
    reasons = dict(zip(df["job"], df["reason"].fillna("")))
    for j in failed:  # the reason as the table has it (an infeasible plan's comes from its plan.json)
        print(f"job {j.num} ({j.overrides}): {STATUS.get(j.code, 'error')}: {j.reason or reasons.get(j.num, '')}",
              file=sys.stderr)


def swept_columns(df):
    """The summary with one column per swept key (``gpu``, ``workload.rate_rps``, ...), values
    as typed; numbers where every value is one."""
    import pandas as pd

    parsed = [dict(kv.split("=", 1) for kv in str(s).split() if "=" in kv) for s in df["swept"].fillna("")]
    keys = sorted({k for p in parsed for k in p})
    out = df.copy()
    for k in keys:
        col = pd.Series([p.get(k) for p in parsed], index=df.index)
        num = pd.to_numeric(col, errors="coerce")
        out[f"swept:{k}"] = num if num.notna().all() else col
    return out


def pivot(df, row_keys: list[str], col_key: str, value: str = "total_usd_per_hour"):
    """A table of ``value`` by the swept keys (rows) against one swept key (columns); a job that
    found no deployment shows its status instead of a number."""
    d = swept_columns(df)
    cell = [f"{v:,.2f}" if s == "ok" and v == v else s for v, s in zip(d[value], d["status"])]
    d = d.assign(cell=cell)
    rows = [f"swept:{k}" for k in row_keys]
    table = d.pivot_table(index=rows, columns=f"swept:{col_key}", values="cell", aggfunc="first")
    table.index.names = row_keys
    table.columns.name = col_key
    return table


def plot(df, path: Path, panel_key: str, line_key: str, x_key: str, value: str = "total_usd_per_hour",
         y_label: str = "cost of the cheapest deployment ($/h)", title: str = "") -> Path:
    """One panel per ``panel_key`` value, one line per ``line_key`` value, ``value`` against
    ``x_key`` (log-log); jobs that found no deployment are left out of the lines and counted in
    the panel's title. PNG (matplotlib, Agg)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    d = swept_columns(df)
    panels = sorted(d[f"swept:{panel_key}"].unique(), key=str)
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, p in zip(axes.flat, panels):
        sub = d[d[f"swept:{panel_key}"] == p]
        for name, g in sorted(sub.groupby(f"swept:{line_key}"), key=lambda kv: str(kv[0])):
            ok = g[g["status"] == "ok"].sort_values(f"swept:{x_key}")
            if len(ok):
                ax.plot(ok[f"swept:{x_key}"], ok[value], marker="o", label=str(name))
        missing = int((sub["status"] != "ok").sum())
        ax.set_title(f"{p}" + (f" ({missing} without a deployment)" if missing else ""), fontsize=10)
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = sorted(set(sub[f"swept:{x_key}"]))
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(x_key + (" (req/s)" if x_key.endswith("rate_rps") else ""))
        ax.set_ylabel(y_label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

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
    deps = d.get("deployments", [])
    return {"model": d.get("model"), "feasible": d.get("feasible"),
            "total_usd_per_hour": d.get("total_usd_per_hour"), "total_gpus": d.get("total_gpus"),
            "usd_per_million_output_tokens": d.get("usd_per_million_output_tokens"),
            "deployment": " + ".join(f"{x['replicas']}x {x['gpu']} tp{x['tp']} pp{x['pp']} ep{x['ep']} {x['precision']}"
                                     for x in deps),
            "binding_constraint": d.get("binding_constraint")}


def _simulate_fields(d: dict) -> dict[str, Any]:
    return {"model": d.get("deployment", {}).get("model"),
            "ttft_p90_ms": (d.get("ttft_ms") or {}).get("p90"), "tpot_p90_ms": (d.get("tpot_ms") or {}).get("p90"),
            "requests_per_s": d.get("requests_per_s"), "output_tokens_per_s": d.get("output_tokens_per_s")}


def _whatif_fields(d: dict) -> dict[str, Any]:
    base, new = d.get("baseline", {}), d.get("whatif", {})
    return {"model": base.get("model"), "scenario": d.get("scenario"),
            "baseline_usd_per_hour": base.get("total_usd_per_hour"), "whatif_usd_per_hour": new.get("total_usd_per_hour")}


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
    df.to_csv(sweep_dir / "summary.csv", index=False)
    (sweep_dir / "summary.md").write_text(df.to_markdown(index=False) if _has_tabulate() else df.to_string(index=False))
    return df


def _has_tabulate() -> bool:
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


def report(sweep_dir: Path, jobs: list[SweptJob]) -> None:
    """Summarize and print: the table, then a line per job that did not succeed."""
    df = summarize(sweep_dir, jobs)
    failed = [j for j in jobs if j.code != EXIT_OK]
    print(f"\nSweep summary ({len(jobs)} jobs, {len(jobs) - len(failed)} ok): {sweep_dir / 'summary.csv'}")
    brief = [c for c in ("job", "swept", "status", "deployment", "total_usd_per_hour", "ttft_p90_ms", "tpot_p90_ms",
                         "whatif_usd_per_hour", "reason") if c in df.columns]
    print(df[brief].to_string(index=False))
    for j in failed:
        print(f"job {j.num} ({j.overrides}): {STATUS.get(j.code, 'error')}: {j.reason}", file=sys.stderr)

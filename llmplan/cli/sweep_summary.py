"""Hydra callback: after a multirun, one summary table across jobs (summary.csv + summary.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def _row(job_dir: Path) -> dict[str, Any] | None:
    for name in ("plan.json", "summary.json"):
        f = job_dir / name
        if f.is_file():
            d = json.loads(f.read_text())
            row: dict[str, Any] = {"job": job_dir.name, "kind": name.split(".")[0]}
            if name == "plan.json":
                deps = d.get("deployments", [])
                row |= {"model": d.get("model"), "feasible": d.get("feasible"),
                        "total_usd_per_hour": d.get("total_usd_per_hour"), "total_gpus": d.get("total_gpus"),
                        "usd_per_million_output_tokens": d.get("usd_per_million_output_tokens"),
                        "deployment": " + ".join(f"{x['replicas']}x {x['gpu']} tp{x['tp']} pp{x['pp']} ep{x['ep']} {x['precision']}"
                                                 for x in deps),
                        "binding_constraint": d.get("binding_constraint")}
            else:
                row |= {"model": d.get("deployment", {}).get("model"),
                        "ttft_p90_ms": (d.get("ttft_ms") or {}).get("p90"), "tpot_p90_ms": (d.get("tpot_ms") or {}).get("p90"),
                        "requests_per_s": d.get("requests_per_s"), "output_tokens_per_s": d.get("output_tokens_per_s")}
            return row
    return None


def summarize(sweep_dir: Path) -> pd.DataFrame:
    rows = [r for d in sorted(p for p in sweep_dir.iterdir() if p.is_dir()) if (r := _row(d))]
    df = pd.DataFrame(rows)
    if not df.empty:
        df.to_csv(sweep_dir / "summary.csv", index=False)
        (sweep_dir / "summary.md").write_text(df.to_markdown(index=False) if _has_tabulate() else df.to_string(index=False))
    return df


def _has_tabulate() -> bool:
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


class SweepSummary(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir():
            df = summarize(sweep_dir)
            print(f"\nSweep summary ({len(df)} jobs): {sweep_dir / 'summary.csv'}")
            if not df.empty:
                print(df.to_string(index=False))

"""Run an example sweep (models x GPUs x rates) and draw its summary table and plot.

Reads a sweep definition (default: sweep_models_gpus_rates.yaml beside this script: 4 models x
5 GPU types x 5 rates = 100 plans), runs ``llmplan <command> -m ...`` once as a subprocess (on
this machine's joblib launcher, or ``--launcher ray_local`` / ``submitit_slurm``), and writes
into the sweep folder, next to Hydra's ``summary.csv``/``summary.md``:

* ``pivot.md``: the cost ($/h) of the cheapest deployment per (model, GPU type) and rate, or
  the job's status where it found none;
* ``cost_vs_rate.png``: one panel per model, one line per GPU type, $/h against the rate.

It prints the sweep's wall time (the whole process: start-up, 100 plans, summary).

Usage:
  python benchmarks/scripts/sweep_example.py --out llmplan-out/sweep-example
  python benchmarks/scripts/sweep_example.py --launcher ray_local      # pip install 'llmplan[ray]'
  python benchmarks/scripts/sweep_example.py --sweep my_sweep.yaml
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

from llmplan.cli.sweep_summary import pivot, plot

HERE = Path(__file__).resolve().parent


def argv_for(sweep: dict, out: Path, launcher: str | None) -> list[str]:
    axes = [f"{k}={','.join(str(v) for v in vals)}" for k, vals in sweep["axes"].items()]
    extra = [f"hydra/launcher={launcher}"] if launcher else []
    return [sys.executable, "-m", "llmplan.cli", sweep.get("command", "plan"), "-m", *axes,
            *sweep.get("fixed", []), *extra, f"hydra.sweep.dir={out}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=HERE / "sweep_models_gpus_rates.yaml")
    ap.add_argument("--out", type=Path, default=Path("llmplan-out/sweep-example"))
    ap.add_argument("--launcher", default=None, help="hydra/launcher option (ray_local, submitit_slurm, ...)")
    a = ap.parse_args()
    sweep = yaml.safe_load(a.sweep.read_text())
    jobs = 1
    for vals in sweep["axes"].values():
        jobs *= len(vals)
    argv = argv_for(sweep, a.out, a.launcher)
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    summary = a.out / "summary.csv"
    if not summary.is_file():
        print(p.stderr[-2000:], file=sys.stderr)
        return p.returncode or 1
    df = pd.read_csv(summary)
    table = pivot(df, [sweep["panel"], sweep["line"]], sweep["x"])
    (a.out / "pivot.md").write_text(table.to_markdown() if _has_tabulate() else table.to_string())
    png = plot(df, a.out / "cost_vs_rate.png", sweep["panel"], sweep["line"], sweep["x"],
               title=f"{len(df)} plans: cheapest deployment per model, GPU type and rate")
    counts = df["status"].value_counts().to_dict()
    print(f"{len(df)} of {jobs} jobs ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}) in {wall:.0f} s "
          f"(exit code {p.returncode}; 3 = some jobs found no deployment)")
    print(table.to_string())
    print(f"wrote {summary}, {a.out / 'pivot.md'}, {png}")
    return 0


def _has_tabulate() -> bool:
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


if __name__ == "__main__":
    sys.exit(main())

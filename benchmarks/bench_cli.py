"""Whole-process wall time of the CLI's main jobs (what a user waits for).

Each command runs as a fresh process ``--repeats`` times; the script prints the minimum,
median and maximum wall time, and the median CPU time (user + system) of the process, and
writes them as JSON (``--json FILE``). Machines are noisy: quote the median; on a shared
machine the CPU time moves less with the other jobs than the wall time does.

Usage:
  python benchmarks/bench_cli.py                 # default plan, analytical-only plan, simulate 10k
  python benchmarks/bench_cli.py --repeats 5 --only plan
  PYTHONPATH=/path/to/other/checkout python benchmarks/bench_cli.py   # time another checkout (a baseline)
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = {
    "plan": ["plan"],
    "plan_analytical": ["plan", "search.finalists=0"],
    # the maximum rate of a given fleet: screen + verify, ILP, then settle the rate on whole-deployment
    # steady-state simulations (optimizer/fleet.py settle_rate)
    "fleet": ["plan", "model=llama3_1_8b", "fleet.gpus={h100_sxm: 8}"],
    "simulate_10k": ["simulate", "model=llama3_1_8b", "gpu=h100_sxm", "workload.num_requests=10000"],
    "whatif_2x_bw": ["whatif", "gpu=h100_sxm", "whatif.gpu_scale={h100_sxm: {hbm_bw_gbps: 2.0}}"],
}


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def time_once(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``llmplan args``."""
    out = tempfile.mkdtemp(prefix="llmplan-bench-")
    try:
        c0, t0 = _children_cpu_s(), time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "llmplan.cli", *args, f"hydra.run.dir={out}"],
                           capture_output=True, text=True)
        dt, cpu = time.perf_counter() - t0, _children_cpu_s() - c0
        if r.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
        return dt, cpu
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", choices=sorted(COMMANDS), action="append")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    results = {}
    for name in a.only or COMMANDS:
        runs = [time_once(COMMANDS[name]) for _ in range(a.repeats)]
        times = [w for w, _ in runs]
        results[name] = {"command": "llmplan " + " ".join(COMMANDS[name]), "min_s": round(min(times), 2),
                         "median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
                         "median_cpu_s": round(statistics.median(c for _, c in runs), 2), "repeats": a.repeats}
        print(f"{name:<16} median {results[name]['median_s']:6.2f} s  (min {results[name]['min_s']:.2f}, "
              f"max {results[name]['max_s']:.2f}; CPU {results[name]['median_cpu_s']:.2f} s)  "
              f"`{results[name]['command']}`", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

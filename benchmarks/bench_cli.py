"""Whole-process wall time of the CLI's main jobs (what a user waits for).

Each command runs as a fresh process ``--repeats`` times; the script prints the minimum,
median and maximum wall time, and the median CPU time (user + system) of the process, and
writes them as JSON (``--json FILE``). Machines are noisy: quote the median; on a shared
machine the CPU time moves less with the other jobs than the wall time does.

Usage:
  python benchmarks/bench_cli.py                 # default plan, analytical-only plan, simulate 10k
  python benchmarks/bench_cli.py --repeats 5 --only plan
  PYTHONPATH=/path/to/other/checkout python benchmarks/bench_cli.py   # time another checkout (a baseline)
  python benchmarks/bench_cli.py --only plan --compare PYTHONPATH=/path/to/base   # interleaved: this tree vs a base
  python benchmarks/bench_cli.py --only day_plan --compare LLMPLAN_WORKERS=1   # interleaved: as is vs one process

``--compare ENV=VALUE`` times every command twice per repeat, interleaved, as is and with that
environment variable set (e.g. ``LLMPLAN_WORKERS=1``: no worker processes, llmplan/parallel.py),
and prints both medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
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
    # a day of traffic with price tiers: 24 hourly intervals, day ILP, simulated attainment of the
    # autoscaled and the static schedule (benchmarks/bench_day_plan.py --cli runs the same command)
    "day_plan": ["plan", "model=llama3_1_8b", "gpu=h100_sxm", "day.profile=diurnal_24h",
                 "day.price_tiers={h100_sxm: {reserved_usd_per_gpu_hour: 2.6, spot_usd_per_gpu_hour: 2.0, "
                 "spot_interruption_rate: 0.05}}"],
}
#: timed unless --only names them (the longest)
NOT_BY_DEFAULT = {"day_plan"}


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def time_once(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s incl. worker processes) of one run of ``llmplan args`` (``env``: added variables)."""
    out = tempfile.mkdtemp(prefix="llmplan-bench-")
    try:
        c0, t0 = _children_cpu_s(), time.perf_counter()
        # cwd: the empty output folder, never a checkout (``python -m`` puts the working directory
        # first on sys.path, ahead of PYTHONPATH: run from a checkout, both sides of a
        # ``--compare PYTHONPATH=...`` timed that checkout)
        r = subprocess.run([sys.executable, "-m", "llmplan.cli", *args, f"hydra.run.dir={out}"],
                           capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=out)
        dt, cpu = time.perf_counter() - t0, _children_cpu_s() - c0
        if r.returncode not in (0, 3):
            raise SystemExit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
        return dt, cpu
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _figures(name: str, runs: list[tuple[float, float]], repeats: int) -> dict:
    times = [w for w, _ in runs]
    return {"command": "llmplan " + " ".join(COMMANDS[name]), "min_s": round(min(times), 2),
            "median_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
            "median_cpu_s": round(statistics.median(c for _, c in runs), 2), "repeats": repeats,
            "load_avg_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", choices=sorted(COMMANDS), action="append")
    p.add_argument("--compare", metavar="ENV=VALUE", help="also time each run with this variable set, interleaved")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    alt = dict([a.compare.split("=", 1)]) if a.compare else None
    results = {}
    for name in a.only or [c for c in COMMANDS if c not in NOT_BY_DEFAULT]:
        runs, alt_runs = [], []
        for _ in range(a.repeats):
            runs.append(time_once(COMMANDS[name]))
            if alt:
                alt_runs.append(time_once(COMMANDS[name], alt))
        results[name] = r = _figures(name, runs, a.repeats)
        print(f"{name:<16} median {r['median_s']:6.2f} s  (min {r['min_s']:.2f}, max {r['max_s']:.2f}; "
              f"CPU {r['median_cpu_s']:.2f} s; load {r['load_avg_1min']})  `{r['command']}`", flush=True)
        if alt:
            r["with_" + a.compare] = b = _figures(name, alt_runs, a.repeats)
            print(f"{'  ' + a.compare:<16} median {b['median_s']:6.2f} s  (min {b['min_s']:.2f}, max {b['max_s']:.2f}; "
                  f"CPU {b['median_cpu_s']:.2f} s)  ratio as is / with it {r['median_s'] / b['median_s']:.2f}",
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

"""Speed of the day-of-traffic ILP (optimizer/day_plan.py). Target (issue 11): a 24-hour
profile with hourly intervals plans in under 30 s.

Scenario: a diurnal profile (20 req/s at night, a 100 req/s peak at 14:00), 7 GPU types x
4 replica shapes (28 candidates, shortlisted to ``max_candidates``), reserved + on-demand +
spot (10% interruptions) on every type, 600 s scale-up, 2 replicas minimum. Reports the median
wall time of ``plan_day`` (the day ILP plus the two static-peak ILPs) over repeats.

``--cli`` times instead the whole command a user runs, as a fresh process: ``llmplan plan
model=llama3_1_8b gpu=h100_sxm day.profile=diurnal_24h`` (plan, day ILP, and the simulated SLO
attainment of the autoscaled and the static-peak schedule through the 24 hours); with
``--no-attainment`` the same without the simulation (``day.attainment.enabled=false``).

Usage:
  python benchmarks/bench_day_plan.py                    # 24 hourly intervals, 3 repeats
  python benchmarks/bench_day_plan.py --intervals 96 --repeats 1
  python benchmarks/bench_day_plan.py --cli --repeats 3  # the whole `llmplan plan ... day.profile=...`
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from llmplan.optimizer.day_plan import DayCandidate, plan_day, profile_from_rates
from llmplan.optimizer.price_tiers import PriceTiers


CLI = ["plan", "model=llama3_1_8b", "gpu=h100_sxm", "day.profile=diurnal_24h",
       "day.price_tiers={h100_sxm: {reserved_usd_per_gpu_hour: 2.6, spot_usd_per_gpu_hour: 2.0, "
       "spot_interruption_rate: 0.05}}"]


def bench_cli(repeats: int, attainment: bool) -> None:
    import json
    import subprocess
    import sys
    import tempfile

    times, day = [], {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            argv = [sys.executable, "-m", "llmplan.cli", *CLI, f"day.attainment.enabled={str(attainment).lower()}",
                    f"hydra.run.dir={tmp}"]
            t0 = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
            day = json.loads((Path(tmp) / "plan.json").read_text())["day"]
    att = day.get("attainment") or {}
    print(f"`llmplan {' '.join(CLI[:4])} ...` (attainment {'on' if attainment else 'off'}): median "
          f"{statistics.median(times):.1f} s (min {min(times):.1f}, max {max(times):.1f}) over {repeats}; "
          f"{day.get('intervals')} intervals, {att.get('simulations', 0)} simulations")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-candidates", type=int, default=4)
    ap.add_argument("--cli", action="store_true", help="time the whole `llmplan plan ... day.profile=diurnal_24h`")
    ap.add_argument("--no-attainment", action="store_true", help="with --cli: day.attainment.enabled=false")
    args = ap.parse_args()
    if args.cli:
        bench_cli(args.repeats, not args.no_attainment)
        return
    step_h = 24.0 / args.intervals
    rates = [20 + 80 * math.exp(-(((i * step_h) - 14) / 3) ** 2) for i in range(args.intervals)]
    prof = profile_from_rates(rates, interval_s=3600.0 * step_h)
    gpus = [f"gpu{i}" for i in range(7)]
    cands = [DayCandidate(f"{g}-tp{2 ** k}", g, 2 ** k, 3.0 * 2 ** k * (1 + 0.1 * i) * (1 - 0.05 * k), 2.0 + 0.3 * i)
             for i, g in enumerate(gpus) for k in range(4)]
    tiers = {g: PriceTiers(g, 2.0 + 0.3 * i, 1.4 + 0.3 * i, 0.9 + 0.3 * i, 0.1) for i, g in enumerate(gpus)}
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        d = plan_day(prof, cands, tiers, scale_up_s=600, min_replicas=2, max_candidates=args.max_candidates)
        times.append(time.perf_counter() - t0)
    print(f"{args.intervals} intervals, {len(d.candidates)} of {len(cands)} candidates: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}); day ${d.cost_usd:.2f} vs static ${d.static_cost_usd:.2f} "
          f"({d.saving_pct:.1f}% saved)")


if __name__ == "__main__":
    main()

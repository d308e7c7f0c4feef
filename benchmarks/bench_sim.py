"""Speed and memory of the discrete-event serving simulator.

Scenario: chat preset (log-normal prompts mean 1024, outputs mean 256), Poisson arrivals
at ~80% of estimated capacity (the simulator picks the rate), Llama-3.1-8B bf16 on one
H100 SXM with the default vLLM engine profile. Reports, per request count, the median
wall time of ``simulate_serving`` over fresh processes, the peak resident set size of
those processes, and the peak Python heap traced by ``tracemalloc`` in one extra run.

Cost model switch (``--cost``):
  real  the project's AnalyticalStepModel + memory plan (sim.deployment.build) [default]
  fake  sim.testing_costs.LinearStepCost.h100_llama3_8b(), KV capacity 407,429 tokens

Usage:
  python benchmarks/bench_sim.py                      # 1k, 10k, 100k requests, 3 repeats
  python benchmarks/bench_sim.py --sizes 10000 --repeats 5 --cost fake
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL, GPU = "llama3_1_8b", "h100_sxm"
MAX_MODEL_LEN = 131072
FAKE_KV_TOKENS = 407_429  # what sim.memory gives for this model/GPU at gpu_memory_utilization 0.9


def build_replica(cost: str):
    """One replica of the benchmark deployment (real analytical model or the fake)."""
    from llmplan.sim.replica import ReplicaSpec
    from llmplan.sim.types import EngineProfile

    engine = EngineProfile()
    if cost == "real":
        from llmplan.hardware_catalog.loader import get_gpu
        from llmplan.model_catalog.loader import load_model
        from llmplan.sim.deployment import Deployment, build
        from llmplan.sim.types import Parallelism, Precision

        cm, mem = build(Deployment(load_model(MODEL), get_gpu(GPU), Parallelism(), Precision(), engine))
        return ReplicaSpec(cm, engine, mem.kv_capacity_tokens, MAX_MODEL_LEN)
    from llmplan.sim.testing_costs import LinearStepCost

    return ReplicaSpec(LinearStepCost.h100_llama3_8b(), engine, FAKE_KV_TOKENS, MAX_MODEL_LEN)


def run_once(n: int, cost: str, trace: bool) -> dict:
    """Simulate ``n`` chat requests once in this process; wall time excludes imports/setup."""
    from llmplan.sim.serving import simulate_serving
    from llmplan.sim.workload import WorkloadSpec

    rep = build_replica(cost)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    res = simulate_serving(WorkloadSpec(preset="chat", num_requests=n, seed=0), [rep], seed=0)
    wall = time.perf_counter() - t0
    out = {"n": n, "wall_s": wall, "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rss_before_mb": base_rss, "steps": res.summary["steps"], "events": res.summary["events"],
           "rate_rps": res.summary["offered_rate_rps"], "overloaded": res.overloaded,
           "ttft_ms_p50": res.summary["ttft_ms_p50"], "tpot_ms_p50": res.summary["tpot_ms_p50"]}
    if trace:
        out["py_heap_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cost", choices=("real", "fake"), default="real")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)      # child: one run of this size
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(run_once(args.one, args.cost, args.trace)))
        return 0
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(f"scenario: chat preset, Poisson at ~80% capacity, {MODEL} on 1x {GPU}, cost model = {args.cost}")
    print(f"{'requests':>9} {'wall s (median)':>16} {'min':>7} {'max':>7} {'peak RSS MB':>12} "
          f"{'py heap MB':>11} {'steps':>8} {'rate rps':>9}")
    for n in args.sizes:
        runs = []
        for _ in range(args.repeats):
            cmd = [sys.executable, __file__, "--one", str(n), "--cost", args.cost]
            runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        cmd = [sys.executable, __file__, "--one", str(n), "--cost", args.cost, "--trace"]
        traced = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        walls = [r["wall_s"] for r in runs]
        print(f"{n:>9} {statistics.median(walls):>16.3f} {min(walls):>7.3f} {max(walls):>7.3f} "
              f"{max(r['rss_peak_mb'] for r in runs):>12.0f} {traced['py_heap_peak_mb']:>11.1f} "
              f"{runs[0]['steps']:>8} {runs[0]['rate_rps']:>9.2f}" + ("  OVERLOADED" if runs[0]["overloaded"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of the disaggregated simulator against the aggregated one on the same workload.

Scenario: chat preset (log-normal prompts mean 1024, outputs mean 256), Poisson arrivals,
Llama-3.1-8B bf16, default vLLM engine profile, the project's AnalyticalStepModel.
Aggregated: 2 replicas of 1x H100 SXM. Disaggregated: 1 prefill worker (1x H100 SXM) and
1 decode worker (1x H100 SXM), KV over the scale-out network of sim.kv_transfer. Both run
the same requests at the same rate: ``--load`` x the smaller of the two deployments'
estimated capacities. Each run is a fresh process; the wall time covers the simulate call
only (imports and model building excluded). Target (issue 10): disaggregated <= 2x aggregated.

Usage:
  python benchmarks/bench_disagg.py                    # 10,000 requests, 3 repeats
  python benchmarks/bench_disagg.py --n 2000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL, GPU = "llama3_1_8b", "h100_sxm"
MAX_MODEL_LEN = 131072


def build():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.deployment import Deployment, build as build_dep
    from llmplan.sim.disagg_build import disagg_from_deployments
    from llmplan.sim.replica import ReplicaSpec
    from llmplan.sim.types import EngineProfile, Parallelism, Precision

    dep = Deployment(load_model(MODEL), get_gpu(GPU), Parallelism(), Precision(), EngineProfile())
    cm, mem = build_dep(dep)
    agg = [ReplicaSpec(cm, dep.engine, mem.kv_capacity_tokens, MAX_MODEL_LEN)] * 2
    dis = disagg_from_deployments(dep, dep, 1, 1, MAX_MODEL_LEN, placement="network")
    return agg, dis


def run_once(n: int, mode: str, load: float) -> dict:
    from dataclasses import replace

    from llmplan.sim.disaggregated import estimate_disagg_capacity_rps, simulate_disaggregated
    from llmplan.sim.serving import estimate_capacity_rps, simulate_serving
    from llmplan.sim.workload import WorkloadSpec, mean_lengths

    agg, dis = build()
    wl = WorkloadSpec(preset="chat", num_requests=n, seed=0)
    means = mean_lengths(wl)
    rate = load * min(estimate_capacity_rps(agg, *means), estimate_disagg_capacity_rps(dis, *means))
    wl = replace(wl, rate_rps=rate)
    t0 = time.perf_counter()
    res = simulate_serving(wl, agg, seed=0) if mode == "agg" else simulate_disaggregated(wl, dis, seed=0)
    wall = time.perf_counter() - t0
    s = res.summary
    return {"mode": mode, "n": n, "wall_s": wall, "rate_rps": rate, "steps": s["steps"], "events": s["events"],
            "overloaded": res.overloaded, "ttft_ms_p50": s["ttft_ms_p50"], "tpot_ms_p50": s["tpot_ms_p50"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--one", choices=("agg", "dis"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_once(args.n, args.one, args.load)))
        return 0
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(f"scenario: chat preset, Poisson, {args.n} requests, {MODEL}; aggregated 2x {GPU} vs 1P1D {GPU}")
    med = {}
    for mode in ("agg", "dis"):
        runs = []
        for _ in range(args.repeats):
            cmd = [sys.executable, __file__, "--one", mode, "--n", str(args.n), "--load", str(args.load)]
            runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        walls = [r["wall_s"] for r in runs]
        med[mode] = statistics.median(walls)
        r = runs[0]
        print(f"{mode:>4}: wall s median {med[mode]:.3f} (min {min(walls):.3f}, max {max(walls):.3f}), "
              f"rate {r['rate_rps']:.2f} rps, steps {r['steps']}, events {r['events']}, "
              f"TTFT p50 {r['ttft_ms_p50']:.1f} ms, TPOT p50 {r['tpot_ms_p50']:.2f} ms"
              + ("  OVERLOADED" if r["overloaded"] else ""))
    print(f"ratio disaggregated / aggregated: {med['dis'] / med['agg']:.2f} (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

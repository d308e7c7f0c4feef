"""Step-model speed: mean time of one ``step_time_ms`` call over 2,000 decode shapes with
distinct KV lengths (cold caches, then warm), Llama-3.1-8B on H100, spec tier.

    python benchmarks/bench_step_model.py [--repeats 5]

Prints the median over repeats, in microseconds per call (the simulator calls this once per
engine iteration, so it bounds the DES speed).
"""

from __future__ import annotations

import argparse
import statistics
import time

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape


def one_run() -> tuple[float, float]:
    step, _ = build(Deployment(load_model("llama3_1_8b"), get_gpu("h100_sxm"), Parallelism(), Precision(),
                               EngineProfile(name="vllm")),
                    calibration="spec", min_kv_tokens=4096)
    shapes = [StepShape.build([], [1000 + i] * 8) for i in range(2000)]
    out = []
    for _ in range(2):  # cold, then warm
        t0 = time.perf_counter()
        for s in shapes:
            step.step_time_ms(s)
        out.append((time.perf_counter() - t0) / len(shapes) * 1e6)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    runs = [one_run() for _ in range(ap.parse_args().repeats)]
    print(f"step_time_ms: cold {statistics.median(r[0] for r in runs):.1f} us/call, "
          f"warm {statistics.median(r[1] for r in runs):.1f} us/call (median of {len(runs)})")


if __name__ == "__main__":
    main()

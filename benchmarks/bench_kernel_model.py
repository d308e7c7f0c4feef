"""Speed of the calibrated kernel model's scalar path (the step model's hot path).

    python benchmarks/bench_kernel_model.py [--gpu h100_sxm] [--backend vllm] [--calls 2000]

Prints the best-of-5 time per uncached call for GEMM, decode attention and MoE queries
(~20-35 us per GEMM call on a laptop core; the simulator caches repeated shapes), and the
time to load the shipped calibration and build one GPU's model. Not a test: timings depend
on the machine and its load.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100_sxm")
    p.add_argument("--backend", default="vllm")
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    t0 = time.perf_counter()
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.calibrated import CalibratedKernelModel
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    cal = load_calibration(None)
    m = CalibratedKernelModel(get_gpu(a.gpu), a.backend, cal)
    m._gemm(64, 4096, 4096, "bf16")
    print(f"import + load + first query: {1e3 * (time.perf_counter() - t0):.0f} ms "
          f"(sections read: {getattr(cal.measured, 'loaded', lambda: sorted(cal.measured))()})")
    n = a.calls
    cases = {
        "gemm": lambda i: m._gemm(1 + i % 700, 1024 + 64 * (i % 50), 4096, "bf16"),
        "attention_decode": lambda i: m._attention_decode(1 + i % 256, 100.0 + 37 * i, 32, 8, 128, "bf16"),
        "moe": lambda i: m._moe(1 + i % 512, 4096, 1536, 8, 128, 1, 4, "bf16"),
    }
    for name, fn in cases.items():
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for i in range(n):
                fn(i)
            best = min(best, (time.perf_counter() - t) / n)
        print(f"{name:18s} {1e6 * best:7.1f} us per uncached call ({m.tier})")


if __name__ == "__main__":
    main()

"""Per-kernel floor of a small memory-bound kernel inside a CUDA graph, per GPU and engine,
from the measured ``scale_matrix`` tables (the constants of ``sim/small_ops.py``).

aiconfigurator's collectors time ``scale_matrix`` (quantizing a bf16 ``m x k`` activation to fp8
with a given scale) with ``collector.helper.benchmark_with_power``, which captures the calls in a
CUDA graph (``use_cuda_graph=True`` by default) and replays it, five calls per replay:

* vLLM (``collector/vllm/collect_computescale.py``): ``ops.scaled_fp8_quant(x, scale=...)``, one
  custom CUDA kernel per call;
* TensorRT-LLM (``collector/trtllm/collect_computescale.py``): one quantization kernel per call;
* SGLang (``collector/sglang/collect_computescale.py``): ``out.copy_((x / scale).clamp(...).to(fp8))``,
  four PyTorch elementwise kernels per call (divide, clamp, cast, copy), so its rows are divided by 4.

At the smallest sizes (bytes moved, 2 read + 1 written per element, at most ``TINY_BYTES``) the
time does not depend on size: it is the cost of one graph-launched kernel. The floor is the median
of those rows.

    python -m llmplan.calibration.small_op_floor --measurements ../shared/measurements

Diagnosis only: nothing in the replay reads these floors. Timing the step's small memory-bound
operators (norms, activation, RoPE, embedding, sampling) at them instead of the spec roofline's
5 us ``LAUNCH_FLOOR_US`` was tried in session 12 (branch s12B3) and not kept: after a full engine
refit the training half did not improve overall (TensorRT-LLM TPOT 6.4 -> 7.2 %) and the fitted
per-step host term took the removed time back (docs/ACCURACY.md, "Small operators of a decode
step (session 12)").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

#: rows moving at most this many bytes time the launch floor (64 KiB: ~20 ns of HBM time)
TINY_BYTES = 65536
#: elementwise kernels per timed call in each engine's collector (see the module docstring)
KERNELS_PER_CALL = {"vllm": 1, "trtllm": 1, "sglang": 4}
#: measurement folder -> hardware catalog key
FOLDER_GPU = {"h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200", "l40s": "l40s",
              "rtx_pro_6000_server": "rtx_pro_6000_server"}


def floors_us(table: pd.DataFrame) -> dict[str, float]:
    """{backend: per-kernel floor in us} of one GPU's ``scale_matrix`` table."""
    t = table[table["quant_dtype"] == "fp8"]
    tiny = t[t["m"] * t["k"] * 3 <= TINY_BYTES]
    out = {}
    for backend, rows in tiny.groupby("backend"):
        if backend in KERNELS_PER_CALL and len(rows):
            out[str(backend)] = round(float(rows["latency_ms"].median()) * 1e3 / KERNELS_PER_CALL[backend], 2)
    return out


#: the floors this module derives from ../shared/measurements (us; tests/test_small_op_floor.py
#: checks them), kept as the measured reference for a future per-kernel count of each engine's step
SMALL_OP_FLOOR_US: dict[tuple[str, str], float] = {
    ("b200", "sglang"): 1.97, ("b200", "trtllm"): 2.11, ("b200", "vllm"): 2.17,
    ("h100_sxm", "sglang"): 1.98, ("h100_sxm", "trtllm"): 1.37, ("h100_sxm", "vllm"): 2.03,
    ("h200_sxm", "sglang"): 1.93, ("h200_sxm", "trtllm"): 1.32, ("h200_sxm", "vllm"): 1.94,
    ("l40s", "sglang"): 1.45, ("l40s", "trtllm"): 2.73, ("l40s", "vllm"): 1.60,
    ("rtx_pro_6000_server", "sglang"): 1.57, ("rtx_pro_6000_server", "trtllm"): 1.40,
    ("rtx_pro_6000_server", "vllm"): 1.74,
}


def derive(measurements: Path) -> dict[tuple[str, str], float]:
    """{(gpu key, backend): floor us} over every GPU folder with a ``scale_matrix`` table."""
    res = {}
    for folder, key in sorted(FOLDER_GPU.items()):
        f = Path(measurements) / folder / "scale_matrix.csv.gz"
        if f.is_file():
            for backend, us in floors_us(pd.read_csv(f)).items():
                res[(key, backend)] = us
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", type=Path, required=True)
    args = ap.parse_args(argv)
    for (gpu, backend), us in sorted(derive(args.measurements).items()):
        print(f"{gpu:22s} {backend:7s} {us:5.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

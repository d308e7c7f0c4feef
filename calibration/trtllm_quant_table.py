"""Build ``sim/data/trtllm_fp8_quant.json``: the per-tensor fp8 activation quantization that
TensorRT-LLM's measured ``fp8`` GEMM rows include, per GPU (runtime use: sim/trtllm_fp8_inputs.py).

aiconfigurator's TensorRT-LLM GEMM collector (``collector/trtllm/collect_gemm.py``) times
``Linear.forward`` on a bf16 input with no ``input_scale``, i.e. dynamic per-tensor quantization
before the fp8 GEMM; the same collector family measures those two kernels on their own:
``computescale`` (the dynamic scale) and ``scale_matrix`` (quantizing with a scale), per token count
``m`` and width ``k``. This writes their sum on the measured (m, k) grid for every GPU folder that
has both TensorRT-LLM tables; nothing is fitted.

    python -m llmplan.calibration.trtllm_quant_table --measurements ../shared/measurements \\
        --out sim/data/trtllm_fp8_quant.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from llmplan.calibration.gpu_table_cli import table_main
from llmplan.errors import UserError

TABLES = ("computescale", "scale_matrix")


def quant_grid(computescale: pd.DataFrame, scale_matrix: pd.DataFrame) -> dict:
    """{"m": [...], "k": [...], "ms": [[per k] per m], "version": ...} of computescale + scale_matrix
    (TensorRT-LLM rows, fp8), on the (m, k) points both tables measured."""
    parts = []
    for name, d in (("computescale", computescale), ("scale_matrix", scale_matrix)):
        d = d[(d["backend"] == "trtllm") & (d["quant_dtype"].astype(str) == "fp8")]
        parts.append(d.groupby(["m", "k"])["latency_ms"].median().rename(name))
    both = pd.concat(parts, axis=1).dropna()
    if both.empty:
        raise UserError("the computescale and scale_matrix tables share no TensorRT-LLM fp8 (m, k) point",
                        key="--measurements", fix="give a folder with both TensorRT-LLM tables")
    total = (both["computescale"] + both["scale_matrix"]).unstack("k")
    total = total.dropna(axis=0, how="any").dropna(axis=1, how="any")
    version = sorted({str(v) for d in (computescale, scale_matrix) for v in d.loc[d["backend"] == "trtllm", "backend_version"]})
    return {"m": [int(v) for v in total.index], "k": [int(v) for v in total.columns],
            "ms": [[round(float(x), 6) for x in row] for row in total.to_numpy()],
            "backend_version": ",".join(version)}


def build(measurements: Path) -> dict:
    if not measurements.is_dir():
        raise UserError(f"measurement directory '{measurements}' does not exist", key="--measurements",
                        fix="point at the measurements folder (one sub-folder per GPU)")
    out = {}
    for gpu in sorted(p for p in measurements.iterdir() if p.is_dir()):
        files = [gpu / f"{t}.csv.gz" for t in TABLES]
        if not all(f.exists() for f in files):
            continue
        cs, sm = (pd.read_csv(f) for f in files)
        if not ((cs["backend"] == "trtllm").any() and (sm["backend"] == "trtllm").any()):
            continue
        out[gpu.name] = quant_grid(cs, sm)
    if not out:
        raise UserError(f"no GPU folder under {measurements} has TensorRT-LLM computescale and scale_matrix tables",
                        key="--measurements", fix="point at the measurements folder (one sub-folder per GPU)")
    return out


def main(argv: list[str] | None = None) -> int:
    return table_main(argv, "python -m llmplan.calibration.trtllm_quant_table", __doc__.split("\n\n")[0], build,
                      "computescale + scale_matrix, TensorRT-LLM rows of aiconfigurator-core 0.12.0's "
                      "measured tables (ms per call; m tokens, k width); calibration/trtllm_quant_table.py")


if __name__ == "__main__":
    sys.exit(main())

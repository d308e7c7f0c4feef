"""Build ``sim/data/vllm_marlin_mxfp4.json``: the throughput of vLLM's Marlin MXFP4 fused MoE,
measured, per GPU and expert layout, against the routed tokens per expert (runtime use:
sim/vllm_marlin_mxfp4.py).

The vLLM MoE tables time Marlin's MXFP4 experts (``kernel_source``
``vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu``, ``moe_dtype``
``w4a16_mxfp4``: 4-bit float weights, 16-bit activations) at one expert shape only (hidden 3,584,
inter 3,072, 896 experts, top-16), at ``moe_tp_size`` 1-128 with EP 1 and EP 2-16 with
``moe_tp_size`` 1, 1-16,384 tokens, each at three routings (``balanced``, ``power_law_1.01``,
``power_law_1.2``). This writes, per GPU folder, routing and (moe_tp, moe_ep), the median of

* ``tokens_per_expert`` = tokens x top-k / experts (the rows of each expert's GEMM), and
* ``tflops`` = the gated expert GEMMs' flops on one GPU over the measured time:
  ``6 x hidden x (inter / moe_tp) x tokens x top-k / moe_ep / ms``.

Nothing is fitted; the file is a re-expression of measured rows.

    python -m llmplan.calibration.vllm_marlin_mxfp4_table --measurements ../shared/measurements \\
        --out sim/data/vllm_marlin_mxfp4.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from llmplan.calibration.gpu_table_cli import table_main
from llmplan.errors import UserError

#: vLLM's Marlin MXFP4 fused-MoE kernel in the aiconfigurator vLLM MoE tables
MARLIN_SOURCE = "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu"
DTYPE = "w4a16_mxfp4"


def marlin_rows(moe: pd.DataFrame) -> pd.DataFrame:
    """The Marlin MXFP4 rows with ``tokens_per_expert`` and ``tflops``."""
    sel = moe[(moe["backend"] == "vllm") & (moe["moe_dtype"].astype(str) == DTYPE)
              & (moe["kernel_source"].astype(str) == MARLIN_SOURCE)].copy()
    pairs = sel["num_tokens"] * sel["topk"]
    sel["tokens_per_expert"] = pairs / sel["num_experts"]
    local_flops = 6.0 * sel["hidden_size"] * (sel["inter_size"] / sel["moe_tp_size"]) * pairs / sel["moe_ep_size"]
    sel["tflops"] = local_flops / (sel["latency_ms"] * 1e9)
    return sel


def curves(moe: pd.DataFrame) -> dict:
    """{"curves": {<distribution>: {"<moe_tp>x<moe_ep>": {"tokens_per_expert": [...], "tflops": [...]}}},
    "shape": ..., "backend_version": ...}"""
    sel = marlin_rows(moe)
    if sel.empty:
        return {}
    out: dict = {}
    for (dist, tp, ep), g in sel.groupby(["distribution", "moe_tp_size", "moe_ep_size"], sort=True):
        med = g.groupby("tokens_per_expert")["tflops"].median().sort_index()
        out.setdefault(str(dist), {})[f"{int(tp)}x{int(ep)}"] = {
            "tokens_per_expert": [round(float(v), 6) for v in med.index],
            "tflops": [round(float(v), 4) for v in med.to_numpy()]}
    shapes = sel[["hidden_size", "inter_size", "num_experts", "topk"]].drop_duplicates()
    return {"curves": out,
            "shape": [[int(v) for v in r] for r in shapes.to_numpy()],
            "backend_version": ",".join(sorted({str(v) for v in sel["backend_version"]}))}


def build(measurements: Path) -> dict:
    if not measurements.is_dir():
        raise UserError(f"measurement directory '{measurements}' does not exist", key="--measurements",
                        fix="point at the measurements folder (one sub-folder per GPU)")
    out = {}
    for gpu in sorted(p for p in measurements.iterdir() if p.is_dir()):
        f = gpu / "moe.csv.gz"
        if not f.exists():
            continue
        c = curves(pd.read_csv(f))
        if c:
            out[gpu.name] = c
    if not out:
        raise UserError(f"no GPU folder under {measurements} has vLLM Marlin MXFP4 MoE rows", key="--measurements",
                        fix="point at the measurements folder (one sub-folder per GPU)")
    return out


def main(argv: list[str] | None = None) -> int:
    return table_main(argv, "python -m llmplan.calibration.vllm_marlin_mxfp4_table", __doc__.split("\n\n")[0], build,
                      f"{MARLIN_SOURCE} ({DTYPE}) rows of aiconfigurator-core 0.12.0's "
                      "measured vLLM MoE tables: median TFLOP/s of the gated expert GEMMs per GPU and routing against "
                      "tokens per expert; calibration/vllm_marlin_mxfp4_table.py")


if __name__ == "__main__":
    sys.exit(main())

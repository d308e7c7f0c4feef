"""Extract TensorRT-LLM's measured MLA generation-module curves into
``sim/data/trtllm_mla_module.json`` (offline; runtime use: ``sim/trtllm_mla_module.py``).

Source: ``<gpu>/mla_generation_module.csv.gz`` of the measurement folders (aiconfigurator-core
0.12.0 database, Apache-2.0; ``collector/trtllm/collect_mla_module.py``: the whole attention module,
projections + attention + output, of DeepSeek-V3 with the local head count), TensorRT-LLM rows.
One curve per (KV dtype, GEMM dtype, local heads): {batch: [[kv_len (``step``), ms], ...]}, the
median of repeated points.

``python -m llmplan.calibration.trtllm_mla_module_table --measurements ../shared/measurements --out sim/data/trtllm_mla_module.json``
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmplan.calibration.reader import gpu_folders
from llmplan.calibration.wideep_tables import extract_main
from llmplan.sim.trtllm_mla_module import curve_key

TABLE = "mla_generation_module.csv.gz"


def curves_of(frame: Any) -> dict[str, dict[str, list[list[float]]]]:
    """{curve key: {batch: [[kv_len, ms], ...] sorted}} of one GPU's TensorRT-LLM rows."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    f = frame[frame["isl"].astype(int) == 1]   # one new token per sequence (no speculative rows)
    for (kv, gemm, heads, batch), g in f.groupby(["kv_cache_dtype", "gemm_type", "num_heads", "batch_size"],
                                                 sort=True):
        pts = g.groupby("step")["latency_ms"].median().sort_index()
        out.setdefault(curve_key(str(kv), str(gemm), int(heads)), {})[str(int(batch))] = \
            [[int(s), round(float(v), 6)] for s, v in pts.items()]
    return out


def extract(measurements: Iterable[str]) -> dict[str, Any]:
    import pandas as pd

    gpus: dict[str, Any] = {}
    versions: dict[str, str] = {}
    for root in measurements:
        for gdir in gpu_folders(Path(root)):
            path = gdir / TABLE
            if not path.is_file():
                continue
            frame = pd.read_csv(path)
            frame = frame[(frame["backend"].astype(str) == "trtllm")
                          & (frame["architecture"].astype(str) == "DeepseekV3ForCausalLM")]
            if frame.empty:
                continue
            gpus[gdir.name] = curves_of(frame)
            versions[f"{gdir.name}/{TABLE}"] = f"trtllm {frame['backend_version'].iloc[0]}"
    return {"gpus": gpus,
            "_provenance": {"source": f"aiconfigurator-core 0.12.0 database (Apache-2.0), shared/measurements "
                                      f"<gpu>/{TABLE}, TensorRT-LLM rows (collector/trtllm/collect_mla_module.py: "
                                      "projections + attention + output of one DeepSeek-V3 layer, local heads)",
                            "tables": versions,
                            "curve": "kv_cache_dtype|gemm_type|num_heads -> batch_size -> [[step (KV length), "
                                     "latency_ms], ...]; isl 1; median of repeated points",
                            "license": "Apache License 2.0, Copyright (c) NVIDIA CORPORATION & AFFILIATES "
                                       "(aiconfigurator-core); full notice: sim/kernel_calibration/data/NOTICE.md",
                            "written_by": "python -m llmplan.calibration.trtllm_mla_module_table"}}


def main(argv: list[str] | None = None) -> int:
    return extract_main(argv, "Extract TensorRT-LLM's MLA generation-module curves (sim/data/trtllm_mla_module.json).",
                        extract, compact=True)


if __name__ == "__main__":
    raise SystemExit(main())

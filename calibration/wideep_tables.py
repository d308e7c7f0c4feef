"""Extract the measured wide-EP fused-MoE curves into ``sim/data/wideep_moe.json`` (offline).

The measurement folders hold, per GPU, the fused expert computation of wide expert parallel
(attention DP + EP) layouts timed by the engines themselves (shared/measurements/README.md,
``wideep_*``; aiconfigurator-core 0.12.0 database, Apache-2.0):

* TensorRT-LLM 1.3.0rc10 ``wideep_moe.csv.gz`` (``wideep_compute_cutlass``: the WIDEEP MoE
  backend's CUTLASS grouped GEMMs), one curve for every step kind;
* SGLang 0.5.10 ``wideep_context_moe.csv.gz`` / ``wideep_generation_moe.csv.gz``
  (``deepepmoe``: DeepEP's normal / low-latency layouts with DeepGEMM grouped GEMMs), one curve
  per phase.

In both, ``num_tokens`` is the token count of the whole DP group entering the MoE layer (TensorRT-LLM
also writes ``dp_num_tokens`` = ``num_tokens / moe_ep_size``, one rank's share; SGLang's range
grows with the EP size), which is what the step model's ``group_tokens`` is. Only curves without
redundant experts and without the EPLB balancer are kept (``num_slots == num_experts``,
``op_name`` without ``_eplb``: neither engine enables them by default), at the routing skews the
runtime can ask for (``power_law_<skew>``, ``uniform``).

``python -m llmplan.calibration.wideep_tables --measurements ../shared/measurements --out sim/data/wideep_moe.json``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmplan.calibration.reader import gpu_folders
from llmplan.errors import EXIT_USER_ERROR, UserError
from llmplan.sim import wideep_moe

#: (engine, phase, file): phase "any" serves every step, else "context" / "generation"
SOURCES = (("trtllm", "any", "wideep_moe.csv.gz"),
           ("sglang", "context", "wideep_context_moe.csv.gz"),
           ("sglang", "generation", "wideep_generation_moe.csv.gz"))
KEY_COLUMNS = ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
               "distribution")


def curve_key(engine: str, phase: str, row: dict[str, Any]) -> str:
    """The JSON key of one curve: ``sim.wideep_moe.curve_key`` (the runtime's lookup) of the row's
    :data:`KEY_COLUMNS` (in that function's argument order)."""
    return wideep_moe.curve_key(engine, phase, *(row[c] for c in KEY_COLUMNS))


def curves_of(frame: Any, engine: str, phase: str) -> dict[str, list[list[float]]]:
    """{curve key: [[num_tokens, latency_ms], ...] sorted by tokens} of one table (the median of
    repeated points)."""
    f = frame
    if "num_slots" in f.columns:
        f = f[f["num_slots"] == f["num_experts"]]
    if "op_name" in f.columns:
        f = f[~f["op_name"].astype(str).str.endswith("_eplb")]
    f = f[~f["distribution"].astype(str).str.endswith("_eplb")]
    out: dict[str, list[list[float]]] = {}
    for keys, g in f.groupby(list(KEY_COLUMNS), sort=True):
        row = dict(zip(KEY_COLUMNS, keys))
        pts = g.groupby("num_tokens")["latency_ms"].median().sort_index()
        out[curve_key(engine, phase, row)] = [[int(t), round(float(v), 6)] for t, v in pts.items()]
    return out


def extract(measurements: Iterable[str]) -> dict[str, Any]:
    import pandas as pd

    gpus: dict[str, dict[str, Any]] = {}
    versions: dict[str, str] = {}
    for root in measurements:
        for gdir in gpu_folders(Path(root)):   # a missing or empty folder: one clear error
            for engine, phase, name in SOURCES:
                path = gdir / name
                if not path.is_file():
                    continue
                frame = pd.read_csv(path)
                frame = frame[frame["backend"].astype(str) == engine]
                if frame.empty:
                    continue
                gpus.setdefault(gdir.name, {}).update(curves_of(frame, engine, phase))
                versions[f"{gdir.name}/{name}"] = f"{engine} {frame['backend_version'].iloc[0]}"
    return {"gpus": gpus,
            "_provenance": {"source": "aiconfigurator-core 0.12.0 database (Apache-2.0), shared/measurements "
                                      "<gpu>/wideep_moe.csv.gz (TensorRT-LLM), wideep_context_moe.csv.gz and "
                                      "wideep_generation_moe.csv.gz (SGLang)",
                            "tables": versions,
                            "num_tokens": "tokens of the whole attention-DP group entering the MoE layer",
                            "kept": "num_slots == num_experts, no EPLB; median of repeated points",
                            "license": "Apache License 2.0, Copyright (c) NVIDIA CORPORATION & AFFILIATES "
                                       "(aiconfigurator-core); full notice: sim/kernel_calibration/data/NOTICE.md",
                            "written_by": "python -m llmplan.calibration.wideep_tables"}}


def extract_main(argv: list[str] | None, description: str, extract_fn: Any, compact: bool = False) -> int:
    """The command line of a table extractor: ``--measurements DIR... --out FILE``; ``extract_fn``
    maps the folders to a ``{"gpus": {gpu: curves}, ...}`` document (``compact``: no newlines)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--measurements", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        doc = extract_fn(a.measurements)
        if not doc["gpus"]:   # never overwrite a shipped table with an empty one
            raise UserError(f"no rows of this table under {', '.join(a.measurements)}", key="--measurements",
                            fix="pass the measurement folders that hold the table (DIR/<gpu>/<table>.csv.gz)")
    except UserError as e:   # one or two lines, no traceback
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True) if compact else json.dumps(doc, indent=0,
                                                                                            sort_keys=True)
    Path(a.out).write_text(text + "\n")
    n = sum(len(v) for v in doc["gpus"].values())
    print(f"{n} curves over {len(doc['gpus'])} GPUs -> {a.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return extract_main(argv, "Extract the wide-EP MoE curves (sim/data/wideep_moe.json).", extract)


if __name__ == "__main__":
    raise SystemExit(main())

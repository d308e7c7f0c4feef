"""Whether an engine's Triton fused-MoE kernel runs a tuned launch configuration or its default one.

SGLang's Triton ``fused_moe`` picks its tile sizes (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, warps, stages)
per token count from a JSON file it ships for the (local experts E, local intermediate size N,
device, dtype) it runs: ``E=<E>,N=<N>,device_name=<torch device name>[,dtype=fp8_w8a8,
block_shape=[128, 128]].json`` under ``sglang/srt/layers/moe/moe_runner/triton_utils/configs/
triton_<version>/`` (0.5.14; ``layers/moe/fused_moe_triton/configs/`` in 0.5.10).
``fused_moe_triton_config.get_moe_configs`` looks in the installed Triton version's folder, then in
the other version folders; without a file ``get_default_config`` runs one fixed configuration
(bf16: 64 x 64 x 32 tiles, or 16 x 32 x 64 when the token count is at most E; block fp8: 64 x 128 x
128), which is often much slower. aiconfigurator's SGLang collector (ai-dynamo/aiconfigurator,
``collector/sglang/collect_moe.py``: ``benchmark`` calls ``get_moe_configs(num_local_experts,
local_inter_size, ...)`` and falls back to ``get_default_config`` the same way; its framework-layer
path runs SGLang's own ``try_get_optimal_moe_config``) timed the tables with whatever the engine
version ships, so a row's speed depends on whether its (E / EP, inter / TP, GPU, dtype) has a file.

``data/moe_triton_tuned.csv`` lists the files of the SGLang versions of the measured tables
(MANIFEST.csv: 0.5.10 for A100, 0.5.14 for the others), read from the wheels on PyPI
(``sglang-0.5.14-cp311-cp311-manylinux_2_34_x86_64.whl``, ``sglang-0.5.10-py3-none-any.whl``): bf16
(no dtype selector) and block fp8 (``dtype=fp8_w8a8,block_shape=[128, 128]``) files for the six
NVIDIA GPUs. 0.5.10 searches its installed Triton's folder (torch 2.9.1: Triton 3.5.1) and then only
``triton_3_4_0``, ``3_3_1``, ``3_2_0``, ``3_1_0``, so its ``triton_3_3_0`` file is left out.

The fit and the query read the same file through :func:`triton_default_config`, the MoE feature
``triton_default_cfg``: 1 where the engine's Triton kernel runs the default configuration, -1 where it
runs a tuned one, 0 where the engine / kernel / dtype / GPU is not covered by the file (vLLM, whose
0.24 ``get_default_config`` scales its tiles with the token count, TensorRT-LLM, non-Triton kernels).
Three values, not two: with 0 for tuned, a tuned SGLang row looked like every other kernel's row to
the shared residual ensemble, and the held-out tuned rows of hidden 1,024 / top-22 of 512 on H100
went from 29% to 40% MAPE (grouped split, seed 1; docs/ACCURACY.md, session 13).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path
from typing import Any

import numpy as np

DATA_PATH = Path(__file__).resolve().parent / "data" / "moe_triton_tuned.csv"
#: the measured row label of SGLang's Triton fused_moe (collector's ``source_by_backend``)
SGLANG_TRITON_SOURCE = "sglang_fused_moe_triton"
#: dtypes whose Triton configuration files the file lists
DTYPES = ("bf16", "fp8_block")
#: feature values: the default configuration, a tuned one, not covered (another engine / kernel / dtype)
DEFAULT, TUNED, NOT_COVERED = 1.0, -1.0, 0.0


@functools.lru_cache(maxsize=1)
def _table() -> tuple[frozenset[tuple[str, str, str, str, int, int]], dict[tuple[str, str], str]]:
    """(tuned (engine, version, gpu, dtype, E, N) set, (engine, gpu) -> version listed)."""
    tuned, versions = set(), {}
    with open(DATA_PATH, newline="") as f:
        for r in csv.DictReader(f):
            tuned.add((r["engine"], r["engine_version"], r["gpu"], r["dtype"], int(r["local_experts"]),
                       int(r["inter_local"])))
            versions[(r["engine"], r["gpu"])] = r["engine_version"]
    return frozenset(tuned), versions


def covered_version(engine: str, gpu_key: str) -> str | None:
    """The engine version whose configuration files the file lists for this GPU (None: not covered)."""
    return _table()[1].get((str(engine), str(gpu_key)))


def triton_default_config(engine: str, gpu_key: str, dtype: str, num_experts: float, inter: float,
                          moe_tp: float, moe_ep: float, version: str | None = None) -> float:
    """:data:`DEFAULT` when the engine's Triton fused-MoE kernel runs its default configuration for this
    shape on this GPU (no tuned file for E = experts / EP, N = inter / TP), :data:`TUNED` when it has
    one, :data:`NOT_COVERED` when the file lists nothing for the engine, GPU, version or dtype. ``version``: the engine
    version (a measured row's ``backend_version``); None (a query): the version the file lists for the
    GPU, the one its kernel tables were measured with. The caller decides that the kernel is Triton."""
    tuned, versions = _table()
    listed = versions.get((str(engine), str(gpu_key)))
    if listed is None or str(dtype) not in DTYPES or (version is not None and str(version) != listed):
        return NOT_COVERED
    e = int(round(num_experts / max(moe_ep, 1.0)))
    n = int(round(inter / max(moe_tp, 1.0)))
    return TUNED if (str(engine), listed, str(gpu_key), str(dtype), e, n) in tuned else DEFAULT


def frame_default_config(df: Any, gpu_key: str) -> np.ndarray:
    """:func:`triton_default_config` of every measured MoE row of one GPU (canonical frame): SGLang
    Triton rows (``kernel_source`` :data:`SGLANG_TRITON_SOURCE`); :data:`NOT_COVERED` elsewhere."""
    n = len(df)
    need = ("kernel_source", "backend", "backend_version", "dtype", "num_experts", "inter", "moe_tp", "moe_ep")
    if not n or any(c not in df for c in need):
        return np.zeros(n)
    out = np.zeros(n)
    sel = (df["kernel_source"].astype(str) == SGLANG_TRITON_SOURCE).to_numpy()
    if not sel.any():
        return out
    cols = [df[c].to_numpy()[sel] for c in ("backend", "backend_version", "dtype", "num_experts", "inter",
                                            "moe_tp", "moe_ep")]
    memo: dict[tuple[Any, ...], float] = {}
    vals = []
    for key in zip(*cols):
        if key not in memo:
            eng, ver, dt, e, i, tp, ep = key
            memo[key] = triton_default_config(str(eng), gpu_key, str(dt), float(e), float(i), float(tp),
                                              float(ep), str(ver))
        vals.append(memo[key])
    out[sel] = vals
    return out

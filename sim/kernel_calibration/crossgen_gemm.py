"""A shape -> efficiency model of GEMMs pooled over measured GPUs (the cross-gen tier's second
GEMM member, NeuSight-style).

One boosted-tree ensemble per *pool* (a set of measured GPUs) predicts
``log(latency / ideal)``, ``ideal = q * t_c + t_m`` the tile/wave-quantized compute time plus
the DRAM time at the GPU's specification peaks, from GPU-normalised features only: the GEMM
features of :mod:`llmplan.sim.kernel_calibration.features` (log shapes, tile and wave
efficiencies over the SM count, working set over L2, compute/memory time ratio against the
ridge point, ideal time) plus engine and dtype flags. It is fitted on the pooled rows of the
GPUs of the pool, each GPU weighing the same (``python -m llmplan.calibration.fit_crossgen``),
so it learns how efficiency varies with shape *across* GPUs rather than one GPU's curve.

The cross-gen tier pools its prediction with the per-GPU models' by a geometric mean
(:data:`llmplan.sim.kernel_calibration.crossgen.GEMM_POOLED_WEIGHT`), for GEMM dtype groups in
:data:`GROUPS` when a model was fitted on exactly the GPUs the tier pools. The file is plain
JSON beside the calibration (``data/crossgen_gemm.json``), read on the first cross-gen GEMM
query only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from llmplan.sim.kernel_calibration import features as F
from llmplan.sim.kernel_calibration.gbt import GBTModel

FORMAT = "llmplan-crossgen-gemm"
VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "crossgen_gemm.json"
#: engine and dtype-group flags appended to the GEMM features, in this order
BACKENDS = ("sglang", "trtllm", "vllm")
GROUPS = ("bf16", "fp8", "fp8_block", "fp4")
FEATURE_NAMES = tuple(F.FEATURES["gemm"]) + tuple(f"backend_{b}" for b in BACKENDS) + \
    tuple(f"dtype_{g}" for g in GROUPS)


def pool_key(gpus: list[str] | tuple[str, ...]) -> str:
    """The key of a pool of measured GPUs in the file."""
    return "+".join(sorted(gpus))


def flags(backend: str, group: str) -> list[float]:
    return [1.0 if backend == b else 0.0 for b in BACKENDS] + [1.0 if group == g else 0.0 for g in GROUPS]


def ideal_us(phys: F.Phys) -> Any:
    """The reference time the model's log ratio is taken against (scalar or array)."""
    return phys.q * phys.t_c + phys.t_m


def design(phys: F.Phys, backend: str, group: str) -> np.ndarray:
    """(rows, features) matrix of a vectorised GEMM Phys for one engine and dtype group."""
    x = F.feature_matrix(phys)
    return np.hstack([x, np.tile(np.array(flags(backend, group)), (len(x), 1))])


@dataclass(frozen=True)
class PooledGemmMember:
    """The pooled model bound to one engine and dtype group: predicts latency in us."""

    gbt: GBTModel
    backend: str
    group: str

    def log_us_frame(self, phys: F.Phys) -> np.ndarray:
        x = design(phys, self.backend, self.group)
        ref = np.broadcast_to(np.asarray(ideal_us(phys), dtype=np.float64), (len(x),))
        return np.log(np.maximum(ref, 1e-9)) + self.gbt.predict(x)

    def log_us_one(self, phys: F.Phys) -> float:
        x = np.array(list(phys.x) + flags(self.backend, self.group), dtype=np.float64)
        return math.log(max(float(ideal_us(phys)), 1e-9)) + self.gbt.predict_one(x)


@lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> dict[str, GBTModel]:
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    if d.get("format") != FORMAT or int(d.get("version", 0)) != VERSION:
        return {}
    if tuple(d.get("feature_names", ())) != FEATURE_NAMES:
        return {}     # fitted with other features: not usable by this code
    return {k: GBTModel.from_dict(v) for k, v in d.get("models", {}).items()}


def load_models(path: Path | None = None) -> dict[str, GBTModel]:
    """pool key -> ensemble; empty when the file is absent or of another format/feature set
    (the cross-gen tier then uses the per-GPU models only)."""
    p = path or DEFAULT_PATH
    if not p.is_file():
        return {}
    return _load(str(p.resolve()), p.stat().st_mtime_ns)


def member_for(pool: list[str], backend: str, group: str, path: Path | None = None) -> PooledGemmMember | None:
    """The pooled member for a cross-gen GEMM group, or None (no model for that pool, or a
    dtype group / engine the model was not fitted on)."""
    if group not in GROUPS or backend not in BACKENDS:
        return None
    gbt = load_models(path).get(pool_key(pool))
    return None if gbt is None else PooledGemmMember(gbt, backend, group)

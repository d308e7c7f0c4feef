"""The few GPU specification figures the kernel models use, and how a GPU is looked up.

A calibration file stores these figures for every GPU it was fitted on, so a measured-tier
prediction does not depend on later catalog edits, and a what-if GPU (a catalog GPU whose
figures were overridden) is recognised as *not* the measured one and predicted cross-gen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.errors import UserError

#: relative tolerance under which two GPUs' figures count as the same hardware
SAME_HW_RTOL = 0.005


@dataclass(frozen=True)
class GPUFeatures:
    key: str
    peak_bf16_tflops: float
    peak_fp8_tflops: float       # falls back to bf16 where the GPU has no fp8 tensor cores
    peak_fp4_tflops: float       # falls back to fp8, then bf16
    hbm_bw_gbps: float
    sm_count: int
    l2_mb: float
    scaleup_bw_gbps: float       # 0 = no NVLink/xGMI
    pcie_bw_gbps: float

    @staticmethod
    def from_spec(gpu: GPUSpec) -> "GPUFeatures":
        bf16 = gpu.peak_tflops("bf16")
        fp8 = gpu.peak_tflops("fp8") if gpu.supports("fp8") else bf16
        fp4 = gpu.peak_tflops("fp4") if gpu.supports("fp4") else fp8
        return GPUFeatures(gpu.key, float(bf16), float(fp8), float(fp4), float(gpu.hbm_bw_gbps),
                           int(gpu.sm_count), float(gpu.l2_mb), float(gpu.scaleup_bw_gbps),
                           float(gpu.pcie_bw_gbps))

    def peak(self, compute_dtype: str) -> float:
        """Dense TFLOP/s for a compute dtype name (bf16 | fp8 | fp4)."""
        return {"fp8": self.peak_fp8_tflops, "fp4": self.peak_fp4_tflops}.get(compute_dtype, self.peak_bf16_tflops)

    @property
    def fabric(self) -> str:
        """The kind of link its multi-GPU measurements ran over: the scale-up fabric
        (NVLink / xGMI) when it has one, else PCIe (see :func:`link_kind`)."""
        return "scaleup" if self.scaleup_bw_gbps > 0 else "pcie"

    @property
    def fabric_bw_gbps(self) -> float:
        return self.scaleup_bw_gbps if self.scaleup_bw_gbps > 0 else self.pcie_bw_gbps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "GPUFeatures":
        return GPUFeatures(**d)

    def same_hardware(self, other: "GPUFeatures") -> bool:
        """True when every performance figure agrees within :data:`SAME_HW_RTOL`."""
        for name in ("peak_bf16_tflops", "peak_fp8_tflops", "hbm_bw_gbps", "sm_count", "l2_mb",
                     "scaleup_bw_gbps", "pcie_bw_gbps"):
            a, b = float(getattr(self, name)), float(getattr(other, name))
            if abs(a - b) > SAME_HW_RTOL * max(abs(a), abs(b), 1e-9):
                return False
        return True


def link_kind(name: str) -> str:
    """``scaleup`` for NVLink/xGMI links, else the link's own name (pcie, network)."""
    return "scaleup" if name in ("nvlink", "xgmi", "scaleup") else name


def catalog_resolver() -> Callable[[str], GPUSpec]:
    """``hardware_catalog.loader.get_gpu`` (imported lazily: the catalog is optional here)."""
    try:
        from llmplan.hardware_catalog.loader import get_gpu  # type: ignore[import-not-found]
    except ImportError as exc:  # pragma: no cover - only before the catalog exists
        raise UserError("the GPU catalog (hardware_catalog.loader) is not available",
                        fix="install llmplan with its hardware catalog") from exc
    return get_gpu


def resolve_gpu(name: str, resolver: Callable[[str], GPUSpec] | None = None) -> GPUSpec:
    """Look a GPU up by catalog key, display name or alias; a clear UserError if unknown.

    Folder names like ``h100_sxm`` are tried as given, then with ``_``/``-`` read as spaces.
    """
    resolve = resolver or catalog_resolver()
    tried = [name, name.replace("_", " "), name.replace("-", " "), name.replace("_", "-")]
    last: Exception | None = None
    for cand in dict.fromkeys(tried):
        try:
            return resolve(cand)
        except (UserError, KeyError, ValueError, LookupError) as exc:
            last = last or exc          # report the name as given, not a respelling
    if isinstance(last, UserError):
        msg = str(last) if str(last).startswith("unknown GPU") else f"unknown GPU '{name}' ({last})"
        raise UserError(msg, key="gpu", fix=last.fix or "use a catalog key (`llmplan catalog gpus`) or one of its aliases")
    raise UserError(f"unknown GPU '{name}'", key="gpu",
                    fix="use a catalog key (`llmplan catalog gpus`) or one of its aliases")

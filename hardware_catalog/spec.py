"""The typed, frozen record for one GPU type. Units are in field names.

Figures are dense (never 2:4-sparse) tensor throughput. Bandwidths are unidirectional
per GPU in GB/s (1e9 bytes/s). ``sources`` maps each field name to its citation;
``unknown`` lists fields for which no trustworthy public figure was found (their value
is then a conservative stand-in documented in the data file's notes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

#: dtype names used across llmplan (weights / activations / KV cache).
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")


@dataclass(frozen=True)
class GPUSpec:
    key: str                      # catalog key, e.g. "h100_sxm"
    name: str                     # display name, e.g. "NVIDIA H100 SXM5 80GB"
    vendor: str                   # "nvidia" | "amd"
    aliases: tuple[str, ...]      # other spellings that map here ("H100 80GB HBM3", "h100")
    dense_tflops: Mapping[str, float]  # dtype -> dense TFLOP/s (TOP/s for int); absent = unsupported
    hbm_gb: float                 # device memory capacity, GB (1e9 bytes)
    hbm_bw_gbps: float            # device memory bandwidth, GB/s
    l2_mb: float                  # last-level on-chip cache, MB (MI300: L2 here, Infinity Cache noted)
    sm_count: int                 # SMs (NVIDIA) or CUs (AMD)
    scaleup_bw_gbps: float        # NVLink/xGMI bandwidth per GPU, unidirectional GB/s (0 = none)
    scaleup_domain_size: int      # GPUs reachable over the scale-up fabric (1 = no fabric)
    pcie_gen: int                 # host interface PCIe generation
    pcie_bw_gbps: float           # PCIe x16 bandwidth, unidirectional GB/s
    scaleout_bw_gbps: float       # network bandwidth per GPU, unidirectional GB/s
    tdp_w: float                  # board power, W
    usd_per_hour: float           # default on-demand price per GPU-hour
    price_source: str             # provider, SKU, date the price was read
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    unknown: tuple[str, ...] = ()  # fields with no trustworthy public figure

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a dtype; fp16 falls back to bf16 and vice versa."""
        if dtype in self.dense_tflops:
            return float(self.dense_tflops[dtype])
        alias = {"fp16": "bf16", "bf16": "fp16", "int8": "fp8", "int4": "fp4"}.get(dtype)
        if alias and alias in self.dense_tflops:
            return float(self.dense_tflops[alias])
        raise KeyError(f"{self.key} has no dense {dtype} tensor throughput")

    def supports(self, dtype: str) -> bool:
        try:
            self.peak_tflops(dtype)
            return True
        except KeyError:
            return False

    def with_overrides(self, **changes: object) -> "GPUSpec":
        """A what-if copy (e.g. hbm_bw_gbps doubled). Unknown fields are an error."""
        from dataclasses import replace

        return replace(self, **changes)

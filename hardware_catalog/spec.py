"""The typed, frozen records for one GPU type and its host topology. Units are in field names.

Figures are dense (never 2:4-sparse) tensor throughput. Bandwidths are unidirectional
per GPU in GB/s (1e9 bytes/s). ``sources`` maps each field name to its citation;
``unknown`` lists fields for which no trustworthy public figure was found (their value
is then a conservative stand-in documented in the data file's notes).

Memory: ``memory_bytes`` is the physical capacity the device reports (nvidia-smi
``memory.total`` in MiB x 2**20, or the vendor's GiB figure), which is what every memory
computation uses. ``hbm_gb`` is the marketed figure ("80 GB" for an H100 whose 80 GiB is
85.9e9 bytes), kept for display only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

#: dtype names used across llmplan (weights / activations / KV cache).
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")

#: the collective-communication library each vendor's serving engines use
COLLECTIVE_LIBRARY = {"nvidia": "nccl", "amd": "rccl", "intel": "oneccl"}

#: how the GPUs of one host reach each other when there is no scale-up fabric (or beyond it).
#:  - ``pcie_switch``: GPU pairs sit behind PCIe switches and exchange data peer-to-peer
#:    through them without crossing the CPU; larger groups cross the host bridge;
#:  - ``pcie_host_bridge``: each GPU hangs off a CPU root port; peer-to-peer traffic crosses
#:    the CPU's root complex, and the inter-socket link for GPUs on different sockets;
#:  - ``scaleup``: NVLink / xGMI / NVL72 fabric (the PCIe layout does not carry collectives).
GPU_LINKS = ("pcie_switch", "pcie_host_bridge", "scaleup")


@dataclass(frozen=True)
class HostTopology:
    """How the GPUs of one host (box) are connected: a catalog input with a documented default.

    ``p2p`` is peer-to-peer across the CPU host bridge (between switch pairs, or between root
    ports). False: NCCL stages those transfers through host memory. GPU pairs behind one PCIe
    switch always talk peer-to-peer through the switch.
    """

    name: str                 # e.g. "pcie4_switch_p2p"
    gpu_link: str             # one of GPU_LINKS
    pcie_gen: int             # PCIe generation of the GPU links
    p2p: bool                 # GPU peer-to-peer enabled
    gpus_per_host: int = 8    # GPUs in one box
    sockets: int = 2          # CPU sockets the GPUs are split over (host-bridge layouts)
    description: str = ""

    @property
    def gpus_per_socket(self) -> int:
        return max(1, self.gpus_per_host // max(1, self.sockets))


@dataclass(frozen=True)
class GPUSpec:
    key: str                      # catalog key, e.g. "h100_sxm"
    name: str                     # display name, e.g. "NVIDIA H100 SXM5 80GB"
    vendor: str                   # "nvidia" | "amd" | "intel"
    aliases: tuple[str, ...]      # other spellings that map here ("H100 80GB HBM3", "h100")
    dense_tflops: Mapping[str, float]  # dtype -> dense TFLOP/s (TOP/s for int); absent = unsupported
    hbm_gb: float                 # marketed device memory, GB: DISPLAY ONLY (use memory_bytes)
    hbm_bw_gbps: float            # device memory bandwidth, GB/s
    l2_mb: float                  # last-level on-chip cache, MB (MI300: L2 here, Infinity Cache noted)
    sm_count: int                 # SMs (NVIDIA), CUs (AMD) or Xe cores (Intel)
    scaleup_bw_gbps: float        # NVLink/xGMI bandwidth per GPU, unidirectional GB/s (0 = none)
    scaleup_domain_size: int      # GPUs reachable over the scale-up fabric (1 = no fabric)
    pcie_gen: int                 # host interface PCIe generation
    pcie_bw_gbps: float           # PCIe bandwidth of the card's link, unidirectional GB/s
    scaleout_bw_gbps: float       # network bandwidth per GPU, unidirectional GB/s
    tdp_w: float                  # board power, W
    usd_per_hour: float           # default on-demand price per GPU-hour
    price_source: str             # provider, SKU, date the price was read
    memory_bytes: int = 0         # physical device memory the device reports, bytes
    topologies: Mapping[str, HostTopology] = field(default_factory=lambda: MappingProxyType({}))
    default_topology: str = ""    # key of ``topologies`` used unless the config picks another
    measured_topology: str = ""   # topology of the box the shipped collective measurements came from
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    unknown: tuple[str, ...] = ()  # fields with no trustworthy public figure

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def collective_library(self) -> str:
        return COLLECTIVE_LIBRARY.get(self.vendor, "nccl")

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

    def topology(self, name: str | None = None) -> HostTopology:
        """The host topology ``name`` (default: the catalog default). KeyError if unknown."""
        return self.topologies[name or self.default_topology]

    def with_overrides(self, **changes: object) -> "GPUSpec":
        """A what-if copy (e.g. hbm_bw_gbps doubled). Unknown fields are an error."""
        from dataclasses import replace

        return replace(self, **changes)

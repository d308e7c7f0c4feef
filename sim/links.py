"""Which link a collective crosses, and its alpha-beta parameters.

Within the scale-up domain (NVLink / xGMI) collectives use the scale-up bandwidth;
beyond it, or on GPUs without a fabric, PCIe (within a host of 8) or the network.
Start-up latencies (alpha) are typical published figures: NVLink all-reduce ~8 us
(NCCL tests on HGX H100), PCIe peer-to-peer ~15 us, InfiniBand/RoCE ~25 us.
"""

from __future__ import annotations

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.sim.kernels import Link

NVLINK_ALPHA_US = 8.0
PCIE_ALPHA_US = 15.0
NETWORK_ALPHA_US = 25.0
HOST_GPUS = 8  # GPUs that share one host's PCIe switch fabric


def group_link(gpu: GPUSpec, group_size: int, span_gpus: int | None = None) -> Link:
    """Link used by a collective over ``group_size`` GPUs placed inside a replica of
    ``span_gpus`` GPUs (defaults to the group itself)."""
    span = span_gpus or group_size
    if gpu.scaleup_bw_gbps > 0 and span <= gpu.scaleup_domain_size:
        name = "xgmi" if gpu.vendor == "amd" else "nvlink"
        return Link(name, gpu.scaleup_bw_gbps, NVLINK_ALPHA_US)
    if span <= HOST_GPUS:
        return Link("pcie", gpu.pcie_bw_gbps, PCIE_ALPHA_US)
    return Link("network", gpu.scaleout_bw_gbps, NETWORK_ALPHA_US)


def stage_link(gpu: GPUSpec, tp: int, pp: int) -> Link:
    """Link between consecutive pipeline stages (point-to-point activations)."""
    return group_link(gpu, 2, span_gpus=tp * pp)

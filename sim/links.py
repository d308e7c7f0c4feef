"""Which link a collective crosses, and its alpha-beta parameters.

Within the scale-up domain (NVLink / xGMI) collectives use the scale-up bandwidth. GPUs
without a fabric (L40S, L4, A10G, H100 PCIe, RTX PRO 6000, Arc Pro B60) run them over PCIe,
within one host of ``gpus_per_host`` GPUs, in the layout of the GPU's host topology
(a catalog input, ``GPUSpec.topologies`` with a default; the config key ``gpu.topology``
picks another through ``hardware_catalog.loader.with_topology``). Beyond the host: the network.

Measured collective curves (``../shared/measurements/<gpu>/nccl.csv.gz``) come from ONE box
per GPU, recorded as ``GPUSpec.measured_topology`` (the L40S box: GPU pairs behind PCIe Gen4
switches, no peer-to-peer between pairs). The link of that topology is named ``pcie``, which
is the fabric the calibration's curves were fitted on, so they apply. Any other topology
gets a link named ``pcie:<topology>``, and :func:`guard_topology` (applied by
sim/deployment.py to every kernel model) prices its collectives with the roofline over the
link below (tier ``spec``): neither the measured box's curves nor the alpha-beta efficiency
fitted on them are applied to a box of another topology.

PCIe model for an unmeasured topology (first order, not fitted):
  * bandwidth = the card's PCIe link rate (``pcie_bw_gbps``, per direction); halved when the
    group's traffic crosses the CPU host bridge without peer-to-peer (NCCL then stages every
    transfer through a host-memory buffer: a copy to host and a copy back) -- an assumption;
  * a pair behind one PCIe switch talks peer-to-peer through the switch; groups larger than
    a pair, and every group on a host-bridge layout, cross the host bridge;
  * start-up latency (alpha) PCIE_ALPHA_US, doubled when staged through host memory.
  * Splitting the group over two CPU sockets is not modelled separately.
Start-up latencies are typical published figures: NVLink all-reduce ~8 us (NCCL tests on
HGX H100), PCIe peer-to-peer ~15 us, InfiniBand/RoCE ~25 us.
"""

from __future__ import annotations

from llmplan.hardware_catalog.spec import GPUSpec, HostTopology
from llmplan.sim.kernels import KernelModel, KernelTime, Link, RooflineKernelModel

NVLINK_ALPHA_US = 8.0
PCIE_ALPHA_US = 15.0
NETWORK_ALPHA_US = 25.0
HOST_GPUS = 8  # GPUs of one host when the topology does not say
STAGED_BW_FACTOR = 0.5  # no peer-to-peer: staged through host memory (assumption, see module doc)


def _host_gpus(gpu: GPUSpec) -> int:
    topo = gpu.topologies.get(gpu.default_topology) if gpu.topologies else None
    return topo.gpus_per_host if topo is not None else HOST_GPUS


def crosses_host_bridge(topo: HostTopology, group_size: int) -> bool:
    """Whether a collective over ``group_size`` GPUs of this box crosses the CPU host bridge."""
    if topo.gpu_link == "pcie_switch":
        return group_size > 2
    return group_size > 1


def pcie_link(gpu: GPUSpec, group_size: int, topo: HostTopology) -> Link:
    """The PCIe link of a group of ``group_size`` contiguous GPUs in one host of topology ``topo``."""
    staged = crosses_host_bridge(topo, group_size) and not topo.p2p
    bw = gpu.pcie_bw_gbps * (STAGED_BW_FACTOR if staged else 1.0)
    alpha = PCIE_ALPHA_US * (2.0 if staged else 1.0)
    name = "pcie" if topo.name == gpu.measured_topology else f"pcie:{topo.name}"
    return Link(name, bw, alpha)


def group_link(gpu: GPUSpec, group_size: int, span_gpus: int | None = None, *, across_span: bool = False) -> Link:
    """Link used by a collective over ``group_size`` GPUs placed inside a replica of
    ``span_gpus`` GPUs (defaults to the group itself), in the GPU's selected host topology
    (``gpu.default_topology``). The group's GPUs are contiguous (a TP or EP group); with
    ``across_span`` its members sit at opposite ends of the span (pipeline stages)."""
    span = span_gpus or group_size
    if gpu.scaleup_bw_gbps > 0 and span <= gpu.scaleup_domain_size:
        name = "xgmi" if gpu.vendor == "amd" else "nvlink"
        return Link(name, gpu.scaleup_bw_gbps, NVLINK_ALPHA_US)
    if span <= _host_gpus(gpu):
        topo = gpu.topologies.get(gpu.default_topology) if gpu.topologies else None
        if topo is None or topo.gpu_link == "scaleup":
            return Link("pcie", gpu.pcie_bw_gbps, PCIE_ALPHA_US)  # beyond a small fabric, inside the host
        return pcie_link(gpu, span if across_span else group_size, topo)
    return Link("network", gpu.scaleout_bw_gbps, NETWORK_ALPHA_US)


def domain_gpus(gpu: GPUSpec) -> int:
    """GPUs of one scale-up domain (an NVLink/xGMI node or NVL72 rack; 1 without a fabric)."""
    return max(1, gpu.scaleup_domain_size) if gpu.scaleup_bw_gbps > 0 else 1


def span_collective(kernels: KernelModel, gpu: GPUSpec, op: str, message_bytes: float, n: int) -> KernelTime:
    """One collective over a contiguous group of ``n`` GPUs of one replica.

    Inside one scale-up domain (or a GPU without a fabric): the kernel model's collective over
    :func:`group_link`. A group spanning ``m = n / d`` domains of ``d`` GPUs runs hierarchically,
    as NCCL does across nodes: the intra-domain part over the scale-up link, the inter-domain
    part over the scale-out network (``scaleout_bw_gbps`` per GPU, every GPU with its own NIC):

    * all_reduce: reduce-scatter in the domain, all-reduce of ``1/d`` of the message across the
      ``m`` domains, all-gather in the domain;
    * all_gather / reduce_scatter: the in-domain step on the whole message, and the cross-domain
      step on ``1/d`` of it over ``m`` domains;
    * alltoall: the ``(n - d) / n`` of each GPU's buffer bound for other domains crosses the
      network (``m``-way), the rest stays on the scale-up link.
    The two parts are added (no overlap assumed)."""
    d = domain_gpus(gpu)
    if n <= 1 or d <= 1 or n <= d or op == "p2p":
        return kernels.collective(op, message_bytes, n, group_link(gpu, n, span_gpus=n))
    m = -(-n // d)
    local = group_link(gpu, d, span_gpus=d)
    net = Link("network", gpu.scaleout_bw_gbps, NETWORK_ALPHA_US)
    if op == "all_reduce":
        parts = [kernels.collective("reduce_scatter", message_bytes, d, local),
                 kernels.collective("all_reduce", message_bytes / d, m, net),
                 kernels.collective("all_gather", message_bytes, d, local)]
    elif op in ("all_gather", "reduce_scatter"):
        parts = [kernels.collective(op, message_bytes, d, local), kernels.collective(op, message_bytes / d, m, net)]
    else:  # alltoall
        off = message_bytes * (n - d) / n
        parts = [kernels.collective(op, message_bytes * d / n, d, local),
                 kernels.collective(op, off * m / max(1, m - 1), m, net)]
    # tier of the network part (never measured: the tables are single-node); flagged extrapolated
    return KernelTime(sum(p.latency_ms for p in parts), 0.0, sum(p.bytes for p in parts), "comm", parts[1].tier, True)


def stage_link(gpu: GPUSpec, tp: int, pp: int) -> Link:
    """Link between consecutive pipeline stages (point-to-point activations)."""
    return group_link(gpu, 2, span_gpus=tp * pp, across_span=True)


def unmeasured_topology(gpu: GPUSpec) -> bool:
    """True when the GPU's selected host topology is a PCIe layout its collective tables were not measured on."""
    topo = gpu.topologies.get(gpu.default_topology) if gpu.topologies else None
    return topo is not None and topo.gpu_link != "scaleup" and topo.name != gpu.measured_topology


class TopologyGuardedKernels:
    """A kernel model whose collectives over an unmeasured PCIe host topology (links named
    ``pcie:<topology>``) are priced by the roofline over that link.

    The calibrated model would otherwise fall back to alpha-beta parameters fitted on the one
    box where the GPU's collectives were measured, carrying that box's efficiency (e.g. the
    L40S box's collapse beyond a GPU pair) into a box of another topology. Everything else is
    delegated unchanged."""

    def __init__(self, inner: KernelModel, gpu: GPUSpec) -> None:
        self._inner = inner
        self._roof = RooflineKernelModel(gpu)

    def collective(self, op: str, message_bytes: float, num_gpus: int, link: Link) -> KernelTime:
        if link.name.startswith("pcie:"):
            return self._roof.collective(op, message_bytes, num_gpus, link)
        return self._inner.collective(op, message_bytes, num_gpus, link)

    def __getattr__(self, name: str):  # noqa: ANN204 - plain delegation
        return getattr(self._inner, name)


def guard_topology(km: KernelModel, gpu: GPUSpec) -> KernelModel:
    """``km``, guarded when the GPU runs in a PCIe topology other than its measured box."""
    if unmeasured_topology(gpu) and not isinstance(km, (RooflineKernelModel, TopologyGuardedKernels)):
        return TopologyGuardedKernels(km, gpu)  # type: ignore[return-value]
    return km

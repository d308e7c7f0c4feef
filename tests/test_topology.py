"""PCIe host topology (issue 12 §3): a catalog input with a default, used by sim/links.py;
measured collective curves apply only to the box they were measured on."""

from __future__ import annotations

import pytest

from llmplan.errors import CatalogError, UserError
from llmplan.hardware_catalog.loader import get_gpu, topology_for, with_topology
from llmplan.sim.deployment import make_kernel_model
from llmplan.sim.kernels import RooflineKernelModel
from llmplan.sim.links import PCIE_ALPHA_US, TopologyGuardedKernels, group_link, stage_link, unmeasured_topology


def test_measured_box_keeps_the_calibrated_link_name():
    l40s = get_gpu("l40s")  # default = the box the L40S NCCL tables come from
    assert l40s.default_topology == l40s.measured_topology == "pcie4_switch_no_p2p"
    assert group_link(l40s, 2).name == group_link(l40s, 8).name == "pcie"
    rtx = get_gpu("rtx_pro_6000_server")
    assert group_link(rtx, 8).name == "pcie" and group_link(rtx, 8).bw_gbps == 64


def test_other_topology_of_the_same_gpu_is_a_different_link():
    l40s = get_gpu("l40s")
    for name in ("pcie4_switch_p2p", "pcie4_host_bridge_p2p", "pcie4_host_bridge_no_p2p"):
        link = group_link(with_topology(l40s, name), 4)
        assert link.name == f"pcie:{name}"  # never the measured fabric's name


def test_pcie_bandwidth_and_latency_follow_the_layout():
    l4 = get_gpu("l4")  # no measurements; PCIe Gen4 x16 = 32 GB/s per direction
    p2p = group_link(with_topology(l4, "pcie4_host_bridge_p2p"), 4)
    staged = group_link(with_topology(l4, "pcie4_host_bridge_no_p2p"), 4)
    assert (p2p.bw_gbps, p2p.latency_us) == (32, PCIE_ALPHA_US)
    assert (staged.bw_gbps, staged.latency_us) == (16, 2 * PCIE_ALPHA_US)  # through host memory
    sw = with_topology(l4, "pcie4_switch_no_p2p")
    assert group_link(sw, 2).bw_gbps == 32  # a pair talks peer-to-peer through its switch
    assert group_link(sw, 4).bw_gbps == 16  # beyond the pair: staged across the host bridge
    # pipeline stages at opposite ends of a 4-GPU replica cross the bridge even though p2p is one pair
    assert stage_link(sw, 2, 2).bw_gbps == 16 and group_link(sw, 2, span_gpus=4).bw_gbps == 32
    b60 = get_gpu("b60")  # PCIe 5.0 x8: half the x16 rate
    assert group_link(b60, 4).bw_gbps == 32


def test_scaleup_gpus_are_unaffected_and_gb300_spans_72():
    assert group_link(get_gpu("h100_sxm"), 8).name == "nvlink"
    assert group_link(get_gpu("gb300"), 72).name == "nvlink"
    assert group_link(get_gpu("b300"), 16).name == "network"
    assert group_link(get_gpu("mi355x"), 8).name == "xgmi"
    assert group_link(get_gpu("l40s"), 16).name == "network"


def test_unknown_topology_is_a_user_error_naming_the_key():
    with pytest.raises(CatalogError) as exc:
        with_topology(get_gpu("l40s"), "pcie4_nvswitch", key="gpu.spec_overrides.l40s.topology")
    assert isinstance(exc.value, UserError)  # exit 2
    assert exc.value.key == "gpu.spec_overrides.l40s.topology"
    assert "pcie4_switch_no_p2p" in exc.value.fix
    with pytest.raises(CatalogError):
        topology_for(get_gpu("h100_sxm"), "pcie5_switch_p2p")


def test_measured_curves_are_not_applied_to_another_topology():
    l40s = get_gpu("l40s")
    measured = make_kernel_model(l40s, "vllm", None)
    assert not isinstance(measured, TopologyGuardedKernels) and not unmeasured_topology(l40s)
    other = with_topology(l40s, "pcie4_switch_p2p")
    guarded = make_kernel_model(other, "vllm", None)
    assert unmeasured_topology(other)
    link = group_link(other, 4)
    t = guarded.collective("all_reduce", 16e6, 4, link)
    roof = RooflineKernelModel(other).collective("all_reduce", 16e6, 4, link)
    assert t.tier == roof.tier and t.latency_ms == roof.latency_ms  # the link's physics, not the box's fit
    if getattr(measured, "measured", False):  # a calibration file with L40S collectives is shipped
        own = measured.collective("all_reduce", 16e6, 4, group_link(l40s, 4))
        assert own.tier == "measured" and own.latency_ms != t.latency_ms

"""Memory fractions outside (0, 1] are refused by the CLI with exit 2 naming the key (issue 12)."""

from __future__ import annotations

import pytest

from llmplan.cli import main


@pytest.mark.parametrize("argv,key", [
    (["simulate", "model=llama3_1_8b", "deployment.gpu=h100_sxm", "engine=sglang", "engine.mem_fraction_static=1.5",
      "workload.num_requests=20"], "engine.mem_fraction_static"),
    (["simulate", "model=llama3_1_8b", "deployment.gpu=h100_sxm", "engine=trtllm",
      "engine.kv_cache_free_gpu_mem_fraction=0", "workload.num_requests=20"], "engine.kv_cache_free_gpu_mem_fraction"),
    (["plan", "engine=sglang", "engine.mem_fraction_static=-0.2"], "engine.mem_fraction_static"),
])
def test_bad_memory_fraction_exits_2_naming_the_key(argv, key, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[0].startswith(f"error: {key}: ") and "(0, 1]" in err


def test_marketed_memory_override_scales_the_physical_bytes(capsys):
    """gpu.spec_overrides.<gpu>.hbm_gb (and whatif gpu_scale) must still change the memory math,
    which runs on memory_bytes: 70B BF16 does not fit one H100, but fits a 160 GB one."""
    base = ["simulate", "model=llama3_1_70b", "deployment.gpu=h100_sxm", "deployment.tp=1", "workload.num_requests=20"]
    assert main(base) == 2
    assert "no memory left for the KV cache" in capsys.readouterr().err
    assert main(base + ["gpu.spec_overrides={h100_sxm: {hbm_gb: 160}}"]) == 0


def test_topology_is_chosen_per_gpu_and_unknown_ones_exit_2(capsys):
    base = ["simulate", "model=llama3_1_8b", "deployment.gpu=l40s", "deployment.tp=4", "workload.num_requests=20"]
    assert main(base + ["gpu.topology={l40s: pcie5_switch_p2p}"]) == 2  # Gen5 is not an L40S option
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("error: gpu.topology.l40s: unknown topology 'pcie5_switch_p2p'")
    assert "pcie4_switch_no_p2p" in err  # the fix lists the catalog's options and default
    assert main(base + ["gpu.topology={l40s: pcie4_host_bridge_p2p}"]) == 0

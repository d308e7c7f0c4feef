"""Roofline sanity of the analytical step model (specification-only kernels)."""

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.derived import weight_bytes
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.kernels import LAUNCH_FLOOR_US, MEM_ETA, RooflineKernelModel, waves
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

# no host time at all: the fitted defaults' eager-step launch (sim/cuda_graphs.eager_step) included
NO_HOST = EngineProfile(host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0, eager_step_ms_per_layer=0.0)


def _step(model="llama3_1_8b", gpu="h100_sxm", par=Parallelism(), prec=Precision(), engine=NO_HOST):
    m, g = load_model(model), get_gpu(gpu)
    step, mem = build(Deployment(m, g, par, prec, engine), calibration="spec", min_kv_tokens=4096)
    return m, g, step, mem


def test_decode_step_is_weight_bandwidth_bound():
    m, g, step, _ = _step()
    shape = StepShape.build([], [1024])
    t = step.step_time_ms(shape)
    weights_ms = weight_bytes(m, "bf16") / (g.hbm_bw_gbps * 1e9 * MEM_ETA) * 1e3
    n_kernels = len([o for o in step.breakdown(shape).ops if o.family != "host"])
    floors_ms = m.num_layers * 10 * LAUNCH_FLOOR_US / 1e3  # ~10 launches per layer
    assert weights_ms <= t <= weights_ms + floors_ms
    assert t == pytest.approx(weights_ms, rel=0.12)
    assert n_kernels > 5


def test_more_bandwidth_never_slower_for_decode():
    m, g, step, _ = _step()
    fast = g.with_overrides(hbm_bw_gbps=g.hbm_bw_gbps * 2)
    step2, _ = build(Deployment(m, fast, Parallelism(), Precision(), NO_HOST), calibration="spec", min_kv_tokens=4096)
    shape = StepShape.build([], [2000] * 32)
    assert step2.step_time_ms(shape) < step.step_time_ms(shape) * 0.6


def test_prefill_is_compute_bound_and_scales_with_tokens():
    m, g, step, _ = _step()
    t1 = step.step_time_ms(StepShape.build([(2048, 0)], []))
    t2 = step.step_time_ms(StepShape.build([(4096, 0)], []))
    flops = 2 * 8.0e9 * 2048
    assert t1 >= flops / (g.peak_tflops("bf16") * 1e12) * 1e3  # never beats the dense peak
    assert 1.8 < t2 / t1 < 2.4
    bounds = {o.name: o.bound for o in step.breakdown(StepShape.build([(2048, 0)], [])).ops}
    assert bounds["mlp_up"] == "compute"


def test_tensor_parallel_adds_allreduce_and_cuts_gemm_time():
    _, _, s1, _ = _step("llama3_1_70b", par=Parallelism(4, 1, 1))
    _, _, s2, _ = _step("llama3_1_70b", par=Parallelism(8, 1, 1))
    shape = StepShape.build([], [1000] * 16)
    names = {o.name for o in s1.breakdown(shape).ops}
    assert "tp_allreduce" in names
    assert s2.step_time_ms(shape) < s1.step_time_ms(shape)


def test_pipeline_parallel_stage_time_below_latency():
    _, _, step, _ = _step("llama3_1_70b", par=Parallelism(4, 2, 1))
    shape = StepShape.build([], [1000] * 16)
    assert step.stage_time_ms(shape) < step.step_time_ms(shape)
    assert any(o.name == "pp_send_recv" for o in step.breakdown(shape).ops)


def test_host_overhead_added_once_per_step():
    _, _, s0, _ = _step()
    _, _, s1, _ = _step(engine=EngineProfile(host_overhead_ms=2.0, host_overhead_per_seq_ms=0.01))
    shape = StepShape.build([], [500] * 10)
    assert s1.step_time_ms(shape) - s0.step_time_ms(shape) == pytest.approx(2.0 + 0.1)


@pytest.mark.parametrize("model,par,prec", [
    ("mixtral_8x7b", Parallelism(2, 1, 2), Precision("bf16", "bf16")),
    ("deepseek_v3", Parallelism(8, 2, 8), Precision("fp8", "fp8")),
    ("gpt_oss_120b", Parallelism(2, 1, 1), Precision("fp8", "fp8")),
])
def test_moe_and_mla_models_have_expected_operators(model, par, prec):
    _, _, step, mem = _step(model, par=par, prec=prec)
    ops = {o.name for o in step.breakdown(StepShape.build([(256, 0)], [800] * 8)).ops}
    assert "moe_experts" in ops and "router" in ops
    if model == "deepseek_v3":
        assert {"mla_prefill", "mla_decode", "kv_b_absorb"} <= ops
    if model == "gpt_oss_120b":
        assert "attn_decode_swa" in ops
    # EP inside the TP group (no attention DP): the TP all-reduce combines the experts, no all-to-all
    assert "ep_alltoall" not in ops
    if par.tp > 1:
        assert "tp_allreduce" in ops


def test_wave_quantization():
    assert waves(128 * 132, 128, 132) == pytest.approx(1.0)
    assert waves(128 * 133, 128, 132) > 1.9  # one tile spills into a second wave
    assert waves(1, 4096, 132) > 1.0


def test_step_time_is_cached():
    """Repeated shapes are answered from the caches (speed itself: benchmarks/bench_step_model.py)."""
    _, _, step, _ = _step()
    shapes = [StepShape.build([], [1000 + i] * 8) for i in range(200)]
    first = [step.step_time_ms(s) for s in shapes]
    linear_misses, attn_misses = step._linear_ms.cache_info().misses, step._attn_ms.cache_info().misses
    assert [step.step_time_ms(s) for s in shapes] == first
    assert step._linear_ms.cache_info().misses == linear_misses
    assert step._attn_ms.cache_info().misses == attn_misses
    assert step._body_lat.cache_info().misses == 1  # one token count, 8 decode rows
    # 1% geometric KV buckets: 200 lengths from 1000 to 1199 share far fewer attention entries
    assert attn_misses < 40


def test_roofline_collective_over_slower_link_is_slower():
    from llmplan.sim.links import group_link
    k = RooflineKernelModel(get_gpu("h100_sxm"))
    nv = group_link(get_gpu("h100_sxm"), 8)
    pcie = group_link(get_gpu("l40s"), 8)
    assert nv.name == "nvlink" and pcie.name == "pcie"
    assert k.collective("all_reduce", 64e6, 8, pcie).latency_ms > k.collective("all_reduce", 64e6, 8, nv).latency_ms


def test_error_band_is_the_time_weighted_residual_in_percent():
    from llmplan.sim.calibrated import error_band
    from llmplan.sim.uncertainty import _FAMILY, step_band

    m, g = load_model("llama3_1_8b"), get_gpu("l40s")
    step, _ = build(Deployment(m, g, Parallelism(), Precision(), NO_HOST), calibration=None, min_kv_tokens=4096)
    shape = StepShape.build([], [1024] * 16)
    ops = [o for o in step.breakdown(shape).ops if o.family != "host"]
    total = sum(o.latency_ms for o in ops)
    # measured-tier bands are the GPU's own held-out figures (sim.calibrated.error_band(gpu=...))
    expected = sum(o.latency_ms / total * error_band(_FAMILY[o.family], o.tier,
                                                     gpu=g.key if o.tier == "measured" else None)["p90_ape"]
                   for o in ops) * 100
    band = step_band(step, shape)
    assert band is not None and band.p90_pct == pytest.approx(expected, abs=0.06)
    assert band.tier == "measured"


@pytest.mark.parametrize("model,par", [("llama3_1_8b", Parallelism(2, 1, 1)), ("deepseek_v3", Parallelism(8, 2, 8)),
                                       ("qwen3_5_397b_a17b", Parallelism(8, 1, 8))])
def test_cached_step_sum_equals_the_breakdown_sum(model, par):
    """The hot path sums cached parts (token rows / logit rows, prefill / decode attention):
    it must give exactly the sum of the per-operator breakdown."""
    _, _, step, _ = _step(model, par=par, prec=Precision("fp8", "fp8"))
    for shape in (StepShape.build([(512, 0)], [900] * 12), StepShape.build([(64, 3000), (200, 0)], []),
                  StepShape.build([], [40, 5000, 17]), StepShape.build([(512, 0)], [900] * 12)):
        lin, attn = step._linear_ms(*step._linear_key(shape)), step._attn_ms(*step._attn_key(shape))
        assert lin == sum(o.latency_ms for o in step._linear(*step._linear_key(shape)))
        assert attn == sum(o.latency_ms for o in step._attn(*step._attn_key(shape)))


@pytest.mark.parametrize("model,par", [("llama3_1_8b", Parallelism(1, 2, 1)), ("mixtral_8x7b", Parallelism(2, 1, 2))])
def test_decode_only_memo_equals_the_general_path(model, par):
    """Decode-only steps are memoised on (sequences, bucketed mean KV): same answer as the
    uncached composition, including pipeline sends and host time."""
    _, _, step, _ = _step(model, par=par, engine=EngineProfile())
    for n, kv in ((1, 30), (8, 8 * 1000), (8, 8 * 1002), (8, 8 * 1004), (64, 64 * 3000), (8, 8 * 1000)):
        shape = StepShape.build([], [kv // n] * n)
        stage, comm = step._stage_and_comm(shape)
        assert step.step_time_ms(shape) == step._with_host(stage * step.pp + comm, shape)
    assert len(step._decode_ms) == 4  # 8x1000 and 8x1002 share a 1% KV bucket, 8x1004 does not

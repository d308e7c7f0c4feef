"""Attention data parallelism and wide expert parallelism: memory per rank, collective choice
inside vs across scale-up domains, step-time scaling, and the served rows' layout mapping."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.derived import bytes_per_element, param_breakdown, weight_dtypes
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build, parallelism_problem
from llmplan.sim.dp_layout import rank_shape
from llmplan.sim.ep_comm import distinct_ranks, moe_exchange
from llmplan.sim.kernels import KernelTime, Link, RooflineKernelModel
from llmplan.sim.links import NETWORK_ALPHA_US, domain_gpus, span_collective
from llmplan.sim.memory import plan_memory, weights_per_gpu_bytes
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

FP8 = Precision("fp8", "fp8")


@pytest.fixture(scope="module")
def dsr1():
    return load_model("deepseek-ai/DeepSeek-R1")


@pytest.fixture(scope="module")
def h200():
    return get_gpu("h200_sxm")


def spec_step(model, gpu, par, engine=None):
    engine = engine or EngineProfile(name="trtllm", max_num_seqs=256, host_overhead_ms=0.0,
                                     host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0)  # device time only
    step, mem = build(Deployment(model, gpu, par, FP8, engine),
                      calibration="spec", min_kv_tokens=2048)
    return step, mem


# ----------------------------------------------------------------------------- layout arithmetic


def test_parallelism_counts_gpus_of_all_dp_ranks():
    p = Parallelism(tp=2, pp=2, ep=8, dp=4)
    assert (p.gpus, p.stage_gpus, p.moe_tp) == (16, 8, 1)
    assert Parallelism(tp=1, dp=2, ep=1).moe_tp == 2   # vLLM DP without EP: experts TP over DP x TP


def test_layout_problems_name_the_cause(dsr1, h200):
    llama = load_model("llama3_1_8b")
    assert "dense" in parallelism_problem(llama, h200, Parallelism(tp=1, dp=2), Precision())
    assert "must divide tp=2 x dp=3" in parallelism_problem(dsr1, h200, Parallelism(tp=2, dp=3, ep=4), FP8)
    # layouts beyond one 8-GPU node are allowed (collectives then cross the network)
    assert parallelism_problem(dsr1, h200, Parallelism(tp=16, ep=16), FP8) is None
    assert parallelism_problem(dsr1, h200, Parallelism(tp=1, dp=32, ep=32), FP8) is None


def test_rank_shape_is_the_busiest_rank():
    s = StepShape.build([(1000, 0)], [100] * 9)
    r = rank_shape(s, 8)
    assert (r.prefill_seqs, r.prefill_tokens, r.decode_seqs) == (1, 1000, 2)
    assert r.decode_kv_tokens == 200 and rank_shape(s, 1) is s
    even = rank_shape(StepShape.build([], [64] * 64), 8)
    assert (even.decode_seqs, even.decode_kv_tokens, even.tokens) == (8, 512, 8)


# ----------------------------------------------------------------------------- memory per rank


def test_attention_dp_replicates_attention_and_splits_experts(dsr1):
    tp8 = weights_per_gpu_bytes(dsr1, Parallelism(tp=8, ep=8), "fp8")
    dp8 = weights_per_gpu_bytes(dsr1, Parallelism(tp=1, ep=8, dp=8), "fp8")
    routed = param_breakdown(dsr1).routed_experts * bytes_per_element(weight_dtypes(dsr1, "fp8")["routed_experts"])
    embed = dsr1.vocab_size * dsr1.hidden_size * 2.0 * (1 if dsr1.tie_word_embeddings else 2)
    from llmplan.model_catalog.derived import weight_bytes
    rest = weight_bytes(dsr1, "fp8") - embed - routed
    # TP8: everything / 8; DP8: the non-expert body and the vocabulary matrices whole on every GPU
    assert tp8 == pytest.approx((rest + routed + embed) / 8, rel=1e-9)
    assert dp8 == pytest.approx(rest + routed / 8 + embed, rel=1e-9)
    assert dp8 - tp8 == pytest.approx((rest + embed) * 7 / 8, rel=1e-9)


def test_kv_capacity_is_per_rank_times_ranks(dsr1, h200):
    eng = EngineProfile(name="trtllm", max_num_seqs=256)
    par = Parallelism(tp=1, ep=8, dp=8)
    mem = plan_memory(dsr1, h200, par, FP8, eng, 2048)
    assert mem.fits and mem.kv_capacity_tokens == 8 * mem.budget.kv_tokens
    # one request must fit in one rank: a request larger than a rank's cache is refused
    big = plan_memory(dsr1, h200, par, FP8, eng, mem.budget.kv_tokens + 1)
    assert not big.fits and "per attention-DP rank (8 ranks)" in big.reason


# ----------------------------------------------------------------------------- collectives


class Recorder(RooflineKernelModel):
    """Roofline collectives that record which link each call used."""

    def __init__(self, gpu):
        super().__init__(gpu)
        self.calls: list[tuple[str, int, str]] = []

    def collective(self, op, message_bytes, num_gpus, link):
        self.calls.append((op, num_gpus, link.name))
        return super().collective(op, message_bytes, num_gpus, link)


def test_collective_inside_a_domain_is_one_scaleup_call(h200):
    k = Recorder(h200)
    t = span_collective(k, h200, "all_reduce", 1e6, 8)
    assert k.calls == [("all_reduce", 8, "nvlink")] and not t.extrapolated


def test_collective_across_domains_is_hierarchical(h200):
    k = Recorder(h200)
    t = span_collective(k, h200, "all_reduce", 8e6, 64)
    assert k.calls == [("reduce_scatter", 8, "nvlink"), ("all_reduce", 8, "network"), ("all_gather", 8, "nvlink")]
    net = RooflineKernelModel(h200).collective("all_reduce", 1e6, 8, Link("network", h200.scaleout_bw_gbps,
                                                                              NETWORK_ALPHA_US))
    assert t.latency_ms > net.latency_ms and t.extrapolated
    # a cross-node all-reduce costs more than the same one inside an (imaginary) 64-GPU domain
    one_domain = RooflineKernelModel(h200).collective("all_reduce", 8e6, 64, Link("nvlink", h200.scaleup_bw_gbps, 8.0))
    assert t.latency_ms > one_domain.latency_ms


def test_nvl72_rack_is_one_domain():
    gb200 = get_gpu("gb200")
    assert domain_gpus(gb200) == 72
    k = Recorder(gb200)
    span_collective(k, gb200, "alltoall", 1e6, 64)
    assert k.calls == [("alltoall", 64, "nvlink")]


def test_step_model_links_follow_the_domain(dsr1, h200):
    step, _ = spec_step(dsr1, h200, Parallelism(tp=8, ep=8, dp=8))
    assert (step.ep_link.name, step.dp_link.name, step.tp_link.name) == ("network", "network", "nvlink")
    step8, _ = spec_step(dsr1, h200, Parallelism(tp=1, ep=8, dp=8))
    assert (step8.ep_link.name, step8.dp_link.name) == ("nvlink", "nvlink")
    gb, _ = spec_step(dsr1, get_gpu("gb200"), Parallelism(tp=1, ep=64, dp=64))
    assert gb.ep_link.name == "nvlink"


class FakeA2ASource:
    """A calibrated model's collective source with one measured DeepEP curve (ms = tokens / 1000)."""

    def __init__(self):
        from llmplan.sim.kernel_calibration.collectives import CurveSet
        self.own = type("Own", (), {"moe_a2a": CurveSet(curves={"trtllm_deepep_ll|dispatch|7168|8|256|0": {},
                                                                  "trtllm_deepep_ll|combine|7168|8|256|0": {}})})()
        self.rows: list[dict] = []

    def moe_a2a(self, row):
        self.rows.append(row)
        return (row["num_tokens"] / 1000.0, True) if row["ep"] == 8 else None


def test_deepep_uses_measured_curves_only_inside_the_domain(h200):
    k = Recorder(h200)
    src = FakeA2ASource()
    k.choice = type("Choice", (), {"collectives": src})()
    nv, net = Link("nvlink", 450.0, 8.0), Link("network", 50.0, 25.0)
    args = dict(tokens_rank=64, tokens_group=512, tp=1, dp=8, ep=8, hidden=7168, top_k=8, num_experts=256,
                decode_only=True)
    ops = moe_exchange(k, k.collective, "trtllm", "deepep", stage_link=nv, ep_link=nv, **args)
    assert [n for n, _ in ops] == ["ep_dispatch", "ep_combine"]
    assert [t.latency_ms for _, t in ops] == [0.064, 0.064] and k.calls == []
    assert src.rows[0]["comm_backend"] == "trtllm_deepep_ll"
    ops = moe_exchange(k, k.collective, "trtllm", "deepep", stage_link=net, ep_link=net, **args)
    assert k.calls == [("alltoall", 8, "network")] * 2      # measured on one node only: link model
    want = 64 * distinct_ranks(8, 8) * 7168 * 2.0
    assert ops[0][1].bytes == pytest.approx(want * 7 / 8)


def test_distinct_ranks_of_topk_routing():
    assert distinct_ranks(8, 1) == 1.0 and distinct_ranks(1, 64) == pytest.approx(1.0)
    assert distinct_ranks(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))
    assert distinct_ranks(8, 10 ** 6) == pytest.approx(8.0, rel=1e-4)


def test_default_exchange_is_allgather_reducescatter_over_the_stage(h200):
    k = Recorder(h200)
    nv = Link("nvlink", 450.0, 8.0)
    ops = moe_exchange(k, k.collective, "vllm", "allgather_reducescatter", tokens_rank=10, tokens_group=70, tp=2,
                       dp=4, ep=8, hidden=4096, top_k=8, num_experts=256, decode_only=False, stage_link=nv,
                       ep_link=nv)
    assert [n for n, _ in ops] == ["dp_allgather", "dp_reducescatter"]
    assert k.calls == [("all_gather", 8, "nvlink"), ("reduce_scatter", 8, "nvlink")]
    assert moe_exchange(k, k.collective, "vllm", "deepep", tokens_rank=10, tokens_group=10, tp=8, dp=1, ep=8,
                        hidden=4096, top_k=8, num_experts=256, decode_only=True, stage_link=nv, ep_link=nv) == []


# ----------------------------------------------------------------------------- step time scaling


def _op(step, shape, name):
    return sum(o.latency_ms for o in step.breakdown(shape).ops if o.name == name)


def test_dp_rank_attention_sees_its_share_and_moe_sees_all_tokens(dsr1, h200):
    dp8, _ = spec_step(dsr1, h200, Parallelism(tp=1, ep=8, dp=8))
    from llmplan.sim.step_model import AnalyticalStepModel
    one = AnalyticalStepModel(dsr1, h200, Parallelism(tp=1), FP8, dp8.engine, RooflineKernelModel(h200))
    full = StepShape.build([], [2048] * 64)
    share = StepShape.build([], [2048] * 8)
    # attention of the 8-rank replica over 64 sequences == one rank over its 8
    assert _op(dp8, full, "mla_decode") == pytest.approx(_op(one, share, "mla_decode"), rel=1e-12)
    # MoE experts of the DP replica compute all 64 tokens
    k = dp8.kernels
    e = dsr1.moe
    kt = k.moe(64, dsr1.hidden_size, e.expert_intermediate_size, e.top_k, e.num_experts, 1, 8,
               dp8._wd["routed_experts"])
    assert _op(dp8, full, "moe_experts") == pytest.approx(kt.latency_ms * dsr1.num_moe_layers, rel=1e-12)
    assert _op(dp8, full, "dp_allgather") > 0 and _op(one, share, "dp_allgather") == 0


def test_more_ranks_shorten_the_decode_step_per_sequence(dsr1, h200):
    """Same 64 sequences: 8 ranks of 8 sequences beat one rank of 64 on attention, and a decode
    step grows with the sequences of the busiest rank, not with the replica's total."""
    dp8, _ = spec_step(dsr1, h200, Parallelism(tp=1, ep=8, dp=8))
    t64 = dp8.step_time_ms(StepShape.build([], [4096] * 64))
    t65 = dp8.step_time_ms(StepShape.build([], [4096] * 65))  # one rank gets a 9th sequence
    t72 = dp8.step_time_ms(StepShape.build([], [4096] * 72))  # every rank has 9
    assert t64 < t65 <= t72
    assert _op(dp8, StepShape.build([], [4096] * 65), "mla_decode") == pytest.approx(
        _op(dp8, StepShape.build([], [4096] * 72), "mla_decode"), rel=1e-12)


def test_cross_node_layout_is_slower_than_the_same_layout_in_one_rack(dsr1, h200):
    gb_like = replace(h200, key="h200_nvl64", scaleup_domain_size=64)
    cross, _ = spec_step(dsr1, h200, Parallelism(tp=8, ep=64, dp=8))
    rack, _ = spec_step(dsr1, gb_like, Parallelism(tp=8, ep=64, dp=8))
    s = StepShape.build([], [2048] * 256)
    assert cross.step_time_ms(s) > rack.step_time_ms(s)
    assert _op(cross, s, "dp_allgather") > _op(rack, s, "dp_allgather")


# ----------------------------------------------------------------------------- served rows


def _row(**kw):
    r = {"id": "r", "silicon_data_source": "silicon_concurrency=32", "backend": "trtllm", "backend_version": "1.1",
         "model_path": "deepseek-ai/DeepSeek-R1", "system": "h200_sxm", "precision": "fp8", "mode": "agg",
         "isl": 1024, "osl": 64, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": 32,
         "tp_size": 8, "pp_size": 1, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 8,
         "silicon_ttft_ms": 500.0, "silicon_tpot_ms": 20.0}
    r.update(kw)
    return r


def _par(**kw):
    m = sr.map_row(_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case.dep.par


def test_attention_dp_row_maps_to_dp_ranks():
    p = _par(tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8, batch_size=4)
    assert (p.tp, p.dp, p.ep, p.gpus) == (1, 8, 8, 8)
    m = sr.map_row(_row(tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8, batch_size=4), 0,
                   sr.engine_profiles())
    assert m.case.dep.engine.max_num_seqs == 32  # batch_size is per rank


def test_product_encoded_rows_read_their_id_layout():
    p = _par(id="x_c32_tp8_ep8_922", tp_size=64, moe_tp_size=8, moe_ep_size=8)
    assert (p.tp, p.dp, p.ep, p.moe_tp, p.gpus) == (8, 1, 8, 1, 8)
    p = _par(id="x_c64_tp8_ep8_941", tp_size=1, attention_dp_size=64, moe_tp_size=8, moe_ep_size=8)
    assert (p.tp, p.dp, p.ep, p.gpus) == (1, 8, 8, 8)
    # an id that agrees with the columns changes nothing; without an id the same export over more
    # GPUs than one NVLink domain is read the same way (serving_rows.product_layout)
    assert _par(id="x_tp8_ep8_1", tp_size=8, moe_tp_size=1, moe_ep_size=8).gpus == 8
    p = _par(tp_size=64, moe_tp_size=8, moe_ep_size=8)
    assert (p.tp, p.ep, p.moe_tp, p.gpus) == (8, 8, 1, 8)


def test_product_export_without_layout_id():
    # TRT-LLM DeepSeek-V3 H200 config_id=181 rows: tp_size 64 = moe_tp 8 x moe_ep 8, no layout id;
    # their TPOT equals the 8-GPU config_id=83 runs, so they are 8 GPUs with EP 8
    p = _par(id="dsr1_h200_trtllm_fp8_agg_1024x1024_c4_cfg181", tp_size=64, moe_tp_size=8, moe_ep_size=8)
    assert (p.tp, p.pp, p.ep, p.dp, p.stage_gpus) == (8, 1, 8, 1, 8)
    p = _par(id="cfg181", tp_size=1, attention_dp_size=64, moe_tp_size=8, moe_ep_size=8)
    assert (p.tp, p.ep, p.dp, p.stage_gpus) == (1, 8, 8, 8)
    # the same signature inside one NVLink domain is an ordinary layout: columns as written
    p = _par(tp_size=8, moe_tp_size=2, moe_ep_size=4)
    assert (p.tp, p.ep, p.moe_tp) == (8, 4, 2)
    assert sr.product_layout(_row(tp_size=8, moe_tp_size=2, moe_ep_size=4), 8) is None
    assert sr.product_layout(_row(tp_size=64, moe_tp_size=8, moe_ep_size=8), 8) == (8, 8)
    assert sr.product_layout(_row(tp_size=64, moe_tp_size=8, moe_ep_size=8), 72) is None  # NVL72 holds 64


def test_missing_dp_is_implied_by_the_moe_group():
    p = _par(model_path="Qwen/Qwen3-235B-A22B-FP8", backend="vllm", tp_size=1, attention_dp_size=math.nan,
             moe_tp_size=2, moe_ep_size=1)
    assert (p.tp, p.dp, p.moe_tp, p.ep) == (1, 2, 2, 1)
    m = sr.map_row(_row(tp_size=2, attention_dp_size=2, moe_tp_size=1, moe_ep_size=2), 0, sr.engine_profiles())
    assert m.reason == "parallelism" and "attention_dp_size 2" in m.status


def test_int4_weight_only_and_renamed_glm5_rows_map():
    m = sr.map_row(_row(model_path="moonshotai/Kimi-K2.5", backend="vllm", precision="int4", gemm_quant_mode="int4_wo",
                        moe_quant_mode="int4_wo", moe_tp_size=8, moe_ep_size=1), 0, sr.engine_profiles())
    assert m.case is not None and (m.case.dep.prec.weights, m.case.dep.prec.kv_cache) == ("int4", "bf16")
    g = sr.map_row(_row(model_path="zhipuai/GLM-5", backend="sglang", moe_tp_size=8, moe_ep_size=1), 0,
                   sr.engine_profiles())
    assert g.case is not None and g.case.dep.model.key == "glm_5"


def test_dp_row_simulates(dsr1):
    m = sr.map_row(_row(tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8, batch_size=2,
                        silicon_data_source="silicon_concurrency=16"), 0, sr.engine_profiles())
    p = sr.simulate_case(m.case, sr.SimOptions(calibration="spec", waves=1, min_requests=16))
    assert p.status == sr.SIMULATED and p.ttft_ms > 0 and p.tpot_ms > 0


# ----------------------------------------------------------------------------- config / CLI


@pytest.mark.parametrize("argv, key, needle", [
    (["simulate", "model=llama3_1_8b", "deployment.gpu=h100_sxm", "deployment.tp=1", "deployment.dp=2"],
     "deployment.dp", "dense model"),
    (["simulate", "model=deepseek-ai/DeepSeek-R1", "deployment.gpu=h200_sxm", "deployment.precision=fp8",
      "deployment.tp=2", "deployment.dp=3", "deployment.ep=4"], "deployment.dp", "must divide tp=2 x dp=3"),
    (["simulate", "deployment.dp=0"], "deployment.dp", ">= 1"),
    (["simulate", "engine.moe_all2all=nccl"], "engine.moe_all2all", "allgather_reducescatter, deepep"),
])
def test_impossible_layouts_exit_2_naming_the_key(argv, key, needle, capsys):
    from llmplan.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 2 and lines[0].startswith(f"error: {key}: ") and needle in err, err


def test_groups_inside_one_host_stay_on_the_host_link(dsr1, h200):
    """A group larger than a (what-if) 2-GPU NVLink domain but inside one host takes the host's
    PCIe path as one collective; only a group spanning hosts goes hierarchical."""
    from llmplan.sim.step_model import AnalyticalStepModel

    pairs = replace(h200, key="h200_pairs", scaleup_domain_size=2)
    eng = EngineProfile(name="trtllm", max_num_seqs=64)
    k = Recorder(pairs)
    step = AnalyticalStepModel(dsr1, pairs, Parallelism(tp=4, ep=4), FP8, eng, k)
    step.step_time_ms(StepShape.build([], [1024] * 4))
    assert ("all_reduce", 4, "pcie") in k.calls and all(c[2] != "network" for c in k.calls)
    k2 = Recorder(h200)
    wide = AnalyticalStepModel(dsr1, h200, Parallelism(tp=16, ep=16), FP8, eng, k2)
    wide.step_time_ms(StepShape.build([], [1024] * 4))
    assert ("all_reduce", 2, "network") in k2.calls and ("reduce_scatter", 8, "nvlink") in k2.calls


def test_unwritten_moe_columns_mean_experts_tp_over_the_worker():
    p = _par(model_path="Qwen/Qwen3-235B-A22B-FP8", backend="vllm", tp_size=1, attention_dp_size=4,
             moe_tp_size=0, moe_ep_size=0)
    assert (p.tp, p.dp, p.ep, p.moe_tp) == (1, 4, 1, 4)
    p = _par(model_path="Qwen/Qwen3-235B-A22B-FP8", backend="vllm", tp_size=4, attention_dp_size=math.nan,
             moe_tp_size=math.nan, moe_ep_size=math.nan)
    assert (p.tp, p.dp, p.ep, p.moe_tp) == (4, 1, 1, 4)


def test_rank_activations_use_the_rank_token_budget(dsr1, h200):
    """The replica's batch and token budget are dp times a rank's: each rank's activations and
    CUDA graphs are sized for its own share (here 512 / 8 sequences, 65,536 / 8 tokens)."""
    from llmplan.sim.kv_budget import kv_budget
    from llmplan.sim.memory import kv_bytes_per_token_per_gpu

    par = Parallelism(tp=1, ep=8, dp=8)
    big = plan_memory(dsr1, h200, par, FP8, EngineProfile(name="trtllm", max_num_seqs=512,
                                                          max_num_batched_tokens=8 * 8192), 2048)
    rank = kv_budget(dsr1, h200, par, EngineProfile(name="trtllm", max_num_seqs=64, max_num_batched_tokens=8192),
                     weights_per_gpu_bytes(dsr1, par, "fp8"), kv_bytes_per_token_per_gpu(dsr1, par, "fp8"))
    assert big.fits and big.budget.activation_bytes == rank.activation_bytes
    assert big.kv_capacity_tokens == 8 * rank.kv_tokens


def test_simulate_attention_dp_reports_the_layout(capsys, tmp_path):
    import json

    from simulate_cli_helpers import run_cli

    code, out, err = run_cli(["simulate", "model=deepseek-ai/DeepSeek-R1", "deployment.gpu=h200_sxm",
                              "deployment.tp=1", "deployment.dp=8", "deployment.ep=8", "deployment.precision=fp8",
                              "workload.num_requests=60", "workload.rate_rps=2"], capsys, tmp_path)
    assert code == 0, err
    dep = json.loads((tmp_path / "summary.json").read_text())["deployment"]
    assert (dep["tp"], dep["dp"], dep["ep"], dep["gpus"]) == (1, 8, 8, 8)
    assert "TP1 DP8" in out


# ----------------------------------------------------------------------------- planner hook


def test_planner_enumerates_attention_dp_for_moe_models_only(dsr1, h200):
    from llmplan.optimizer.enumerate import enumerate_candidates

    ok, _ = enumerate_candidates(dsr1, [(h200, 3.0)], [1, 8], [1], [1, 8], ["fp8"], [256], dps=[1, 8])
    shapes = {(c.par.tp, c.par.dp, c.par.ep) for c in ok}
    assert (1, 8, 8) in shapes and (1, 8, 1) in shapes and (8, 1, 8) in shapes
    assert not any(c.par.dp > 1 and c.par.tp > 1 for c in ok)          # one attention GPU per rank
    assert any(c.name.startswith("h200_sxm-tp1-dp8-pp1-ep8") for c in ok)
    dense, _ = enumerate_candidates(load_model("llama3_1_8b"), [(h200, 3.0)], [1], [1], [1], ["bf16"], [64],
                                    dps=[1, 8])
    assert {c.par.dp for c in dense} == {1}
    default, _ = enumerate_candidates(dsr1, [(h200, 3.0)], [8], [1], [8], ["fp8"], [256])
    assert {c.par.dp for c in default} == {1}


def test_launch_spec_of_a_dp_candidate_sets_attention_dp_per_rank_limits(dsr1, h200):
    from llmplan.optimizer.launch import sglang, trtllm, vllm
    from llmplan.optimizer.launch.spec import spec_from_allocation
    from llmplan.optimizer.types import Candidate

    c = Candidate(h200, Parallelism(tp=1, ep=8, dp=8), FP8, 256, 3.0)
    ev = type("Ev", (), {"candidate": c, "kv_capacity_tokens": 10 ** 6})()
    alloc = type("Alloc", (), {"evaluation": ev, "replicas": 2})()
    wl = type("WL", (), {"max_request_tokens": 4096})()
    s = spec_from_allocation(alloc, dsr1, EngineProfile(name="vllm", max_num_batched_tokens=8192), wl)
    assert (s.tp, s.ep, s.attention_dp, s.gpus_per_replica, s.max_num_seqs) == (8, 8, True, 8, 32)
    assert any("attention DP over 8 GPUs" in n for n in s.notes)
    f = vllm.command(s).argv
    assert f[f.index("--data-parallel-size") + 1] == "8" and f[f.index("--tensor-parallel-size") + 1] == "1"
    assert "--enable-dp-attention" in sglang.command(replace(s, engine="sglang")).argv
    assert not any("attention DP is not modelled" in n for n in trtllm.command(replace(s, engine="trtllm")).notes)

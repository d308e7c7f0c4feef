"""TensorRT-LLM's token budget bounds prompts only (sim/trtllm_token_budget.py), and InferenceX's
DeepSeek-R1 FP8 H200 launch that sets it to one prompt plus the decodes
(calibration/trtllm_sweep_launch.py)."""

import pytest

from llmplan.calibration.serving_rows import SimOptions, engine_profiles, map_row, simulate_case
from llmplan.calibration.trtllm_sweep_launch import dsr1_max_num_tokens, script_sets_budget, sweep_engine
from llmplan.errors import UserError
from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.replica import validate_replica
from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.trtllm_token_budget import budget_bounds_prompts_only
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import Request

#: 10 ms per step plus 0.1 ms per prompt token
COST = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0.1,
                      per_attn_pair_ms=0)


@pytest.mark.parametrize("isl, conc, tokens", [
    (1024, 4, 1152), (1024, 64, 1152), (1024, 128, 1216), (8192, 4, 8320), (8192, 64, 8320), (8192, 128, 8384)])
def test_dsr1_script_budget(isl, conc, tokens):
    # MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))
    assert dsr1_max_num_tokens(isl, conc) == tokens


def _row(isl, osl, conc, model="deepseek-ai/DeepSeek-V3", system="h200_sxm", source=None, tp=8, adp=1):
    return {"id": f"d_{isl}_{osl}_{conc}", "silicon_data_source": source or
            f"db-dump/2026-04-27; config_id=83; silicon_concurrency={conc}; measured=2025-11-02T00:00:00.000Z",
            "backend": "trtllm", "backend_version": "1.1.0rc2.post2", "model_path": model, "system": system,
            "precision": "fp8", "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": "fp8",
            "moe_quant_mode": "fp8", "batch_size": conc, "tp_size": tp, "pp_size": 1, "attention_dp_size": adp,
            "moe_tp_size": 1, "moe_ep_size": 8, "silicon_ttft_ms": 300.0, "silicon_tpot_ms": 15.0}


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"])
@pytest.mark.parametrize("isl, osl, conc", [(1024, 1024, 64), (1024, 8192, 4), (8192, 1024, 32)])
def test_inferencex_dsr1_launch_budget(model, isl, osl, conc):
    m = map_row(_row(isl, osl, conc, model=model), 0, engine_profiles())
    assert m.case is not None, m.status
    assert m.case.dep.engine.max_num_batched_tokens == dsr1_max_num_tokens(isl, conc)
    assert script_sets_budget(m.case.backend, m.case.model_path, m.case.dep.gpu.key, m.case.length_ratio)


def test_attention_dp_budget_is_per_rank():
    m = map_row(_row(1024, 1024, 128, tp=1, adp=8), 0, engine_profiles())
    assert m.case is not None, m.status
    assert m.case.dep.par.dp == 8
    assert m.case.dep.engine.max_num_batched_tokens == 8 * 1216


def test_other_deepseek_rows_keep_the_engine():
    base = EngineProfile(name="trtllm", max_num_batched_tokens=8192, max_num_seqs=8)
    assert sweep_engine(_row(1024, 1024, 8, system="h100_sxm"), 1024, 1024, 8, base, 1, 8) is base
    assert sweep_engine(_row(1024, 2048, 8), 1024, 2048, 8, base, 1, 8) is base     # not a sweep shape
    coll = _row(1024, 1024, 8, source="source_file=x/data/h200_sxm/trtllm/1.1.0/deepseek.csv")
    assert sweep_engine(coll, 1024, 1024, 8, base, 1, 8) is base                     # fixed-length collection row
    nvfp4 = _row(1024, 1024, 8) | {"precision": "nvfp4"}
    assert sweep_engine(nvfp4, 1024, 1024, 8, base, 1, 8) is base
    assert not script_sets_budget("trtllm", "deepseek-ai/DeepSeek-V3", "h200_sxm", 1.0)
    assert not script_sets_budget("vllm", "deepseek-ai/DeepSeek-V3", "h200_sxm", 0.8)


def test_replay_keeps_the_script_budget(monkeypatch):
    # the replay raises a whole-prompt budget below isl + longest output + N for other rows; not the script's
    import llmplan.sim.serving as serving

    seen = []
    real = serving.simulate_serving
    monkeypatch.setattr(serving, "simulate_serving",
                        lambda spec, replicas, **kw: seen.append(replicas[0].engine.max_num_batched_tokens)
                        or real(spec, replicas, **kw))
    opts = SimOptions(waves=1, min_requests=16)
    m = map_row(_row(1024, 1024, 16), 0, engine_profiles())
    assert simulate_case(m.case, opts).status == "simulated"
    other = map_row(_row(1024, 1024, 16, model="meta-llama/Llama-3.1-70B") | {"moe_ep_size": 1}, 0, engine_profiles())
    assert other.case is not None, other.status
    simulate_case(other.case, opts)
    assert seen == [1152, 16384]


def test_budget_bounds_prompts_only_for_trtllm_whole_prompts():
    assert budget_bounds_prompts_only(EngineProfile(name="trtllm", chunked_prefill=True, whole_prompts=True))
    assert not budget_bounds_prompts_only(EngineProfile(name="trtllm", chunked_prefill=True, whole_prompts=False))
    assert not budget_bounds_prompts_only(EngineProfile(name="vllm", chunked_prefill=True, whole_prompts=True))


def test_validate_replica_accepts_budget_below_max_model_len_for_trtllm():
    kw = dict(chunked_prefill=True, whole_prompts=True, max_num_batched_tokens=1152, max_num_seqs=64)
    validate_replica(make_replica(COST, max_model_len=2100, name="trtllm", **kw), 0)
    with pytest.raises(UserError, match="must cover max_model_len"):
        validate_replica(make_replica(COST, max_model_len=2100, name="vllm", **kw), 0)


def _run(reqs, budget):
    return simulate_serving(reqs, [make_replica(COST, name="trtllm", chunked_prefill=True, whole_prompts=True,
                                                max_num_batched_tokens=budget, max_num_seqs=8, max_model_len=4096)],
                            window=MeasureWindow(0, 0))


def test_one_prompt_per_step_under_the_script_budget():
    reqs = [Request(0.0, 1000, 50), Request(0.0, 1000, 50)]
    wide = _run(reqs, 4096).requests["ttft_ms"].tolist()
    narrow = _run(reqs, 1152).requests["ttft_ms"].tolist()
    # both prompts share the first step under a wide budget (10 + 0.1 x 2000 ms)
    assert wide == pytest.approx([210.0, 210.0])
    # one prompt per step: the second waits for the first one's step (110 ms)
    assert sorted(narrow)[0] == pytest.approx(110.0)
    assert sorted(narrow)[1] > 200.0


def test_prompt_longer_than_the_budget_is_refused():
    with pytest.raises(UserError, match="exceeds the token budget"):
        _run([Request(0.0, 2000, 10)], 1152)

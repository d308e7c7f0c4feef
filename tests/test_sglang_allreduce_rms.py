"""SGLang's FlashInfer AllReduce + RMSNorm fusion (sim/sglang_allreduce_rms.py), a default from SGLang
0.5.7 on Hopper for DeepSeek-V3 / gpt-oss / GLM-4-MoE / Qwen3-MoE (calibration/sglang_launch.py):
both RMSNorms of a layer run inside the TP all-reduce for steps of up to 2,048 tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import sglang_launch as sl
from llmplan.sim.deployment import build
from llmplan.sim.sglang_allreduce_rms import FUSED_MAX_TOKENS, fused_max_tokens
from llmplan.sim.types import StepShape
from test_vllm_allreduce_rms import _ops

DECODE = StepShape.build([], [2048] * 4)        # 4 sequences decoding
PROMPT = StepShape.build([(1024, 0)], [])       # one 1k prompt (1,024 tokens: fused in SGLang)
TWO_8K = StepShape.build([(8192, 0)], [])       # an 8k prompt step (above 2,048 tokens: not fused)


def _row(**kw) -> dict:
    """The InferenceX SGLang 0.5.9 DeepSeek-V3 sweep row on 8 H200s at N = 4 (1k / 1k)."""
    r = {"id": "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81",
         "silicon_data_source": "db-dump/2026-04-27; config_id=81; silicon_concurrency=4; "
                                "measured=2026-03-25T00:00:00.000Z; workflow_run_id=337; lmsysorg/sglang:v0.5.9-cu130",
         "backend": "sglang", "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-V3",
         "system": "h200_sxm", "precision": "fp8", "mode": "agg", "isl": 1024, "osl": 1024,
         "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8_block", "batch_size": 4.0, "tp_size": 8.0,
         "pp_size": 1.0, "attention_dp_size": 1.0, "moe_tp_size": 8.0, "moe_ep_size": 1.0,
         "silicon_ttft_ms": 259.9, "silicon_tpot_ms": 10.29}
    r.update(kw)
    return r


def _step(**kw):
    """(case, step model) of the row with ``kw`` changed."""
    case = sr.map_row(_row(**kw), 0, sr.engine_profiles()).case
    return case, sr.step_model(case, None)


def test_version_rule():
    for v in ("0.5.7", "0.5.8", "0.5.8.post1", "0.5.9", "0.6.0"):
        assert sl.allreduce_rms_fusion(v), v
    # 0.5.6.post2 and older: PR #14764 not established / not in; non-release builds
    for v in ("0.5.6.post2", "0.5.6", "0.5.1.post1", "glm5-hopper", "", None):
        assert not sl.allreduce_rms_fusion(v), v


def test_fused_size_follows_sglangs_rule():
    assert fused_max_tokens("h200_sxm", "DeepseekV3ForCausalLM", 8, 1, 1) == FUSED_MAX_TOKENS == 2048
    assert fused_max_tokens("h100_sxm", "Qwen3MoeForCausalLM", 4, 1, 1) == 2048
    assert fused_max_tokens("b200", "GptOssForCausalLM", 2, 1, 1) == 2048
    # not on SGLang's list (dense Qwen3, Llama, GLM-5's DSA model, Qwen3.5 in the 0.5.x list of PR #14764)
    for arch in ("Qwen3ForCausalLM", "LlamaForCausalLM", "GlmMoeDsaForCausalLM", "Qwen3_5MoeForConditionalGeneration"):
        assert fused_max_tokens("h200_sxm", arch, 8, 1, 1) == 0, arch
    # TP 1, attention DP, pipeline stages, more than one node, another GPU
    assert fused_max_tokens("h200_sxm", "DeepseekV3ForCausalLM", 1, 1, 1) == 0
    assert fused_max_tokens("h200_sxm", "DeepseekV3ForCausalLM", 8, 2, 1) == 0
    assert fused_max_tokens("h200_sxm", "DeepseekV3ForCausalLM", 8, 1, 2) == 0
    assert fused_max_tokens("h200_sxm", "DeepseekV3ForCausalLM", 16, 1, 1) == 0
    assert fused_max_tokens("a100_sxm", "DeepseekV3ForCausalLM", 8, 1, 1) == 0


def test_059_deepseek_row_folds_the_norms_of_decode_and_1k_prompt_steps():
    case, fused = _step()
    assert case.version == "0.5.9" and fused._ar_rms_tokens == 2048
    _, plain = _step(backend_version="0.5.6.post2")
    assert plain._ar_rms_tokens == 0
    for shape in (DECODE, PROMPT):
        f, p = _ops(fused, shape), _ops(plain, shape)
        assert f["norms"] == 0.0 and p["norms"] > 0
        # everything else identical: the step is shorter by exactly the two norms of every layer
        assert {k: v for k, v in f.items() if k != "norms"} == pytest.approx(
            {k: v for k, v in p.items() if k != "norms"})
        assert plain.step_time_ms(shape) - fused.step_time_ms(shape) == pytest.approx(p["norms"])
    # the decode step of 4 sequences loses 2 x 61 norm kernels: 5.4% of it (11.21 -> 10.60 ms in the
    # shipped terms, measured TPOT 10.29 ms)
    share = _ops(plain, DECODE)["norms"] / plain.step_time_ms(DECODE)
    assert 0.03 < share < 0.08
    # an 8k prompt step is above 2,048 tokens: its norms stay
    big = _ops(fused, TWO_8K)["norms"]
    assert big > 0 and big == pytest.approx(_ops(plain, TWO_8K)["norms"])


def test_rows_without_the_fusion_keep_their_norms():
    for version in ("0.5.6.post2", "0.5.1.post1", "glm5-hopper"):
        _, step = _step(backend_version=version)
        assert step._ar_rms_tokens == 0 and _ops(step, DECODE)["norms"] > 0, version


def test_only_sglang_steps_take_the_sglang_fusion():
    case, _ = _step()
    vl = replace(case.dep, engine=sr.engine_profiles()["vllm"])
    with pytest.raises(ValueError):
        build(vl, None, 2048)[0].fuse_sglang_allreduce_rms()

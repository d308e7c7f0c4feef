"""The engine table that answered a kernel query is part of the answer (KernelTime.table):
it does not depend on which queries a (cached, shared) kernel model answered before."""

from __future__ import annotations

import pytest

from llmplan.calibration import trtllm_moe_evidence as ev
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.sim.calibrated import MOE_FP4_STAND_IN, CalibratedKernelModel, kernel_model_for

# gpt-oss-120b experts on one GPU (MXFP4: TensorRT-LLM on Hopper runs vLLM's measured triton kernel)
GPT_OSS_FP4 = (64, 2880, 2880, 4, 128, 1, 1, "fp4")
# a DeepSeek-style fp8 MoE: TensorRT-LLM's own table answers
FP8 = (64, 7168, 2048, 8, 256, 8, 1, "fp8")


@pytest.mark.parametrize("first", ["fp4", "fp8"])
def test_moe_table_and_time_do_not_depend_on_query_order(first):
    g = get_gpu("h200_sxm")
    km = CalibratedKernelModel(g, "trtllm")
    order = (GPT_OSS_FP4, FP8) if first == "fp4" else (FP8, GPT_OSS_FP4)
    answers = {q[-1]: km.moe(*q) for q in order}
    assert answers["fp4"].table == MOE_FP4_STAND_IN["trtllm"] == "vllm"
    assert answers["fp8"].table == "trtllm"
    # a model that answered only one query gives the same time and table
    for q in order:
        alone = CalibratedKernelModel(g, "trtllm").moe(*q)
        assert alone == answers[q[-1]]


def test_evidence_table_after_an_fp4_query_on_the_shared_model():
    # the reproduction: the simulator's cached model answered an fp4 MoE query first
    g = get_gpu("h200_sxm")
    assert kernel_model_for(g, "trtllm").moe(*GPT_OSS_FP4).table == "vllm"
    out = ev.fitted_at_shape("h200_sxm", 7168, 2048, 8, 256, engines=("trtllm",))
    assert set(out["table"]) == {"trtllm"}


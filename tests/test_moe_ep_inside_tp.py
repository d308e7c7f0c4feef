"""Expert parallelism inside the TP group (no attention DP) adds no communication to a step:
every rank holds all tokens after the attention all-reduce and the MLP all-reduce combines
the experts' outputs (sim/step_model.py; the engines all-to-all only for EP + attention DP)."""

from __future__ import annotations

import pytest

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

ENGINE = EngineProfile(name="trtllm", kernel_backend="trtllm", host_overhead_ms=0.0)


def _comm_ms(par: Parallelism, shape: StepShape) -> dict[str, float]:
    dep = Deployment(load_model("deepseek-ai/DeepSeek-V3"), get_gpu("h200_sxm"), par, Precision("fp8", "fp8"), ENGINE)
    step, _ = build(dep, None, 4096)
    out: dict[str, float] = {}
    for o in step.breakdown(shape).ops:
        if o.family == "comm":
            out[o.name] = out.get(o.name, 0.0) + o.latency_ms
    return out


@pytest.mark.parametrize("shape", [StepShape.build([], [2048] * 16), StepShape.build([(4096, 0)], [])])
def test_ep8_inside_tp8_communicates_like_tp8(shape):
    tp_only, tp_ep = _comm_ms(Parallelism(8, 1, 1), shape), _comm_ms(Parallelism(8, 1, 8), shape)
    assert set(tp_ep) == {"tp_allreduce"}
    assert tp_ep["tp_allreduce"] == pytest.approx(tp_only["tp_allreduce"], rel=1e-12)


def test_attention_dp_still_exchanges_tokens():
    comm = _comm_ms(Parallelism(1, 1, 8, dp=8), StepShape.build([], [2048] * 64))
    assert comm and "tp_allreduce" not in comm and sum(comm.values()) > 0

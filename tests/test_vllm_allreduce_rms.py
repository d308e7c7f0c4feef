"""vLLM's AllReduce + RMSNorm fusion (sim/vllm_allreduce_rms.py), applied to the served rows of
vLLM 0.18+ (calibration/vllm_launch.py): both RMSNorms of a layer run inside the TP all-reduce for
steps up to FlashInfer's fused size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration import vllm_launch as vl
from llmplan.sim.deployment import build
from llmplan.sim.types import StepShape
from llmplan.sim.vllm_allreduce_rms import MiB, fused_max_tokens
from test_vllm_launch import _row as launch_row

DECODE = StepShape.build([], [2048] * 8)       # 8 sequences decoding
PROMPT = StepShape.build([(1024, 0)], [])      # one 1k prompt


def _row(**kw) -> dict:
    """A vLLM 0.18.0 gpt-oss-120b sweep row on 8 H200s at N = 8 (test_vllm_launch's row)."""
    r = launch_row(batch_size=8.0, tp_size=8.0, moe_tp_size=8.0)
    r.update(kw)
    return r


def _step(**kw):
    m = sr.map_row(_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case, sr.step_model(m.case, None)


def _ops(step, shape) -> dict[str, float]:
    return {o.name: o.latency_ms for o in step.breakdown(shape).ops}


def test_version_rule():
    assert vl.allreduce_rms_fusion("0.18.0") and vl.allreduce_rms_fusion("0.19.1")
    # -O2 preset with "fuse_allreduce_rms": False (0.12-0.14.1); 0.15-0.17 not established
    for v in ("0.16.0", "0.14.1", "0.12.0", "0.11.2", "", "gpt-oss-dev", None):
        assert not vl.allreduce_rms_fusion(v), v


def test_fused_size_follows_flashinfers_caps():
    # Hopper: 64 / 2 / 0.5 MiB at TP 2 / 4 / 8 over a bf16 row of `hidden` values
    assert fused_max_tokens("h200_sxm", 8, 1, 1, 2880, 2.0) == int(0.5 * MiB // (2880 * 2))
    assert fused_max_tokens("h100_sxm", 4, 1, 1, 3072, 2.0) == int(2 * MiB // (3072 * 2))
    assert fused_max_tokens("h100_sxm", 2, 1, 1, 8192, 2.0) == int(64 * MiB // (8192 * 2))
    assert fused_max_tokens("b200", 4, 1, 1, 3072, 2.0) == int(32 * MiB // (3072 * 2))  # Blackwell cap
    # no fusion: TP 1, attention DP or pipeline stages (vLLM 0.18 gating), another GPU, a TP size without a cap
    assert fused_max_tokens("h200_sxm", 1, 1, 1, 2880, 2.0) == 0
    assert fused_max_tokens("h200_sxm", 4, 2, 1, 2880, 2.0) == 0
    assert fused_max_tokens("h200_sxm", 4, 1, 2, 2880, 2.0) == 0
    assert fused_max_tokens("a100_sxm", 8, 1, 1, 2880, 2.0) == 0
    assert fused_max_tokens("h200_sxm", 16, 1, 1, 2880, 2.0) == 0


def test_018_row_folds_the_decode_steps_norms_but_not_the_prompt_steps():
    case, fused = _step()
    assert case.version == "0.18.0" and fused._ar_rms_tokens == fused_max_tokens("h200_sxm", 8, 1, 1, 2880, 2.0)
    _, plain = _step(backend_version="0.16.0")
    assert plain._ar_rms_tokens == 0
    plain.run_marlin_mxfp4_moe()  # the 0.18 launch's Marlin MXFP4 experts (calibration.vllm_launch.mxfp4_marlin): only the fusion differs
    f, p = _ops(fused, DECODE), _ops(plain, DECODE)
    assert f["norms"] == 0.0 and p["norms"] > 0
    # everything else identical: the decode step is shorter by exactly the norm kernels
    assert {k: v for k, v in f.items() if k != "norms"} == pytest.approx({k: v for k, v in p.items() if k != "norms"})
    assert plain.step_time_ms(DECODE) - fused.step_time_ms(DECODE) == pytest.approx(p["norms"])
    # a 1,024-token prompt step is above the 91-token cap at TP 8: its norms stay
    pf = _ops(fused, PROMPT)["norms"]
    assert pf > 0 and pf == pytest.approx(_ops(plain, PROMPT)["norms"])
    assert fused.step_time_ms(PROMPT) == pytest.approx(plain.step_time_ms(PROMPT))


def test_rows_without_the_fusion_keep_their_norms():
    for kw in ({"tp_size": 1.0, "moe_tp_size": 1.0}, {"backend_version": ""}, {"backend_version": "0.12.0"}):
        _, step = _step(**kw)
        assert step._ar_rms_tokens == 0 and _ops(step, DECODE)["norms"] > 0, kw


def test_only_vllm_steps_take_the_fusion():
    case, _ = _step()
    sg = replace(case.dep, engine=sr.engine_profiles()["sglang"])
    with pytest.raises(ValueError):
        build(sg, None, 2048)[0].fuse_allreduce_rms()


def test_fusion_tables_name_catalog_gpus():
    """The fusion tables are keyed by hardware-catalog keys (the step model's gpu.key): a key the
    catalog does not have (e.g. a measurement folder name) would silently never fuse."""
    from llmplan.hardware_catalog.loader import load_catalog
    from llmplan.sim import sglang_allreduce_rms, vllm_allreduce_rms

    catalog = load_catalog()
    assert set(vllm_allreduce_rms.CAPABILITY) <= set(catalog)
    assert sglang_allreduce_rms.SM90_SM100 <= set(catalog)

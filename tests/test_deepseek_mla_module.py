"""TensorRT-LLM decode-only MLA steps take the measured whole-module time
(sim/trtllm_mla_module.py, data extracted by calibration/trtllm_mla_module_table.py): lookup and
interpolation, the step model's extra operator, and where it does not apply."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llmplan.calibration.trtllm_mla_module_table import curves_of
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.trtllm_mla_module import (COVERED_OPS, MODULE_FILE, applies, curve_key, module_correction_ms,
                                           module_decode_ms)
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape


def _table(tmp_path, curve):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"gpus": {"g": {curve_key("fp8", "fp8_block", 16): curve}}}))
    return p


def test_lookup_interpolates_in_batch_and_kv_and_flags_outside(tmp_path):
    p = _table(tmp_path, {"4": [[1024, 0.05], [4096, 0.07]], "16": [[1024, 0.06], [4096, 0.09]]})
    at = lambda b, kv: module_decode_ms("g", "fp8", "fp8", 16, b, kv, p)   # noqa: E731
    assert at(4, 1024).latency_ms == pytest.approx(0.05) and not at(4, 1024).extrapolated
    assert at(4, 2048).latency_ms == pytest.approx(0.06)                  # half way in log KV
    assert at(8, 1024).latency_ms == pytest.approx((0.05 * 0.06) ** 0.5)  # geometric mean in log-log batch
    assert at(2, 1024).latency_ms == pytest.approx(0.05) and at(2, 1024).extrapolated   # floor below
    assert at(32, 1024).latency_ms == pytest.approx(0.12) and at(32, 1024).extrapolated  # proportional above
    assert at(4, 100_000).extrapolated
    t = at(4, 1024)
    assert (t.tier, t.table) == ("measured", "trtllm")
    # no curve: the composition stands
    assert module_decode_ms("g", "fp8", "fp8", 32, 4, 1024, p) is None
    assert module_decode_ms("other", "fp8", "fp8", 16, 4, 1024, p) is None
    assert module_decode_ms("g", "bf16", "fp8", 16, 4, 1024, p) is None


def test_correction_turns_the_parts_into_the_module():
    assert module_correction_ms(0.055, 61, 2.934) == pytest.approx(0.055 * 61 - 2.934)
    assert module_correction_ms(0.04, 10, 0.5) < 0    # parts above the module: the correction is negative


def test_extraction_keeps_medians_per_batch_and_kv():
    f = pd.DataFrame({"kv_cache_dtype": ["fp8"] * 4, "gemm_type": ["fp8_block"] * 4, "num_heads": [16] * 4,
                      "batch_size": [4, 4, 4, 8], "isl": [1] * 4, "step": [1024, 1024, 2048, 1024],
                      "latency_ms": [0.05, 0.07, 0.08, 0.06]})
    out = curves_of(f)
    assert out == {curve_key("fp8", "fp8_block", 16): {"4": [[1024, 0.06], [2048, 0.08]], "8": [[1024, 0.06]]}}


def _step(kernel_backend: str, par: Parallelism, kv: str = "fp8"):
    engine = EngineProfile(name=kernel_backend, kernel_backend=kernel_backend, max_num_seqs=256, host_overhead_ms=0.0,
                           host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0)   # device time only
    step, _ = build(Deployment(load_model("deepseek-ai/DeepSeek-V3"), get_gpu("h200_sxm"), par,
                               Precision(weights="fp8", kv_cache=kv), engine), calibration="spec", min_kv_tokens=2048)
    return step


TP8 = Parallelism(tp=8, ep=8)


def test_trtllm_decode_step_takes_the_module_time():
    step = _step("trtllm", TP8)
    shape = StepShape.build([], [1536] * 4)
    t = step.breakdown(shape)
    ops = {o.name: o.latency_ms for o in t.ops}
    module = module_decode_ms("h200_sxm", "fp8", "fp8", 16, 4, 1536)
    assert module is not None
    # the covered parts plus the correction are the module, layer for layer (the step model looks the
    # module up at its bucketed mean KV length: within 0.1% of 1,536)
    covered = sum(ops[n] for n in COVERED_OPS) + ops["mla_module_vs_ops"]
    assert covered == pytest.approx(module.latency_ms * step.layers_per_stage, rel=1e-3)
    assert ops["mla_module_vs_ops"] > 0.2   # H200 TP8: the module is ~7 us per layer above the parts
    # the step time is the breakdown's sum (the correction is part of the device time)
    assert t.latency_ms == pytest.approx(sum(o.latency_ms for o in t.ops))


def test_other_engines_and_mixed_steps_keep_the_composition():
    assert "mla_module_vs_ops" not in {o.name for o in _step("sglang", TP8).breakdown(
        StepShape.build([], [1536] * 4)).ops}
    mixed = _step("trtllm", TP8).breakdown(StepShape.build([(1024, 0)], [1536] * 4))
    assert "mla_module_vs_ops" not in {o.name for o in mixed.ops}
    # a local head count without a measured curve: no module time (the composition stands)
    assert module_decode_ms("h200_sxm", "fp8", "fp8", 3, 4, 1536) is None


def test_only_the_measured_module_dimensions_take_it():
    """The table times DeepSeek-V3's module; an MLA model of other dimensions keeps the composition
    (never DeepSeek-V3's module under its own head count)."""
    from dataclasses import replace

    ds, kimi = load_model("deepseek_v3"), load_model("kimi_k2_5")
    assert applies("trtllm", ds) and applies("trtllm", kimi)      # Kimi-K2.5: V3's dimensions, 64 heads
    assert not applies("sglang", ds)
    assert not applies("trtllm", replace(ds, mla=replace(ds.mla, kv_lora_rank=256)))
    assert not applies("trtllm", replace(ds, hidden_size=4096))
    assert not applies("trtllm", load_model("glm_5"))              # sparse MLA: no module table


def test_shipped_table_holds_the_tp8_deepseek_curve():
    doc = json.loads(MODULE_FILE.read_text())
    assert curve_key("fp8", "fp8_block", 16) in doc["gpus"]["h200_sxm"]
    assert "/" not in json.dumps(doc["_provenance"]["tables"]).replace("/mla_generation_module", "")   # no paths


def test_extraction_without_any_curve_exits_2_and_writes_nothing(tmp_path, capsys):
    from llmplan.calibration.trtllm_mla_module_table import main

    gdir = tmp_path / "m" / "h100_sxm"
    gdir.mkdir(parents=True)
    (gdir / "gemm.csv.gz").write_bytes(b"")   # a known kernel table, but no MLA module table
    assert main(["--measurements", str(tmp_path / "m"), "--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "--measurements" in err and "no rows" in err and "Traceback" not in err
    assert not (tmp_path / "t.json").exists()

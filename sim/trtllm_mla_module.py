"""TensorRT-LLM decode steps of MLA models from the engine's measured whole-module MLA table
(``sim/data/trtllm_mla_module.json``, extracted by ``calibration/trtllm_mla_module_table.py``).

The measurement database times TensorRT-LLM's attention *module* of DeepSeek-V3 in generation
(shared/measurements ``<gpu>/mla_generation_module.csv.gz``; aiconfigurator
``collector/trtllm/collect_mla_module.py``: "the complete attention module forward pass
(projections + attention + output)", built from TensorRT-LLM's own ``DeepseekV3DecoderLayer``
with the local head count, 1.3.0rc20). The step model otherwise composes that block from five
separately measured operators (``q_a_kv_a_proj``, ``q_b_proj``, ``kv_b_absorb``, ``mla_decode``,
``o_proj``), and on H200 at TP 8 (16 local heads, fp8 KV, block-fp8 GEMMs) the composition is
6-10 us per layer below the module: 48.1 / 52.3 / 68.5 us against 54.5-56.1 / 59.5-62.4 /
72.4-84.7 us at 4 / 16 / 64 sequences (docs/ACCURACY.md, "Disaggregated rows (session 8)"). In a
decode-only TensorRT-LLM step the module's time replaces the composition
(:func:`module_correction_ms`: the module minus the composed operators, added as one operator so
the breakdown keeps the parts). Steps carrying prefill keep the composition (the table has no
mixed batch).

Lookup: the curve of (GPU, KV dtype, GEMM dtype, local heads); log-log interpolation in the batch
between measured batch sizes and log-linear in the KV length; below the smallest measured point,
its time; above the largest batch, proportional to the batch; flagged extrapolated outside. No
curve: None (the composition stands).
"""

from __future__ import annotations

import bisect
import json
import math
from functools import lru_cache
from pathlib import Path

from llmplan.model_catalog.spec import MLASpec, ModelSpec
from llmplan.sim.kernels import KernelTime
from llmplan.sim.types import OpTime

MODULE_FILE = Path(__file__).resolve().parent / "data" / "trtllm_mla_module.json"
#: the step model's operators that the module covers
COVERED_OPS = ("q_a_kv_a_proj", "q_b_proj", "kv_b_absorb", "mla_decode", "o_proj")
#: step-model dtypes -> the table's (DeepSeek fp8 checkpoints are block-scaled: sim/calibrated.py)
_GEMM = {"fp8": "fp8_block", "fp8_block": "fp8_block", "bf16": "bfloat16", "bfloat16": "bfloat16",
         "nvfp4": "nvfp4", "fp4": "nvfp4"}
_KV = {"fp8": "fp8", "bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "bfloat16"}
#: the measured module's dimensions (DeepSeek-V3's config.json; the collector builds its layer): other
#: MLA models keep the composition, never DeepSeek-V3's module under their head count
MEASURED_HIDDEN_SIZE = 7168
MEASURED_MLA = MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def curve_key(kv_dtype: str, gemm_dtype: str, heads: int) -> str:
    """The JSON key ``calibration.trtllm_mla_module_table`` writes."""
    return f"{kv_dtype}|{gemm_dtype}|{int(heads)}"


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    p = Path(path)
    return json.loads(p.read_text()).get("gpus", {}) if p.is_file() else {}


def _along(points: list[list[float]], x: float) -> tuple[float, bool]:
    """Time at KV length ``x`` on one batch's [[kv, ms], ...] (log-linear; clamped outside)."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return float(points[0][1]), x < xs[0]
    if x >= xs[-1]:
        return float(points[-1][1]), x > xs[-1]
    i = bisect.bisect_left(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return float(y0 + w * (y1 - y0)), False


def module_decode_ms(gpu: str, kv_dtype: str, gemm_dtype: str, heads: int, batch: int, kv_len: float,
                     path: Path = MODULE_FILE) -> KernelTime | None:
    """One layer's measured MLA module in a decode step of ``batch`` sequences of mean KV
    length ``kv_len`` with ``heads`` local heads; None without a curve."""
    curve = _load(str(path)).get(gpu, {}).get(curve_key(_KV.get(kv_dtype, kv_dtype),
                                                        _GEMM.get(gemm_dtype, gemm_dtype), heads))
    if not curve or batch < 1:
        return None
    sizes = sorted(int(b) for b in curve)
    at = lambda b: _along(curve[str(b)], max(1.0, kv_len))   # noqa: E731
    if batch <= sizes[0]:
        ms, ext = at(sizes[0])
        ext = ext or batch < sizes[0]
    elif batch >= sizes[-1]:
        ms, ext = at(sizes[-1])
        ms, ext = ms * batch / sizes[-1], ext or batch > sizes[-1]
    else:
        i = bisect.bisect_left(sizes, batch)
        b0, b1 = sizes[i - 1], sizes[i]
        (y0, e0), (y1, e1) = at(b0), at(b1)
        w = 1.0 if batch == b1 else (math.log(batch) - math.log(b0)) / (math.log(b1) - math.log(b0))
        ms, ext = math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0))), e0 or e1
    return KernelTime(ms, bound="latency", tier="measured", extrapolated=ext, table="trtllm")


def module_correction_ms(module_ms_per_layer: float, layers: float, composed_ms: float) -> float:
    """The operator that turns the composed ops (``composed_ms``, all layers) into the module's
    time: ``layers`` x the module minus the composition (negative where the parts exceed it)."""
    return module_ms_per_layer * layers - composed_ms


def applies(backend: str, model: ModelSpec) -> bool:
    """Whether a step model of ``backend`` serving ``model`` can take the module at all (TensorRT-LLM,
    a dense-attention MLA model of the measured module's dimensions, :data:`MEASURED_MLA`); fixed per
    step model, so its hot path skips the lookup otherwise."""
    return (backend == "trtllm" and model.mla == MEASURED_MLA and model.sparse is None
            and model.hidden_size == MEASURED_HIDDEN_SIZE)


def module_ops(backend: str, model: ModelSpec, gpu: str, kv_dtype: str, gemm_dtype: str, heads: int,
               layers: float, attn_key: tuple, composed: tuple[OpTime, ...]) -> tuple[OpTime, ...]:
    """The step model's extra operator for one pipeline stage of a step: ``mla_module_vs_ops``
    (:func:`module_correction_ms` over the :data:`COVERED_OPS` among ``composed``, the stage's
    operators) for a TensorRT-LLM decode-only step of an MLA model (``attn_key``: the step model's
    ``(prefill seqs, prefill q, prefill kv, decode seqs, mean decode KV)`` of the busiest rank) whose
    GPU has a curve; else none."""
    pf_seqs, _, _, dc_seqs, dc_kv = attn_key
    if not applies(backend, model) or pf_seqs or not dc_seqs:
        return ()
    kt = module_decode_ms(gpu, kv_dtype, gemm_dtype, heads, dc_seqs, dc_kv)
    if kt is None:
        return ()
    parts = sum(o.latency_ms for o in composed if o.name in COVERED_OPS)
    return (OpTime("mla_module_vs_ops", "mla", module_correction_ms(kt.latency_ms, layers, parts), "latency",
                   0.0, 0.0, kt.tier, kt.extrapolated, kt.table),)

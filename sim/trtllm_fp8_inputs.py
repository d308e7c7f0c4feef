"""TensorRT-LLM Llama GEMMs whose fp8 input arrives already quantized.

With fp8 per-tensor weights, ``LlamaDecoderLayer`` (tensorrt_llm/_torch/models/modeling_llama.py,
TensorRT-LLM 1.0-1.2) runs its all-reduce fusions (sim/trtllm_fusions.py) as
``AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8``: the pre-MLP fusion quantizes the normed hidden
state with ``scale = self.mlp.gate_up_proj.input_scale`` and the post-MLP fusion with the next
layer's ``qkv_proj.input_scale``. So ``gate_up_proj`` and ``qkv_proj`` receive fp8 tensors and run
no quantization kernel of their own (``o_proj`` and ``down_proj`` are not covered here: not checked).

The measured TensorRT-LLM ``fp8`` GEMM rows time ``Linear.forward`` on a bf16 input without an input
scale (aiconfigurator ``collector/trtllm/collect_gemm.py``), i.e. dynamic quantization + GEMM. The
GEMM alone is that time minus the measured quantization kernels, ``computescale`` +
``scale_matrix`` of the same collector (``sim/data/trtllm_fp8_quant.json``, written by
``python -m llmplan.calibration.trtllm_quant_table``), at the nearest measured width ``k`` and
interpolated in log ``m``. A GPU without those tables keeps the GEMM figure as it is.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from functools import lru_cache
from pathlib import Path

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.trtllm_fusions import LLAMA_ARCHITECTURES, norms_in_allreduce
from llmplan.sim.types import Parallelism

QUANT_FILE = Path(__file__).resolve().parent / "data" / "trtllm_fp8_quant.json"


def inputs_prequantized(backend: str, model: ModelSpec, par: Parallelism, gemm_dtype: str) -> bool:
    """Whether ``qkv_proj`` and ``gate_up_proj`` get fp8 inputs from the fused all-reduce kernel:
    TensorRT-LLM Llama with per-tensor fp8 GEMMs where both RMSNorms fold into the all-reduce (the
    pre-MLP fusion feeds gate_up, the post-MLP one the next layer's qkv)."""
    return (gemm_dtype == "fp8" and backend == "trtllm" and model.architecture in LLAMA_ARCHITECTURES
            and norms_in_allreduce(backend, model, par) == 2)


@lru_cache(maxsize=4)
def _grids(path: str) -> dict:
    p = Path(path)
    return json.loads(p.read_text()).get("gpus", {}) if p.is_file() else {}


def quantize_ms(gpu_key: str, m: int, k: int, path: str | Path = QUANT_FILE) -> float | None:
    """Measured per-tensor fp8 quantization (dynamic scale + quantize) of an (m x k) activation on
    ``gpu_key``, or None where the GPU has no such table."""
    g = _grids(str(path)).get(gpu_key)
    if not g or m <= 0 or k <= 0:
        return None
    ks, ms, grid = g["k"], g["m"], g["ms"]
    j = min(range(len(ks)), key=lambda i: abs(math.log(ks[i]) - math.log(k)))
    col = [row[j] for row in grid]
    if m <= ms[0]:
        return float(col[0])
    if m >= ms[-1]:
        return float(col[-1])
    i = bisect_left(ms, m)
    if ms[i] == m:
        return float(col[i])
    x0, x1 = math.log(ms[i - 1]), math.log(ms[i])
    w = (math.log(m) - x0) / (x1 - x0)
    return float(col[i - 1] + w * (col[i] - col[i - 1]))

"""TensorRT-LLM Llama GEMMs whose fp8 input arrives already quantized.

With fp8 per-tensor weights, ``LlamaDecoderLayer`` (tensorrt_llm/_torch/models/modeling_llama.py,
TensorRT-LLM 1.0-1.2) runs its all-reduce fusions (sim/trtllm_fusions.py) as
``AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8``: the pre-MLP fusion quantizes the normed hidden
state with ``scale = self.mlp.gate_up_proj.input_scale`` and the post-MLP fusion with the next
layer's ``qkv_proj.input_scale``. So ``gate_up_proj`` and ``qkv_proj`` receive fp8 tensors and run
no quantization kernel of their own (``o_proj`` and ``down_proj`` are not covered here: not checked).
The conditions follow that file (``LlamaDecoderLayer.__init__`` / ``forward`` and
``LlamaModel.forward``, TensorRT-LLM main of late 2025,
https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/_torch/models/modeling_llama.py):

* ``is_fp8_quant`` / the fp8 fusion op go with per-tensor fp8 (``has_fp8_qdq``); each GEMM is
  decided by its own weight dtype (qkv: attention, gate_up: dense MLP), since a component
  served in bf16 has no ``input_scale`` to quantize to.
* ``POST_MLP_FUSION = has_tp() and enable_fusion``: no attention-DP condition, so the next
  layer's qkv takes fp8 with attention DP too; ``PRE_MLP_FUSION`` adds ``not enable_attention_dp``
  (the simulator refuses attention DP on a dense model today, so this binds no plan yet).
* Layer 0 has no previous layer: ``if residual is None: hidden_states = self.input_layernorm(...)``
  runs a plain RMSNorm, so its qkv quantizes its own input: ``(L - 1) / L`` of the qkv GEMMs
  take fp8 inputs. (Pipeline stages' first layers are not separated out: not checked.)

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
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.kernels import KernelModel, KernelTime
from llmplan.sim.trtllm_fusions import LLAMA_ARCHITECTURES, norms_in_allreduce
from llmplan.sim.types import Parallelism

QUANT_FILE = Path(__file__).resolve().parent / "data" / "trtllm_fp8_quant.json"


@dataclass(frozen=True)
class PrequantizedInputs:
    """Which normed-input GEMMs take fp8 from the fused all-reduce kernel."""

    qkv_share: float = 0.0   # share of qkv_proj GEMMs (all layers but layer 0 when fused)
    gate_up: bool = False    # gate_up_proj of every layer (pre-MLP fusion)


def prequantized_inputs(backend: str, model: ModelSpec, par: Parallelism, attention_dtype: str,
                        mlp_dtype: str) -> PrequantizedInputs:
    """TensorRT-LLM Llama with per-tensor fp8 GEMMs where the all-reduce fusions run
    (sim/trtllm_fusions.py): the post-MLP fusion feeds the next layer's qkv (attention DP or not),
    the pre-MLP one (no attention DP) this layer's gate_up."""
    if (backend != "trtllm" or model.architecture not in LLAMA_ARCHITECTURES
            or norms_in_allreduce(backend, model, par) == 0):
        return PrequantizedInputs()
    layers = max(model.num_layers, 1)
    qkv = (layers - 1) / layers if attention_dtype == "fp8" else 0.0
    gate_up = mlp_dtype == "fp8" and norms_in_allreduce(backend, model, par) == 2
    return PrequantizedInputs(qkv_share=qkv, gate_up=gate_up)


def normed_gemm_ms(kernels: KernelModel, m: int, n: int, k: int, dtype: str, share: float) -> KernelTime:
    """A GEMM on the normed hidden state of which ``share`` of the layers get their fp8 input
    from the fused all-reduce (no quantization kernel: ``gemm_prequantized``) and the rest
    quantize it themselves (the plain ``gemm``): the layer-weighted mean latency."""
    pre = getattr(kernels, "gemm_prequantized", None) if share > 0.0 and dtype == "fp8" else None
    if pre is None:
        return kernels.gemm(m, n, k, dtype)
    fused = pre(m, n, k)
    if share >= 1.0:
        return fused
    plain = kernels.gemm(m, n, k, dtype)
    return replace(plain, latency_ms=share * fused.latency_ms + (1.0 - share) * plain.latency_ms)


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

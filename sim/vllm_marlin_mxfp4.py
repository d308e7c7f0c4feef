"""vLLM's Marlin MXFP4 fused MoE, timed at another expert shape by its measured throughput.

**Which kernel.** vLLM serves gpt-oss's MXFP4 experts on Hopper with OpenAI's ``triton_kernels``
(matmul_ogs) by default, and with Marlin's weight-only MXFP4 kernel when ``VLLM_MXFP4_USE_MARLIN``
is set: ``get_mxfp4_backend`` (vllm ``model_executor/layers/quantization/mxfp4.py``) returns
``Mxfp4Backend.MARLIN`` "if envs.VLLM_MXFP4_USE_MARLIN" before any other SM90 choice, and the later
``select_mxfp4_moe_backend`` (``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``, stored
version 045335ce) still returns ``MARLIN`` when the variable is set, ahead of SM90's default
``TRITON_MONOLITHIC``. The InferenceX
launches of the vLLM 0.18 gpt-oss-120b sweep rows export ``VLLM_MXFP4_USE_MARLIN=1``
(SemiAnalysisAI/InferenceX ``benchmarks/single_node/gptoss_fp4_h100.sh`` / ``gptoss_fp4_h200.sh``
at 626932a1, 2026-03-27, the v0.18.0 image); which rows: ``calibration.vllm_launch.mxfp4_marlin``.

**How it is timed.** The vLLM MoE tables time Marlin MXFP4 only at hidden 3,584 / inter 3,072 /
896 experts / top-16 (``sim/data/vllm_marlin_mxfp4.json``, written by ``python -m
llmplan.calibration.vllm_marlin_mxfp4_table``), and gpt-oss (hidden 2,880 / inter 2,880 / 128
experts / top-4) only with the triton kernel. The transfer keeps what the two shapes share: each
expert runs one weight-only GEMM of ``tokens_per_expert`` rows (tokens x top-k / experts) against
its own ``hidden x inter / moe_tp`` weights, whose arithmetic intensity is set by those rows
(weights read once per expert, ``2 x rows`` flops per weight), not by the expert count or widths.
So the measured Marlin throughput (TFLOP/s of the gated expert GEMMs) at the same tokens per
expert, the same (moe_tp, moe_ep) layout and the same routing (the kernel model's skew), interpolated
in log-log, times the query's own flops: ``ms = 6 x hidden x (inter / moe_tp) x tokens x top-k /
moe_ep / TFLOP/s``. Per-expert widths differ (3,584 x 3,072 against 2,880 x 2,880), so the answer
is flagged ``extrapolated``; tokens per expert beyond the measured range take the end value. The
transfer holds where the GEMMs are throughput-bound; in decode (few tokens per expert: weight
reads and launch floors) the measured triton time of gpt-oss's own shape is kept wherever it is
the larger (:func:`moe_on_marlin`).

On H200 at the replay's routing (power law 1.01) this gives, per layer at moe_tp 1 against the
measured triton kernel of gpt-oss's shape: 8 tokens 0.158 ms (triton 0.189), 64 tokens 0.446
(0.517), 1,024 tokens 1.542 (1.340), 2,048 tokens 2.51 (1.68), 8,192 tokens 7.39 (3.94): Marlin
runs at about 220 TFLOP/s in an 8k prompt step where the triton kernel reaches 410, and the decode
sizes keep the triton time (docs/ACCURACY.md, "vLLM gpt-oss prompts: the launch's Marlin MXFP4
MoE (session 11)").
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from functools import lru_cache
from pathlib import Path

from llmplan.sim.kernels import KernelTime

MARLIN_FILE = Path(__file__).resolve().parent / "data" / "vllm_marlin_mxfp4.json"


@lru_cache(maxsize=1)
def _curves() -> dict:
    try:
        return json.loads(MARLIN_FILE.read_text())["gpus"]
    except (OSError, KeyError, ValueError):
        return {}


def _interp_loglog(xs: list[float], ys: list[float], x: float) -> tuple[float, bool]:
    """y at x, linear in (log x, log y) between the measured points; the end value (and True)
    outside them."""
    if x <= xs[0]:
        return ys[0], x < xs[0]
    if x >= xs[-1]:
        return ys[-1], x > xs[-1]
    i = bisect_left(xs, x)
    if xs[i] == x:
        return ys[i], False
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0))), False


def routing_label(skew: float) -> str:
    """The tables' ``distribution`` of a kernel model's routing skew (power-law exponent; 0 = balanced)."""
    return "balanced" if skew <= 0 else f"power_law_{skew:g}"


def marlin_moe(gpu_key: str, num_tokens: int, hidden: int, inter: int, topk: int, num_experts: int,
               moe_tp: int, moe_ep: int, skew: float) -> KernelTime | None:
    """One fused gated MoE layer at Marlin MXFP4's measured throughput (module docstring); None
    where the GPU, routing or (moe_tp, moe_ep) layout has no measured Marlin curve."""
    if num_tokens <= 0:
        return KernelTime(0.0, 0.0, 0.0, "latency", "measured")
    tp, ep = max(int(moe_tp), 1), max(int(moe_ep), 1)
    curve = _curves().get(gpu_key, {}).get("curves", {}).get(routing_label(skew), {}).get(f"{tp}x{ep}")
    if not curve:
        return None
    pairs = float(num_tokens) * topk
    per_expert = pairs / max(num_experts, 1)
    tflops, _ = _interp_loglog(curve["tokens_per_expert"], curve["tflops"], per_expert)
    flops = 6.0 * hidden * (inter / tp) * pairs / ep
    weight_bytes = 3.0 * hidden * (inter / tp) * (num_experts / ep) * 0.53  # 4.25 bits per MXFP4 weight
    return KernelTime(flops / (tflops * 1e9), flops, weight_bytes, "compute", "measured", True, "vllm")


def moe_on_marlin(measured: KernelTime, gpu_key: str, num_tokens: int, hidden: int, inter: int, topk: int,
                  num_experts: int, moe_tp: int, moe_ep: int, skew: float) -> KernelTime:
    """The MXFP4 MoE layer of a Marlin launch: Marlin's throughput transfer where it is the slower
    answer, else ``measured`` (the kernel model's answer at the model's own shape, the triton
    kernel). Where the experts are few tokens each, the time is weight reads and launch floors,
    which a flop-throughput transfer from a 7x larger layer (896 against 128 experts, 4x the routed
    pairs per token) does not carry: it would make gpt-oss's decode MoE 2-3x faster than its
    measured triton kernel at TP 8; there the measured kernel of the model's shape stands."""
    marlin = marlin_moe(gpu_key, num_tokens, hidden, inter, topk, num_experts, moe_tp, moe_ep, skew)
    if marlin is None or marlin.latency_ms <= measured.latency_ms:
        return measured
    return marlin

"""Fused-MoE time of an attention-DP (wide expert parallel) step from the engines' own measured
wide-EP tables (``sim/data/wideep_moe.json``, extracted by ``calibration/wideep_tables.py``).

Under attention DP a MoE layer's experts see the tokens of every DP rank: ``group_tokens``
(``sim/dp_layout.py``). The engines run those layers with their wide-EP kernels, which the
measurement database times directly (shared/measurements/README.md, ``wideep_*``):

* TensorRT-LLM: the WIDEEP MoE backend's CUTLASS grouped GEMMs (``wideep_moe``, 1.3.0rc10);
* SGLang: DeepEP + DeepGEMM (``deepepmoe``; ``wideep_context_moe`` for steps with a prefill,
  ``wideep_generation_moe`` for decode-only steps: SGLang's ``--deepep-mode auto`` picks the
  normal kernels for prefill batches and the low-latency ones for decode,
  https://docs.sglang.io/advanced_features/server_arguments.html).

The plain fused-MoE tables behind ``KernelModel.moe`` were measured with one rank's tokens and
stop at 16k tokens; an attention-DP prefill step of 8 ranks x 8k-token prompts asks for 64k.
For DeepSeek-V3 on H200 (fp8, EP 8) the calibrated TensorRT-LLM query then answered 4.5 ms per
layer at 64k tokens and 0.98 ms at 8k, while TensorRT-LLM's wide-EP table measures 2.5 ms at 8k
and 4.6 ms at 16k (power-law routing, no EPLB): the query's extrapolation is sublinear where a
compute-bound grouped GEMM is linear.

Lookup: the curve of (engine, phase, dtype, hidden, inter, top-k, experts, moe TP, EP, routing
skew) of the step's GPU; log-log interpolation between measured token counts; below the smallest,
its time (launch floor); above the largest, proportional to the tokens (the grouped GEMMs are
compute-bound there: the curves grow ~linearly over their last octave), flagged extrapolated.
No curve: None (the caller keeps ``KernelModel.moe``).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from llmplan.sim.kernels import KernelTime

WIDEEP_FILE = Path(__file__).resolve().parent / "data" / "wideep_moe.json"
#: dtype of the step model's expert weights -> the tables' ``moe_dtype`` (fp8 checkpoints of the
#: MoE models served are block-scaled: sim/calibrated.py MOE_FP8_GROUP)
_DTYPE = {"fp8": "fp8_block", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "fp4": "nvfp4"}
#: engines with wide-EP tables, and whether their curve depends on the step kind
_PHASED = {"trtllm": False, "sglang": True}


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    p = Path(path)
    return json.loads(p.read_text()).get("gpus", {}) if p.is_file() else {}


def curve_key(engine: str, phase: str, dtype: str, hidden: int, inter: int, top_k: int, num_experts: int,
              moe_tp: int, ep: int, distribution: str) -> str:
    """The key ``calibration.wideep_tables.curve_key`` writes."""
    return "|".join(str(x) for x in (engine, phase, dtype, hidden, inter, top_k, num_experts, moe_tp, ep,
                                     distribution))


def distribution_name(skew: float) -> str:
    """The tables' routing-distribution label of a power-law skew (0: uniform)."""
    return "uniform" if skew <= 0 else f"power_law_{skew:g}"


def interpolate(points: list[list[float]], tokens: float) -> tuple[float, bool]:
    """(time at ``tokens``, extrapolated) on a sorted [[tokens, ms], ...] curve (module docstring)."""
    xs = [p[0] for p in points]
    if tokens <= xs[0]:
        return float(points[0][1]), tokens < xs[0]
    if tokens >= xs[-1]:
        return float(points[-1][1]) * tokens / xs[-1], tokens > xs[-1]
    i = bisect.bisect_left(xs, tokens)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    if tokens == x1:
        return float(y1), False
    w = (math.log(tokens) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return float(math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))), False


def wideep_moe(gpu: str, engine: str, decode_only: bool, group_tokens: int, hidden: int, inter: int, top_k: int,
               num_experts: int, moe_tp: int, ep: int, dtype: str, skew: float = 1.01,
               path: str | Path = WIDEEP_FILE) -> KernelTime | None:
    """One MoE layer's expert time under attention DP from the measured wide-EP curves, or None."""
    if group_tokens <= 0 or engine not in _PHASED or dtype not in _DTYPE:
        return None
    curves = _load(str(path)).get(gpu)
    if not curves:
        return None
    phase = ("generation" if decode_only else "context") if _PHASED[engine] else "any"
    pts = curves.get(curve_key(engine, phase, _DTYPE[dtype], hidden, inter, top_k, num_experts, max(1, moe_tp),
                               max(1, ep), distribution_name(skew)))
    if not pts:
        return None
    ms, extrapolated = interpolate(pts, float(group_tokens))
    return KernelTime(ms, 0.0, 0.0, "compute", "measured", extrapolated)


def group_moe(kernels: object, gpu: str, engine: str, moe_all2all: str, decode_only: bool, group_tokens: int,
              hidden: int, inter: int, top_k: int, num_experts: int, moe_tp: int, ep: int, dtype: str,
              architecture: str | None = None) -> KernelTime:
    """The step model's expert time of an attention-DP step: the measured wide-EP curve where the
    kernel model is the GPU's measured tier and the engine runs that table's kernel (TensorRT-LLM:
    its CUTLASS grouped GEMMs under either token exchange; SGLang: DeepGEMM only with DeepEP,
    ``moe_all2all="deepep"``), else ``kernels.moe`` of the group's tokens. ``architecture``: the
    model's, from which the kernel model names the fused-MoE kernel the engine runs
    (sim/kernel_calibration/moe_kernels.py), as on the step model's other MoE path."""
    kt = None
    if getattr(kernels, "measured", False) and (engine != "sglang" or moe_all2all == "deepep"):
        kt = wideep_moe(gpu, engine, decode_only, group_tokens, hidden, inter, top_k, num_experts, moe_tp, ep, dtype,
                        float(getattr(kernels, "moe_skew", 1.01)))
    phys = kernels.moe(group_tokens, hidden, inter, top_k, num_experts, moe_tp, ep, dtype, architecture=architecture)
    if kt is None:
        return phys
    # the measured time with the work it does (FLOPs and bytes of the same query: the power model's
    # utilisation, sim/power.py, reads them)
    return replace(kt, flops=phys.flops, bytes=phys.bytes)

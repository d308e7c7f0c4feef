"""Physical quantities and model features of each compute operator family.

For every family a function turns a shape (and the GPU's figures) into

* ``t_c`` / ``t_m``: ideal compute and DRAM times in microseconds at the specification
  peaks (FLOPs / peak, bytes / HBM bandwidth),
* ``q``: the compute quantization factor (>= 1) from tile and wave quantization over the
  SMs, and ``l2``: 1 when the working set fits in L2 (benchmarks run with a warm L2),
* ``x``: the feature vector of the residual model (:data:`FEATURES` names its entries),
  built only from dimensionless or GPU-normalised quantities (waves over the SM count,
  working set over L2 size, intensity over the ridge point...) plus log shape terms, so
  one feature space serves a single GPU and a pool of GPUs alike.

The same code evaluates numpy arrays (fitting, validation) and Python scalars (the fast
path of :class:`sim.calibrated.CalibratedKernelModel`): operations go through an ``ops``
namespace, :data:`NP` or :data:`PY`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from llmplan.sim.kernel_calibration import moe_kernels, moe_routing, moe_tuned
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures


class _NumpyOps:
    log2 = staticmethod(lambda v: np.log2(np.maximum(v, 1e-30)))
    ceil = staticmethod(np.ceil)
    floor = staticmethod(np.floor)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)

    @staticmethod
    def flag(cond: Any) -> Any:
        return np.asarray(cond, dtype=np.float64)


class _PythonOps:
    log2 = staticmethod(lambda v: math.log2(v) if v > 1e-30 else -99.65784284662087)
    ceil = staticmethod(math.ceil)
    floor = staticmethod(math.floor)
    maximum = staticmethod(max)
    minimum = staticmethod(min)
    where = staticmethod(lambda c, a, b: a if c else b)

    @staticmethod
    def flag(cond: Any) -> float:
        return 1.0 if cond else 0.0


NP = _NumpyOps()
PY = _PythonOps()

#: bytes per element of weight / KV dtypes (fp4-like formats count their block scales)
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "fp8_block": 1.0,
                                 "int8": 1.0, "int4_wo": 0.53, "w4a16_mxfp4": 0.53, "fp4": 0.53,
                                 "int4": 0.53, "w4a8_mxfp4": 0.53,
                                 # TensorRT-LLM's int8 weight-only and SmoothQuant (w8a8) GEMMs (A100 tables)
                                 "int8_wo": 1.0, "sq": 1.0}
#: dtype -> tensor-core dtype whose peak bounds its compute (weight-only formats run in bf16)
COMPUTE_DTYPE: dict[str, str] = {"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "fp8": "fp8",
                                 "fp8_block": "fp8", "int8": "fp8", "int4_wo": "bf16",
                                 "w4a16_mxfp4": "bf16", "fp4": "fp4", "int4": "bf16", "w4a8_mxfp4": "fp8"}

#: bandwidth one SM can draw, in multiples of its fair share of the DRAM bandwidth
DECODE_SM_BW_SHARE = 3.0

# DeepSeek-V3 MLA dimensions (the measured MLA tables are all DeepSeek-V3 shaped)
MLA_KV_LORA, MLA_NOPE, MLA_ROPE, MLA_V = 512, 128, 64, 128

FEATURES: dict[str, tuple[str, ...]] = {
    "gemm": ("log_m", "log_n", "log_k", "eff_m64", "eff_m128", "eff_n128", "eff_wave_128x128",
             "eff_wave_128x256", "eff_wave_64x128", "log_tiles_per_sm", "log_cycled_ws_over_l2",
             "log_tc_over_tm", "log_t_roof_us", "m_aligned8", "log_k_per_n"),
    "attention_prefill": ("log_batch", "log_q", "log_heads", "log_gqa", "log_head_dim", "kv_fp8", "attn_fp8",
                          "log_window_frac", "log_ctas_per_sm", "eff_wave", "eff_tile_q", "log_kv_over_q",
                          "log_tc_over_tm", "log_t_roof_us", "sliding_window"),
    "attention_decode": ("log_batch", "log_kv", "log_heads", "log_kv_heads", "log_gqa", "log_head_dim",
                         "kv_fp8", "windowed", "log_par_per_sm", "log_ws_over_l2", "log_t_roof_us",
                         "log_tc_over_tm", "sliding_window"),
    "moe": ("log_tokens", "log_hidden", "log_inter_local", "log_topk", "log_local_experts", "log_assign",
            "log_tok_per_expert", "log_touched_frac", "skew", "log_wbytes", "block_scaled", "weight_only",
            "log_moe_tp", "log_moe_ep", "log_tc_over_tm", "log_t_roof_us", "triton_default_cfg", "k2_unaligned16"),
    "mla_prefill": ("log_batch", "log_q", "log_heads", "kv_fp8", "log_ctas_per_sm", "eff_wave", "eff_tile_q",
                    "log_kv_over_q", "log_tc_over_tm", "log_t_roof_us"),
    "mla_decode": ("log_batch", "log_kv", "log_heads", "kv_fp8", "log_par_per_sm", "log_ws_over_l2",
                   "log_t_roof_us", "log_tc_over_tm"),
    "mla_bmm": ("log_tokens", "log_heads", "post", "eff_t64", "log_units_per_sm", "log_ws_over_l2",
                "log_tc_over_tm", "log_t_roof_us"),
    "gdn_prefill": ("log_batch", "log_seq", "log_tokens", "log_v_heads", "log_gqa", "log_dk", "log_dv",
                    "log_units_per_sm", "eff_chunk", "log_tc_over_tm", "log_t_roof_us"),
    "gdn_decode": ("log_batch", "log_v_heads", "log_gqa", "log_dk", "log_dv", "log_units_per_sm",
                   "log_ws_over_l2", "log_tc_over_tm", "log_t_roof_us"),
}

#: canonical shape columns each family's features read (see calibration.reader.CANONICAL)
SHAPE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype"),
    "attention_prefill": ("batch", "q_len", "kv_len", "num_heads", "num_kv_heads", "head_dim", "kv_dtype",
                          "attn_dtype", "window"),
    "attention_decode": ("batch", "kv_len", "num_heads", "num_kv_heads", "head_dim", "kv_dtype", "window"),
    "moe": ("num_tokens", "hidden", "inter", "topk", "num_experts", "moe_tp", "moe_ep", "dtype", "skew"),
    "mla_prefill": ("batch", "q_len", "kv_len", "num_heads", "kv_dtype"),
    "mla_decode": ("batch", "kv_len", "num_heads", "kv_dtype"),
    "mla_bmm": ("op", "dtype", "num_tokens", "num_heads"),
    "gdn_prefill": ("batch", "seq_len", "num_tokens", "k_heads", "head_k_dim", "v_heads", "head_v_dim", "conv_dim"),
    "gdn_decode": ("batch", "num_tokens", "k_heads", "head_k_dim", "v_heads", "head_v_dim", "conv_dim"),
}

COMPUTE_FAMILIES = tuple(FEATURES)
#: ws_l2 value meaning "L2 residency not modelled for this family"
NO_L2 = 1e9


@dataclass
class Phys:
    """Physical terms of one family for one shape (scalars) or many (arrays)."""

    t_c: Any        # ideal compute time, us
    t_m: Any        # ideal DRAM time, us
    q: Any          # compute quantization factor >= 1
    ws_l2: Any      # working set / L2 capacity (inf where L2 residency is not modelled)
    t_l2: Any       # time to stream the bytes from L2 at 1 GB/s per SM, us
    waves: Any      # waves of work units (tiles / CTAs) over the SMs (per-wave overhead)
    flops: Any
    nbytes: Any
    x: list[Any]    # residual-model features, in FEATURES[family] order


def _us_compute(flops: Any, peak_tflops: Any) -> Any:
    return flops / (peak_tflops * 1e6)


def _us_memory(nbytes: Any, gpu: GPUFeatures) -> Any:
    return nbytes / (gpu.hbm_bw_gbps * 1e3)


def _l2_unit(nbytes: Any, gpu: GPUFeatures) -> Any:
    return nbytes / (gpu.sm_count * 1e3)


def _wave_eff(tiles: Any, sm: int, ops: Any) -> Any:
    return tiles / (ops.ceil(tiles / sm) * sm)


def _prefill_ctas(batch: Any, heads: Any, q_len: Any, sm: int, ops: Any) -> tuple[Any, Any, Any]:
    """Prefill attention grid: one CTA per (sequence, head, 128-query tile); returns the CTA
    count, the wave efficiency over ``sm`` SMs and the share of the last tile's queries used."""
    qt = ops.ceil(q_len / 128)
    ctas = batch * heads * qt
    return ctas, _wave_eff(ctas, sm, ops), q_len / (qt * 128)


def causal_pairs(q_len: Any, ctx: Any, window: Any, ops: Any) -> Any:
    """Sum over the ``q_len`` new queries (after ``ctx`` earlier tokens) of the keys each sees,
    with a sliding window of ``window`` keys (0 = full causal attention)."""
    full = q_len * ctx + q_len * (q_len + 1) / 2.0
    w = ops.maximum(window, 1)
    # positions p = ctx+1 .. ctx+q_len each see min(p, w) keys
    hi = ops.minimum(ctx + q_len, w)                      # last position still below the window
    n_lo = ops.maximum(hi - ctx, 0)                       # positions with p <= w
    lo_sum = n_lo * (ctx + 1 + ctx + n_lo) / 2.0
    windowed = lo_sum + (q_len - n_lo) * w
    return ops.where(window > 0, ops.minimum(windowed, full), full)


#: (tile_m, tile_n, relative per-SM efficiency) of the tile shapes a GEMM library picks from
#: (the 16-row tile stands for the GEMV-like kernels used for a handful of tokens)
GEMM_TILES = ((128, 256, 1.0), (128, 128, 0.93), (64, 128, 0.8), (64, 64, 0.62), (16, 64, 0.35))
GEMM_MAX_SPLIT = 32


def gemm_quant(m: Any, n: Any, k: Any, sm: int, ops: Any) -> Any:
    """Compute quantization factor (>= 1) of the best (tile, split-K) choice: issued tile
    work rounded up to whole waves over the SMs, over the ideal work, divided by the tile
    shape's relative efficiency. When tiles are fewer than SMs, K is split (k/split >= 256)
    to fill one wave, as cuBLAS/CUTLASS heuristics do."""
    if ops is PY:
        return _gemm_quant_scalar(m, n, k, sm)
    best = None
    kmax = ops.maximum(ops.minimum(ops.floor(k / 256), GEMM_MAX_SPLIT), 1)
    for tm, tn, eff in GEMM_TILES:
        tiles = ops.ceil(m / tm) * ops.ceil(n / tn)
        split = ops.where(tiles < sm, ops.minimum(ops.maximum(ops.floor(sm / tiles), 1), kmax), 1)
        qc = ops.ceil(tiles * split / sm) * (tm * tn * sm) / (m * n * eff * split)
        best = qc if best is None else ops.minimum(best, qc)
    return ops.maximum(best, 1.0)


def _gemm_quant_scalar(m: float, n: float, k: float, sm: int) -> float:
    """:func:`gemm_quant` for one shape in plain Python (same arithmetic, fewer calls)."""
    kmax = max(min(math.floor(k / 256), GEMM_MAX_SPLIT), 1)
    best = math.inf
    for tm, tn, eff in GEMM_TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        split = min(max(math.floor(sm / tiles), 1), kmax) if tiles < sm else 1
        qc = math.ceil(tiles * split / sm) * (tm * tn * sm) / (m * n * eff * split)
        if qc < best:
            best = qc
    return max(best, 1.0)


#: distinct weight copies aiconfigurator's GEMM collectors cycle through, one call each, per timed
#: iteration (the table's latency is the loop's time over the copies), so that a small weight is
#: not served from the L2 left warm by the previous call (ai-dynamo/aiconfigurator
#: ``collector/*/collect_gemm.py``, ``outside_loop_count``): TensorRT-LLM ``min(5, ceil(L2 / weight
#: bytes))``; SGLang and vLLM's XPU collector up to 6 (fewer only when 6 copies exceed 45% of the
#: device memory, i.e. for weights of gigabytes, far above any L2, where the count no longer
#: matters); vLLM's CUDA collector 6, except 1 for ``fp8_block`` and nvfp4
#: (:data:`GEMM_BENCH_SINGLE_COPY`). Engines not listed (the cross-gen pool) take
#: :data:`GEMM_BENCH_COPIES_DEFAULT`.
GEMM_BENCH_COPIES = {"trtllm": 5.0, "sglang": 6.0, "vllm": 6.0}
GEMM_BENCH_COPIES_DEFAULT = 6.0
#: (engine, dtype group) pairs whose collector times a single weight copy
GEMM_BENCH_SINGLE_COPY = frozenset({("vllm", "fp8_block"), ("vllm", "fp4"), ("vllm", "nvfp4")})


def gemm_bench_copies(backend: Any, dtype: Any, weight_bytes: Any, gpu: GPUFeatures, ops: Any = NP) -> Any:
    """Weight copies the engine's GEMM collector cycles through (:data:`GEMM_BENCH_COPIES`) for
    weights of ``weight_bytes``: scalars (one query) or arrays of backends / dtypes (table rows)."""
    l2 = gpu.l2_mb * 1e6
    if ops is PY:
        if (backend, dtype) in GEMM_BENCH_SINGLE_COPY:
            return 1.0
        cap = GEMM_BENCH_COPIES.get(backend, GEMM_BENCH_COPIES_DEFAULT)
        return max(1.0, min(cap, float(math.ceil(l2 / weight_bytes)))) if backend == "trtllm" else cap
    be = np.asarray(backend).astype(str)
    dt = np.asarray(dtype).astype(str)
    out = np.full(len(be), GEMM_BENCH_COPIES_DEFAULT)
    for b, c in GEMM_BENCH_COPIES.items():
        out[be == b] = c
    trt = be == "trtllm"
    if trt.any():
        out[trt] = np.maximum(1.0, np.minimum(out[trt], np.ceil(l2 / np.asarray(weight_bytes)[trt])))
    for b, d in GEMM_BENCH_SINGLE_COPY:
        out[(be == b) & (dt == d)] = 1.0
    return out


#: engines whose GEMM collector builds every weight copy with its own activation buffers: SGLang's
#: ``create_gemm()`` (ai-dynamo/aiconfigurator ``collector/sglang/collect_gemm.py``, since the
#: 0.5.8 collector, PR #323) draws a new bf16 input ``a`` (m x k) per copy, for fp8 also the
#: quantized input ``output_fp8`` (m x k, 1 byte), for fp8_block and nvfp4 also the output ``out``
#: (m x n bf16); TensorRT-LLM, vLLM and vLLM-XPU call every copy on one shared input ``x``.
GEMM_BENCH_PER_COPY_ACT = frozenset({"sglang"})
#: (engine, dtype group): the collector's own per-copy output buffer (see above)
GEMM_BENCH_PER_COPY_OUT = frozenset({("sglang", "fp8_block"), ("sglang", "fp4"), ("sglang", "nvfp4")})
#: (engine, dtype group): a per-copy 1-byte quantized input besides the bf16 one (see above)
GEMM_BENCH_PER_COPY_QUANT = frozenset({("sglang", "fp8")})


def gemm_bench_buffers(backend: Any, dtype: Any, copies: Any, ops: Any = NP) -> tuple[Any, Any]:
    """(activation bytes per m x k element, output buffers) in the working set the engine's GEMM
    collector cycles through with ``copies`` weight copies (:data:`GEMM_BENCH_PER_COPY_ACT`):
    (2, 1) where every copy shares one bf16 input and output; scalars or arrays of backends / dtypes."""
    if ops is PY:
        if backend not in GEMM_BENCH_PER_COPY_ACT:
            return 2.0, 1.0
        act = 3.0 if (backend, dtype) in GEMM_BENCH_PER_COPY_QUANT else 2.0
        return act * copies, (copies if (backend, dtype) in GEMM_BENCH_PER_COPY_OUT else 1.0)
    be = np.asarray(backend).astype(str)
    dt = np.asarray(dtype).astype(str)
    per = np.isin(be, list(GEMM_BENCH_PER_COPY_ACT))
    act = np.full(len(be), 2.0)
    for b, d in GEMM_BENCH_PER_COPY_QUANT:
        act[(be == b) & (dt == d)] = 3.0
    cp = np.broadcast_to(np.asarray(copies, dtype=np.float64), (len(be),))
    out = np.ones(len(be))
    for b, d in GEMM_BENCH_PER_COPY_OUT:
        sel = (be == b) & (dt == d)
        out[sel] = cp[sel]
    return np.where(per, act * cp, 2.0), np.where(per, out, 1.0)


#: bytes per element of the quantized activation that a GEMM of this dtype group makes from its bf16
#: input on every call, and reads back: every collector quantizes the activation dynamically inside
#: the timed op (ai-dynamo/aiconfigurator ``collector/*/collect_gemm.py``: TensorRT-LLM's fp8 Linear has
#: no ``input_scale`` and "runs its dynamic-quantization path", fp8_block quantizes per 1 x 128 group,
#: nvfp4 calls ``fp4_quantize``; SGLang's ``gemm_op`` runs ``sgl_per_token_quant_fp8`` /
#: ``sglang_per_token_group_quant_fp8`` / ``flashinfer_fp4_quantize`` before the GEMM; vLLM's
#: ``Fp8Config(activation_scheme="dynamic")`` and nvfp4 quantize the input per call). The input's
#: traffic is then 2 bytes read, q written and q read back, not 2. Only on a GPU with tensor cores of
#: that format (:func:`gemm_act_quant`): without them the engine runs the GEMM weight-only with bf16
#: activations (vLLM on the Arc Pro B60: ``torch.ops._xpu_C.fp8_gemm_w8a16``, vllm-project/vllm-xpu-kernels;
#: vLLM's fp8 docs: Ampere runs FP8 "W8A16 (weight-only FP8) utilizing Marlin kernels").
#: TensorRT-LLM's SmoothQuant plugin (A100) is timed alone and keeps 2.
GEMM_ACT_QUANT_BYTES = {"fp8": 1.0, "fp8_block": 1.0, "fp4": 0.5}   # fp4: the canonical nvfp4 group


def gemm_act_quant(dtype: Any, gpu: GPUFeatures, ops: Any = NP) -> Any:
    """Bytes per element of the per-call quantized activation (:data:`GEMM_ACT_QUANT_BYTES`; 0: none,
    also where ``gpu`` has no tensor cores of the format: its fp8 (fp4) peak is not above bf16 (fp8))."""
    native = {"fp8": gpu.peak_fp8_tflops > gpu.peak_bf16_tflops, "fp4": gpu.peak_fp4_tflops > gpu.peak_fp8_tflops}
    if ops is PY:
        return GEMM_ACT_QUANT_BYTES.get(dtype, 0.0) if native.get(COMPUTE_DTYPE.get(dtype, ""), False) else 0.0
    dt = np.asarray(dtype).astype(str)
    out = np.zeros(len(dt))
    for d, q in GEMM_ACT_QUANT_BYTES.items():
        if native.get(COMPUTE_DTYPE.get(d, ""), False):
            out[dt == d] = q
    return out


def gemm(m: Any, n: Any, k: Any, w_bytes: Any, peak: Any, gpu: GPUFeatures, ops: Any = NP,
         copies: Any = 1.0, act_ws: Any = 2.0, out_ws: Any = 1.0, act_q: Any = 0.0) -> Phys:
    """GEMM terms. ``copies``: weight copies the benchmark cycles through (:func:`gemm_bench_copies`);
    the base model's warm-L2 share and the residual feature ``log_cycled_ws_over_l2`` follow that
    cycled working set: ``copies`` weights, ``act_ws`` bytes per input element and ``out_ws`` output
    buffers (:func:`gemm_bench_buffers`; default one bf16 input and one output buffer, which the
    caching allocator reuses call after call; ``copies`` = 1: one call's bytes). ``act_q``: bytes per
    element of the activation quantized on every call (:func:`gemm_act_quant`), written and read
    back (DRAM traffic) in one buffer the calls share (working set), unless ``act_ws`` counts it."""
    sm = gpu.sm_count
    flops = 2.0 * m * n * k
    nbytes = m * k * (2.0 + 2.0 * act_q) + k * n * w_bytes + m * n * 2.0
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    tm64, tm128, tn128, tn256 = ops.ceil(m / 64), ops.ceil(m / 128), ops.ceil(n / 128), ops.ceil(n / 256)
    eff_m64 = m / (tm64 * 64)
    eff_m128 = m / (tm128 * 128)
    eff_n128 = n / (tn128 * 128)
    tiles = tm128 * tn128
    w128 = _wave_eff(tiles, sm, ops)
    w256 = _wave_eff(tm128 * tn256, sm, ops)
    w64 = _wave_eff(tm64 * tn128, sm, ops)
    q = gemm_quant(m, n, k, sm, ops)
    # the quantized activation is one buffer (q bytes per element) however often it is read; SGLang's
    # fp8 collector keeps one per weight copy, counted in act_ws (gemm_bench_buffers)
    q_buf = ops.where(act_ws > 2.0 * copies, 0.0, act_q) - 2.0 * act_q
    ws = (nbytes + (copies - 1.0) * k * n * w_bytes + (act_ws - 2.0 + q_buf) * m * k + (out_ws - 1.0) * m * n * 2.0) \
        / (gpu.l2_mb * 1e6)
    x = [ops.log2(m), ops.log2(n), ops.log2(k), eff_m64, eff_m128, eff_n128, w128, w256, w64,
         ops.log2(tiles / sm), ops.log2(ws), ops.log2(q * t_c / t_m), ops.log2(t_c + t_m),
         ops.flag(m % 8 == 0), ops.log2(k / n)]
    return Phys(t_c, t_m, q, ws, _l2_unit(nbytes, gpu), ops.ceil(tiles / sm), flops, nbytes, x)


def attention_prefill(batch: Any, q_len: Any, kv_len: Any, heads: Any, kv_heads: Any, head_dim: Any,
                      kv_bytes: Any, attn_fp8: Any, window: Any, peak: Any, gpu: GPUFeatures,
                      ops: Any = NP) -> Phys:
    sm = gpu.sm_count
    ctx = ops.maximum(kv_len - q_len, 0)
    pairs = causal_pairs(q_len, ctx, window, ops)
    full = q_len * ctx + q_len * (q_len + 1) / 2.0
    flops = 4.0 * batch * heads * head_dim * pairs
    nbytes = batch * (2.0 * q_len * heads * head_dim * 2.0 + 2.0 * kv_len * kv_heads * head_dim * kv_bytes)
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    ctas, eff_w, eff_t = _prefill_ctas(batch, heads, q_len, sm, ops)
    # critical path: the CTA of the last 128 queries of a sequence sees every key (or the
    # window); with few CTAs it, not the total work spread over the SMs, sets the time
    keys = ops.where(window > 0, ops.minimum(kv_len, window + 128), kv_len)
    crit = 4.0 * ops.minimum(q_len, 128) * keys * head_dim * sm / ops.maximum(flops / (batch * heads), 1.0)
    q = ops.maximum(1.0 / eff_w, crit / (batch * heads))
    q = ops.maximum(q, 1.0)
    x = [ops.log2(batch), ops.log2(q_len), ops.log2(heads), ops.log2(heads / kv_heads), ops.log2(head_dim),
         ops.flag(kv_bytes < 2), attn_fp8, ops.log2(pairs / full), ops.log2(ctas / sm), eff_w, eff_t,
         ops.log2(kv_len / q_len), ops.log2(q * t_c / t_m), ops.log2(t_c + t_m), ops.flag(window > 0)]
    return Phys(t_c, t_m, q, NO_L2 + 0.0 * t_c, 0.0 * t_c, ops.ceil(ctas / sm), flops, nbytes, x)


def attention_decode(batch: Any, kv_len: Any, heads: Any, kv_heads: Any, head_dim: Any, kv_bytes: Any,
                     window: Any, peak: Any, gpu: GPUFeatures, ops: Any = NP) -> Phys:
    kv = ops.where(window > 0, ops.minimum(kv_len, ops.maximum(window, 1)), kv_len)
    kv = ops.maximum(kv, 1)
    flops = 4.0 * batch * heads * head_dim * kv
    nbytes = batch * (2.0 * kv * kv_heads * head_dim * kv_bytes + 2.0 * heads * head_dim * 2.0)
    t_c = _us_compute(flops, peak)
    # split-KV (flash-decoding) fills the SMs when sequences x KV heads are few; below
    # that the bandwidth one SM can pull (~DECODE_SM_BW_SHARE x its fair share) limits
    units = batch * kv_heads
    par = units * ops.minimum(ops.maximum(ops.floor(gpu.sm_count / units), 1), ops.ceil(kv / 256))
    t_m = _us_memory(nbytes, gpu) * ops.maximum(1.0, gpu.sm_count / (DECODE_SM_BW_SHARE * par))
    ws = nbytes / (gpu.l2_mb * 1e6)
    waves = ops.ceil(units / gpu.sm_count)
    x = [ops.log2(batch), ops.log2(kv), ops.log2(heads), ops.log2(kv_heads), ops.log2(heads / kv_heads),
         ops.log2(head_dim), ops.flag(kv_bytes < 2), ops.flag(kv < kv_len),
         ops.log2(batch * kv_heads / gpu.sm_count), ops.log2(ws), ops.log2(t_c + t_m), ops.log2(t_c / t_m),
         ops.flag(window > 0)]
    return Phys(t_c, t_m, 1.0 + 0.0 * t_c, ws, _l2_unit(nbytes, gpu), waves, flops, nbytes, x)


#: weight matrices of one expert MLP: gated (SwiGLU: gate and up, h x I each, fused as h x 2I,
#: then down I x h) or plain (relu^2, Nemotron-3: up h x I, down I x h)
MOE_GATED_MATRICES = 3.0
MOE_PLAIN_MATRICES = 2.0


def moe_matrices(kernel_source: Any) -> Any:
    """Expert weight matrices of each measured MoE row, from its ``kernel_source``: aiconfigurator's
    TensorRT-LLM collector (collector/trtllm/collect_moe.py, ai-dynamo/aiconfigurator) labels the
    relu^2 experts of the Nemotron-3 models ``moe_torch_flow_nongated`` (``ActivationType.Relu2``,
    ``is_gated=False``); every other collector and kernel source times SwiGLU experts."""
    plain = kernel_source.astype(str).str.contains("nongated", regex=False).to_numpy()
    return np.where(plain, MOE_PLAIN_MATRICES, MOE_GATED_MATRICES)


#: SGLang versions whose MoE tables were collected with the rank-0 workloads whose remote slots are
#: clamped to local expert 0 (:func:`moe_routing.collector_clamped_pairs`; aiconfigurator commit
#: e23be5a79 upgraded the SGLang collector to 0.5.14 with them)
SGLANG_CLAMPED_VERSIONS = ("0.5.14",)
#: expert configurations (hidden, inter, topk, experts) that the SGLang collector times on its raw
#: Triton ``fused_moe`` path, the one that clamps: model cases with none of the SGLang routing options
#: (``sglang_moe_scoring_func``, ``_routing_method_type``, ``_routed_scaling_factor``, ``_renormalize``,
#: ``_has_correction_bias``, ``_num_expert_group``, ``_topk_group``, ``_apply_router_weight_on_input``),
#: which otherwise send a case through the framework layer (``use_framework_layer`` in
#: ``collector/sglang/collect_moe.py``) whose expert-parallel dispatch masks remote experts.
#: From ``collector/cases/models/*_cases.yaml`` at e23be5a79: Gemma-4-26B-A4B, Mixtral-8x7B,
#: Mixtral-8x22B, Qwen1.5-MoE-A2.7B, Llama-4-Scout-17B-16E (listed 8192 / 5120); configurations a
#: case file lists both with and without routing options (Qwen3-235B's 4096 / 1536 / 8 / 128,
#: Nemotron-3 Ultra's) are left out. Their tables show the clamp's signature (H100 bf16, 16,384
#: balanced tokens, time at EP 2 / 4 / 8 over EP 1: Mixtral-8x7B 0.99 / 0.47 / 0.21, Gemma-4 1.92 /
#: 1.89 / 1.92, where masked remote experts give ~0.5 / 0.25 / 0.125 as the other configurations do).
#: Session 13: Nemotron-3-Super's 1024 / 2688 / 22 / 512, whose case (NemotronHForCausalLM_cases.yaml
#: at f027123fc / c3ef575cc) listed no SGLang routing options and no mode restriction; e015c0ed6
#: ("prune v2 cases with artifact-aware coverage") later kept it to nvfp4, leaving the bf16 / block
#: fp8 rows already collected. The H100/H200 tables show the clamp's signature for top-22 of 512
#: (stride 24: every token has an expert on rank 0 up to EP 16): 16,384 balanced tokens, TP 1, time at
#: EP 2 / 4 / 8 / 16 over EP 1 0.97 / 0.96 / 0.95 / 0.94 (H200 bf16; block fp8 0.95 / 0.93 / 0.92 /
#: 0.92), where the masked configurations of the same tables give ~0.53 / 0.30 / 0.19.
SGLANG_RAW_TRITON_CONFIGS = frozenset({(2816, 704, 8, 128), (4096, 14336, 2, 8), (6144, 16384, 2, 8),
                                       (2048, 1408, 4, 60), (8192, 5120, 1, 16), (1024, 2688, 22, 512)})
#: dtypes the SGLang collector can time on that raw Triton path (the others always use the framework layer)
SGLANG_RAW_TRITON_DTYPES = ("bf16", "fp8_block")


#: SGLang versions whose collector clamped the remote slots of EVERY expert configuration, Triton and
#: Marlin alike, with the kernel sources it did so for. aiconfigurator's 0.5.10 collector
#: (``collector/sglang/collect_moe.py`` at cb4d907c7 "sglang 0.5.10 perf data", the commit that added
#: A100's 0.5.10 ``moe_perf.txt``; later commits only converted its format) had no framework-layer
#: path: with expert parallelism and balanced or power-law routing ``run_moe_torch`` always built
#: ``build_rank0_workloads`` and ``benchmark_config`` clamped their -1 ids with ``topk_ids.clamp(min=0)``
#: before both ``fused_moe`` (Triton) and ``fused_marlin_moe`` (int4). The A100 tables show it for every
#: configuration: 16,384 balanced tokens, TP 1, time over EP 1 equals the clamp's issued pairs over
#: EP 1 (e.g. 2048 / 768 / 8 / 128 bf16 EP 2 / 4 / 8 / 16 0.98 / 0.98 / 0.96 / 0.43 against 1 / 1 / 1 /
#: 0.5; int4 0.98 / 0.98 / 0.97 / 0.48), not the masked engine's ~1/EP.
SGLANG_CLAMP_ALL_VERSIONS = {"0.5.10": ("sglang_fused_moe_triton", "sglang_marlin_moe")}


def moe_clamped_pairs(df: Any) -> np.ndarray:
    """Pairs each measured MoE row's kernel computed on local expert 0 for the collector's clamped
    remote slots: SGLang Triton rows (``sglang_fused_moe_triton``) of the versions in
    :data:`SGLANG_CLAMPED_VERSIONS`, configurations in :data:`SGLANG_RAW_TRITON_CONFIGS`, with expert
    parallelism, and every Triton / Marlin row with expert parallelism of the versions in
    :data:`SGLANG_CLAMP_ALL_VERSIONS`; 0 elsewhere (other collectors and the framework layer use the
    engine's own masking)."""
    n = len(df)
    need = ("kernel_source", "backend_version", "hidden", "inter", "topk", "num_experts", "dtype")
    if not n or any(c not in df for c in need):
        return np.zeros(n)
    cfg = list(zip(*(df[c].to_numpy(dtype=np.int64) for c in ("hidden", "inter", "topk", "num_experts"))))
    flag = ((df["kernel_source"].astype(str) == "sglang_fused_moe_triton").to_numpy()
            & df["backend_version"].astype(str).isin(SGLANG_CLAMPED_VERSIONS).to_numpy()
            & df["dtype"].isin(SGLANG_RAW_TRITON_DTYPES).to_numpy()
            & np.array([c in SGLANG_RAW_TRITON_CONFIGS for c in cfg], dtype=bool)
            & (df["moe_ep"].to_numpy(dtype=np.float64) > 1))
    src = df["kernel_source"].astype(str).to_numpy()
    ver = df["backend_version"].astype(str).to_numpy()
    for v, sources in SGLANG_CLAMP_ALL_VERSIONS.items():
        flag |= ((ver == v) & np.isin(src, sources) & (df["moe_ep"].to_numpy(dtype=np.float64) > 1))
    out = np.zeros(n)
    if flag.any():
        sub = df[flag]
        out[flag] = moe_routing.collector_clamped_pairs_arrays(
            sub["num_tokens"].to_numpy(), sub["num_experts"].to_numpy(), sub["topk"].to_numpy(),
            sub["moe_ep"].to_numpy(), sub["skew"].to_numpy())
    return out


#: engines whose Triton fused-MoE kernel visits the remote slots under expert parallelism
MASKED_TRITON_ENGINES = ("sglang", "vllm")


def moe_masked_pairs(df: Any) -> np.ndarray:
    """Remote (token, expert) pairs each measured row's Triton fused-MoE kernel still visited under
    expert parallelism: SGLang's and vLLM's ``fused_moe_kernel`` launch the M blocks of the slots
    whose expert is not on this rank (id -1) and write zeros for them (``write_zeros_to_output``,
    sglang 0.5.14 ``moe_runner/triton_utils/fused_moe_triton_kernels.py``; vLLM's
    ``fused_moe.py`` likewise), and the activation and the top-k sum run over every slot of the
    T x topk caches. ``T x topk x (1 - 1/EP)`` on rows of the Triton kernel family
    (:func:`moe_kernels.kernel_family`) of :data:`MASKED_TRITON_ENGINES`, 0 elsewhere and on rows
    whose remote slots the collector clamped to expert 0 instead (:func:`moe_clamped_pairs`)."""
    n = len(df)
    if not n or "kernel_source" not in df:
        return np.zeros(n)
    K = moe_kernels
    tri = (K.kernel_families(df["kernel_source"].fillna("").to_numpy()) == K.TRITON)
    tri &= df["backend"].isin(MASKED_TRITON_ENGINES).to_numpy() if "backend" in df else False
    ep = np.maximum(df["moe_ep"].to_numpy(dtype=np.float64), 1.0)
    out = df["num_tokens"].to_numpy(dtype=np.float64) * df["topk"].to_numpy(dtype=np.float64) * (1.0 - 1.0 / ep)
    return np.where(tri & (moe_clamped_pairs(df) == 0.0), out, 0.0)


def moe_rule_facts(engine: str, gpu_key: str, kernel: str | None, group: str, num_tokens: Any, topk: Any,
                   num_experts: Any, inter: Any, moe_tp: Any, moe_ep: Any) -> tuple[Any, Any]:
    """(tuned-or-default configuration, masked remote pairs) of a MoE query answered by a group of the
    kernel family ``kernel``: the facts a measured row takes from its ``kernel_source``, here from the
    engine's rule (one implementation for scalar queries and label-less frames)."""
    if kernel != moe_kernels.TRITON:
        return moe_tuned.NOT_COVERED, 0.0 * num_tokens
    cfg = moe_tuned.triton_default_config(engine, gpu_key, group, num_experts, inter, moe_tp, moe_ep)
    masked = (num_tokens * topk * (1.0 - 1.0 / np.maximum(moe_ep, 1.0))
              if engine in MASKED_TRITON_ENGINES else 0.0 * num_tokens)
    return cfg, masked


def _moe_row_facts(df: Any, gpu: GPUFeatures, moe_form: str, backend: str | None, kernel: str | None,
                   group: str | None) -> dict[str, Any]:
    """``default_cfg`` and ``masked`` of :func:`moe` for a frame: from each row's ``kernel_source``
    (measured rows), else from the engine's rule when the caller passes the rule's kernel."""
    if "kernel_source" in df or kernel is None or group is None or not len(df):
        return {"default_cfg": moe_tuned.frame_default_config(df, gpu.key),
                "masked": moe_masked_pairs(df) if moe_form_masked(moe_form) else 0.0}
    # the cross-gen pool ("pooled") answers with each row's own engine's facts, as a query gets the asked engine's
    engines = (np.full(len(df), backend) if backend not in (None, "pooled") or "backend" not in df
               else df["backend"].astype(str).to_numpy())
    cfg, masked = np.zeros(len(df)), np.zeros(len(df))
    cols = [df[c].to_numpy(dtype=np.float64) for c in ("num_tokens", "topk", "num_experts", "inter", "moe_tp",
                                                      "moe_ep")]
    for i, eng in enumerate(engines.tolist()):
        cfg[i], masked[i] = moe_rule_facts(eng, gpu.key, kernel, group, *(c[i] for c in cols))
    return {"default_cfg": cfg, "masked": masked if moe_form_masked(moe_form) else 0.0}


#: MoE work-term forms. ``uniform``: calibration files fitted before 2026-11-24 session 9 (no
#: ``work_form`` key; an even ``T x topk / EP`` split, touched experts from independent
#: uniform choices, one 64-row tile efficiency). ``routed``: the routing the tables were
#: measured with (:mod:`llmplan.sim.kernel_calibration.moe_routing`: routed pairs, touched
#: experts and M tiles on the timed rank) and the tile work of both expert GEMMs. A fitted
#: model records its form and is always evaluated with it, so older files predict as before.
#: ``+masked`` (session 13): either, with the bytes of the masked remote pairs a Triton kernel
#: still visits under expert parallelism (:func:`moe_masked_pairs`); the cross-gen pool takes its
#: members' form, so it evaluates them as they were fitted.
MOE_FORM_UNIFORM = "uniform"
MOE_FORM_ROUTED = "routed"
MASKED_SUFFIX = "+masked"
MOE_FORM_UNIFORM_MASKED = MOE_FORM_UNIFORM + MASKED_SUFFIX
MOE_FORM_ROUTED_MASKED = MOE_FORM_ROUTED + MASKED_SUFFIX
MOE_FORMS = (MOE_FORM_UNIFORM, MOE_FORM_ROUTED, MOE_FORM_UNIFORM_MASKED, MOE_FORM_ROUTED_MASKED)
#: the form fits use unless told otherwise (calibration.fit.FitOptions.moe_form, `llmplan calibrate
#: --moe-form`): ``uniform+masked`` since session 13 (the shipped calibration until its refit:
#: ``uniform``; grouped-split MoE MAPE, docs/ACCURACY.md "MoE kernels: SGLang's tuned Triton
#: configurations and the masked remote pairs (session 13)"). ``routed`` improves the grouped-split
#: MoE MAPE on every GPU on seed 1 (mean 15.7 -> 14.7%) but not on seed 2 for L40S/H100/H200 (mean
#: 15.2 -> 14.9%), and costs ~1.3 s of routing per MoE plan process (docs/ACCURACY.md, "MoE
#: kernels (session 9)"): not yet the default.
MOE_FORM = MOE_FORM_UNIFORM_MASKED


def moe_form_masked(form: str) -> bool:
    """The work form counts the Triton kernels' masked remote pairs (:data:`MASKED_SUFFIX`)."""
    return str(form).endswith(MASKED_SUFFIX)


#: N tile of the expert GEMMs (CUTLASS/Triton grouped GEMMs run 128-wide output tiles)
MOE_TILE_N = 128


def moe(tokens: Any, hidden: Any, inter: Any, topk: Any, experts: Any, moe_tp: Any, moe_ep: Any,
        w_bytes: Any, block_scaled: Any, weight_only: Any, skew: Any, peak: Any, gpu: GPUFeatures,
        ops: Any = NP, matrices: Any = MOE_GATED_MATRICES, form: str = MOE_FORM, clamped: Any = 0.0,
        default_cfg: Any = 0.0, masked: Any = 0.0) -> Phys:
    """Fused expert layer on one GPU: ``matrices`` weight matrices of h x I per expert (3 gated,
    2 plain: :func:`moe_matrices`), the intermediate split ``moe_tp`` ways, the experts
    ``moe_ep`` ways; ``skew`` 0 is balanced routing, else the power-law exponent of the
    tables' routing. ``form`` picks the work terms (:data:`MOE_FORMS`). ``clamped``: further
    routed pairs the timed kernel computed on one local expert (only measured rows of SGLang's
    Triton collector with expert parallelism, :func:`moe_clamped_pairs`; 0 for a query: the
    engine masks remote experts). ``default_cfg``: 1 where the engine's Triton kernel runs its
    default launch configuration, no tuned file for the shape, -1 a tuned one, 0 not covered
    (:func:`moe_tuned.triton_default_config`); the last feature. ``masked``: remote pairs a Triton kernel still visits under expert parallelism
    (:func:`moe_masked_pairs`; a query answered by a Triton group: ``T x topk x (1 - 1/EP)``), their
    zero writes and reads added to the bytes in the masked forms only (:func:`moe_form_masked`)."""
    if form not in MOE_FORMS:
        raise ValueError(f"unknown MoE work form {form!r} (known: {', '.join(MOE_FORMS)})")
    masked = masked if moe_form_masked(form) else 0.0
    if form in (MOE_FORM_UNIFORM, MOE_FORM_UNIFORM_MASKED):
        return _moe_uniform(tokens, hidden, inter, topk, experts, moe_tp, moe_ep, w_bytes, block_scaled,
                            weight_only, skew, peak, gpu, ops, matrices, clamped, default_cfg, masked)
    if form not in (MOE_FORM_ROUTED, MOE_FORM_ROUTED_MASKED):
        raise ValueError(f"unknown MoE work form {form!r} (known: {', '.join(MOE_FORMS)})")
    local = ops.maximum(experts / moe_ep, 1.0)
    inter_l = inter / moe_tp
    # routed (token, expert) pairs, distinct experts and M tiles on the timed GPU
    if ops is PY:
        assign, touched, mtiles = moe_routing.routing_load(tokens, experts, topk, moe_ep, skew)
    else:
        assign, touched, mtiles = moe_routing.routing_load_arrays(tokens, experts, topk, moe_ep, skew)
    # the collector's clamped pairs run on local expert 0 (one more run of M tiles)
    assign = assign + clamped
    mtiles = mtiles + ops.ceil(clamped / moe_routing.TILE_M)
    n_up = (matrices - 1.0) * inter_l       # first GEMM (gate+up, or up): N = (m-1) I, K = hidden
    n_down = hidden                          # second GEMM (down): N = hidden, K = I
    flops, nbytes, t_c, t_m = _moe_work(tokens, hidden, inter_l, assign, touched, matrices, w_bytes, peak, gpu)
    nbytes, t_m = _masked_traffic(nbytes, t_m, masked, hidden, inter_l, matrices, gpu, ops)
    nt_up, nt_down = ops.ceil(n_up / MOE_TILE_N), ops.ceil(n_down / MOE_TILE_N)
    # issued tile work (every M tile of a touched expert times every N tile of both GEMMs) over the ideal
    issued = mtiles * moe_routing.TILE_M * MOE_TILE_N * (nt_up * hidden + nt_down * inter_l)
    q = ops.maximum(issued / (assign * (n_up * hidden + n_down * inter_l)), 1.0)
    units = mtiles * (nt_up + nt_down)
    x = [ops.log2(tokens), ops.log2(hidden), ops.log2(inter_l), ops.log2(topk), ops.log2(local),
         ops.log2(assign), ops.log2(assign / touched), ops.log2(touched / local), skew, ops.log2(w_bytes),
         block_scaled, weight_only, ops.log2(moe_tp), ops.log2(moe_ep), ops.log2(q * t_c / t_m),
         ops.log2(t_c + t_m), default_cfg + 0.0 * t_c, _k2_unaligned16(inter_l, ops) + 0.0 * t_c]
    return Phys(t_c, t_m, q, NO_L2 + 0.0 * t_c, 0.0 * t_c, ops.ceil(units / gpu.sm_count), flops, nbytes, x)


def _k2_unaligned16(inter_l: Any, ops: Any) -> Any:
    """1 where the down GEMM's reduction length (inter / TP, the ``K`` argument of the Triton
    ``fused_moe_kernel``) is not a multiple of 16 elements: Triton's JIT specializes integer
    arguments and strides divisible by 16 (``triton.jit``'s ``do_not_specialize_on_alignment``,
    https://triton-lang.org/main/python-api/generated/triton.jit.html) and loses the aligned
    loads otherwise. The tables step at exactly that boundary on Triton kernels (16,384 balanced
    tokens, EP 1): L40S vLLM per-tensor fp8 2816 / 704 / top-8 of 128 TP 4 / 8 / 16 / 32 3.9 /
    130.6 / 129.6 / 130.4 ms and 2048 / 768 TP 16 / 32 2.5 / 95.0 ms (inter / TP 44, 22 and 24),
    while the aligned 2048 / 512 stays at 2.5 / 2.4 ms; H100 vLLM bf16 Triton 2816 / 704 TP 4 / 8
    1.6 / 3.2 ms, 2048 / 768 TP 16 / 32 0.9 / 1.7 ms; CUTLASS/FlashInfer kernels show no step. The
    size of the step is left to the residual trees (not established from a source); without the
    flag they carried those rows onto aligned shapes."""
    return ops.flag(ops.ceil(inter_l / 16.0) * 16.0 > inter_l)


def _moe_work(tokens: Any, hidden: Any, inter_l: Any, assign: Any, touched: Any, matrices: Any, w_bytes: Any,
              peak: Any, gpu: GPUFeatures) -> tuple[Any, Any, Any, Any]:
    """(flops, bytes, compute us, memory us) of the expert GEMMs of both forms: ``assign`` routed
    (token, expert) pairs; each of the ``touched`` experts' weights read once, activations gathered
    per pair, tokens in and out."""
    flops = 2.0 * assign * hidden * inter_l * matrices
    nbytes = touched * matrices * hidden * inter_l * w_bytes + assign * hidden * 2.0 * 2.0 + tokens * hidden * 4.0
    return flops, nbytes, _us_compute(flops, peak), _us_memory(nbytes, gpu)


def _masked_traffic(nbytes: Any, t_m: Any, masked: Any, hidden: Any, inter_l: Any, matrices: Any,
                    gpu: GPUFeatures, ops: Any) -> tuple[Any, Any]:
    """(bytes, memory us) with the ``masked`` remote pairs' traffic (:func:`moe_masked_pairs`): zeros
    written for each expert GEMM's output block and read back by the top-k sum, ``(hidden + (m-1) I)
    x 2`` bytes per pair (docs/ACCURACY.md "MoE kernels: SGLang's tuned Triton configurations and the
    masked remote pairs (session 13)")."""
    if ops is PY and masked == 0.0:
        return nbytes, t_m
    nbytes = nbytes + masked * (hidden + (matrices - 1.0) * inter_l) * 2.0
    return nbytes, _us_memory(nbytes, gpu)


def _moe_uniform(tokens: Any, hidden: Any, inter: Any, topk: Any, experts: Any, moe_tp: Any, moe_ep: Any,
                 w_bytes: Any, block_scaled: Any, weight_only: Any, skew: Any, peak: Any, gpu: GPUFeatures,
                 ops: Any, matrices: Any, clamped: Any = 0.0, default_cfg: Any = 0.0, masked: Any = 0.0) -> Phys:
    """The ``uniform`` work terms (:data:`MOE_FORM_UNIFORM`), kept for calibration files fitted with them."""
    local = ops.maximum(experts / moe_ep, 1.0)
    inter_l = inter / moe_tp
    assign_l = tokens * topk / moe_ep                     # expected routed (token, expert) pairs here
    touched = local * (1.0 - (1.0 - 1.0 / local) ** assign_l)
    touched = ops.maximum(touched, ops.minimum(local, 1.0))
    # the collector's clamped pairs (0 for a query) run as one more, fully tiled expert
    assign = assign_l + clamped
    flops, nbytes, t_c, t_m = _moe_work(tokens, hidden, inter_l, assign, touched, matrices, w_bytes, peak, gpu)
    nbytes, t_m = _masked_traffic(nbytes, t_m, masked, hidden, inter_l, matrices, gpu, ops)
    per = assign_l / touched
    eff_t = per / (ops.ceil(per / 64) * 64)
    q = 1.0 / eff_t + clamped * (1.0 - 1.0 / eff_t) / assign    # issued over ideal work; 1 / eff_t when clamped = 0
    units = (touched * ops.ceil(per / 64) + ops.ceil(clamped / 64)) * ops.ceil(inter_l / 128)
    x = [ops.log2(tokens), ops.log2(hidden), ops.log2(inter_l), ops.log2(topk), ops.log2(local),
         ops.log2(assign), ops.log2(per), ops.log2(touched / local), skew, ops.log2(w_bytes), block_scaled,
         weight_only, ops.log2(moe_tp), ops.log2(moe_ep), ops.log2(q * t_c / t_m), ops.log2(t_c + t_m),
         default_cfg + 0.0 * t_c, _k2_unaligned16(inter_l, ops) + 0.0 * t_c]
    return Phys(t_c, t_m, q, NO_L2 + 0.0 * t_c, 0.0 * t_c, ops.ceil(units / gpu.sm_count), flops, nbytes, x)


def mla_prefill(batch: Any, q_len: Any, kv_len: Any, heads: Any, kv_bytes: Any, peak: Any, gpu: GPUFeatures,
                ops: Any = NP, nope: int = MLA_NOPE, rope: int = MLA_ROPE, v_dim: int = MLA_V) -> Phys:
    sm = gpu.sm_count
    ctx = ops.maximum(kv_len - q_len, 0)
    pairs = causal_pairs(q_len, ctx, 0 * q_len, ops)
    qk = nope + rope
    flops = 2.0 * batch * heads * pairs * (qk + v_dim)
    nbytes = batch * heads * (q_len * (qk + v_dim) * 2.0 + kv_len * (qk + v_dim) * kv_bytes)
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    ctas, eff_w, eff_t = _prefill_ctas(batch, heads, q_len, sm, ops)
    crit = 2.0 * ops.minimum(q_len, 128) * kv_len * (qk + v_dim) * sm / ops.maximum(flops / (batch * heads), 1.0)
    q = ops.maximum(ops.maximum(1.0 / eff_w, crit / (batch * heads)), 1.0)
    x = [ops.log2(batch), ops.log2(q_len), ops.log2(heads), ops.flag(kv_bytes < 2), ops.log2(ctas / sm), eff_w,
         eff_t, ops.log2(kv_len / q_len), ops.log2(q * t_c / t_m), ops.log2(t_c + t_m)]
    return Phys(t_c, t_m, q, NO_L2 + 0.0 * t_c, 0.0 * t_c, ops.ceil(ctas / sm), flops, nbytes, x)


def mla_decode(batch: Any, kv_len: Any, heads: Any, kv_bytes: Any, peak: Any, gpu: GPUFeatures,
               ops: Any = NP, kv_lora: int = MLA_KV_LORA, rope: int = MLA_ROPE) -> Phys:
    kv = ops.maximum(kv_len, 1)
    flops = 2.0 * batch * heads * kv * (2 * kv_lora + rope)
    nbytes = batch * kv * (kv_lora + rope) * kv_bytes + batch * heads * (kv_lora + rope) * 2.0 * 2.0
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    ws = nbytes / (gpu.l2_mb * 1e6)
    x = [ops.log2(batch), ops.log2(kv), ops.log2(heads), ops.flag(kv_bytes < 2),
         ops.log2(batch * heads / gpu.sm_count), ops.log2(ws), ops.log2(t_c + t_m), ops.log2(t_c / t_m)]
    waves = ops.ceil(batch * ops.ceil(heads / 64) / gpu.sm_count)
    # absorbed-MLA decode kernels (FlashMLA and kin) process heads in tiles of 64: fewer
    # heads per GPU still pay for a whole tile
    q = ops.ceil(heads / 64) * 64 / heads
    return Phys(t_c, t_m, q, ws, _l2_unit(nbytes, gpu), waves, flops, nbytes, x)


def mla_bmm(tokens: Any, heads: Any, post: Any, w_bytes: Any, peak: Any, gpu: GPUFeatures, ops: Any = NP,
            kv_lora: int = MLA_KV_LORA, nope: int = MLA_NOPE) -> Phys:
    """MLA's absorb batched matmuls, one per head: (tokens x nope) by (nope x kv_lora)
    before attention ("pre") and (tokens x kv_lora) by (kv_lora x v) after it ("post");
    both move ``heads x nope x kv_lora`` weights."""
    flops = 2.0 * tokens * heads * nope * kv_lora
    nbytes = heads * nope * kv_lora * w_bytes + tokens * heads * (nope + kv_lora) * 2.0
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    tt = ops.ceil(tokens / 64)
    eff = tokens / (tt * 64)
    units = heads * tt * ops.ceil(kv_lora / 128)
    ws = nbytes / (gpu.l2_mb * 1e6)
    q = ops.maximum(1.0 / eff, 1.0)
    x = [ops.log2(tokens), ops.log2(heads), post, eff, ops.log2(units / gpu.sm_count), ops.log2(ws),
         ops.log2(q * t_c / t_m), ops.log2(t_c + t_m)]
    return Phys(t_c, t_m, q, ws, _l2_unit(nbytes, gpu), ops.ceil(units / gpu.sm_count), flops, nbytes, x)


#: Gated DeltaNet chunk length of the chunked (prefill) kernels (FLA's chunk_gated_delta_rule)
GDN_CHUNK = 64


def gdn(batch: Any, seq_len: Any, tokens: Any, k_heads: Any, dk: Any, v_heads: Any, dv: Any, decode: bool,
        peak: Any, gpu: GPUFeatures, ops: Any = NP) -> Phys:
    """A Gated DeltaNet layer (short causal conv + gated delta-rule recurrence), heads per GPU.

    The recurrence keeps a (dk x dv) fp32 state per value head and sequence. Decode reads
    and writes it once per token; the chunked prefill does ~4 state-sized matmuls per chunk
    plus the intra-chunk (chunk x chunk) attention-like products."""
    state = batch * v_heads * dk * dv * 4.0
    act = tokens * (2.0 * k_heads * dk + 2.0 * v_heads * dv) * 2.0 + tokens * v_heads * 2.0 * 4.0
    if decode:
        flops = 6.0 * tokens * v_heads * dk * dv
        nbytes = 2.0 * state + act
    else:
        chunks = ops.ceil(seq_len / GDN_CHUNK)
        flops = batch * v_heads * (8.0 * chunks * GDN_CHUNK * dk * dv
                                   + 4.0 * chunks * GDN_CHUNK * GDN_CHUNK * (dk + dv))
        nbytes = act + 2.0 * state + batch * chunks * v_heads * dk * dv * 2.0
    t_c = _us_compute(flops, peak)
    t_m = _us_memory(nbytes, gpu)
    units = batch * v_heads
    ws = nbytes / (gpu.l2_mb * 1e6)
    if decode:
        x = [ops.log2(batch), ops.log2(v_heads), ops.log2(v_heads / k_heads), ops.log2(dk), ops.log2(dv),
             ops.log2(units / gpu.sm_count), ops.log2(ws), ops.log2(t_c / t_m), ops.log2(t_c + t_m)]
        q = 1.0 + 0.0 * t_c
    else:
        eff = seq_len / (ops.ceil(seq_len / GDN_CHUNK) * GDN_CHUNK)
        x = [ops.log2(batch), ops.log2(seq_len), ops.log2(tokens), ops.log2(v_heads), ops.log2(v_heads / k_heads),
             ops.log2(dk), ops.log2(dv), ops.log2(units / gpu.sm_count), eff, ops.log2(t_c / t_m),
             ops.log2(t_c + t_m)]
        q = ops.maximum(1.0 / eff, 1.0)
    return Phys(t_c, t_m, q, ws, _l2_unit(nbytes, gpu), ops.ceil(units / gpu.sm_count), flops, nbytes, x)


# ---------------------------------------------------------------------------------------------
# Frames -> Phys (vectorised), used by the fit and by validation
# ---------------------------------------------------------------------------------------------
def _col(df: Any, name: str) -> np.ndarray:
    return df[name].to_numpy(dtype=np.float64)


def _map(df: Any, name: str, table: dict[str, Any], default: Any) -> np.ndarray:
    return df[name].map(lambda v: table.get(v, default)).to_numpy(dtype=np.float64)


def _peak(df: Any, name: str, gpu: GPUFeatures) -> np.ndarray:
    return df[name].map(lambda v: gpu.peak(COMPUTE_DTYPE.get(v, "bf16"))).to_numpy(dtype=np.float64)


def frame_phys(family: str, df: Any, gpu: GPUFeatures, moe_form: str = MOE_FORM, backend: str | None = None,
               moe_kernel: str | None = None, moe_group: str | None = None) -> Phys:
    """Physical terms and features for every row of a canonical frame of one GPU
    (``moe_form``: the MoE work terms, :data:`MOE_FORMS`; ``backend``: the engine whose fitted model
    answers, for the GEMM collector's weight copies, :func:`gemm_bench_copies`; default: each row's
    own ``backend`` column, as the fit reads its rows). ``moe_kernel`` / ``moe_group``: for MoE rows
    that do not say which kernel they ran (no ``kernel_source``), the kernel family the engine's rule
    gives and the dtype group that answers: such rows get the tuned-or-default configuration fact and
    the masked remote pairs exactly as a query of that kernel does (:func:`moe_rule_facts`)."""
    c = lambda n: _col(df, n)  # noqa: E731
    if family == "gemm":
        wb = _map(df, "dtype", DTYPE_BYTES, 2.0)
        engines = np.full(len(df), backend) if backend is not None else (
            df["backend"].to_numpy() if "backend" in df else None)
        if engines is None:
            return gemm(c("m"), c("n"), c("k"), wb, _peak(df, "dtype", gpu), gpu,
                        act_q=gemm_act_quant(df["dtype"].to_numpy(), gpu))
        dts = df["dtype"].to_numpy()
        copies = gemm_bench_copies(engines, dts, c("n") * c("k") * wb, gpu)
        act_ws, out_ws = gemm_bench_buffers(engines, dts, copies)
        return gemm(c("m"), c("n"), c("k"), wb, _peak(df, "dtype", gpu), gpu, copies=copies, act_ws=act_ws,
                    out_ws=out_ws, act_q=gemm_act_quant(dts, gpu))
    if family == "attention_prefill":
        peak = df["attn_dtype"].map(lambda v: gpu.peak("fp8" if v == "fp8" else "bf16")).to_numpy(np.float64)
        return attention_prefill(c("batch"), c("q_len"), c("kv_len"), c("num_heads"), c("num_kv_heads"),
                                 c("head_dim"), _map(df, "kv_dtype", DTYPE_BYTES, 2.0),
                                 (df["attn_dtype"] == "fp8").to_numpy(np.float64), c("window"), peak, gpu)
    if family == "attention_decode":
        return attention_decode(c("batch"), c("kv_len"), c("num_heads"), c("num_kv_heads"), c("head_dim"),
                                _map(df, "kv_dtype", DTYPE_BYTES, 2.0), c("window"), gpu.peak("bf16"), gpu)
    if family == "moe":
        dt = df["dtype"]
        return moe(c("num_tokens"), c("hidden"), c("inter"), c("topk"), c("num_experts"), c("moe_tp"),
                   c("moe_ep"), _map(df, "dtype", DTYPE_BYTES, 2.0),
                   (dt == "fp8_block").to_numpy(np.float64),
                   dt.isin(["int4_wo", "w4a16_mxfp4"]).to_numpy(np.float64), c("skew"),
                   _peak(df, "dtype", gpu), gpu,
                   matrices=moe_matrices(df["kernel_source"]) if "kernel_source" in df else MOE_GATED_MATRICES,
                   form=moe_form, clamped=moe_clamped_pairs(df),
                   **_moe_row_facts(df, gpu, moe_form, backend, moe_kernel, moe_group))
    if family == "mla_prefill":
        return mla_prefill(c("batch"), c("q_len"), c("kv_len"), c("num_heads"),
                           _map(df, "kv_dtype", DTYPE_BYTES, 2.0), gpu.peak("bf16"), gpu)
    if family == "mla_decode":
        return mla_decode(c("batch"), c("kv_len"), c("num_heads"), _map(df, "kv_dtype", DTYPE_BYTES, 2.0),
                          gpu.peak("bf16"), gpu)
    if family == "mla_bmm":
        return mla_bmm(c("num_tokens"), c("num_heads"), (df["op"] == "post").to_numpy(np.float64),
                       _map(df, "dtype", DTYPE_BYTES, 2.0), _peak(df, "dtype", gpu), gpu)
    if family in ("gdn_prefill", "gdn_decode"):
        return gdn(c("batch"), c("seq_len"), c("num_tokens"), c("k_heads"), c("head_k_dim"), c("v_heads"),
                   c("head_v_dim"), family == "gdn_decode", gpu.peak("bf16"), gpu)
    raise KeyError(family)


def feature_matrix(phys: Phys) -> np.ndarray:
    """(rows, features) matrix of a vectorised :class:`Phys`."""
    n = len(np.atleast_1d(phys.t_c))
    return np.column_stack([np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for v in phys.x])


#: scalar evaluators used by the kernel model's fast path: family -> callable(**shape) -> Phys
ScalarPhys = Callable[..., Phys]

"""Per-kernel latency: the KernelModel protocol and its specification-only roofline default.

Each kernel is timed as ``max(FLOPs / (peak * eta_compute), bytes / (bw * eta_memory))``
with wave quantization over the SM count plus a fixed launch floor. The efficiencies here
are documented defaults; ``sim.calibrated`` provides a KernelModel fitted to measurements
(see ``llmplan calibrate``) that replaces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT
from llmplan.sim.kernel_calibration.features import PY, causal_pairs


@dataclass(frozen=True, slots=True)
class KernelTime:
    latency_ms: float
    flops: float = 0.0
    bytes: float = 0.0
    bound: str = "memory"     # compute | memory | latency | comm
    tier: str = "spec"        # measured | cross-gen | spec
    extrapolated: bool = False  # query lies outside the fitted shape range
    #: the engine whose measured table answered this query ("" for the spec tier and the
    #: cross-gen pool): part of the answer, so it never depends on earlier queries
    table: str = ""


@dataclass(frozen=True)
class Link:
    """A communication path: alpha-beta parameters."""

    name: str                 # nvlink | xgmi | pcie | network
    bw_gbps: float            # unidirectional GB/s per GPU
    latency_us: float         # per-message start-up latency (alpha)


class KernelModel(Protocol):
    """Latency of each operator family on one GPU for one engine's kernels.

    Shapes are per GPU (after tensor/expert parallelism). dtype names: bf16, fp8, fp4.
    """

    gpu: GPUSpec

    def gemm(self, m: int, n: int, k: int, dtype: str) -> KernelTime: ...

    def attention_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int,
                          num_kv_heads: int, head_dim: int, kv_dtype: str, window: int = 0) -> KernelTime:
        """``batch`` sequences each computing ``q_len`` new tokens against ``kv_len`` total
        keys (kv_len >= q_len; > q_len for chunked prefill after earlier context). ``window``:
        sliding-window layer, each query attends to at most ``window`` keys (0 = full)."""
        ...

    def attention_decode(self, batch: int, kv_len: float, num_heads: int, num_kv_heads: int,
                         head_dim: int, kv_dtype: str, window: int = 0) -> KernelTime:
        """One new token per sequence against ``kv_len`` keys (the sequence's context; a
        sliding-window layer, ``window`` > 0, reads at most ``window`` of them)."""
        ...

    def moe(self, num_tokens: int, hidden: int, inter: int, topk: int, num_experts: int,
            moe_tp: int, moe_ep: int, dtype: str, gated: bool = True,
            architecture: str | None = None) -> KernelTime:
        """Fused routed-expert computation for ``num_tokens`` tokens: gated experts (``gated``:
        SwiGLU gate/up + down, three h x I matrices) or plain ones (relu^2 up + down, two).
        ``architecture``: the model's (``ModelSpec.architecture``), from which a measured model
        names the kernel the engine runs (sim/kernel_calibration/moe_kernels.py); None: unknown."""
        ...

    def mla_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int, kv_lora_rank: int,
                    qk_nope_dim: int, qk_rope_dim: int, v_head_dim: int, kv_dtype: str) -> KernelTime: ...

    def mla_decode(self, batch: int, kv_len: float, num_heads: int, kv_lora_rank: int,
                   qk_rope_dim: int, kv_dtype: str) -> KernelTime: ...

    def memory_op(self, nbytes: float) -> KernelTime:
        """Elementwise / normalization / rotary: purely bandwidth bound."""
        ...

    def collective(self, op: str, message_bytes: float, num_gpus: int, link: Link) -> KernelTime:
        """op in {all_reduce, all_gather, reduce_scatter, alltoall, p2p}."""
        ...


#: Optional operators of the 2026 architectures. A kernel model that lacks one (the
#: calibrated model before it is fitted to the ``gdn`` / ``glm5_*`` / ``dsa_*`` tables) is
#: answered by :class:`RooflineKernelModel`, tier ``spec``, by the step model.
#:
#: * ``gdn(phase, batch, q_len, num_k_heads, num_v_heads, head_k_dim, head_v_dim, conv_kernel,
#:   state_dtype)``: one Gated DeltaNet layer (causal conv1d + gated delta rule; table ``gdn``,
#:   phase ``context`` = chunked scan over ``q_len`` new tokens per sequence, ``generation`` =
#:   one recurrent step per sequence).
#: * ``dsa_mqa_logits(batch, q_len, kv_len, index_n_heads, index_head_dim)``: the lightning
#:   indexer's fp8 scores of every cached key (table ``glm5_mqa_logits_module``).
#: * ``dsa_topk(batch, q_len, kv_len, topk)``: top-k selection over those scores
#:   (``glm5_topk_module``).
#: * ``dsa_attention(batch, q_len, kv_len, topk, num_heads, kv_lora_rank, qk_rope_dim,
#:   kv_dtype)``: sparse MLA over the selected keys (``glm5_dsa_attn_module``,
#:   FlashMLA ``flash_mla_sparse_fwd``).
#: * ``mamba2(phase, batch, q_len, n_groups, num_heads, d_state, head_dim, conv_kernel,
#:   state_dtype)``: one Mamba2 (SSD) layer of Nemotron-H (table ``mamba2``).
OPTIONAL_OPS = ("gdn", "mamba2", "dsa_mqa_logits", "dsa_topk", "dsa_attention")


# ---------------------------------------------------------------------------------------
# Specification-only defaults. Rationale for each constant:
#  * GEMM_ETA_COMPUTE 0.70: large bf16 GEMMs on H100/A100 reach 65-80% of dense peak in
#    cuBLAS (NVIDIA "Matrix Multiplication Background" guide; measured tables in
#    ../shared/measurements show 600-700 of 989 TFLOP/s on H100 for large shapes).
#  * MEM_ETA 0.80: STREAM-like kernels reach ~80-90% of HBM peak; decode GEMV ~75-85%.
#  * ATTN_PREFILL_ETA 0.55: FlashAttention-2/3 forward reaches 50-75% of peak
#    (Dao 2023; Shah et al. 2024 report up to 75% on H100 for FA3 in bf16).
#  * ATTN_DECODE_ETA_MEM 0.60: paged decode attention is bandwidth bound and loses to
#    page gathers and short rows.
#  * LAUNCH_FLOOR_US 5: a kernel launch inside a CUDA graph costs a few microseconds.
#  * COLLECTIVE alpha: NVLink all-reduce ~8 us start-up; PCIe ~15 us; network ~25 us.
# ---------------------------------------------------------------------------------------
GEMM_ETA_COMPUTE = 0.70
MEM_ETA = 0.80
ATTN_PREFILL_ETA = 0.55
ATTN_DECODE_ETA_MEM = 0.60
MOE_ETA_COMPUTE = 0.50
LAUNCH_FLOOR_US = 5.0
GEMM_TILE_M = 128
GDN_CHUNK = 64   # chunk length of the chunked gated-delta-rule scan (flash-linear-attention)
#  * GDN constants: set on the H100 SGLang rows of ../shared/measurements/h100_sxm/gdn.csv.gz,
#    conv1d + gated-delta-rule kernels summed per (model, shape) -- the same head shape is
#    measured for several Qwen3.5 sizes and must not be summed across them (an earlier fit did,
#    which made these constants twice too slow). Grid fit of the median absolute error:
#    chunked prefill at 3.5% of bf16 dense peak with a ~40 us multi-kernel floor (H100 median
#    ratio 0.99, median error 23%), decode moves its state at 90% of HBM bandwidth with a ~6 us
#    floor (0.97, 6%). H200/B200 rows are a check only: prefill 0.87/0.78, decode 0.86/0.80
#    (tests/test_arch_2026.py). Where a GPU has measured gdn tables, the calibrated model answers.
GDN_CONTEXT_ETA_COMPUTE = 0.035
GDN_CONTEXT_FLOOR_US = 40.0
GDN_DECODE_ETA_MEM = 0.9
GDN_DECODE_FLOOR_US = 6.0
#  * DSA floors: the sparse-MLA kernel (FlashMLA flash_mla_sparse_fwd) takes 55-74 us up to
#    ~128 sequences and the top-k kernel ~10 us once it runs, in the H100 glm5_dsa_attn_module
#    and glm5_topk_module rows of ../shared/measurements/h100_sxm.
DSA_ATTN_FLOOR_US = 60.0
#    Blackwell (sm100) runs the same kernel in about half that: the B200 glm5_dsa_attn_module rows
#    of ../shared/measurements/b200_sxm take 29-43 us (median 33.6) at 1-64 sequences in decode,
#    where H100 / H200 take 55-73 us (median 62.9 / 65.0). GB200, B300 and GB300 (same sm100 SMs,
#    no table) take the B200 figure; other GPUs the H100 one.
DSA_ATTN_FLOOR_US_BY_GPU = {"b200": 34.0, "gb200": 34.0, "b300": 34.0, "gb300": 34.0}
DSA_TOPK_FLOOR_US = 10.0
#  * Sparse-MLA prefill (FlashMLA flash_mla_sparse_fwd): the kernel takes q heads in multiples
#    of 64 on Hopper, 128 on Blackwell; SGLang's NSA backend zero-pads the local heads of a TP
#    rank up to that (GLM-5 at TP 8: 8 -> 64; `_forward_flashmla_sparse`, "FlashMLA sparse
#    kernel requires num_heads to be a multiple of 64 (Hopper) or 128 (Blackwell)",
#    sgl-project/sglang python/sglang/srt/layers/attention/nsa_backend.py, v0.5.x). It walks all
#    ``index_topk`` index slots of every query token whatever the context (slots past the causal
#    end hold -1 and are masked, as in decode), so its work is tokens x padded heads x topk.
#    Counted that way, the glm5_dsa_attn_module prefill rows (64 heads, isl >= 64) run at a
#    median 0.618 of dense bf16 peak on H100 (70 rows, 0.58-0.65 at isl 256-8192) and 0.610 on
#    H200 (check); FlashMLA's README quotes up to 640 TFLOP/s (0.65 of H800 peak) for it.
FLASHMLA_SPARSE_HEADS = 64
FLASHMLA_SPARSE_HEADS_BY_GPU = {"b200": 128, "gb200": 128, "b300": 128, "gb300": 128}
DSA_PREFILL_ETA_COMPUTE = 0.618
#    The top-k select reads each score row ~3 times (multi-pass radix select; median
#    measured/one-read ratio 3.3 over the H100 prefill rows of glm5_topk_module).
DSA_TOPK_READS = 3.0
GEMM_TILE_N = 128


def waves(m: int, n: int, sm_count: int, k: int = 4096, tile_n: int = GEMM_TILE_N) -> float:
    """Tile and wave quantization factor (>= 1) of a GEMM's compute time.

    Kernels pick a row tile matching small m (16..128) and split K across SMs when there
    are fewer output tiles than SMs (cuBLAS/CUTLASS heuristics); what remains is the
    padding of m to the tile and of the tile count to whole waves over the SMs.
    """
    tile_m = min(GEMM_TILE_M, max(16, 1 << max(0, math.ceil(math.log2(max(m, 1))))))
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    if tiles < sm_count:
        tiles *= max(1, min(k // 512, math.ceil(sm_count / tiles)))
    wave_pad = math.ceil(tiles / sm_count) * sm_count / tiles
    m_pad = math.ceil(m / tile_m) * tile_m / m
    n_pad = math.ceil(n / tile_n) * tile_n / n
    return max(1.0, wave_pad * m_pad * n_pad)


#: kernel dtype groups the roofline times as their storage precision
_ROOF_DTYPE = {"fp8_block": "fp8", "mxfp4": "fp4"}


def _bytes(dtype: str) -> float:
    # block-scaled fp8 ("fp8_block", model_catalog.gemm_dtypes) is fp8 to the roofline, MXFP4
    # experts ("mxfp4", model_catalog.gemm_dtypes.moe_query_dtype) fp4
    return BYTES_PER_ELEMENT.get(_ROOF_DTYPE.get(dtype, dtype), 2.0)


class RooflineKernelModel:
    """Specification-only roofline with documented default efficiencies (tier ``spec``)."""

    tier = "spec"

    def __init__(self, gpu: GPUSpec):
        self.gpu = gpu
        self._bw = gpu.hbm_bw_gbps * 1e9
        self._floor_ms = LAUNCH_FLOOR_US / 1e3

    def _roof(self, flops: float, nbytes: float, dtype: str, eta_c: float, eta_m: float,
              quant: float = 1.0) -> KernelTime:
        # low-precision compute where the GPU has it; else weight-only (bf16 tensor cores)
        dtype = _ROOF_DTYPE.get(dtype, dtype)
        peak = self.gpu.peak_tflops(dtype if dtype in ("fp8", "fp4", "int8") and self.gpu.supports(dtype) else "bf16") * 1e12
        tc = flops * quant / (peak * eta_c) * 1e3 if flops else 0.0
        tm = nbytes / (self._bw * eta_m) * 1e3 if nbytes else 0.0
        t = max(tc, tm)
        bound = "compute" if tc >= tm else "memory"
        if t < self._floor_ms:
            return KernelTime(self._floor_ms, flops, nbytes, "latency", self.tier)
        return KernelTime(t + self._floor_ms * 0.2, flops, nbytes, bound, self.tier)

    def gemm(self, m, n, k, dtype):
        b = _bytes(dtype)
        flops = 2.0 * m * n * k
        nbytes = (m * k) * 2.0 + (k * n) * b + (m * n) * 2.0
        return self._roof(flops, nbytes, dtype, GEMM_ETA_COMPUTE, MEM_ETA, waves(m, n, self.gpu.sm_count, k))

    def attention_prefill(self, batch, q_len, kv_len, num_heads, num_kv_heads, head_dim, kv_dtype, window=0):
        # causal: the new block attends to kv_len - q_len earlier keys fully and to itself causally;
        # a sliding window caps every query's keys at ``window`` (features.causal_pairs)
        pairs = causal_pairs(q_len, max(kv_len - q_len, 0), window, PY)
        flops = 4.0 * batch * num_heads * head_dim * pairs
        nbytes = batch * (2 * q_len * num_heads * head_dim * 2.0
                          + 2 * kv_len * num_kv_heads * head_dim * _bytes(kv_dtype))
        return self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, MEM_ETA)

    def attention_decode(self, batch, kv_len, num_heads, num_kv_heads, head_dim, kv_dtype, window=0):
        kv_len = min(kv_len, window) if window > 0 else kv_len
        flops = 4.0 * batch * num_heads * head_dim * kv_len
        nbytes = batch * (2 * kv_len * num_kv_heads * head_dim * _bytes(kv_dtype) + 2 * num_heads * head_dim * 2.0)
        return self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, ATTN_DECODE_ETA_MEM)

    def moe(self, num_tokens, hidden, inter, topk, num_experts, moe_tp, moe_ep, dtype, gated=True, architecture=None):
        local_experts = max(1, num_experts // moe_ep)
        inter_local = inter / moe_tp
        mats = 3.0 if gated else 2.0    # h x I weight matrices per expert (gate, up, down / up, down)
        # expected number of distinct local experts touched by num_tokens*topk routed tokens
        assignments = num_tokens * topk / moe_ep
        touched = local_experts * (1.0 - (1.0 - 1.0 / local_experts) ** max(assignments, 0.0))
        flops = 2.0 * assignments * hidden * inter_local * mats
        nbytes = touched * mats * hidden * inter_local * _bytes(dtype) + 2 * assignments * hidden * 2.0 * 2
        return self._roof(flops, nbytes, dtype, MOE_ETA_COMPUTE, MEM_ETA)

    def mla_prefill(self, batch, q_len, kv_len, num_heads, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim, kv_dtype):
        pairs = q_len * (kv_len - q_len) + q_len * (q_len + 1) / 2
        flops = 2.0 * batch * num_heads * pairs * (qk_nope_dim + qk_rope_dim + v_head_dim)
        nbytes = batch * kv_len * (kv_lora_rank + qk_rope_dim) * _bytes(kv_dtype) + \
            batch * q_len * num_heads * (qk_nope_dim + qk_rope_dim + v_head_dim) * 2.0
        return self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, MEM_ETA)

    def mla_decode(self, batch, kv_len, num_heads, kv_lora_rank, qk_rope_dim, kv_dtype):
        # absorbed MLA: each head attends over the latent (kv_lora_rank + rope) per token
        flops = 2.0 * batch * num_heads * kv_len * (2 * kv_lora_rank + qk_rope_dim)
        nbytes = batch * kv_len * (kv_lora_rank + qk_rope_dim) * _bytes(kv_dtype)
        return self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, ATTN_DECODE_ETA_MEM)

    def memory_op(self, nbytes):
        return self._roof(0.0, nbytes, "bf16", 1.0, MEM_ETA)

    # ---- 2026 architectures (see OPTIONAL_OPS)
    def gdn(self, phase, batch, q_len, num_k_heads, num_v_heads, head_k_dim, head_v_dim, conv_kernel,
            state_dtype="fp32"):
        """Gated DeltaNet layer (causal conv1d + gated delta rule).

        Decode (``generation``): one recurrent step per sequence, bound by reading and
        writing the whole recurrent state (plus conv state and q/k/v) at GDN_DECODE_ETA_MEM.
        Prefill (``context``): the chunked scan (chunk 64; flash-linear-attention Triton
        kernels) runs far below tensor-core peak, so it is timed as compute at
        GDN_CONTEXT_ETA_COMPUTE of bf16 peak, with a multi-kernel floor. FLOPs: 6 per state
        element and token (read-out, prediction, rank-1 update), the intra-chunk attention
        and the conv."""
        tokens = batch * q_len
        state = num_v_heads * head_k_dim * head_v_dim
        channels = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
        sb = _bytes(state_dtype)
        if phase == "generation":
            flops = 6.0 * tokens * state + 2.0 * tokens * channels * conv_kernel
            nbytes = (2.0 * batch * state * sb + tokens * (channels + 2 * num_v_heads * head_v_dim) * 2.0
                      + batch * (conv_kernel - 1) * channels * 2.0 * 2)
            t = self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, GDN_DECODE_ETA_MEM)
            floor_us = GDN_DECODE_FLOOR_US
        else:
            chunks = batch * math.ceil(q_len / GDN_CHUNK)
            intra = 2.0 * tokens * min(q_len, GDN_CHUNK) * num_v_heads * (head_k_dim + head_v_dim)
            flops = 6.0 * tokens * state + intra + 2.0 * tokens * channels * conv_kernel
            nbytes = 2.0 * chunks * state * sb + tokens * (channels + 2 * num_v_heads * head_v_dim) * 2.0
            t = self._roof(flops, nbytes, "bf16", GDN_CONTEXT_ETA_COMPUTE, MEM_ETA)
            floor_us = GDN_CONTEXT_FLOOR_US
        return self._floored(t, floor_us)

    def mamba2(self, phase, batch, q_len, n_groups, num_heads, d_state, head_dim, conv_kernel, state_dtype="fp32"):
        """Mamba2 (SSD) layer: the same state-space shape as a GDN layer (``num_heads x
        d_state x head_dim`` state, conv over x/B/C), timed with the GDN constants."""
        return self.gdn(phase, batch, q_len, n_groups, num_heads, d_state, head_dim, conv_kernel, state_dtype)

    def dsa_mqa_logits(self, batch, q_len, kv_len, index_n_heads, index_head_dim):
        """Indexer scores: every query token against every cached fp8 indexer key (causal)."""
        pairs = q_len * max(0.0, kv_len - q_len) + q_len * (q_len + 1) / 2
        flops = 2.0 * batch * pairs * index_n_heads * index_head_dim
        # fp8 keys + fp32 scale per key, fp8 queries, fp32 scores written
        nbytes = batch * (kv_len * (index_head_dim + 4.0) + q_len * index_n_heads * index_head_dim + pairs * 4.0)
        return self._roof(flops, nbytes, "fp8", ATTN_PREFILL_ETA, MEM_ETA)

    def dsa_topk(self, batch, q_len, kv_len, topk):
        """Top-k over the fp32 scores of each query token (DSA_TOPK_READS reads of the score
        row); skipped when the context holds no more than ``topk`` keys."""
        if kv_len <= topk:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        rows = batch * q_len
        nbytes = rows * (kv_len * 4.0 * DSA_TOPK_READS + topk * 4.0)
        return self._floored(self.memory_op(nbytes), DSA_TOPK_FLOOR_US)

    def dsa_attention(self, batch, q_len, kv_len, topk, num_heads, kv_lora_rank, qk_rope_dim, kv_dtype):
        """Sparse MLA (absorbed form) over the selected keys. Decode and prefill process
        ``topk`` index slots per token whatever the context (FlashMLA sparse pads short
        contexts); prefill runs heads padded to FLASHMLA_SPARSE_HEADS."""
        tokens = batch * q_len
        if q_len > 1:  # flash_mla_sparse_fwd: padded heads, every index slot (FLASHMLA_SPARSE_HEADS)
            pad = FLASHMLA_SPARSE_HEADS_BY_GPU.get(self.gpu.key, FLASHMLA_SPARSE_HEADS)
            heads = -(-num_heads // pad) * pad
            flops = 2.0 * tokens * heads * topk * (2 * kv_lora_rank + qk_rope_dim)
            nbytes = min(tokens * topk, batch * max(kv_len, topk)) * (kv_lora_rank + qk_rope_dim) * _bytes(kv_dtype) \
                + tokens * heads * (kv_lora_rank + qk_rope_dim) * 2.0 * 2
            t = self._roof(flops, nbytes, "bf16", DSA_PREFILL_ETA_COMPUTE, MEM_ETA)
            return self._floored(t, DSA_ATTN_FLOOR_US_BY_GPU.get(self.gpu.key, DSA_ATTN_FLOOR_US))
        keys = float(topk)
        flops = 2.0 * tokens * num_heads * keys * (2 * kv_lora_rank + qk_rope_dim)
        nbytes = min(batch * keys, batch * max(kv_len, keys)) * (kv_lora_rank + qk_rope_dim) * _bytes(kv_dtype) \
            + tokens * num_heads * (kv_lora_rank + qk_rope_dim) * 2.0 * 2
        t = self._roof(flops, nbytes, "bf16", ATTN_PREFILL_ETA, ATTN_DECODE_ETA_MEM)
        return self._floored(t, DSA_ATTN_FLOOR_US_BY_GPU.get(self.gpu.key, DSA_ATTN_FLOOR_US))

    def _floored(self, t: KernelTime, floor_us: float) -> KernelTime:
        floor_ms = floor_us / 1e3
        return t if t.latency_ms >= floor_ms else KernelTime(floor_ms, t.flops, t.bytes, "latency", self.tier)

    def collective(self, op, message_bytes, num_gpus, link):
        if num_gpus <= 1 and op != "p2p":
            return KernelTime(0.0, 0.0, 0.0, "comm", self.tier)
        n = max(num_gpus, 2)
        # bytes each GPU sends over its link (ring algorithms)
        factor = {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n,
                  "reduce_scatter": (n - 1) / n, "alltoall": (n - 1) / n, "p2p": 1.0}[op]
        steps = {"all_reduce": 2 * (n - 1), "p2p": 1}.get(op, n - 1)
        alpha_ms = link.latency_us / 1e3 * (1 + 0.1 * steps)
        beta_ms = factor * message_bytes / (link.bw_gbps * 1e9 * 0.8) * 1e3
        return KernelTime(alpha_ms + beta_ms, 0.0, factor * message_bytes, "comm", self.tier)

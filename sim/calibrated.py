"""KernelModel fitted to measured kernel latencies (``llmplan calibrate``).

Which fitted model answers a query, and with which tier, is decided by
:mod:`llmplan.sim.kernel_calibration.tiers`, the implementation that ``validate kernels`` also
uses (through :func:`llmplan.sim.kernel_calibration.predict.predict_frame`), so a validation
figure is the figure ``plan`` gets. Tiers (``KernelTime.tier``):

* ``measured``: the calibration has this GPU (same catalog key and the same performance
  figures): its own fitted parameters for the asked engine (``backend``), or for another
  engine measured on the same GPU when the asked one was not (A100 sglang -> A100 vllm);
* ``sibling``: a GPU without measurements that has the same compute silicon as a measured
  one (same SM count, dense bf16/fp8/fp4 TFLOP/s and L2 size; only memory capacity or
  bandwidth, links, power or price differ: H200 SXM <- H100 SXM, A100 40GB <- A100 80GB,
  a what-if "H100 with 2x bandwidth"): the measured GPU's own fitted parameters (base +
  residual ensembles; engines fall back as in the measured tier) evaluated with this GPU's
  specification figures, so memory-bound terms see its bandwidth. Its collectives use the
  sibling's measured curves when the link figures agree, else the sibling's alpha-beta fit
  over this GPU's link bandwidth;
* ``cross-gen``: any other GPU, including what-if GPUs whose compute figures were
  overridden: the pooled model of the measured GPUs applied to this GPU's specification;
* ``spec``: families never measured (``memory_op``; a dtype no GPU measured) delegate to
  :class:`sim.kernels.RooflineKernelModel`.

``KernelTime.extrapolated`` is set when the query lies outside the shape range fitted for
that family/GPU (or the link is not the one measured).

Collectives: ``collective("all_reduce", ...)`` is the TP all-reduce of activations: the
engine's custom all-reduce (CUDA-graph launch) for messages up to 8 MiB inside the
measured NVLink domain (PCIe: only between 2 GPUs), NCCL otherwise; other ops use the
NCCL tables. A link other than the measured one (PCIe or network on an NVLink GPU) uses
the alpha-beta model over that link's bandwidth plus its start-up latency per step.

MLA: ``mla_prefill``/``mla_decode`` time the attention core only (fitted on the
kernel-level ``mla_context``/``mla_generation`` tables); the step model times the MLA
projections as GEMMs. Engines that prefill in the MHA form while the ``mla_context`` table
answering them measures the absorbed form (SGLang, vLLM: :data:`MLA_PREFILL_MHA`) time the
prefill core with their context-attention table instead.

Calls are cached per model instance (the step model repeats shapes), and the uncached
scalar path evaluates the fitted model in plain Python plus a few numpy calls.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.errors import UserError
from llmplan.sim.kernels import KernelModel, KernelTime, Link, RooflineKernelModel

from llmplan.sim.kernel_calibration.calib_file import Calibration, load_calibration
from llmplan.sim.kernel_calibration.collectives import CUSTOM_AR_MAX_BYTES, OPS, ring_steps
from llmplan.sim.kernel_calibration.features import MOE_GATED_MATRICES, MOE_PLAIN_MATRICES
from llmplan.sim.kernel_calibration.family_model import moe_facts_kernel, scalar_phys
from llmplan.sim.kernel_calibration.moe_kernels import engine_moe_kernel
from llmplan.sim.kernel_calibration.attention_kernels import engine_attention_kernel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures, link_kind
from llmplan.sim.kernel_calibration.tiers import choose_tier, roofline_dtype, spec_gdn, spec_mla_bmm
from llmplan.sim.trtllm_fp8_inputs import quantize_ms

DEFAULT_MOE_SKEW = 1.01   # routing imbalance assumed for MoE (power-law exponent; 0 = balanced)
_CACHE_SIZE = 1 << 16
#: dtype group that times an ``fp8`` fused-MoE query. The step model says only "fp8", and
#: the fp8 MoE checkpoints served in practice (DeepSeek-V3, Qwen3-*-FP8, MiniMax-M2.x,
#: GLM-4.x-FP8) are block-scaled (128x128 weight blocks), which vLLM runs with its
#: block-fp8 kernels; its per-tensor ``fp8`` group (the ModelOpt FlashInfer-CUTLASS path)
#: is 3-4x slower at decode token counts (H100, hidden 3072 / inter 1024, 256 experts
#: top-8, EP4, 64 tokens: 1.10 ms against 0.24 ms). Engines without a block-fp8 group
#: (TensorRT-LLM) fall back to their ``fp8`` group; both count as exact.
#: Dense GEMMs follow the checkpoint's scaling instead (model_catalog.gemm_dtypes): ``fp8_block``
#: queries use the block-fp8 gemm group and fall back to ``fp8`` where an engine/GPU lacks it
#: (``extrapolated`` is then set: GROUP_FALLBACK's second choice is not exact).
MOE_FP8_GROUP = "fp8_block"
#: engines whose measured dense ``fp8_block`` GEMM tables are host-bound: vLLM 0.24's block
#: kernels never time below 0.055 ms (FlashInfer), 0.078 ms (DeepGEMM) and 0.151 ms (CUTLASS
#: block) on H100/H200, at any shape, while its per-tensor CUTLASS kernel and SGLang's DeepGEMM
#: reach 0.005 ms: a per-call dispatch floor that CUDA graphs remove in serving. Replaying the
#: served vLLM rows of block-fp8 checkpoints with that group over-predicts TPOT (MiniMax-M2.5
#: H200, N <= 4: pred/meas 1.69 against 0.95 with the per-tensor group). Their block-fp8 GEMMs
#: are timed with the ``fp8`` group instead, flagged ``extrapolated`` (not the kernel they run).
GEMM_FP8_BLOCK_HOST_BOUND = frozenset({"vllm"})
#: engines whose measured per-tensor ``fp8`` GEMM tables carry a per-call floor of eager
#: activation quantization: TensorRT-LLM's ``torch_flow`` fp8 op never times below 0.0118 ms on
#: H100, H200 or B200 alike, while its block-fp8 GEMM reaches 0.0042 ms and bf16 0.0024 ms; per
#: shape it is 6.7-7.3 us (median) slower than its block-fp8 kernel at m <= 64, the floor of its
#: own activation-quantization table (``computescale``: 6.7 us minimum, 7.9 us median), and
#: within 1% of it at m = 256-1024 (median ratio 0.99-1.00), 5-7% faster above m = 1,024. Under
#: CUDA graphs the launches go and the quantization is a few-microsecond kernel, so these GEMMs
#: take the smaller of the engine's ``fp8`` and ``fp8_block`` figures (same GPU, same engine):
#: the block figure where the floor dominates (flagged ``extrapolated``), the per-tensor one above.
GEMM_FP8_TENSOR_FLOOR = frozenset({"trtllm"})
#: fused-MoE dtypes of 4-bit float (MXFP4 / NVFP4) checkpoints
MOE_FP4_DTYPES = frozenset({"fp4", "nvfp4", "mxfp4", "w4a16_mxfp4", "w4a8_mxfp4"})
#: engine -> the engine whose measured fp4 fused-MoE kernel it runs where it has none of its
#: own on a GPU. TensorRT-LLM runs MXFP4 MoE on Hopper (BF16 activations) with its ``TRITON``
#: backend, the default there ("For Hopper, the default MoE backend is TRITON",
#: https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html,
#: 1.1-1.3): OpenAI's triton_kernels MXFP4 expert matmuls, the kernel vLLM's gpt-oss path runs
#: (``vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic`` in the H100/H200 tables).
#: The TensorRT-LLM tables hold no fp4 MoE on Hopper, and without this the query fell to
#: SGLang's ``fused_moe_triton`` w4a16 kernel, 2.4x slower at the gpt-oss-120b decode shape
#: (H200, 64 tokens: 0.90 ms against 0.37 ms for the OpenAI kernel).
MOE_FP4_STAND_IN = {"trtllm": "vllm"}
#: engine -> the fused-MoE dtype group an MXFP4 checkpoint (gpt-oss) runs on GPUs with fp4 tensor
#: cores (Blackwell); the step model asks ``mxfp4`` for those experts (model_catalog.gemm_dtypes.
#: moe_query_dtype), never the NVFP4 ``fp4`` group, which is a W4A4 kernel for 16-value-block
#: NVFP4 checkpoints (on B200 vLLM's NVFP4 group times the gpt-oss-120b MoE at 0.35 ms for 1,024
#: tokens, its own gpt-oss MXFP4 kernel measures 0.88 ms). TensorRT-LLM: "For Blackwell, the
#: default MoE backend is TRTLLM", MXFP8 activations x MXFP4 weights (support matrix of
#: https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html,
#: 1.1-1.3) = its measured ``w4a8_mxfp4_mxfp8`` table. vLLM: Blackwell runs "a new MoE kernel from
#: FlashInfer" (https://blog.vllm.ai/2025/08/05/gpt-oss.html), with BF16 activations by default
#: (MXFP8 activations only with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1) = the
#: ``vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16`` kernel of its B200 table (``w4a16_mxfp4``).
#: SGLang: its gpt-oss MXFP4 path was measured on B200 only with MXFP8 activations
#: (``sglang_mxfp4_flashinfer_trtllm_moe``, ``w4a8_mxfp4_mxfp8``). GPUs without fp4 tensor cores
#: (Hopper) run MXFP4 weights with BF16 activations (TensorRT-LLM TRITON on H200, same guide;
#: vLLM's Triton matmul_ogs, same blog): ``w4a16_mxfp4``, the group an ``fp4`` query reached there.
MXFP4_MOE_GROUP = {"trtllm": "w4a8_mxfp4", "sglang": "w4a8_mxfp4", "vllm": "w4a16_mxfp4"}
#: engines that run an MLA prefill in the MHA form (kv_b_proj expands the latent to per-head K/V,
#: then ordinary attention with qk head dim nope + rope = 192 and v head dim 128 over bf16 K/V)
#: while the ``mla_context`` table that would answer them measures the absorbed form (MQA over
#: the 576/512-wide latent, ~3.4x the FLOPs) or does not exist. SGLang 0.5.x dispatches an extend
#: without cached prefix (or with at least SGL_CHUNKED_PREFIX_CACHE_THRESHOLD = 8192 prefix tokens)
#: to MHA_ONE_SHOT / MHA_CHUNKED_KV on its Hopper default backend fa3 and on flashinfer / flashmla /
#: trtllm_mla (python/sglang/srt/models/deepseek_common/attention_backend_handler.py,
#: ``_handle_attention_backend``; Hopper MLA default fa3:
#: https://docs.sglang.io/advanced_features/attention_backend.html), while aiconfigurator's SGLang
#: collector times ``mla_context`` on Hopper through FlashAttentionBackend with head dim 576 and
#: v head dim 512 (collector/sglang/collect_mla.py, aiconfigurator 0.12; 1.99 ms at 16 heads x
#: 8,192 tokens on H200: 588 TFLOP/s in the absorbed form, 173 in the MHA form; TensorRT-LLM's
#: table, the MHA form, 0.63 ms). vLLM has no ``mla_context`` table (its query fell to SGLang's)
#: and its MLA prefill is the MHA form too ("the compute friendly approach for prefill", context
#: chunks up-projected; https://docs.vllm.ai/en/v0.10.2/api/vllm/v1/attention/backends/mla/common.html,
#: unchanged in 0.18: .../v0.18.0/api/vllm/model_executor/layers/attention/mla_attention/).
#: These engines time the prefill core with their own measured context-attention table at the
#: FLOP-equivalent head dim (192 + 128) / 2 (the step model's convention for unequal K/V dims).
#: TensorRT-LLM keeps its ``mla_context`` table (MHA form, its own kernel).
MLA_PREFILL_MHA = frozenset({"sglang", "vllm"})
#: SGLang: a prefill batch with cached prefix below this many tokens (summed over the batch)
#: runs the absorbed MLA kernel instead (SGL_CHUNKED_PREFIX_CACHE_THRESHOLD default)
SGLANG_MHA_PREFIX_THRESHOLD = 8192


class CalibratedKernelModel:
    """A :class:`sim.kernels.KernelModel` backed by a calibration file."""

    def __init__(self, gpu: GPUSpec, backend: str = "vllm", calibration: Calibration | None = None,
                 moe_skew: float = DEFAULT_MOE_SKEW, allreduce_mode: str = "graph"):
        self.gpu = gpu
        self.backend = backend
        self.cal = calibration if calibration is not None else load_calibration(None)
        self.moe_skew = float(moe_skew)
        self.allreduce_mode = allreduce_mode
        self._gf = GPUFeatures.from_spec(gpu)
        #: the tier and stand-in models: the one implementation shared with predict_frame
        self.choice = choose_tier(self.cal, self._gf, vendor=getattr(gpu, "vendor", None))
        self.tier = self.choice.tier
        self.measured = self.tier == "measured"
        #: measured GPU whose fitted parameters stand in (itself, its sibling, or None)
        self.source_gpu: str | None = self.choice.source_gpu
        self._feat = self.choice.features
        self._roof = RooflineKernelModel(gpu)
        self._coll = self.choice.collectives
        for name in ("gemm", "attention_prefill", "attention_decode", "moe", "mla_prefill", "mla_decode",
                     "mla_bmm", "gated_delta_net", "collective", "gemm_prequantized"):
            setattr(self, "_c_" + name, functools.lru_cache(maxsize=_CACHE_SIZE)(getattr(self, "_" + name)))
        #: (family, dtype, prefer) -> the candidate and dtype group that answer it (:meth:`_resolve`)
        self._resolved: dict[tuple[str, str | None, str | None], tuple[Any, str, bool] | None] = {}
        # typed: KernelTime.bytes keeps the caller's int or float
        self._c_memory_op = functools.lru_cache(maxsize=_CACHE_SIZE, typed=True)(self._roof.memory_op)

    # -- model selection (llmplan.sim.kernel_calibration.tiers) -----------------------------
    def _predict(self, family: str, dtype: str | None, q: dict[str, Any], range_shape: dict[str, float],
                 exact_dims: bool = True, also_exact: frozenset[str] = frozenset(),
                 prefer: str | None = None, moe_query: tuple[int, str | None] | None = None,
                 attn_query: tuple[Any, ...] | None = None) -> KernelTime | None:
        found = self._resolve(family, dtype, prefer, moe_query, attn_query)
        if found is None:
            return None
        cand, group, exact = found
        fm, tier = cand.model, cand.tier
        exact = exact or group in also_exact
        # which engine's table answered travels with the answer (KernelTime.table): no
        # per-model record that the first query of a family would fix for all later ones
        table = cand.backend if tier != "cross-gen" else ""
        gm = fm.group(group)
        # MoE: the kernel's engine facts (tuned configuration, masked pairs) are the asked engine's when
        # the cross-gen pool answers, as its members' rows (and the pooled validation rows) had them
        kern = (moe_facts_kernel(fm, group, cand.backend == "pooled" and moe_query is not None,
                                 lambda: engine_moe_kernel(self.backend, self.gpu.key, group.split("/")[0],
                                                           moe_query[0], moe_query[1]))
                if family == "moe" else None)
        phys = scalar_phys(family, cand.features, group.split("/")[0], q, fm.work_form, cand.backend, kern,
                           self.backend if cand.backend == "pooled" else None)
        alt = fm.shared_gbt if fm.shared_gbt is not None and gm.outside_config(family, range_shape) else None
        ms, bound = gm.predict_one(phys, alt)
        extrap = (not exact) or (not exact_dims) or gm.outside(range_shape)
        return KernelTime(ms, float(phys.flops), float(phys.nbytes), bound, tier, extrap, table)

    def _resolve(self, family: str, dtype: str | None, prefer: str | None,
                 moe_query: tuple[int, str | None] | None = None,
                 attn_query: tuple[Any, ...] | None = None) -> tuple[Any, str, bool] | None:
        """(candidate, dtype group, exact) answering a family and query dtype: the first of the
        stand-in GPU's engines in order, then (only if needed) the cross-gen pool, that has a
        group for it (None: no candidate has). Depends on nothing but the arguments, so it is
        remembered per (family, dtype, prefer, moe_query). ``moe_query``: MoE, (expert-parallel
        size, model architecture), from which :func:`moe_kernels.engine_moe_kernel` names the
        kernel family this engine runs for the dtype group found; the candidate then answers
        with that family's group (FamilyModel.resolve_group; unknown family: the dtype group).
        ``attn_query``: attention, (head dim, query heads, KV heads, KV dtype, window[, prefill length
        class: 1 or 2 for longer]), from which
        :func:`attention_kernels.engine_attention_kernel` names the kernel the engine runs for that
        head configuration (the candidate's ``head_kernels``); none: the whole table."""
        key = (family, dtype, prefer, moe_query, attn_query)
        if key in self._resolved:
            return self._resolved[key]
        found = None
        for cand in self.choice.candidates(family, self.backend, prefer):
            group, exact = cand.model.resolve_group(dtype)
            if group is not None and moe_query is not None:
                kern = engine_moe_kernel(self.backend, self.gpu.key, group, moe_query[0], moe_query[1])
                if kern is not None:
                    group, exact = cand.model.resolve_group(dtype, kern)
            elif group is not None and attn_query is not None:
                kern = engine_attention_kernel(getattr(cand.model, "head_kernels", None), *attn_query)
                if kern is not None:
                    group, exact = cand.model.resolve_group(dtype, kern)
            if group is not None:
                found = (cand, group, exact)
                break
        self._resolved[key] = found
        return found

    # -- KernelModel protocol ----------------------------------------------------------------
    def gemm(self, m: int, n: int, k: int, dtype: str) -> KernelTime:
        return self._c_gemm(int(m), int(n), int(k), str(dtype))

    def _gemm(self, m: int, n: int, k: int, dtype: str) -> KernelTime:
        if m <= 0 or n <= 0 or k <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        stand_in = dtype == "fp8_block" and self.backend in GEMM_FP8_BLOCK_HOST_BOUND
        q_dtype = "fp8" if stand_in else dtype
        shape = {"m": m, "n": n, "k": k}
        kt = self._predict("gemm", q_dtype, {**shape, "dtype": q_dtype}, shape, exact_dims=not stand_in)
        if kt is not None and dtype == "fp8" and self.backend in GEMM_FP8_TENSOR_FLOOR:
            blk = self._predict("gemm", "fp8_block", {**shape, "dtype": "fp8_block"}, shape, exact_dims=False)
            if blk is not None and blk.latency_ms < kt.latency_ms:
                kt = blk
        return kt if kt is not None else self._roof.gemm(m, n, k, roofline_dtype(self.gpu, dtype))

    def gemm_prequantized(self, m: int, n: int, k: int) -> KernelTime:
        """A per-tensor fp8 GEMM whose input is already fp8 (sim/trtllm_fp8_inputs.py): the engine's
        measured fp8 figure, which holds the dynamic quantization of a bf16 input, less the measured
        quantization kernels; the plain fp8 answer where either is missing. Never slower than the
        plain answer (:meth:`gemm`), which still pays for quantizing its input: where that answer
        takes the block-scaled floor (:data:`GEMM_FP8_TENSOR_FLOOR`), the floor bounds this one too."""
        return self._c_gemm_prequantized(int(m), int(n), int(k))

    def _gemm_prequantized(self, m: int, n: int, k: int) -> KernelTime:
        shape = {"m": m, "n": n, "k": k}
        kt = self._predict("gemm", "fp8", {**shape, "dtype": "fp8"}, shape) if min(shape.values()) > 0 else None
        q = quantize_ms(self.gpu.key, m, k) if self.backend == "trtllm" else None
        plain = self.gemm(m, n, k, "fp8")
        if kt is None or q is None:
            return plain
        pre = KernelTime(max(kt.latency_ms - q, 0.0), kt.flops, kt.bytes, kt.bound, kt.tier, kt.extrapolated, kt.table)
        return plain if plain.latency_ms < pre.latency_ms else pre

    def attention_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int, num_kv_heads: int,
                          head_dim: int, kv_dtype: str, window: int = 0) -> KernelTime:
        return self._c_attention_prefill(int(batch), int(q_len), int(kv_len), int(num_heads), int(num_kv_heads),
                                         int(head_dim), str(kv_dtype), max(int(window), 0))

    def _attention_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int, num_kv_heads: int,
                           head_dim: int, kv_dtype: str, window: int = 0) -> KernelTime:
        if batch <= 0 or q_len <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        kv_len = max(kv_len, q_len)
        # the window travels in the query like the tables' ``window_size`` column: the fitted
        # model's window terms (features.attention_prefill) answer from the engine's window rows
        q = {"batch": batch, "q_len": q_len, "kv_len": kv_len, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
             "head_dim": head_dim, "kv_dtype": kv_dtype, "window": window}
        rs = {"batch": batch, "q_len": q_len, "ctx": kv_len - q_len, "num_heads": num_heads,
              "num_kv_heads": num_kv_heads, "head_dim": head_dim}
        kt = self._predict("attention_prefill", None, q, rs,
                           attn_query=(head_dim, num_heads, num_kv_heads, kv_dtype, window, min(q_len, 2)))
        return kt if kt is not None else self._roof.attention_prefill(batch, q_len, kv_len, num_heads, num_kv_heads,
                                                                      head_dim, kv_dtype, window)

    def attention_decode(self, batch: int, kv_len: float, num_heads: int, num_kv_heads: int, head_dim: int,
                         kv_dtype: str, window: int = 0) -> KernelTime:
        return self._c_attention_decode(int(batch), float(kv_len), int(num_heads), int(num_kv_heads), int(head_dim),
                                        str(kv_dtype), max(int(window), 0))

    def _attention_decode(self, batch: int, kv_len: float, num_heads: int, num_kv_heads: int, head_dim: int,
                          kv_dtype: str, window: int = 0) -> KernelTime:
        if batch <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        kv = max(kv_len, 1.0)
        q = {"batch": batch, "kv_len": kv, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
             "head_dim": head_dim, "kv_dtype": kv_dtype, "window": window}
        rs = {"batch": batch, "kv_len": kv, "num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
        kt = self._predict("attention_decode", None, q, rs,
                           attn_query=(head_dim, num_heads, num_kv_heads, kv_dtype, window))
        return kt if kt is not None else self._roof.attention_decode(batch, kv, num_heads, num_kv_heads, head_dim,
                                                                     kv_dtype, window)

    def moe(self, num_tokens: int, hidden: int, inter: int, topk: int, num_experts: int, moe_tp: int, moe_ep: int,
            dtype: str, gated: bool = True, architecture: str | None = None) -> KernelTime:
        return self._c_moe(int(num_tokens), int(hidden), int(inter), int(topk), int(num_experts), int(moe_tp),
                           int(moe_ep), str(dtype), bool(gated), architecture)

    def _moe(self, num_tokens: int, hidden: int, inter: int, topk: int, num_experts: int, moe_tp: int, moe_ep: int,
             dtype: str, gated: bool = True, architecture: str | None = None) -> KernelTime:
        if num_tokens <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        q = {"num_tokens": num_tokens, "hidden": hidden, "inter": inter, "topk": topk, "num_experts": num_experts,
             "moe_tp": max(moe_tp, 1), "moe_ep": max(moe_ep, 1), "dtype": dtype, "skew": self.moe_skew}
        rs = {k: float(v) for k, v in q.items() if k not in ("dtype", "skew")}
        # the expert MLP's weight matrices (features.moe_matrices: the tables' kernels say which they ran)
        q["matrices"] = MOE_GATED_MATRICES if gated else MOE_PLAIN_MATRICES
        # names the kernel family the engine runs for the group that answers (sim/kernel_calibration/moe_kernels.py)
        kern = (max(moe_ep, 1), architecture)
        if dtype in ("fp8", "fp8_block"):   # shipped fp8 MoE checkpoints are block-scaled (see MOE_FP8_GROUP)
            kt = self._predict("moe", MOE_FP8_GROUP, q, rs, also_exact=frozenset({"fp8", "fp8_block"}), moe_query=kern)
        elif dtype == "mxfp4":
            # weights bytes of any 4-bit float (q dtype fp4); the kernel group per engine and GPU
            kt = self._predict("moe", self.mxfp4_moe_group(), {**q, "dtype": "fp4"}, rs,
                               prefer=MOE_FP4_STAND_IN.get(self.backend), moe_query=kern)
        else:
            prefer = MOE_FP4_STAND_IN.get(self.backend) if dtype in MOE_FP4_DTYPES else None
            kt = self._predict("moe", dtype, q, rs, prefer=prefer, moe_query=kern)
        if kt is not None:
            return kt
        return self._roof.moe(num_tokens, hidden, inter, topk, num_experts, moe_tp, moe_ep,
                              roofline_dtype(self.gpu, dtype), gated)

    def mxfp4_moe_group(self) -> str:
        """The fused-MoE dtype group of an MXFP4 checkpoint on this GPU and engine (:data:`MXFP4_MOE_GROUP`)."""
        if not self.gpu.supports("fp4"):
            return "w4a16_mxfp4"
        return MXFP4_MOE_GROUP.get(self.backend, "w4a16_mxfp4")

    def mla_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int, kv_lora_rank: int, qk_nope_dim: int,
                    qk_rope_dim: int, v_head_dim: int, kv_dtype: str) -> KernelTime:
        return self._c_mla_prefill(int(batch), int(q_len), int(kv_len), int(num_heads), int(kv_lora_rank),
                                   int(qk_nope_dim), int(qk_rope_dim), int(v_head_dim), str(kv_dtype))

    def _mla_prefill(self, batch: int, q_len: int, kv_len: int, num_heads: int, kv_lora_rank: int, qk_nope_dim: int,
                     qk_rope_dim: int, v_head_dim: int, kv_dtype: str) -> KernelTime:
        if batch <= 0 or q_len <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        kv_len = max(kv_len, q_len)
        q = {"batch": batch, "q_len": q_len, "kv_len": kv_len, "num_heads": num_heads, "kv_dtype": kv_dtype,
             "qk_nope_dim": qk_nope_dim, "qk_rope_dim": qk_rope_dim, "v_head_dim": v_head_dim}
        if self.mla_prefill_is_mha(batch, q_len, kv_len):
            return self.attention_prefill(batch, q_len, kv_len, num_heads, num_heads,
                                          (qk_nope_dim + qk_rope_dim + v_head_dim) // 2, "bf16")
        rs = {"batch": batch, "q_len": q_len, "ctx": kv_len - q_len, "num_heads": num_heads}
        same = (qk_nope_dim, qk_rope_dim, v_head_dim) == (128, 64, 128)
        kt = self._predict("mla_prefill", None, q, rs, exact_dims=same)
        return kt if kt is not None else self._roof.mla_prefill(batch, q_len, kv_len, num_heads, kv_lora_rank,
                                                                qk_nope_dim, qk_rope_dim, v_head_dim, kv_dtype)

    def mla_prefill_is_mha(self, batch: int, q_len: int, kv_len: int) -> bool:
        """Whether this engine runs the MLA prefill of ``batch`` chunks in the MHA form
        (:data:`MLA_PREFILL_MHA`): vLLM always, SGLang without cached prefix or with at least
        :data:`SGLANG_MHA_PREFIX_THRESHOLD` prefix tokens in the batch."""
        if self.backend not in MLA_PREFILL_MHA:
            return False
        if self.backend != "sglang":
            return True
        # the step model hands KV lengths on a 1% geometric grid (and prompt chunks rounded up to
        # 16 tokens): a difference inside that grid is no cached prefix
        per_seq = kv_len - q_len
        if per_seq <= 0.011 * kv_len + 16:
            return True
        return batch * per_seq >= SGLANG_MHA_PREFIX_THRESHOLD

    def mla_decode(self, batch: int, kv_len: float, num_heads: int, kv_lora_rank: int, qk_rope_dim: int,
                   kv_dtype: str) -> KernelTime:
        return self._c_mla_decode(int(batch), float(kv_len), int(num_heads), int(kv_lora_rank), int(qk_rope_dim),
                                  str(kv_dtype))

    def _mla_decode(self, batch: int, kv_len: float, num_heads: int, kv_lora_rank: int, qk_rope_dim: int,
                    kv_dtype: str) -> KernelTime:
        if batch <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        kv = max(kv_len, 1.0)
        q = {"batch": batch, "kv_len": kv, "num_heads": num_heads, "kv_dtype": kv_dtype,
             "kv_lora_rank": kv_lora_rank, "qk_rope_dim": qk_rope_dim}
        rs = {"batch": batch, "kv_len": kv, "num_heads": num_heads}
        kt = self._predict("mla_decode", None, q, rs, exact_dims=(kv_lora_rank, qk_rope_dim) == (512, 64))
        return kt if kt is not None else self._roof.mla_decode(batch, kv, num_heads, kv_lora_rank, qk_rope_dim,
                                                               kv_dtype)

    def mla_bmm(self, num_tokens: int, num_heads: int, dtype: str, op: str = "pre", kv_lora_rank: int = 512,
                qk_nope_dim: int = 128) -> KernelTime:
        """MLA's absorb batched matmul (per GPU heads): ``op="pre"`` multiplies the queries'
        no-PE part by W_UK before attention, ``"post"`` the attention output by W_UV."""
        return self._c_mla_bmm(int(num_tokens), int(num_heads), str(dtype), str(op), int(kv_lora_rank),
                               int(qk_nope_dim))

    def _mla_bmm(self, num_tokens: int, num_heads: int, dtype: str, op: str, kv_lora_rank: int,
                 qk_nope_dim: int) -> KernelTime:
        if num_tokens <= 0 or num_heads <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        if op not in ("pre", "post"):
            raise ValueError(f"mla_bmm op must be 'pre' or 'post', not '{op}'")
        q = {"num_tokens": num_tokens, "num_heads": num_heads, "op": op, "kv_lora_rank": kv_lora_rank,
             "qk_nope_dim": qk_nope_dim, "dtype": dtype}
        kt = self._predict("mla_bmm", dtype, q, {"num_tokens": num_tokens, "num_heads": num_heads},
                           exact_dims=(kv_lora_rank, qk_nope_dim) == (512, 128))
        return kt if kt is not None else spec_mla_bmm(self._roof, num_tokens, num_heads, dtype, kv_lora_rank,
                                                      qk_nope_dim)

    def gated_delta_net(self, phase: str, batch: int, seq_len: int, num_k_heads: int, head_k_dim: int,
                        num_v_heads: int, head_v_dim: int) -> KernelTime:
        """One Gated DeltaNet layer's token mixing (short conv + gated delta rule; heads per
        GPU). ``phase="prefill"``: ``batch`` sequences of ``seq_len`` new tokens each (chunked
        kernel); ``"decode"``: one token for each of ``batch`` sequences (recurrent kernel).
        The projections around it are GEMMs."""
        if phase not in ("prefill", "decode"):
            raise ValueError(f"gated_delta_net phase must be 'prefill' or 'decode', not '{phase}'")
        return self._c_gated_delta_net(phase, int(batch), int(seq_len) if phase == "prefill" else 1,
                                       int(num_k_heads), int(head_k_dim), int(num_v_heads), int(head_v_dim))

    def gdn(self, phase: str, batch: int, q_len: int, num_k_heads: int, num_v_heads: int, head_k_dim: int,
            head_v_dim: int, conv_kernel: int = 4, state_dtype: str = "fp32") -> KernelTime:
        """The step model's optional ``gdn`` operator (sim.kernels.OPTIONAL_OPS; phases
        "context"/"generation"), answered by the measured Gated DeltaNet tables."""
        return self.gated_delta_net("prefill" if phase == "context" else "decode", batch, q_len, num_k_heads,
                                    head_k_dim, num_v_heads, head_v_dim)

    def _gated_delta_net(self, phase: str, batch: int, seq_len: int, num_k_heads: int, head_k_dim: int,
                         num_v_heads: int, head_v_dim: int) -> KernelTime:
        if batch <= 0 or seq_len <= 0 or num_v_heads <= 0:
            return KernelTime(0.0, 0.0, 0.0, "latency", self.tier)
        family = "gdn_" + phase
        q = {"batch": batch, "seq_len": seq_len, "num_tokens": batch * seq_len, "k_heads": max(num_k_heads, 1),
             "head_k_dim": head_k_dim, "v_heads": num_v_heads, "head_v_dim": head_v_dim}
        rs = {"batch": batch, "seq_len": seq_len, "v_heads": num_v_heads}
        kt = self._predict(family, None, q, rs)
        return kt if kt is not None else spec_gdn(self._roof, phase, batch, seq_len, num_k_heads, head_k_dim,
                                                  num_v_heads, head_v_dim)

    def memory_op(self, nbytes: float) -> KernelTime:
        return self._c_memory_op(nbytes)

    def collective(self, op: str, message_bytes: float, num_gpus: int, link: Link) -> KernelTime:
        if op not in OPS:
            raise ValueError(f"unknown collective op '{op}' (known: {', '.join(OPS)})")
        return self._c_collective(op, float(message_bytes), int(num_gpus), link)

    def _collective(self, op: str, nbytes: float, n: int, link: Link) -> KernelTime:
        if (n <= 1 and op != "p2p") or nbytes <= 0:
            return KernelTime(0.0, 0.0, 0.0, "comm", self.tier)
        src = self._coll
        on_fabric = link_kind(link.name) == src.fabric
        # the engine's own all-reduce inside the measured fabric (PCIe: only between 2 GPUs)
        custom = (on_fabric and op == "all_reduce" and nbytes <= CUSTOM_AR_MAX_BYTES
                  and (src.fabric == "scaleup" or n == 2))
        if on_fabric and op != "p2p":
            res = src.custom_ar(self.backend, self.allreduce_mode, n, nbytes) if custom else None
            if res is None:
                res = src.nccl(op, "fp16", n, nbytes)
            if res is not None:
                return KernelTime(res[0], 0.0, nbytes, "comm", self.tier, not res[1])
        found = (src.alpha_beta("custom", "all_reduce", "", n, self.allreduce_mode) if custom else None) \
            or src.alpha_beta("nccl", op, "fp16", n)
        if found is None:
            return self._roof.collective(op, nbytes, n, link)
        ab, tier = found
        extra = 0.0 if on_fabric else link.latency_us * ring_steps(op, n)
        ms = ab.predict_ms(op, nbytes, n, link.bw_gbps, extra)
        return KernelTime(ms, 0.0, nbytes, "comm", tier if on_fabric else "cross-gen", not on_fabric)


_MODELS: dict[tuple[Any, ...], tuple[Calibration, CalibratedKernelModel]] = {}


def kernel_model_for(gpu: GPUSpec, backend: str = "vllm", calibration: str | Path | None = None) -> KernelModel:
    """The calibrated kernel model of ``gpu`` for an engine's kernels (``vllm`` | ``sglang`` |
    ``trtllm``); ``calibration`` defaults to the shipped fit. Loaded files and models are
    cached (keyed by the GPU's performance figures, so a what-if copy gets its own model)."""
    cal = load_calibration(calibration)
    key = (gpu.key, GPUFeatures.from_spec(gpu), float(gpu.tdp_w), str(backend),
           None if calibration is None else str(Path(calibration).resolve()))
    hit = _MODELS.get(key)
    if hit is not None and hit[0] is cal:
        return hit[1]
    if len(_MODELS) > 256:
        _MODELS.clear()
    model = CalibratedKernelModel(gpu, str(backend), cal)
    _MODELS[key] = (cal, model)
    return model


#: relative allowance added to the measured tier's errors for the sibling tier: the spread
#: of the fitted achieved-bandwidth fraction ``eta_m`` between memory generations measured
#: with the same engine (vLLM decode attention 0.75 on A100 HBM2e, 0.86 on H100 HBM3, 0.77
#: on L40S GDDR6; bf16 GEMM 0.77 / 0.86 / 0.80), i.e. up to ~15%, halved because a sibling
#: keeps the die, its kernels and its L2 and only memory-bound time is affected (see
#: docs/ACCURACY.md, "Sibling tier"). Not validated on a sibling pair: no such data exists.
SIBLING_ALLOWANCE = 0.075


def _sibling_band(measured: dict[str, float]) -> dict[str, float]:
    """Sibling-tier band: each measured-tier error e becomes (1 + e)(1 + a) - 1."""
    out = {k: (1.0 + v) * (1.0 + SIBLING_ALLOWANCE) - 1.0 for k, v in measured.items() if k != "rows"}
    if "rows" in measured:
        out["rows"] = measured["rows"]
    return out


_ALIASES = {"attn_prefill": "attention_prefill", "prefill_attention": "attention_prefill",
            "attn_decode": "attention_decode", "decode_attention": "attention_decode",
            "comm": "collective", "collectives": "collective", "all_reduce": "custom_allreduce",
            "mla": "mla_decode", "memory": "memory_op", "gdn": "gdn_decode", "gated_delta_net": "gdn_decode",
            "linear_attention": "gdn_decode", "gdn_prefill": "gdn_prefill", "mla_absorb": "mla_bmm"}


def error_band(family: str, tier: str, calibration: str | Path | None = None,
               gpu: str | None = None, extrapolated: bool = False) -> dict[str, float]:
    """{"p50_ape": .., "p90_ape": .., "mape": .., "rows": ..} of a family in a tier, from the
    validation residuals stored in the calibration (measured: grouped split; cross-gen:
    leave-one-GPU-out; spec: the roofline on the measured GPUs; sibling: the measured
    figures plus :data:`SIBLING_ALLOWANCE`, unless the file stores its own). Sub-families such as
    ``gemm:fp8`` are accepted; an unknown family falls back to the tier's pooled figures.
    With ``gpu`` (a measured GPU's key), the measured tier uses that GPU's own held-out
    figures where the calibration has at least :data:`MIN_BAND_ROWS` of them. With
    ``extrapolated`` (a query outside the fitted shape range, ``KernelTime.extrapolated``), the
    figures scored on held-out rows outside their fold's range where the calibration stores
    them (``p90_ape_extrapolated`` ..., calibration/kernel_bands.py), else the same figures."""
    return band_of(load_calibration(calibration), family, tier, gpu, extrapolated)


#: held-out rows a GPU's own band needs; fewer: the family's band pooled over GPUs
MIN_BAND_ROWS = 50


def band_of(cal: Calibration, family: str, tier: str, gpu: str | None = None,
            extrapolated: bool = False) -> dict[str, float]:
    """:func:`error_band` for a loaded calibration."""
    res = cal.residuals.get(tier)
    if res is None and tier == "sibling" and "measured" in cal.residuals:
        return _sibling_band(band_of(cal, family, "measured", gpu, extrapolated))
    if extrapolated and res is not None:
        ext = _extrapolated_band(res, _ALIASES.get(family, family),
                                 gpu if tier in ("measured", "sibling") else None)
        if ext is not None:
            return ext
    if res is None:
        raise UserError(f"no residual statistics for tier '{tier}'", key="tier",
                        fix="tiers: " + ", ".join(sorted(cal.residuals)) if cal.residuals else
                        "re-run `llmplan calibrate` (residual statistics were not computed)")
    fam = _ALIASES.get(family, family)
    stats = None
    if gpu is not None and tier in ("measured", "sibling"):
        own = res.get(f"{fam.split(':', 1)[0]}@{gpu}")
        if own is not None and own.get("rows", 0) >= MIN_BAND_ROWS:
            stats = own
    if stats is None:
        stats = res.get(fam)
    if stats is None and ":" in fam:
        stats = res.get(fam.split(":", 1)[0])
    if stats is None and fam in ("custom_allreduce", "nccl"):
        stats = res.get("collective")
    if stats is None:
        stats = res.get("all", {})
    return {k: float(stats[k]) for k in ("p50_ape", "p90_ape", "mape", "rows") if k in stats}


def _extrapolated_band(res: dict[str, dict[str, Any]], fam: str, gpu: str | None) -> dict[str, float] | None:
    """The ``_extrapolated`` figures of a family (its GPU's own where it has at least
    :data:`MIN_BAND_ROWS` such rows, else pooled over GPUs); None where none are stored."""
    base = fam.split(":", 1)[0]
    keys = ([f"{base}@{gpu}"] if gpu is not None else []) + [fam, base]
    for i, key in enumerate(keys):
        st = res.get(key) or {}
        n = st.get("rows_extrapolated", 0)
        if "p90_ape_extrapolated" in st and (n >= MIN_BAND_ROWS or (i == len(keys) - 1 and n > 0)):
            return {k: float(st[f"{k}_extrapolated"]) for k in ("p50_ape", "p90_ape", "mape", "rows")
                    if f"{k}_extrapolated" in st}
    return None

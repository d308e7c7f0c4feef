"""Analytical step cost model: one engine iteration -> time, with a per-operator breakdown.

An iteration runs ``StepShape.tokens`` tokens (prefill chunks + one token per decoding
sequence) through every layer of one replica. Per layer:

    norm -> QKV projection (or the MLA projections) -> attention (prefill part + decode part)
    -> O projection -> TP all-reduce -> norm -> MLP (dense GEMMs, or router + fused MoE
    experts + shared experts, with all-to-all under expert parallelism) -> TP all-reduce

then once per iteration on the last stage: final norm, lm_head over the sequences that
emit a token, sampling. Pipeline parallelism splits the layers into ``pp`` stages joined
by point-to-point sends. Per-iteration host overhead comes from the engine profile.

Every operator is timed by a :class:`~sim.kernels.KernelModel` (specification roofline
or calibrated). The linear part of a step depends only on the token count and is cached
by it; attention depends on the KV lengths and is cached on geometric buckets (1%), so
the discrete-event simulator can call :meth:`step_time_ms` millions of times.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.gemm_dtypes import gemm_dtypes, moe_query_dtype
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.cuda_graphs import eager_step, padded_tokens, sglang_graph_max_bs
from llmplan.sim.dp_layout import rank_shape
from llmplan.sim.deepseek_routing import moe_layer_extra_ops
from llmplan.sim.engine_terms import request_ttft_ms
from llmplan.sim.frontend_ceiling import frontend_per_token_ms
from llmplan.sim.ep_comm import moe_exchange
from llmplan.sim.kernels import KernelModel, KernelTime, RooflineKernelModel
from llmplan.sim.shared_experts import fused_shared_experts
from llmplan.sim.trtllm_fusions import norms_in_allreduce, rope_in_attention
from llmplan.sim.trtllm_fp8_inputs import normed_gemm_ms, prequantized_inputs
from llmplan.sim.trtllm_mla_module import applies as mla_module_applies, module_ops
from llmplan.sim.links import domain_gpus, group_link, span_collective, stage_link
from llmplan.sim.types import EngineProfile, OpTime, Parallelism, Precision, StepShape, StepTiming
from llmplan.sim.vllm_allreduce_rms import fused_max_tokens
from llmplan.sim.sglang_allreduce_rms import fused_max_tokens as sglang_fused_max_tokens
from llmplan.sim.vllm_minimax_qk_norm import applies as minimax_qk_norm_tp, qk_bytes, variance_allreduce_bytes
from llmplan.sim.vllm_marlin_mxfp4 import moe_on_marlin
from llmplan.sim.wideep_moe import group_moe

ACT_BYTES = 2.0  # activations stay in bf16/fp16
_BUCKET = 1.01   # geometric bucket width for KV lengths in the attention cache
_log = math.log
# the operator caches (AnalyticalStepModel._init_op_caches), shared by share_op_caches
_OP_CACHES = ("_linear", "_attn", "_body_lat", "_logit_lat", "_linear_ms", "_pf_lat", "_dc_lat", "_attn_ms",
              "_mla_module")


def _remember(cache: dict, key: tuple, value):
    """``cache[key] = value`` (returned), the cache emptied first once it holds 262,144 entries."""
    if len(cache) >= 262144:
        cache.clear()
    cache[key] = value
    return value


def _bucket(x: float) -> float:
    """Round a positive length to a 1% geometric grid (cache key, <0.5% error)."""
    if x <= 64:
        return float(round(x))
    return _BUCKET ** round(math.log(x, _BUCKET))


class AnalyticalStepModel:
    """StepCostModel for one replica (model x GPU x parallelism x precision x engine)."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, par: Parallelism, prec: Precision,
                 engine: EngineProfile, kernels: KernelModel):
        self.model, self.gpu, self.par, self.prec, self.engine, self.kernels = model, gpu, par, prec, engine, kernels
        self.pp = par.pp
        m, tp = model, par.tp
        self.layers_per_stage = math.ceil(m.num_layers / par.pp)
        # fraction of the model's layers of each kind on the busiest stage
        self._frac = self.layers_per_stage / m.num_layers
        self.heads = max(1, m.num_attention_heads // tp)
        self.kv_heads = max(1, m.num_kv_heads // tp) if m.num_kv_heads >= tp else 1
        self.dp = max(1, par.dp)  # attention data-parallel ranks (sim/dp_layout.py)
        self.tp_link = group_link(gpu, tp, span_gpus=tp)
        # EP and the DP token exchange span the whole stage (tp x dp GPUs): the scale-out
        # network when that exceeds one scale-up domain (sim/links.py)
        self.ep_link = group_link(gpu, par.ep, span_gpus=par.stage_gpus)
        self.dp_link = group_link(gpu, par.stage_gpus, span_gpus=par.stage_gpus)
        self.pp_link = stage_link(gpu, par.stage_gpus, par.pp)
        self._domain = domain_gpus(gpu)
        self.wdtype = prec.weights
        # per-component weight precision: a quantized checkpoint served as shipped keeps its
        # unquantized components (often attention) in bf16
        # (block-scaled fp8 as "fp8_block": its own GEMM kernels, model_catalog.gemm_dtypes)
        self._wd = gemm_dtypes(m, prec.weights)
        # TensorRT-LLM Llama: qkv / gate_up get fp8 inputs from the fused all-reduce (sim/trtllm_fp8_inputs.py)
        self._prequant = prequantized_inputs(self.engine.kernel_backend, m, par, self._wd["attention"],
                                             self._wd["dense_mlp"])
        self._moe_dtype = moe_query_dtype(m, prec.weights)  # MXFP4 experts: their own kernels
        # SGLang's largest captured decode batch follows the GPU's memory and TP (sim/cuda_graphs.py)
        self._graph_bs = (sglang_graph_max_bs(gpu.memory_bytes, par.tp, par.pp)
                          if self.engine.name == "sglang" and gpu.memory_bytes > 0 else None)
        self._graph_pads = True  # False: every decode batch up to _graph_bs captured (capture_every_batch)
        # serial per-token time of the front end streaming the outputs (sim/frontend_ceiling.py; 0 = none)
        self._frontend_ms = frontend_per_token_ms(self.engine)
        self._ar_rms_tokens = 0  # vLLM / SGLang: steps up to this many rows fold both norms into the all-reduce
        self._marlin_mxfp4 = False  # vLLM with VLLM_MXFP4_USE_MARLIN: MXFP4 experts on Marlin (sim/vllm_marlin_mxfp4.py)
        # layers of each attention kind on the busiest stage (fractions for pp > 1)
        self._n_linear = (m.linear.num_layers if m.linear is not None else 0) * self._frac
        self._n_indexer = (m.sparse.num_indexer_layers if m.sparse is not None else 0) * self._frac
        self._spec_kernels = RooflineKernelModel(gpu)
        # (KV heads per GPU, head dim) of full-attention layers: Gemma-4 global geometry where given
        ga = m.global_attention
        # attention kernels take one head dim: the mean of the K and V dims keeps FLOPs and bytes
        # exact where they differ (MiMo-V2: 192 / 128); sliding layers may have their own KV heads
        hd = (m.head_dim + m.value_head_dim) // 2
        swa_kv = max(1, m.sliding_kv_heads // tp) if m.sliding_kv_heads >= tp else 1
        self._swa_geom = (swa_kv, hd)
        self._n_swa_own = m.num_sliding_layers * self._frac if m.sliding_num_kv_heads else 0.0
        self._full_geom = (self.kv_heads, hd) if ga is None else \
            (max(1, ga.num_kv_heads // tp) if ga.num_kv_heads >= tp else 1, ga.head_dim)
        self._n_global = len(ga.layer_indices) * self._frac if ga is not None else 0.0
        self._init_op_caches()
        self._mla_module_on = mla_module_applies(self.engine.kernel_backend, m)
        self._decode_ms: dict[tuple[int, float], float] = {}  # decode-only step times (dp = 1)
        self._decode_sc: dict[tuple[int, float], tuple[float, float]] = {}  # their (stage, comm)
        self._decode_stage_ms: dict[tuple[int, float], float] = {}  # their stage times (stage_time_ms)
        self._last_sc: tuple[StepShape | None, tuple[float, float]] = (None, (0.0, 0.0))

    def _init_op_caches(self) -> None:
        """Fresh caches of the operator lists and their latency sums (functions of the cache keys
        and of this model's fixed geometry, kernels and fusions; :meth:`share_op_caches`)."""
        m = self.model
        self._linear = lru_cache(maxsize=65536)(self._linear_ops)
        self._attn = lru_cache(maxsize=262144)(self._attn_ops)
        # the hot path only needs the sums. The token-row operators and the logit-row ones
        # (lm_head, sampling: the last two) are cached apart, and so are the prefill and the
        # decode part of attention (dense / MLA models): each sum is still taken over the
        # same latencies in the same order, so it is bit-identical to summing the whole step.
        self._body_lat = lru_cache(maxsize=65536)(
            lambda *k: tuple(o.latency_ms for o in self._linear_body_ops(*k)))
        self._logit_lat = lru_cache(maxsize=65536)(
            lambda rows: tuple(o.latency_ms for o in self._logit_ops(rows)))
        self._linear_ms = lru_cache(maxsize=65536)(self._linear_sum)
        self._split_attn = m.linear is None and m.sparse is None
        self._pf_lat = lru_cache(maxsize=65536)(lambda *k: tuple(o.latency_ms for o in self._attn_ops(*k, 0, 0.0)))
        self._dc_lat = lru_cache(maxsize=65536)(lambda *k: tuple(o.latency_ms for o in self._attn_ops(0, 0, 0.0, *k)))
        self._attn_ms = lru_cache(maxsize=262144)(self._attn_sum)
        # TensorRT-LLM decode-only MLA steps: the measured whole module (sim/trtllm_mla_module.py)
        self._mla_module = lru_cache(maxsize=65536)(lambda lk, ak: module_ops(
            self.engine.kernel_backend, m, self.gpu.key, self.prec.kv_cache, self._wd["attention"], self.heads,
            self.layers_per_stage, ak, self._linear(*lk) + self._attn(*ak)))

    def share_op_caches(self, other: "AnalyticalStepModel") -> bool:
        """Use ``other``'s operator caches when both models time every operator alike: the same
        class, model, GPU and kernel model (the same objects), parallelism and precision, the same
        all-reduce fusion and an engine equal but for ``max_num_seqs`` (which moves only the
        CUDA-graph padding and the host terms, both applied outside these caches, in
        :meth:`_rows` and :meth:`_with_host`). The planner builds one step model per batch cap of
        a shape; without this each re-derives the same operator lists. Every cached value is the
        one this model would compute, so answers are unchanged. Returns whether they are shared."""
        if not (type(self) is type(other) and self.kernels is other.kernels and self.model is other.model
                and self.gpu is other.gpu and self.par == other.par and self.prec == other.prec
                and self._ar_rms_tokens == other._ar_rms_tokens and self._marlin_mxfp4 == other._marlin_mxfp4
                and replace(self.engine, max_num_seqs=0) == replace(other.engine, max_num_seqs=0)):
            return False
        for name in _OP_CACHES:
            setattr(self, name, getattr(other, name))
        return True

    # ------------------------------------------------------------------ public protocol
    def step_time_ms(self, shape: StepShape) -> float:
        n = shape.decode_seqs
        if n and not shape.prefill_seqs and self.dp == 1:
            # a decode-only step's time depends only on (sequences, bucketed mean KV length):
            # its cache keys, pipeline send and host time are functions of those two
            key = (n, _bucket(shape.decode_kv_tokens / n))
            t = self._decode_ms.get(key)
            if t is None:
                t = _remember(self._decode_ms, key, self._step_total(*self._decode_stage_comm(shape, key), shape))
            return t
        return self._step_total(*self._mixed_stage_comm(shape), shape)

    def _step_total(self, stage: float, comm: float, shape: StepShape) -> float:
        """A step's time from its busiest stage and pipeline send: every stage in turn, plus host time."""
        return self._with_host(stage * self.pp + comm, shape)

    def _stage_total(self, stage: float, comm: float, shape: StepShape) -> float:
        """One pipeline stage's time: its layers, one stage-to-stage send and its host share."""
        return self._with_host(stage + (comm / max(1, self.pp - 1) if self.pp > 1 else 0.0), shape,
                               self.layers_per_stage)

    def decode_step_ms(self, decode_seqs: int, decode_kv_tokens: int) -> float:
        """``step_time_ms`` of a decode-only step (``decode_seqs`` >= 1) without building its
        :class:`StepShape` when the decode cache already holds it (the simulator's hot path)."""
        if self.dp == 1:
            x = decode_kv_tokens / decode_seqs  # _bucket(x), inlined (the same operations)
            t = self._decode_ms.get((decode_seqs, float(round(x)) if x <= 64 else _BUCKET ** round(_log(x, _BUCKET))))
            if t is not None:
                return t
        return self.step_time_ms(StepShape(0, 0, 0.0, 0, decode_seqs, decode_kv_tokens))

    def _decode_stage_comm(self, shape: StepShape, key: tuple[int, float]) -> tuple[float, float]:
        """:meth:`_stage_and_comm` of a decode-only step (dp = 1), cached on its decode key
        (the same function of (sequences, bucketed mean KV length) as the decode step time)."""
        sc = self._decode_sc.get(key)
        if sc is None:
            sc = _remember(self._decode_sc, key, self._stage_and_comm(shape))
        return sc

    def _mixed_stage_comm(self, shape: StepShape) -> tuple[float, float]:
        """:meth:`_stage_and_comm`, remembering the last shape: with pipeline parallelism the
        replica asks the step time and the stage time of the same step one after the other."""
        if self.pp == 1:  # the simulator asks no separate stage time
            return self._stage_and_comm(shape)
        last, sc = self._last_sc
        if last is not None and last == shape:
            return sc
        sc = self._stage_and_comm(shape)
        self._last_sc = (shape, sc)
        return sc

    def request_ttft_ms(self, prompt_tokens: float) -> float:
        """The engine's per-request TTFT outside the steps (``sim.engine_terms.request_ttft_ms``)."""
        return request_ttft_ms(self.engine, prompt_tokens)

    def stage_time_ms(self, shape: StepShape) -> float:
        n = shape.decode_seqs
        if n and not shape.prefill_seqs and self.dp == 1:
            # like step_time_ms, a decode-only stage time is a function of its decode key (the
            # analytical screen asks the same decode batches at many loads)
            key = (n, _bucket(shape.decode_kv_tokens / n))
            t = self._decode_stage_ms.get(key)
            if t is None:
                t = _remember(self._decode_stage_ms, key,
                              self._stage_total(*self._decode_stage_comm(shape, key), shape))
            return t
        return self._stage_total(*self._mixed_stage_comm(shape), shape)

    def breakdown(self, shape: StepShape) -> StepTiming:
        rank = rank_shape(shape, self.dp)
        lk, ak = self._linear_key(shape, rank), self._attn_key(rank)
        ops = list(self._linear(*lk)) + list(self._attn(*ak)) + list(self._mla_module_ops(lk, ak))
        n_stage = self.pp
        ops = [OpTime(o.name, o.family, o.latency_ms * n_stage, o.bound, o.flops * n_stage, o.bytes * n_stage, o.tier,
                      o.extrapolated, o.table) for o in ops]
        _, comm = self._stage_and_comm(shape)
        if comm:
            ops.append(OpTime("pp_send_recv", "comm", comm, "comm"))
        ops.append(OpTime("host_overhead", "host", self._host(shape), "host"))
        return StepTiming(self.step_time_ms(shape), self.stage_time_ms(shape), tuple(ops))

    # ------------------------------------------------------------------ internals
    def _with_host(self, device_ms: float, shape: StepShape, layers: int | None = None) -> float:
        """Device time plus the engine's host time (sim/engine_terms.py): per-sequence CPU work
        overlapped with the device step shows only where it is longer, as does a front end's serial
        time for the step's streamed tokens (sim/frontend_ceiling.py); the rest adds, and so does
        the host launch of an eager step (no CUDA graph, sim/cuda_graphs.py): per layer of the
        step (``layers``: of one pipeline stage; default all), never per sequence."""
        e, n = self.engine, shape.decode_seqs + shape.prefill_seqs
        t = (max(device_ms, e.host_overlap_per_seq_ms * n, self._frontend_ms * n) + e.host_overhead_ms
             + e.host_overhead_per_seq_ms * n)
        if e.eager_step_ms_per_layer:
            t += e.eager_step_ms_per_layer * self.eager_layers(shape, layers)
        return t

    def eager_layers(self, shape: StepShape, layers: int | None = None) -> int:
        """Layers whose kernels the host launches one by one in this step: all of them (``layers``
        of one stage) when the step runs without CUDA graphs (``sim.cuda_graphs.eager_step``,
        per attention-DP rank), else 0."""
        e, rank = self.engine, rank_shape(shape, self.dp)  # the busiest rank's step (sim/dp_layout.py)
        if not eager_step(e.name, e.max_num_seqs, rank.tokens, not rank.prefill_seqs, self._graph_bs):
            return 0
        return self.model.num_layers if layers is None else layers

    def _host(self, shape: StepShape) -> float:
        """Host time of a step beyond its device time."""
        stage, comm = self._stage_and_comm(shape)
        device = stage * self.pp + comm
        return self._with_host(device, shape) - device

    def capture_every_batch(self, max_bs: int) -> None:
        """SGLang launched with ``--cuda-graph-bs 1 2 ... max_bs`` (``calibration.sglang_launch``):
        every decode batch of at most ``max_bs`` sequences replays its own graph (no padding),
        larger ones run eagerly. Call before the first step is timed."""
        if self.engine.name != "sglang":
            raise ValueError(f"capture_every_batch is SGLang's --cuda-graph-bs, not {self.engine.name}'s")
        self._graph_bs, self._graph_pads = max(1, int(max_bs)), False

    def capture_up_to(self, max_tokens: int) -> None:
        """vLLM launched with ``max_cudagraph_capture_size = max_tokens`` (``calibration.vllm_launch``):
        steps of up to ``max_tokens`` tokens replay (piecewise) graphs, padded to vLLM's capture
        sizes; larger ones run eagerly. Call before the first step is timed."""
        if self.engine.name != "vllm":
            raise ValueError(f"capture_up_to is vLLM's max_cudagraph_capture_size, not {self.engine.name}'s")
        self._graph_bs = max(1, int(max_tokens))

    def fuse_allreduce_rms(self) -> None:
        """vLLM launched at ``-O2`` with its AllReduce + RMSNorm fusion on (``calibration.vllm_launch``):
        steps up to FlashInfer's fused size fold both RMSNorms of a layer into the TP all-reduce
        (sim/vllm_allreduce_rms.py). Call before the first step is timed."""
        if self.engine.name != "vllm":
            raise ValueError(f"fuse_allreduce_rms is vLLM's fuse_allreduce_rms pass, not {self.engine.name}'s")
        self._ar_rms_tokens = fused_max_tokens(self.gpu.key, self.par.tp, self.par.dp, self.par.pp,
                                               self.model.hidden_size, ACT_BYTES)
        self._init_op_caches()  # the norms' operators change: caches of its own

    def run_marlin_mxfp4_moe(self) -> None:
        """vLLM launched with ``VLLM_MXFP4_USE_MARLIN=1`` (``calibration.vllm_launch.mxfp4_marlin``):
        MXFP4 experts run Marlin's kernel, timed by its measured throughput (sim/vllm_marlin_mxfp4.py).
        Call before the first step is timed."""
        if self.engine.name != "vllm":
            raise ValueError(f"run_marlin_mxfp4_moe is vLLM's VLLM_MXFP4_USE_MARLIN, not {self.engine.name}'s")
        self._marlin_mxfp4 = self._moe_dtype == "mxfp4"
        self._init_op_caches()  # the experts' operator changes: caches of its own

    def fuse_sglang_allreduce_rms(self) -> None:
        """SGLang release whose default turns the FlashInfer AllReduce + RMSNorm fusion on
        (``calibration.sglang_launch``): steps up to 2,048 tokens fold both RMSNorms of a layer into
        the TP all-reduce where the model and layout qualify (sim/sglang_allreduce_rms.py)."""
        if self.engine.name != "sglang":
            raise ValueError(f"fuse_sglang_allreduce_rms is SGLang's fusion, not {self.engine.name}'s")
        self._ar_rms_tokens = sglang_fused_max_tokens(self.gpu.key, self.model.architecture, self.par.tp,
                                                      self.par.dp, self.par.pp)
        self._init_op_caches()  # the norms' operators change: caches of its own

    def _rows(self, shape: StepShape) -> int:
        """Token rows of the linear operators: CUDA-graph padding (sim/cuda_graphs.py)."""
        if not self._graph_pads:
            return shape.tokens
        return padded_tokens(self.engine.name, self.engine.max_num_seqs, shape.tokens, not shape.prefill_seqs,
                             self._graph_bs)

    @staticmethod
    def _logit_rows(shape: StepShape) -> int:
        return shape.decode_seqs + shape.prefill_seqs

    def _attn_key(self, s: StepShape) -> tuple:
        if s.prefill_seqs:
            q = s.prefill_tokens / s.prefill_seqs
            pairs = s.prefill_attn_pairs / s.prefill_seqs
            kv = q + max(0.0, (pairs - q * (q + 1) / 2) / q)
            pf = (s.prefill_seqs, self._token_key(max(1, round(q))), _bucket(kv))
        else:
            pf = (0, 0, 0.0)
        dc = (s.decode_seqs, _bucket(s.decode_kv_tokens / s.decode_seqs)) if s.decode_seqs else (0, 0.0)
        return pf + dc

    @staticmethod
    def _token_key(tokens: int) -> int:
        """Token count for the linear-operator cache: exact up to 256, then rounded up to a
        multiple of 16 (GEMM tiles are 64-128 rows, so the time changes by < 1%)."""
        return tokens if tokens <= 256 else -(-tokens // 16) * 16

    def _stage_and_comm(self, shape: StepShape) -> tuple[float, float]:
        if shape.tokens == 0:
            return 0.0, 0.0
        rank = rank_shape(shape, self.dp)
        lk, ak = self._linear_key(shape, rank), self._attn_key(rank)
        per_stage = self._linear_ms(*lk) + self._attn_ms(*ak)
        if self._mla_module_on and not ak[0]:   # _mla_module_ops' test, inlined on the hot path
            per_stage += sum(o.latency_ms for o in self._mla_module(lk, ak))
        comm = 0.0
        if self.pp > 1:
            t = self.kernels.collective("p2p", rank.tokens * self.model.hidden_size * ACT_BYTES, 2, self.pp_link)
            comm = t.latency_ms * (self.pp - 1)
        return per_stage, comm

    def _linear_key(self, shape: StepShape, rank: StepShape | None = None) -> tuple:
        """Cache key of the linear operators: (token rows, logit rows) of the busiest DP rank,
        and with attention DP also the group's token count (the MoE layers see every rank's
        tokens) and whether the step is decode-only (picks the all-to-all kernels). ``rank``:
        the busiest rank's shape when the caller already has it (:func:`rank_shape`)."""
        if self.dp == 1:
            return self._token_key(self._rows(shape)), self._logit_rows(shape)
        if rank is None:
            rank = rank_shape(shape, self.dp)
        return (self._token_key(self._rows(rank)), self._logit_rows(rank), self._token_key(shape.tokens),
                not shape.prefill_seqs)

    def _mla_module_ops(self, lk: tuple, ak: tuple) -> tuple[OpTime, ...]:
        """The measured-MLA-module operator of a stage (sim/trtllm_mla_module.py), looked up only for
        decode-only steps (``ak[0]``: prefill sequences) of a step model it applies to: elsewhere
        ``module_ops`` answers nothing, and its arguments would build the full operator lists."""
        return self._mla_module(lk, ak) if self._mla_module_on and not ak[0] else ()

    def _collective(self, op: str, message_bytes: float, n: int, link) -> KernelTime:
        """A collective over ``n`` GPUs: the kernel model's over ``link`` inside one scale-up
        domain or host, hierarchical (scale-up + scale-out network) when the group spans
        several domains over the network (sim/links.py)."""
        if link.name == "network" and n > self._domain > 1:
            return span_collective(self.kernels, self.gpu, op, message_bytes, n)
        return self.kernels.collective(op, message_bytes, n, link)

    def _optional(self, op: str):
        """An optional operator (sim.kernels.OPTIONAL_OPS) of the kernel model, or the
        roofline's (tier "spec") when the kernel model has none."""
        return getattr(self.kernels, op, None) or getattr(self._spec_kernels, op)

    def _op(self, name: str, family: str, kt: KernelTime, count: float) -> OpTime:
        return OpTime(name, family, kt.latency_ms * count, kt.bound, kt.flops * count, kt.bytes * count, kt.tier,
                      kt.extrapolated, kt.table)

    def _linear_sum(self, tokens: int, logit_rows: int, group_tokens: int | None = None,
                    decode_only: bool = False) -> float:
        """sum(latency_ms) of :meth:`_linear_ops`, from the two cached parts."""
        return sum(self._body_lat(tokens, group_tokens, decode_only) + self._logit_lat(logit_rows))

    def _attn_sum(self, pf_seqs: int, pf_q: int, pf_kv: float, dc_seqs: int, dc_kv: float) -> float:
        """sum(latency_ms) of :meth:`_attn_ops`; for dense/MLA attention from its cached
        prefill and decode parts (linear-attention and DSA layers mix the two)."""
        if not self._split_attn:
            return sum(o.latency_ms for o in self._attn(pf_seqs, pf_q, pf_kv, dc_seqs, dc_kv))
        return sum(self._pf_lat(pf_seqs, pf_q, pf_kv) + self._dc_lat(dc_seqs, dc_kv))

    def _linear_ops(self, tokens: int, logit_rows: int, group_tokens: int | None = None,
                    decode_only: bool = False) -> tuple[OpTime, ...]:
        """Token-count-dependent operators of one pipeline stage (all but attention).
        ``tokens``: rows of one (the busiest) attention DP rank; ``group_tokens``: rows of the
        whole DP group, which the MoE experts compute (None without attention DP)."""
        return self._linear_body_ops(tokens, group_tokens, decode_only) + self._logit_ops(logit_rows)

    def _linear_body_ops(self, tokens: int, group_tokens: int | None = None,
                         decode_only: bool = False) -> tuple[OpTime, ...]:
        """:meth:`_linear_ops` but the logit-row operators (which come last)."""
        m, k, par, T = self.model, self.kernels, self.par, tokens
        tp, h, wd = par.tp, m.hidden_size, self._wd
        L = self.layers_per_stage
        ops: list[OpTime] = []
        norm = k.memory_op(T * h * ACT_BYTES * 2)
        per_layer = 1 if m.block_pattern else 2  # Nemotron-H blocks: one norm, one TP all-reduce each
        # TensorRT-LLM: norms inside the all-reduce kernel, RoPE inside attention (sim/trtllm_fusions.py)
        folded = norms_in_allreduce(self.engine.kernel_backend, m, par)
        if T <= self._ar_rms_tokens:  # fused all-reduce + RMSNorm (sim/{vllm,sglang}_allreduce_rms.py)
            folded = per_layer
        ops.append(self._op("norms", "memory", norm, (per_layer - folded) * L))
        # ---- attention projections
        n_attn = m.num_full_attention_layers * self._frac
        if m.linear is not None:  # Gated DeltaNet layers: fused in_proj (q,k,v,z,b,a) and out_proj
            g = m.linear
            vd = g.num_value_heads * g.value_head_dim // tp
            gates = 1 if g.kind == "mamba2" else 2  # Mamba2 dt; GDN beta and alpha, per value head
            in_n = (g.conv_channels + g.num_value_heads * g.value_head_dim + gates * g.num_value_heads) // tp
            ops.append(self._op(f"{g.kind}_in_proj", "gemm", k.gemm(T, in_n, h, wd["linear_attention"]), self._n_linear))
            ops.append(self._op(f"{g.kind}_out_proj", "gemm", k.gemm(T, h, vd, wd["linear_attention"]), self._n_linear))
        if m.mla is None:
            gate = 2 if m.attn_output_gate else 1
            n_local = n_attn - self._n_global - self._n_swa_own
            kv_dims = m.head_dim + m.value_head_dim
            qkv_n = gate * self.heads * m.head_dim + self.kv_heads * kv_dims
            ops.append(self._op("qkv_proj", "gemm", normed_gemm_ms(k, T, qkv_n, h, wd["attention"],
                                                                   self._prequant.qkv_share), n_local))
            if self._n_swa_own:  # sliding layers with their own KV heads (MiMo-V2)
                qkv_s = gate * self.heads * m.head_dim + self._swa_geom[0] * kv_dims
                ops.append(self._op("qkv_proj_swa", "gemm", k.gemm(T, qkv_s, h, wd["attention"]), self._n_swa_own))
            ops.append(self._op("o_proj", "gemm", k.gemm(T, h, self.heads * m.value_head_dim, wd["attention"]),
                                n_local + self._n_swa_own))
            rope = k.memory_op(T * (self.heads + self.kv_heads) * m.head_dim * ACT_BYTES * 2)
            ops.append(self._op("rotary", "memory", rope, 0.0 if rope_in_attention(self.engine.kernel_backend, m) else n_attn))
            if self._n_global:  # Gemma-4 global layers: own head dim and KV heads, no v_proj with k_eq_v
                ga, (g_kv, g_hd) = m.global_attention, self._full_geom
                qkv_g = (self.heads + (1 if ga.k_eq_v else 2) * g_kv) * g_hd
                ops.append(self._op("qkv_proj_global", "gemm", k.gemm(T, qkv_g, h, wd["attention"]), self._n_global))
                ops.append(self._op("o_proj_global", "gemm", k.gemm(T, h, self.heads * g_hd, wd["attention"]), self._n_global))
        else:
            a = m.mla
            qk = a.qk_nope_head_dim + a.qk_rope_head_dim
            if a.q_lora_rank:
                ops.append(self._op("q_a_kv_a_proj", "gemm", k.gemm(T, a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim, h, wd["attention"]), L))
                ops.append(self._op("q_b_proj", "gemm", k.gemm(T, self.heads * qk, a.q_lora_rank, wd["attention"]), L))
            else:
                ops.append(self._op("q_proj", "gemm", k.gemm(T, self.heads * qk, h, wd["attention"]), L))
                ops.append(self._op("kv_a_proj", "gemm", k.gemm(T, a.kv_lora_rank + a.qk_rope_head_dim, h, wd["attention"]), L))
            # up-projection of the latent (prefill) or the absorbed q/out matmuls (decode):
            # both cost ~ tokens x heads x kv_lora_rank x (nope + v) MACs
            ops.append(self._op("kv_b_absorb", "gemm", k.gemm(T, self.heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, "bf16"), L))
            ops.append(self._op("o_proj", "gemm", k.gemm(T, h, self.heads * a.v_head_dim, wd["attention"]), L))
            if m.sparse is not None:  # DSA indexer projections (replicated across TP ranks)
                s = m.sparse
                ops.append(self._op("indexer_q_proj", "gemm",
                                    k.gemm(T, s.index_n_heads * s.index_head_dim, a.q_lora_rank or h, wd["indexer"]), self._n_indexer))
                ops.append(self._op("indexer_k_w_proj", "gemm",
                                    k.gemm(T, s.index_head_dim + s.index_n_heads, h, "bf16"), self._n_indexer))
        if tp > 1:
            ar = self._collective("all_reduce", T * h * ACT_BYTES, tp, self.tp_link)
            ops.append(self._op("tp_allreduce", "comm", ar, per_layer * L))
            if minimax_qk_norm_tp(self.engine.kernel_backend, m, par):  # sim/vllm_minimax_qk_norm.py
                qk = qk_bytes(T, self.heads, self.kv_heads, m.head_dim, ACT_BYTES)
                ops.append(self._op("qk_norm_allreduce", "comm",
                                    self._collective("all_reduce", variance_allreduce_bytes(T), tp, self.tp_link), n_attn))
                ops.append(self._op("qk_norm_variance", "memory", k.memory_op(qk), n_attn))
                ops.append(self._op("qk_norm_scale", "memory", k.memory_op(2 * qk), n_attn))
        # ---- MLP / MoE
        n_moe = m.num_moe_layers * self._frac
        n_dense = m.num_dense_mlp_layers * self._frac
        if n_dense > 0:
            inter = m.intermediate_size // tp
            up_n = (2 if m.gated_mlp else 1) * inter
            ops.append(self._op("mlp_up", "gemm", normed_gemm_ms(k, T, up_n, h, wd["dense_mlp"],
                                                                float(self._prequant.gate_up)), n_dense))
            ops.append(self._op("mlp_act", "memory", k.memory_op(T * inter * ACT_BYTES * 3), n_dense))
            ops.append(self._op("mlp_down", "gemm", k.gemm(T, h, inter, wd["dense_mlp"]), n_dense))
        if n_moe > 0 and m.moe is not None:
            e = m.moe
            eh = e.latent_size or h  # Nemotron-3 experts work in a latent width
            # the fused-MoE query says gated (SwiGLU, 3 matrices) or plain (relu2, 2); the wide-EP
            # curves time gated experts, where a plain one of width I is a gated one of width 2I/3
            e_inter = e.expert_intermediate_size if m.gated_mlp else e.expert_intermediate_size * 2 // 3
            ops.append(self._op("router", "gemm", k.gemm(T, e.num_experts, h, "bf16"), n_moe))
            if e.latent_size:
                ops.append(self._op("moe_latent_proj", "gemm", k.gemm(T, eh, h, wd["shared_experts"]), 2 * n_moe))
            T_moe = T if group_tokens is None else group_tokens
            # SGLang folds DeepSeek-V3/R1's shared expert into the fused MoE (sim/shared_experts.py)
            fused = 0 if group_tokens is not None else fused_shared_experts(
                self.engine.kernel_backend, m, par, wd["routed_experts"], wd["shared_experts"])
            moe_kt = k.moe(T_moe, eh, e.expert_intermediate_size, e.top_k + fused, e.num_experts + fused,
                           par.moe_tp, par.ep, self._moe_dtype, gated=m.gated_mlp,
                           architecture=m.architecture) \
                if group_tokens is None else group_moe(  # attention DP: measured wide-EP curves (sim/wideep_moe.py)
                    k, self.gpu.key, self.engine.kernel_backend, self.engine.moe_all2all, decode_only, T_moe, eh,
                    e_inter, e.top_k, e.num_experts, par.moe_tp, par.ep, wd["routed_experts"],
                    architecture=m.architecture)
            if self._marlin_mxfp4 and group_tokens is None:  # VLLM_MXFP4_USE_MARLIN (sim/vllm_marlin_mxfp4.py)
                moe_kt = moe_on_marlin(moe_kt, self.gpu.key, T_moe, eh, e.expert_intermediate_size, e.top_k,
                                       e.num_experts, par.moe_tp, par.ep, float(getattr(k, "moe_skew", 1.01)))
            ops.append(self._op("moe_experts", "moe", moe_kt, n_moe))
            # the shared expert's local width when it runs as its own MLP (0: none, or folded into the fused MoE)
            sh = e.num_shared_experts * e.shared_intermediate_size // tp if e.num_shared_experts and not fused else 0
            if e.num_shared_experts and not fused:
                ops.append(self._op("shared_up", "gemm", k.gemm(T, (2 if m.gated_mlp else 1) * sh, h, wd["shared_experts"]), n_moe))
                ops.append(self._op("shared_down", "gemm", k.gemm(T, h, sh, wd["shared_experts"]), n_moe))
            for name, kt in moe_layer_extra_ops(k, self.engine.kernel_backend, m, T, sh):  # sim/deepseek_routing.py
                ops.append(self._op(name, "memory", kt, n_moe))
            if self.dp > 1:  # attention DP: tokens gathered to / returned from the experts (sim/ep_comm.py)
                for name, kt in moe_exchange(k, self._collective, self.engine.kernel_backend, self.engine.moe_all2all,
                                             tokens_rank=T,
                                             tokens_group=T_moe, tp=tp, dp=self.dp, ep=par.ep, hidden=eh,
                                             top_k=e.top_k, num_experts=e.num_experts, decode_only=decode_only,
                                             stage_link=self.dp_link, ep_link=self.ep_link):
                    ops.append(self._op(name, "comm", kt, n_moe))
            # without attention DP every rank of the TP group holds all T tokens after the attention
            # all-reduce, so expert parallelism inside it needs no dispatch/combine: each rank runs
            # its experts on the tokens it has and the MLP all-reduce above sums them (engines
            # all-to-all only for EP + DP: docs.vllm.ai/en/v0.12.0/serving/expert_parallel_deployment/;
            # TensorRT-LLM with enable_attention_dp). A separate all-to-all here double-counted it.
        # ---- once per iteration (last stage): embedding, final norm, lm_head, sampling
        ops.append(self._op("embedding", "memory", k.memory_op(T * h * ACT_BYTES), 1))
        return tuple(ops)

    def _logit_ops(self, logit_rows: int) -> tuple[OpTime, ...]:
        """lm_head and sampling over the sequences that emit a token (last stage, once per step)."""
        if not logit_rows:
            return ()
        m, k = self.model, self.kernels
        return (self._op("lm_head", "gemm", k.gemm(logit_rows, max(1, m.vocab_size // self.par.tp), m.hidden_size,
                                                   self._wd["lm_head"]), 1),
                self._op("sampling", "memory", k.memory_op(logit_rows * m.vocab_size * 4.0 * 2), 1))

    def _attn_ops(self, pf_seqs: int, pf_q: int, pf_kv: float, dc_seqs: int, dc_kv: float) -> tuple[OpTime, ...]:
        """Attention of one pipeline stage: prefill chunks and decode tokens."""
        m, k = self.model, self.kernels
        L = self.layers_per_stage
        kvd = self.prec.kv_cache
        n_slide = m.num_sliding_layers * self._frac if m.sliding_window else 0.0
        n_full = m.num_full_attention_layers * self._frac - n_slide
        ops: list[OpTime] = []
        if m.linear is not None:
            self._gdn_ops(ops, pf_seqs, pf_q, dc_seqs)
        if m.sparse is not None:
            self._dsa_ops(ops, pf_seqs, pf_q, pf_kv, dc_seqs, dc_kv)
            return tuple(ops)

        def layers(name: str, family: str, fn) -> None:
            if n_full > 0:
                ops.append(self._op(name, family, fn(None), n_full))
            if n_slide > 0:
                ops.append(self._op(name + "_swa", family, fn(m.sliding_window), n_slide))

        if pf_seqs:
            if m.mla is None:
                # sliding layers: the kernel is told the window (each query sees at most ``win``
                # keys) and reads no key older than win + pf_q
                layers("attn_prefill", "attn_prefill", lambda win: k.attention_prefill(
                    pf_seqs, pf_q, int(round(min(pf_kv, win + pf_q) if win else pf_kv)), self.heads,
                    *(self._swa_geom if win else self._full_geom), kvd, *((win,) if win else ())))
            else:
                a = m.mla
                layers("mla_prefill", "mla", lambda win: k.mla_prefill(
                    pf_seqs, pf_q, int(round(pf_kv)), self.heads, a.kv_lora_rank, a.qk_nope_head_dim,
                    a.qk_rope_head_dim, a.v_head_dim, kvd))
        if dc_seqs:
            if m.mla is None:
                layers("attn_decode", "attn_decode", lambda win: k.attention_decode(
                    dc_seqs, dc_kv, self.heads, *(self._swa_geom if win else self._full_geom), kvd,
                    *((win,) if win else ())))
            else:
                a = m.mla
                layers("mla_decode", "mla", lambda win: k.mla_decode(
                    dc_seqs, dc_kv, self.heads, a.kv_lora_rank, a.qk_rope_head_dim, kvd))
        return tuple(ops)

    def _gdn_ops(self, ops: list[OpTime], pf_seqs: int, pf_q: int, dc_seqs: int) -> None:
        """Linear-attention layers (Gated DeltaNet or Mamba2): chunked scan over prefill
        chunks, one recurrent step per decoding sequence (state-size bound); heads split over TP."""
        g, tp = self.model.linear, self.par.tp
        heads = (max(1, g.num_key_heads // tp), max(1, g.num_value_heads // tp), g.key_head_dim, g.value_head_dim,
                 g.conv_kernel, g.state_dtype)
        op = g.kind  # "gdn" or "mamba2", each answered by its own measured table when calibrated
        scan = self._optional(op)
        if pf_seqs:
            ops.append(self._op(f"{op}_prefill", f"{op}_prefill", scan("context", pf_seqs, pf_q, *heads), self._n_linear))
        if dc_seqs:
            ops.append(self._op(f"{op}_decode", f"{op}_decode", scan("generation", dc_seqs, 1, *heads), self._n_linear))

    def _dsa_ops(self, ops: list[OpTime], pf_seqs: int, pf_q: int, pf_kv: float, dc_seqs: int, dc_kv: float) -> None:
        """DeepSeek sparse attention: the indexer scores the whole context, top-k picks the
        keys, sparse MLA attends to at most ``index_topk`` of them."""
        m, kvd, L = self.model, self.prec.kv_cache, self.layers_per_stage
        s, a = m.sparse, m.mla
        logits, topk, attn = (self._optional(op) for op in ("dsa_mqa_logits", "dsa_topk", "dsa_attention"))
        for phase, seqs, q, kv in (("prefill", pf_seqs, pf_q, pf_kv), ("decode", dc_seqs, 1, dc_kv)):
            if not seqs:
                continue
            kv_i = max(q, int(round(kv)))
            ops.append(self._op(f"dsa_indexer_{phase}", "dsa_mqa_logits",
                                logits(seqs, q, kv_i, s.index_n_heads, s.index_head_dim), self._n_indexer))
            ops.append(self._op(f"dsa_topk_{phase}", "dsa_topk", topk(seqs, q, kv_i, s.index_topk), self._n_indexer))
            ops.append(self._op(f"dsa_attn_{phase}", "dsa_attention", attn(seqs, q, kv_i, s.index_topk, self.heads,
                                                                   a.kv_lora_rank, a.qk_rope_head_dim, kvd), L))

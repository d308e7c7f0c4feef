"""Speculative decoding: accepted tokens per step, and the step cost from the step model.

Methods (``METHODS``):

* ``mtp`` -- the target's own multi-token-prediction modules (DeepSeek-V3/R1, GLM-5, Qwen3.5:
  ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers`` in config.json). One draft forward is
  one MTP module: one transformer layer of the target's geometry (its attention kind, MoE or
  dense MLP) plus the ``eh_proj`` (2h -> h) projection, the shared embedding and lm_head.
  With k above the number of modules the last module is reused, as vLLM and SGLang do.
* ``eagle3`` -- an EAGLE-3 head (Li et al., arXiv:2503.01840): one dense decoder layer of the
  target's hidden size whose attention input is 2h (token embedding + fused feature), an
  ``fc`` fusing three target layers (3h -> h) and a reduced draft vocabulary
  (``EAGLE3_DRAFT_VOCAB`` = 32,000, the ``draft_vocab_size`` of the published
  EAGLE3-LLaMA3.1-Instruct-8B head).
* ``draft_model`` -- any catalog model as a separate draft (it must not be larger than the
  target: UserError).

Acceptance (:class:`Acceptance`): per-position conditional rates alpha_1..alpha_k (alpha_i =
P(draft token i accepted | tokens 1..i-1 accepted)), a single rate for every position, or the
distribution of the number of accepted draft tokens. Tokens per verify step, bonus token
included: ``E[L] = 1 + sum_{i=1..k} prod_{j<=i} alpha_j``.

Cost of one speculative step for a batch (:class:`SpeculativeStepModel`):

* draft: k sequential forwards of the draft. The first processes the k+1 tokens of the
  previous verify step per sequence (vLLM V1's EAGLE proposer runs its first pass over the
  verified tokens and their target hidden states), the other k-1 one token each. Draft
  forwards are priced with the same kernel model as the target (same GPU, TP group,
  precision) and WITHOUT the engine's per-step host overhead: they run inside the engine
  step (CUDA graphs), whose host time the verify step pays once.
* verify: one target iteration in which every sequence carries k+1 query tokens attending to
  its context. ``StepShape`` has no multi-token decode, so verify is expressed as one prefill
  chunk of k+1 new tokens per sequence after its context (linear layers see n*(k+1) tokens),
  plus the lm_head and sampling of the k extra logit rows per sequence that a prefill chunk
  does not emit. Its attention is the cheaper of the prefill kernel over those chunks (KV read
  once per sequence) and the decode kernel over the n*(k+1) queries flattened into
  single-token decodes (KV read once per query): engines' multi-query decode kernels
  (FlashMLA, FlashInfer) sit at or below both, and the measured prefill tables are
  extrapolated far below their fitted query lengths (they price a 2-token MLA chunk at 10x
  the decode kernel). The draft's first forward (k+1 tokens) is priced the same way.
* extra KV: the verify attends to context + k+1 keys; :meth:`extra_kv_bytes_per_seq` gives
  the memory a sequence additionally holds (the k speculative slots in the target, the
  draft's own cache).

Draft trees (EAGLE in SGLang / TensorRT-LLM): ``topk`` branches per later draft step and
``verify_tokens`` query tokens per sequence in the verify step (the tree size, root
included) instead of k + 1; the draft phase pays the engine's per-step host time once
(it is a forward of its own). docs/SPECULATIVE.md explains both and the validation.

TPOT = step time / E[L]. The loss of benefit at large batch is not a factor: the verify
step's (k+1) x batch tokens make the linear layers compute-bound sooner than one-token decode,
and the draft steps grow with the batch; both come from the step model.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from llmplan.errors import UserError
from llmplan.model_catalog.derived import (
    bytes_per_element,
    kv_bytes_per_token_tp,
    param_breakdown,
    param_count_total,
    weight_bytes,
)
from llmplan.model_catalog.loader import CONFIG_DIR, load_model
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.step_model import ACT_BYTES, AnalyticalStepModel, _bucket
from llmplan.sim.types import EngineProfile, Parallelism, StepShape

METHODS = ("mtp", "eagle3", "draft_model")

#: vocabulary of an EAGLE-3 head's lm_head (``draft_vocab_size`` of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B).
EAGLE3_DRAFT_VOCAB = 32000

#: default per-position acceptance rate of each method, with its source (docs/SPECULATIVE.md).
DEFAULT_ACCEPTANCE: dict[str, tuple[float, str]] = {
    "mtp": (0.85, "DeepSeek-V3 technical report (arXiv:2412.19437) sec. 5.4.3: second-token acceptance of the "
                  "MTP module 85%-90% across generation topics; lower end"),
    "eagle3": (0.75, "EAGLE-3 paper (arXiv:2503.01840), acceptance rate per draft position (n-alpha) for "
                     "LLaMA-Instruct 3.1 8B: roughly 0.7-0.8 at every position (read from the figure)"),
    "draft_model": (0.70, "survey scenario I5.1 (issue 10): Llama-2-7B draft for Llama-2-70B, acceptance "
                          "70%-85%; lower end"),
}

#: config.json keys that give the number of MTP modules
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


# --------------------------------------------------------------------------- acceptance
def _check_prob(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0.0 <= value <= 1.0:
        raise UserError(f"acceptance must be a number in [0, 1], got {value!r}", key=key,
                        fix="give a probability between 0 and 1")
    return float(value)


def _check_k(k: object, key: str = "speculative.k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise UserError(f"the number of speculative tokens must be an integer >= 0, got {k!r}", key=key)
    return k


@dataclass(frozen=True)
class Acceptance:
    """Conditional acceptance rate of each draft position. ``extends``: the last rate holds for
    every later position (a single rate); otherwise at most ``len(rates)`` tokens can be drafted."""

    rates: tuple[float, ...]
    extends: bool = False
    source: str = ""

    @staticmethod
    def constant(alpha: float, source: str = "", key: str = "speculative.acceptance") -> "Acceptance":
        """The same rate at every position (i.i.d. acceptance, Leviathan et al., arXiv:2211.17192)."""
        return Acceptance((_check_prob(alpha, key),), True, source)

    @staticmethod
    def from_mean_length(mean_tokens: float, k: int, source: str = "",
                         key: str = "speculative.accept_length") -> "Acceptance":
        """The constant rate whose chain of ``k`` drafts emits ``mean_tokens`` per verify step
        (bonus included): the form engines report (SGLang's ``accept len``, vLLM's mean
        acceptance length). Must lie in [1, k + 1]. The shape of the distribution around that
        mean is the i.i.d. assumption; the mean, which sets TPOT and throughput, is exact."""
        k = _check_k(k)
        if isinstance(mean_tokens, bool) or not isinstance(mean_tokens, (int, float)) \
                or not math.isfinite(mean_tokens) or not 1.0 <= mean_tokens <= k + 1:
            raise UserError(f"mean accepted length must be a number in [1, k + 1 = {k + 1}], got {mean_tokens!r}",
                            key=key, fix="tokens per verify step, bonus token included (1 = nothing accepted)")
        lo, hi = 0.0, 1.0
        for _ in range(60):  # E[L] grows monotonically with the rate
            mid = (lo + hi) / 2
            if Acceptance((mid,), True).expected_tokens(k) < mean_tokens:
                lo = mid
            else:
                hi = mid
        return Acceptance(((lo + hi) / 2,), True, source)

    @staticmethod
    def per_position(rates: Sequence[float], source: str = "", key: str = "speculative.acceptance") -> "Acceptance":
        """alpha_1..alpha_m; drafting up to m tokens."""
        if len(rates) == 0:
            raise UserError("the per-position acceptance list is empty", key=key, fix="give at least one rate")
        return Acceptance(tuple(_check_prob(a, f"{key}[{i}]") for i, a in enumerate(rates)), False, source)

    @staticmethod
    def from_length_distribution(probs: Sequence[float], source: str = "",
                                 key: str = "speculative.accepted_length_probs") -> "Acceptance":
        """``probs[a]`` = P(exactly a draft tokens accepted), a = 0..k (so k = len(probs) - 1);
        the tokens emitted per step are a + 1. Must sum to 1 (within 1e-6)."""
        if len(probs) < 1:
            raise UserError("the accepted-length distribution is empty", key=key)
        p = [_check_prob(x, f"{key}[{i}]") for i, x in enumerate(probs)]
        total = sum(p)
        if abs(total - 1.0) > 1e-6:
            raise UserError(f"the accepted-length probabilities sum to {total:.6g}, not 1", key=key,
                            fix="give P(0 accepted), ..., P(k accepted) summing to 1")
        rates, tail = [], 1.0  # tail = P(a >= i - 1)
        for i in range(1, len(p)):
            nxt = tail - p[i - 1]  # P(a >= i)
            rates.append(min(1.0, max(0.0, nxt / tail)) if tail > 1e-15 else 0.0)
            tail = nxt
        return Acceptance(tuple(rates), False, source)

    @property
    def max_k(self) -> int | None:
        """Most draft tokens this acceptance describes (None: any)."""
        return None if self.extends else len(self.rates)

    def rate(self, i: int) -> float:
        """alpha_i, 1-based."""
        if i <= len(self.rates):
            return self.rates[i - 1]
        if self.extends:
            return self.rates[-1]
        raise UserError(f"the acceptance gives {len(self.rates)} positions, k={i} needs {i}",
                        key="speculative.k", fix=f"use k <= {len(self.rates)} or give more acceptance rates")

    def expected_tokens(self, k: int) -> float:
        """E[L]: tokens emitted per verify step with k draft tokens, the bonus token included."""
        k = _check_k(k)
        total, run = 1.0, 1.0
        for i in range(1, k + 1):
            run *= self.rate(i)
            total += run
        return total

    def sample_tokens(self, rng: random.Random, k: int) -> int:
        """Tokens one sequence emits in one verify step (accepted drafts + the bonus token),
        drawn from :meth:`length_distribution` (for the discrete-event simulator)."""
        u, run = rng.random(), 1.0
        for i in range(1, k + 1):
            a = self.rate(i)
            if u >= run * a:  # rejected at position i (u uniform in [0, 1): P = run * (1 - a) here)
                return i
            run *= a
        return k + 1

    def length_distribution(self, k: int) -> tuple[float, ...]:
        """P(exactly a draft tokens accepted), a = 0..k."""
        k = _check_k(k)
        out, run = [], 1.0
        for i in range(1, k + 1):
            a = self.rate(i)
            out.append(run * (1.0 - a))
            run *= a
        out.append(run)
        return tuple(out)


def default_acceptance(method: str) -> Acceptance:
    """The documented default of ``method`` (``DEFAULT_ACCEPTANCE``)."""
    _check_method(method)
    alpha, source = DEFAULT_ACCEPTANCE[method]
    return Acceptance.constant(alpha, source)


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise UserError(f"unknown speculative method {method!r}", key="speculative.method",
                        fix="one of " + ", ".join(METHODS))


# --------------------------------------------------------------------------- draft geometry
def mtp_layers(model: ModelSpec) -> int:
    """Number of MTP modules of ``model`` (0 if none), from the model's config.json
    (``_MTP_KEYS``; the catalog's ModelSpec does not carry them)."""
    src = Path(model.source)
    return _mtp_layers_of(str(CONFIG_DIR / src.name if model.source.startswith("model_catalog/configs/") else src))


@lru_cache(maxsize=64)
def _mtp_layers_of(path: str) -> int:
    """:func:`mtp_layers` of one config.json, read once per path."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return 0
    for c in (cfg, cfg.get("text_config") or {}):
        for key in _MTP_KEYS:
            if isinstance(c.get(key), int) and c[key] > 0:
                return int(c[key])
    return 0


def one_layer_of(target: ModelSpec) -> ModelSpec:
    """One transformer layer with the target's geometry (MLA/DSA attention, MoE or dense MLP),
    the shape of one MTP module; linear-attention and sliding layers become full attention
    (Qwen3.5's MTP layer is a full-attention layer)."""
    moe = replace(target.moe, num_dense_layers=0) if target.moe is not None else None
    sparse = replace(target.sparse, num_indexer_layers=1) if target.sparse is not None else None
    layer = replace(target, key=f"{target.key}_mtp", num_layers=1, moe=moe, sparse=sparse, linear=None,
                    sliding_window=0, num_sliding_layers=0, global_attention=None, quant=None)
    return replace(layer, quant=_layer_quant(target, layer))


def _layer_quant(target: ModelSpec, layer: ModelSpec) -> Any:
    """The target's shipped weight format (``quant``) rescaled to one layer: each component keeps its
    format with the layer's own parameter count (and tensors in proportion). The target's ``quant``
    counts the whole checkpoint's parameters; left as is, the one-layer module's ``weight_bytes`` was
    the layer's bf16 size minus the whole checkpoint's (negative: -642 GB for DeepSeek-R1 fp8, so a
    speculating replica got -80 GB of draft weights per GPU and that much more KV)."""
    q = target.quant
    if q is None:
        return None
    mine = param_breakdown(layer)
    parts = []
    for part in q.parts:
        n = getattr(mine, part.component, None)
        n = int(n) if isinstance(n, (int, float)) else int(round(part.params / max(1, target.num_layers)))
        ratio = n / part.params if part.params else 0.0
        parts.append(replace(part, params=n, tensors=int(round(part.tensors * ratio))))
    return replace(q, parts=tuple(parts))


def eagle3_head_of(target: ModelSpec) -> ModelSpec:
    """An EAGLE-3 head: one dense Llama-style layer of the target's hidden size and heads, the
    target's dense MLP width, a 32k draft vocabulary (MLA targets: GQA with one KV head per
    query head at the target's qk head dim, an assumption)."""
    kv = target.num_kv_heads if target.mla is None else target.num_attention_heads
    return replace(target, key=f"{target.key}_eagle3", num_layers=1, moe=None, mla=None, sparse=None,
                   linear=None, global_attention=None, sliding_window=0, num_sliding_layers=0,
                   num_kv_heads=kv, vocab_size=EAGLE3_DRAFT_VOCAB, tie_word_embeddings=False,
                   attn_output_gate=False, quant=None)


def _no_host(engine: EngineProfile) -> EngineProfile:
    """The engine profile with every per-step host term zero, the eager-step launch included (draft
    forwards run inside the step, within its CUDA graph: TensorRT-LLM's one-model speculation "can
    launch the entire drafting loop as a single CUDA graph",
    https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html)."""
    return replace(engine, **{f.name: 0.0 for f in fields(engine)
                              if f.name.startswith("host_") or f.name == "eager_step_ms_per_layer"})


#: operator families of attention (and its linear / sparse variants) in the step model's breakdown
ATTENTION_FAMILIES = ("attn_prefill", "attn_decode", "mla", "dsa_mqa_logits", "dsa_topk", "dsa_attention",
                      "gdn_prefill", "gdn_decode", "mamba2_prefill", "mamba2_decode")


def _attention_ms(sm: AnalyticalStepModel, shape: StepShape) -> float:
    """Attention part of a step of ``sm`` (all pipeline stages), from its breakdown."""
    return sum(o.latency_ms for o in sm.breakdown(shape).ops if o.family in ATTENTION_FAMILIES)


@lru_cache(maxsize=65536)
def _multi_query_uniform_ms(sm: AnalyticalStepModel, n: int, q: int, ctx: float) -> float:
    """:meth:`SpeculativeStepModel._multi_query_ms` for n sequences of context ``ctx``."""
    pairs = n * (q * ctx + q * (q + 1) / 2)  # query i of q attends to ctx + i keys
    chunk = StepShape(prefill_tokens=n * q, prefill_seqs=n, prefill_attn_pairs=pairs,
                      prefill_ctx_tokens=int(round(n * ctx)))
    flat = StepShape(decode_seqs=n * q, decode_kv_tokens=int(round(pairs)))
    a_chunk, a_flat = _attention_ms(sm, chunk), _attention_ms(sm, flat)
    t = sm.step_time_ms(chunk) - a_chunk + min(a_chunk, a_flat)
    e = sm.engine.eager_step_ms_per_layer
    if e:  # a verify step is a decode step of n x q tokens for the CUDA graphs (sim/cuda_graphs.eager_step),
        # not a prompt: the engines capture it (vLLM/SGLang verify graphs, TensorRT-LLM one-model graph)
        t += e * (sm.eager_layers(flat) - sm.eager_layers(chunk))
    return t


# --------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class SpecConfig:
    """What the planner or the config chooses."""

    method: str
    k: int
    acceptance: Acceptance
    draft: ModelSpec | None = None   # the draft model of ``draft_model``
    #: draft tree (EAGLE-2/3 in SGLang: ``speculative_eagle_topk``): branches each later draft
    #: step expands per sequence; 1 = a chain
    topk: int = 1
    #: query tokens per sequence in the verify step, the bonus/root position included (SGLang's
    #: ``speculative_num_draft_tokens``); None = k + 1, a chain
    verify_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_method(self.method)
        _check_k(self.k)
        if isinstance(self.topk, bool) or not isinstance(self.topk, int) or self.topk < 1:
            raise UserError(f"topk must be an integer >= 1, got {self.topk!r}", key="speculative.topk",
                            fix="1 for a chain, e.g. 4 or 8 for an EAGLE tree")
        if self.verify_tokens is not None:
            v, top = self.verify_tokens, 1 + self.topk + max(0, self.k - 1) * self.topk * self.topk
            if isinstance(v, bool) or not isinstance(v, int) or not self.k + 1 <= v <= max(self.k + 1, top) \
                    or (self.topk == 1 and v != self.k + 1):
                raise UserError(f"verify_tokens={v!r} is not a tree of depth k={self.k} and topk={self.topk}",
                                key="speculative.verify_tokens",
                                fix=f"use k + 1 = {self.k + 1} for a chain, at most {top} for this tree "
                                    "(SGLang: 1 + topk + (k - 1) topk^2 candidates)")
        if self.method == "draft_model" and self.draft is None:
            raise UserError("method draft_model needs a draft model", key="speculative.draft_model",
                            fix="name a catalog model smaller than the target")
        if self.acceptance.max_k is not None and self.k > self.acceptance.max_k:
            self.acceptance.rate(self.k)  # raises with the key and the fix

    @property
    def tokens_per_step(self) -> float:
        return self.acceptance.expected_tokens(self.k)

    @property
    def verify_width(self) -> int:
        """Query tokens per sequence in the verify step (k + 1 for a chain, the tree size otherwise)."""
        if self.k == 0:
            return 1
        return self.k + 1 if self.verify_tokens is None else self.verify_tokens


@dataclass(frozen=True)
class SpecStepTime:
    """One speculative step for a batch, next to plain decode of the same batch."""

    batch: int
    k: int
    draft_ms: float
    verify_ms: float
    step_ms: float             # draft + verify: the time between two bursts of tokens (ITL)
    tokens_per_step: float     # E[L] per sequence
    baseline_step_ms: float    # one plain decode step of the batch (= its TPOT)

    @property
    def tpot_ms(self) -> float:
        return self.step_ms / self.tokens_per_step

    @property
    def itl_ms(self) -> float:
        """Gap between token bursts: tokens of one step arrive together."""
        return self.step_ms

    @property
    def speedup(self) -> float:
        """Plain-decode TPOT over speculative TPOT (> 1: speculation helps)."""
        return self.baseline_step_ms / self.tpot_ms

    @property
    def tokens_per_s_per_seq(self) -> float:
        return 1e3 / self.tpot_ms

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.tokens_per_s_per_seq


def check_draft_size(draft: ModelSpec, target: ModelSpec) -> None:
    """UserError when the draft model has more parameters than the target."""
    if param_count_total(draft) > param_count_total(target):
        raise UserError(f"draft model {draft.key} ({param_count_total(draft) / 1e9:.1f}B parameters) is "
                        f"larger than the target {target.key} ({param_count_total(target) / 1e9:.1f}B)",
                        key="speculative.draft_model", fix="choose a smaller draft model")


class SpeculativeStepModel:
    """Speculative decode step cost for one replica, on top of its target step model."""

    def __init__(self, target: AnalyticalStepModel, cfg: SpecConfig, draft_tp: int | None = None,
                 mtp_modules: int | None = None):
        self.target, self.cfg = target, cfg
        m = target.model
        if cfg.method == "mtp":
            n = mtp_layers(m) if mtp_modules is None else mtp_modules
            if n <= 0:
                raise UserError(f"{m.key} has no multi-token-prediction modules (num_nextn_predict_layers)",
                                key="speculative.method", fix="use eagle3 or draft_model for this model")
            self.mtp_modules = n
            draft, ep = one_layer_of(m), target.par.ep
        elif cfg.method == "eagle3":
            draft, ep = eagle3_head_of(m), 1
        else:
            draft, ep = cfg.draft, 1
            assert draft is not None
            check_draft_size(draft, m)
        if draft_tp is not None and (isinstance(draft_tp, bool) or not isinstance(draft_tp, int) or draft_tp < 1
                                     or draft.num_attention_heads % draft_tp):
            raise UserError(f"draft TP {draft_tp!r} does not split the draft's {draft.num_attention_heads} attention "
                            f"heads", key="speculative.draft_tp", fix=f"use 1 or the target's TP ({target.par.tp})")
        tp = target.par.tp if draft_tp is None else draft_tp
        if draft.num_attention_heads % tp:
            tp = 1  # by default the draft runs at the target's TP, else at TP 1 (vLLM's two choices)
        self.draft_model = draft
        self.draft_par = Parallelism(tp=tp, pp=1, ep=ep if ep <= tp else 1)
        if cfg.method == "mtp" and target.par.dp > 1 and tp == target.par.tp:
            # attention DP: the MTP module is a layer of the target and runs on its mapping (each DP rank
            # its own sequences, the experts over the same EP group); TensorRT-LLM builds the MTP layers
            # with the target's model_config/mapping (tensorrt_llm/_torch/models/modeling_deepseekv3.py)
            self.draft_par = Parallelism(tp=tp, pp=1, ep=target.par.ep, dp=target.par.dp)
        self.draft = AnalyticalStepModel(draft, target.gpu, self.draft_par, target.prec, _no_host(target.engine),
                                         target.kernels)

    # ---------------------------------------------------------------- extra operators
    def _extra_draft_ms(self, tokens: int) -> float:
        """Operators of a draft forward the one-layer spec does not hold: MTP eh_proj (2h -> h);
        EAGLE-3's second half of the qkv input (2h wide)."""
        m, k, w = self.target.model, self.target.kernels, self.target.prec.weights
        h = m.hidden_size
        if self.cfg.method == "mtp":
            return k.gemm(tokens, h, 2 * h, w).latency_ms
        if self.cfg.method == "eagle3":
            d, tp = self.draft_model, self.draft_par.tp
            qkv_n = (d.num_attention_heads + 2 * d.num_kv_heads) * d.head_dim // tp
            return k.gemm(tokens, qkv_n, h, w).latency_ms
        return 0.0

    def _extra_logits_ms(self, seqs: int, rows: int) -> float:
        """lm_head and sampling of ``rows`` logit rows beyond the ``seqs`` a prefill chunk emits."""
        if rows <= seqs:
            return 0.0
        m, k = self.target.model, self.target.kernels
        v = max(1, m.vocab_size // self.target.par.tp)
        head = k.gemm(rows, v, m.hidden_size, "bf16").latency_ms - k.gemm(seqs, v, m.hidden_size, "bf16").latency_ms
        sampling = (k.memory_op(rows * m.vocab_size * 4.0 * 2).latency_ms
                    - k.memory_op(seqs * m.vocab_size * 4.0 * 2).latency_ms)
        return max(0.0, head) + max(0.0, sampling)

    # ---------------------------------------------------------------- public
    def baseline_step_ms(self, kv_lens: Sequence[int]) -> float:
        """One plain decode step of sequences with these KV lengths."""
        return self.target.step_time_ms(StepShape.build(decode_kv_lens=list(kv_lens)))

    def draft_ms(self, kv_lens: Sequence[int]) -> float:
        """The k draft forwards of one speculative step."""
        k = self.cfg.k
        if k == 0 or not kv_lens:
            return 0.0
        n = len(kv_lens)
        t = self._multi_query_ms(self.draft, kv_lens, k + 1) + self._extra_draft_ms(n * (k + 1))
        if self.cfg.method == "eagle3":  # fc fuses three target features (3h -> h) of the verified tokens
            h = self.target.model.hidden_size
            t += self.target.kernels.gemm(n * (k + 1), h, 3 * h, self.target.prec.weights).latency_ms
        # the draft phase is a forward of its own: input preparation and graph launch once per
        # speculative step (SGLang's EAGLE worker: draft, then verify, then draft-extend; vLLM V1:
        # the proposer after the target forward); its per-forward host time is the engine's
        t += self.target.engine.host_overhead_ms or 0.0
        total_kv, b = sum(kv_lens), self.cfg.topk  # a tree expands b branches per sequence per later step
        for i in range(1, k):
            t += self.draft.step_time_ms(StepShape(decode_seqs=n * b, decode_kv_tokens=b * (total_kv + n * (k + 1 + i))))
            t += self._extra_draft_ms(n * b)
        return t

    def verify_ms(self, kv_lens: Sequence[int]) -> float:
        """One target iteration verifying k+1 tokens per sequence (see module docstring)."""
        k = self.cfg.k
        if not kv_lens:
            return 0.0
        if k == 0:
            return self.baseline_step_ms(kv_lens)
        n, q = len(kv_lens), self.cfg.verify_width
        return self._multi_query_ms(self.target, kv_lens, q) + self._extra_logits_ms(n, n * q)

    def _multi_query_ms(self, sm: AnalyticalStepModel, kv_lens: Sequence[int], q: int) -> float:
        """A step of ``sm`` in which each sequence carries ``q`` query tokens after its context.

        Priced as one prefill chunk of q tokens per sequence; its attention is replaced by the
        cheaper of that (prefill kernel, KV read once per sequence) and the decode kernel over
        the n*q queries flattened into single-token decodes (KV read once per query). Engines
        run multi-query decode kernels (FlashMLA, FlashInfer) that sit at or below both; the
        measured kernel tables have no such shapes and the prefill tables are extrapolated
        far below their fitted query lengths. Sequences are taken at their mean context on a 1%
        grid (the step model prices attention from the mean KV length too), so the result is
        cached for the discrete-event simulator's hot path."""
        n = len(kv_lens)
        return _multi_query_uniform_ms(sm, n, q, _bucket(sum(kv_lens) / n))

    def draft_prefill_ms(self, prefill_chunks: Sequence[tuple[int, int]]) -> float:
        """Extra time a prefill step takes with speculation on: the draft (MTP module, EAGLE-3
        head or draft model) also runs over the new prompt tokens, ``(new_tokens, context)``
        per chunk, to build its own KV (added to the target's prefill step by the caller)."""
        if self.cfg.k == 0 or not prefill_chunks:
            return 0.0
        tokens = sum(n for n, _ in prefill_chunks)
        return (self.draft.step_time_ms(StepShape.build(prefill_chunks=list(prefill_chunks)))
                + self._extra_draft_ms(tokens))

    def step(self, batch: int, kv_len: int) -> SpecStepTime:
        """A speculative step of ``batch`` sequences of ``kv_len`` context tokens each."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UserError(f"batch must be an integer >= 1, got {batch!r}", key="batch")
        if isinstance(kv_len, bool) or not isinstance(kv_len, int) or kv_len < 1:
            raise UserError(f"kv_len must be an integer >= 1, got {kv_len!r}", key="kv_len")
        lens = [kv_len] * batch
        draft, verify = self.draft_ms(lens), self.verify_ms(lens)
        return SpecStepTime(batch, self.cfg.k, draft, verify, draft + verify, self.cfg.tokens_per_step,
                            self.baseline_step_ms(lens))

    def step_time_ms(self, kv_lens: Sequence[int]) -> float:
        """DES hook: time of one speculative step of running sequences with these KV lengths."""
        return self.draft_ms(kv_lens) + self.verify_ms(kv_lens)

    def extra_kv_bytes_per_seq(self, kv_len: int) -> float:
        """Memory one running sequence holds beyond plain decode, per GPU of the target's TP
        group: the k speculative KV slots of the target, plus the draft's own KV of
        ``kv_len + k`` tokens (MTP: one layer per module used; EAGLE-3: one layer)."""
        kv_dtype, tp, k = self.target.prec.kv_cache, self.target.par.tp, self.cfg.k
        if k == 0:
            return 0.0
        target = (self.cfg.verify_width - 1) * kv_bytes_per_token_tp(self.target.model, kv_dtype, tp)
        layers = min(k, self.mtp_modules) if self.cfg.method == "mtp" else 1
        per_tok = kv_bytes_per_token_tp(self.draft_model, kv_dtype, self.draft_par.tp)
        draft = per_tok * (kv_len + k) * (layers if self.cfg.method == "mtp" else 1)
        return target + draft

    def draft_weight_bytes_per_gpu(self) -> float:
        """Weights the draft adds per GPU: a separate draft model or EAGLE-3 head (the head's
        own lm_head included; it shares the target's embedding), or the MTP modules used
        (sharing the target's embedding and lm_head)."""
        d, w = self.draft_model, self.target.prec.weights
        if self.cfg.method == "mtp":
            n = min(self.cfg.k, self.mtp_modules)
            p, b = param_breakdown(d), bytes_per_element(w)
            shared = (p.embedding + p.lm_head) * max(b, ACT_BYTES)  # embedding and lm_head stay bf16 when narrower
            one = weight_bytes(d, w) - shared + 2 * d.hidden_size * d.hidden_size * b  # + eh_proj (2h -> h)
            return n * one / self.draft_par.tp
        return weight_bytes(d, w) / self.draft_par.tp


def spec_config_from(cfg: Mapping[str, Any] | None, load_draft: Callable[[str], ModelSpec] | None = None,
                     key: str = "speculative") -> SpecConfig | None:
    """A :class:`SpecConfig` from a config mapping, or None when speculation is off.

    Keys: ``method`` (mtp | eagle3 | draft_model | none), ``k``, and at most one of
    ``acceptance`` (a rate, or a list alpha_1..alpha_m) and ``accepted_length_probs``
    (P(0..k drafts accepted); k defaults to its length - 1); neither = the method's
    documented default. ``draft_model`` names a catalog model (``load_draft`` resolves it)."""
    if not cfg or cfg.get("method") in (None, "none", "off"):
        return None
    method = cfg["method"]
    _check_method(method)
    known = {"method", "k", "acceptance", "accepted_length_probs", "accept_length", "draft_model", "topk",
             "verify_tokens"}
    extra = sorted(set(cfg) - known)
    if extra:
        raise UserError(f"unknown key {extra[0]!r}", key=f"{key}.{extra[0]}", fix="known: " + ", ".join(sorted(known)))
    acc_in, dist_in, mean_in = cfg.get("acceptance"), cfg.get("accepted_length_probs"), cfg.get("accept_length")
    if sum(x is not None for x in (acc_in, dist_in, mean_in)) > 1:
        raise UserError("give one of acceptance, accepted_length_probs and accept_length", key=f"{key}.acceptance")
    if mean_in is not None:
        k = cfg.get("k")
        if k is None:
            raise UserError("accept_length needs k", key=f"{key}.k", fix="set k, e.g. k=3")
        acc = Acceptance.from_mean_length(mean_in, _check_k(k, f"{key}.k"), "config", key=f"{key}.accept_length")
    elif dist_in is not None:
        acc = Acceptance.from_length_distribution(list(dist_in), "config", key=f"{key}.accepted_length_probs")
        k = cfg.get("k", len(dist_in) - 1)
        if k != len(dist_in) - 1:
            raise UserError(f"k={k!r} but accepted_length_probs gives {len(dist_in)} entries (k + 1 expected)",
                            key=f"{key}.k", fix=f"use k = {len(dist_in) - 1} or give k + 1 probabilities")
    elif isinstance(acc_in, (list, tuple)):
        acc = Acceptance.per_position(list(acc_in), "config", key=f"{key}.acceptance")
        k = cfg.get("k", len(acc_in))
    elif acc_in is not None:
        acc = Acceptance.constant(acc_in, "config", key=f"{key}.acceptance")
        k = cfg.get("k")
    else:
        acc, k = default_acceptance(method), cfg.get("k")
    if k is None:
        raise UserError("the number of speculative tokens is not set", key=f"{key}.k", fix="set k, e.g. k=3")
    _check_k(k, f"{key}.k")
    draft = None
    if method == "draft_model":
        name = cfg.get("draft_model")
        if not name:
            raise UserError("method draft_model needs a draft model", key=f"{key}.draft_model",
                            fix="name a catalog model smaller than the target")
        draft = (load_draft or load_model)(name)
    return SpecConfig(method, k, acc, draft, cfg.get("topk") or 1, cfg.get("verify_tokens"))


# --------------------------------------------------------------------------- planner search
@dataclass(frozen=True)
class SpecChoice:
    """Best speculation setting for one batch and context (k = 0: off)."""

    k: int
    step: SpecStepTime
    candidates: tuple[SpecStepTime, ...]  # every k tried, k = 0 first

    @property
    def enabled(self) -> bool:
        return self.k > 0


def best_k(target: AnalyticalStepModel, method: str, acceptance: Acceptance | None, batch: int, kv_len: int,
           k_max: int = 8, draft: ModelSpec | None = None, min_gain: float = 0.0) -> SpecChoice:
    """Search speculation off (k = 0) and k = 1..k_max for the lowest TPOT at this batch and
    context (at a fixed batch the lowest TPOT is also the highest throughput). ``k_max`` is
    capped by a per-position acceptance list; speculation stays off unless its speed-up
    exceeds ``1 + min_gain``."""
    acc = acceptance if acceptance is not None else default_acceptance(method)
    top = k_max if acc.max_k is None else min(k_max, acc.max_k)
    _check_k(top, "speculative.k_max")
    results = []
    for k in range(0, top + 1):
        model = SpeculativeStepModel(target, SpecConfig(method, k, acc, draft))
        results.append(model.step(batch, kv_len))
    best = min(results, key=lambda r: (r.tpot_ms, r.k))
    if best.k and best.speedup <= 1.0 + min_gain:
        best = results[0]
    return SpecChoice(best.k, best, tuple(results))

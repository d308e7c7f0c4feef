"""Speculative decoding inside the discrete-event simulator.

A speculating replica decodes in *verify steps*: each step runs the draft phase and one
target verify of ``verify_width`` query tokens per sequence (:class:`sim.speculative.
SpeculativeStepModel`), and each sequence then emits its own sampled number of tokens,
1..k+1 (accepted drafts + the bonus token), drawn from the acceptance's length
distribution with a generator seeded by ``(seed, request index)`` -- deterministic for the
same config and seed, and the same draws whatever the routing.

The scheduler (``sim/scheduler.py``) advances every decoding sequence by one position per
step, with aggregate bookkeeping (a step counter). Speculation is therefore simulated in
*step space*: when a request reaches the replica, its output length ``O`` is replaced by
``1 + S``, where ``S`` is the number of verify steps its own draws need to emit the
``O - 1`` tokens after the first (which comes from the prefill). The replica restores ``O``
when the request finishes, so TPOT = (E2E - TTFT) / (O - 1), throughput and output
tokens are in real tokens; ITL is the gap between token bursts (one verify step).

Two quantities the scheduler counts in step space are converted here:

* **context of a verify step**: the scheduler's KV length of a sequence is prompt + steps;
  the cost model gets prompt + E[L] x steps (the workload's mean prompt length splits the
  batch's mean KV length into the two parts);
* **KV capacity** (:func:`speculative_kv`): the draft's weights and its own KV (MTP layers,
  the EAGLE-3 layer or the whole draft model) come out of the replica's KV memory, and
  the token capacity is scaled to step space by the mean footprint ratio
  (P + 1 + (O - 1) / E[L]) / (P + O) of the workload. Both are stated in summary.json.

Limits (stated in the output): pipeline parallelism > 1 is refused; a step's
prefill chunks and decodes are priced as the plain mixed step plus the extra cost of the
speculative decode over plain decode, plus the draft's pass over the new prompt tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.model_catalog.derived import kv_bytes_per_token_tp
from llmplan.model_catalog.loader import load_model
from llmplan.sim.speculative import SpecConfig, SpeculativeStepModel, spec_config_from
from llmplan.sim.step_model import AnalyticalStepModel, _bucket
from llmplan.sim.types import StepShape

#: the speculation config keys of ``speculative.*`` that :func:`spec_config_from` reads
CONFIG_KEYS = ("method", "k", "acceptance", "accepted_length_probs", "accept_length", "draft_model", "topk",
               "verify_tokens")
#: salt of the per-request acceptance draws (kept apart from the workload's own streams)
_RNG_SALT = 0x5BEC


def spec_config(raw: Mapping[str, Any] | None, key: str = "speculative") -> SpecConfig | None:
    """The speculation setting of a ``speculative`` config node (None: off). k < 1 with a
    method set is refused (speculation is turned off with method=none)."""
    if not raw:
        return None
    cfg = {k: v for k, v in raw.items() if k in CONFIG_KEYS and v is not None}
    if cfg.get("method") in (None, "none", "off"):
        return None
    if cfg.get("topk") == 1:
        cfg.pop("topk")
    k = cfg.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise UserError(f"speculative tokens k must be an integer >= 1, got {k!r}", key=f"{key}.k",
                        fix=f"e.g. {key}.k=3, or {key}.method=none to turn speculation off")
    return spec_config_from(cfg, load_model, key=key)


@dataclass(frozen=True)
class SpecKV:
    """KV memory of a speculating replica."""

    kv_capacity_tokens: int          # real tokens of target KV the replica holds with the draft loaded
    step_space_tokens: int           # the same in the scheduler's step space (what the DES is given)
    draft_weights_gb_per_gpu: float
    draft_kv_bytes_per_token: float  # per GPU
    step_space_factor: float         # (P + 1 + (O - 1) / E[L]) / (P + O)

    def as_dict(self) -> dict:
        return {"kv_capacity_tokens": self.kv_capacity_tokens, "step_space_kv_tokens": self.step_space_tokens,
                "draft_weights_gb_per_gpu": round(self.draft_weights_gb_per_gpu, 3),
                "draft_kv_bytes_per_token_per_gpu": round(self.draft_kv_bytes_per_token, 1),
                "step_space_factor": round(self.step_space_factor, 4)}


def speculative_kv(spec: SpeculativeStepModel, kv_capacity_tokens: int, mean_in: float, mean_out: float) -> SpecKV:
    """Target KV capacity once the draft's weights and its own KV share the replica's KV memory
    (per GPU of the TP group); InfeasibleDeployment when nothing is left."""
    t = spec.target
    per_tok = kv_bytes_per_token_tp(t.model, t.prec.kv_cache, t.par.tp)
    layers = min(spec.cfg.k, spec.mtp_modules) if spec.cfg.method == "mtp" else 1
    draft_tok = layers * kv_bytes_per_token_tp(spec.draft_model, t.prec.kv_cache, spec.draft_par.tp)
    pool = kv_capacity_tokens * per_tok
    w = spec.draft_weight_bytes_per_gpu()
    tokens = int((pool - w) // (per_tok + draft_tok)) if pool > w else 0
    if tokens < 1:
        raise InfeasibleDeployment(f"the draft ({spec.draft_model.key}, {w / 1e9:.2f} GB per GPU) leaves no KV memory "
                                   f"for the target", key="speculative.draft_model",
                                   fix="use a smaller draft, more GPUs per replica, or speculative.method=none")
    el = spec.cfg.tokens_per_step
    p, o = max(1.0, mean_in), max(1.0, mean_out)
    factor = (p + 1.0 + (o - 1.0) / el) / (p + o)
    return SpecKV(tokens, max(1, int(tokens * factor)), w / 1e9, draft_tok, factor)


class SpecDecodeCost:
    """A :class:`sim.types.StepCostModel` for a speculating replica (pp = 1), on top of the
    plain step model ``base``; ``spec_decode_steps`` is the replica's hook (sim/replica.py)."""

    pp = 1

    def __init__(self, base: AnalyticalStepModel, cfg: SpecConfig, seed: int, mean_prompt_tokens: float):
        if getattr(base, "pp", 1) != 1:
            raise UserError("speculative decoding with pipeline parallelism is not modelled", key="deployment.pp",
                            fix="use pp=1 with speculation, or speculative.method=none")
        self.base = base
        self.spec = SpeculativeStepModel(base, cfg)
        self.cfg = cfg
        self.seed = int(seed)
        self.mean_prompt = max(0.0, float(mean_prompt_tokens))
        self.tokens_per_step = cfg.tokens_per_step
        probs = np.asarray(cfg.acceptance.length_distribution(cfg.k), float)
        self._cdf = np.cumsum(probs / probs.sum())  # P(tokens <= 1..k+1)
        self._cdf[-1] = 1.0
        self._memo: dict[tuple[int, float], float] = {}

    def __getattr__(self, name: str):  # breakdown, kernels, model, ... of the target step model
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    # ------------------------------------------------------------------ DES hook
    def spec_decode_steps(self, seq) -> int:
        """Step-space output length of a request: 1 (the prefill's token) + the verify steps
        its sampled accepted lengths need for the other ``O - 1`` tokens."""
        need = int(seq.req.output_tokens) - 1
        if need <= 0:
            return int(seq.req.output_tokens)
        rng = np.random.default_rng([self.seed, _RNG_SALT, int(seq.idx)])
        steps, done = 0, 0
        while done < need:
            m = max(8, int(math.ceil((need - done) / self.tokens_per_step * 1.25)) + 4)
            draws = np.searchsorted(self._cdf, rng.random(m), side="right") + 1  # tokens 1..k+1
            csum = done + np.cumsum(draws)
            hit = int(np.searchsorted(csum, need))  # first index where the total reaches need
            if hit < m:
                return 1 + steps + hit + 1
            steps, done = steps + m, int(csum[-1])
        return 1 + steps

    # ------------------------------------------------------------------ cost
    def token_context(self, step_context: float) -> float:
        """Mean KV length in tokens of a sequence whose step-space KV length is ``step_context``."""
        p = min(self.mean_prompt, step_context)
        return p + self.tokens_per_step * (step_context - p)

    def _decode_ms(self, n: int, step_ctx: float) -> float:
        ctx = _bucket(max(1.0, self.token_context(step_ctx)))  # the step model's own 1% grid
        key = (n, ctx)
        t = self._memo.get(key)
        if t is None:
            lens = [max(1, int(round(ctx)))] * n
            t = self.spec.step_time_ms(lens)
            if len(self._memo) > 65536:
                self._memo.clear()
            self._memo[key] = t
        return t

    def step_time_ms(self, shape: StepShape) -> float:
        n = shape.decode_seqs
        draft_prefill = 0.0
        if shape.prefill_seqs:
            q = shape.prefill_tokens / shape.prefill_seqs
            c = shape.prefill_ctx_tokens / shape.prefill_seqs
            draft_prefill = self.spec.draft_prefill_ms([(int(round(q)), int(round(c)))] * shape.prefill_seqs)
        if not n:
            return self.base.step_time_ms(shape) + draft_prefill
        ctx = shape.decode_kv_tokens / n
        spec = self._decode_ms(n, ctx)
        if not shape.prefill_seqs:
            return spec
        plain_decode = self.base.step_time_ms(StepShape(decode_seqs=n, decode_kv_tokens=shape.decode_kv_tokens))
        return self.base.step_time_ms(shape) + max(0.0, spec - plain_decode) + draft_prefill

    def stage_time_ms(self, shape: StepShape) -> float:
        return self.step_time_ms(shape)


def describe(cfg: SpecConfig, kv: SpecKV | None = None) -> dict:
    """summary.json / plan.json fields of a speculation setting."""
    out = {"method": cfg.method, "k": cfg.k, "topk": cfg.topk, "verify_tokens": cfg.verify_width,
           "draft_model": cfg.draft.key if cfg.draft is not None else None,
           "acceptance_rates": [round(a, 4) for a in cfg.acceptance.rates],
           "acceptance_source": cfg.acceptance.source,
           "tokens_per_step": round(cfg.tokens_per_step, 4)}
    if kv is not None:
        out["kv"] = kv.as_dict()
    return out


def speculative_replica(raw: Mapping[str, Any] | None, step: AnalyticalStepModel, kv_capacity_tokens: int,
                        mean_tokens: tuple[float, float], seed: int) -> tuple[Any, int, dict | None]:
    """(cost model, KV capacity the DES gets, summary fields) of a replica with the
    ``speculative`` config ``raw``; the plain ones and None when speculation is off."""
    cfg = spec_config(raw)
    if cfg is None:
        return step, kv_capacity_tokens, None
    cost = SpecDecodeCost(step, cfg, seed, mean_tokens[0])
    kv = speculative_kv(cost.spec, kv_capacity_tokens, *mean_tokens)
    info = describe(cfg, kv)
    info["note"] = (f"speculative decoding ({cfg.method}, k={cfg.k}, E[L]={cfg.tokens_per_step:.2f} tokens per verify "
                    f"step): simulated in verify steps; KV {kv_capacity_tokens:,} -> {kv.kv_capacity_tokens:,} tokens with "
                    f"the draft loaded, x{kv.step_space_factor:.3f} in step space; the analytical columns are "
                    f"without speculation (docs/SPECULATIVE.md)")
    return cost, kv.step_space_tokens, info


class SpecMeanFieldCost(SpecDecodeCost):
    """The analytical screen's view of a speculating replica: every decode step emits one token
    per sequence and costs the speculative step time / E[L] (TPOT and throughput at their
    means; no token bursts, so ITL equals TPOT). KV and context stay in real tokens, so the
    replica is given the token capacity of :func:`speculative_kv`. The discrete-event
    simulator in `simulate` uses :class:`SpecDecodeCost` (sampled accepted lengths) instead."""

    spec_decode_steps = None  # the replica hook stays off: one token per step

    def __init__(self, base: AnalyticalStepModel, cfg: SpecConfig):
        super().__init__(base, cfg, seed=0, mean_prompt_tokens=0.0)

    def token_context(self, step_context: float) -> float:
        return step_context

    def _decode_ms(self, n: int, step_ctx: float) -> float:
        return super()._decode_ms(n, step_ctx) / self.tokens_per_step

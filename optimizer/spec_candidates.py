"""Speculative decoding in the planner's search: candidates with speculation on, next to off.

Where the model has multi-token-prediction modules (``num_nextn_predict_layers`` in its
config.json) or the config names a method (``speculative.method``: eagle3, or draft_model
with ``speculative.draft_model``), every enumerated replica shape also enters the screen
with speculation on (:class:`SpecCandidate`). Its k is the one with the lowest TPOT at a
quarter of the candidate's batch limit (``best_k`` over 1..``speculative.k_max``, or the
configured ``speculative.k``); the screen, the simulator verification and the ILP then
compare it with the same shape without speculation, so the plan turns speculation on only
where it buys capacity within the SLOs (at large batch the verify step is compute-bound and
it does not). ``plan.json`` states the setting of each chosen pool (:func:`plan_block`).

The screen and its verification price a speculating replica by its mean per-token step
(:class:`sim.spec_decode.SpecMeanFieldCost`); ``llmplan simulate`` with the same
``speculative.*`` keys samples the accepted lengths (sim/spec_decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.types import Candidate
from llmplan.sim.spec_decode import SpecMeanFieldCost, spec_config, speculative_kv
from llmplan.sim.speculative import (Acceptance, SpecConfig, best_k, check_draft_size, default_acceptance,
                                     mtp_layers)

#: the batch at which a candidate's k is chosen, as a share of its batch limit
K_BATCH_SHARE = 0.25
#: context (tokens) at which k is chosen when the workload gives none
DEFAULT_CONTEXT = 1024


@dataclass(frozen=True)
class SpecCandidate(Candidate):
    """A replica shape with speculative decoding on."""

    spec: Optional[SpecConfig] = None

    @property
    def name(self) -> str:
        s = self.spec
        tree = f"t{s.topk}x{s.verify_width}" if s is not None and s.topk > 1 else ""
        return f"{super().name}-{s.method}{tree}-k{s.k}" if s is not None else super().name


@dataclass(frozen=True)
class SpecSearch:
    """What to search: the method, its acceptance, draft, tree, and k (fixed or 1..k_max)."""

    method: str
    acceptance: Acceptance
    draft: Optional[ModelSpec]
    topk: int
    verify_tokens: Optional[int]
    k_fixed: Optional[int]
    k_max: int

    def config(self, k: int) -> SpecConfig:
        return SpecConfig(self.method, k, self.acceptance, self.draft, self.topk,
                          self.verify_tokens if self.k_fixed is not None else None)


def search_setting(model: ModelSpec, raw: Mapping[str, Any] | None) -> SpecSearch | None:
    """The speculation to search for ``model`` (None: none): the configured method, else MTP
    when the model has MTP modules (with its documented default acceptance); ``off``: none."""
    raw = dict(raw or {})
    k_max = raw.get("k_max", 4)
    if isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1:
        raise UserError(f"must be an integer >= 1, got {k_max!r}", key="speculative.k_max", fix="e.g. 4")
    method = raw.get("method") or "none"
    if method == "off":  # no speculation searched, MTP modules or not
        return None
    if method == "none":
        if mtp_layers(model) <= 0:
            return None
        return SpecSearch("mtp", default_acceptance("mtp"), None, 1, None, None, k_max)
    probe = dict(raw)
    if probe.get("k") is None:  # validate everything else with a k the acceptance allows
        probe["k"] = 1
    cfg = spec_config(probe)
    assert cfg is not None
    if cfg.draft is not None:
        check_draft_size(cfg.draft, model)
    k_fixed = raw.get("k")
    return SpecSearch(cfg.method, cfg.acceptance, cfg.draft, cfg.topk, raw.get("verify_tokens"), k_fixed,
                      k_max if cfg.acceptance.max_k is None else min(k_max, cfg.acceptance.max_k))


def expand(cands: list[Candidate], search: SpecSearch | None) -> list[Candidate]:
    """Each candidate, followed by its speculating twin (pp = 1, dp = 1 shapes only; k chosen later, per
    shape: a placeholder k here, replaced in :func:`spec_view`)."""
    if search is None:
        return cands
    out: list[Candidate] = []
    for c in cands:
        out.append(c)
        if c.par.pp != 1 or c.par.dp != 1:  # not modelled with pipeline stages or attention DP
            continue
        k = search.k_fixed or 1
        out.append(SpecCandidate(c.gpu, c.par, c.prec, c.max_num_seqs, c.usd_per_gpu_hour, spec=search.config(k)))
    return out


def choose_k(step, search: SpecSearch, batch: int, context: int) -> int:
    """k with the lowest TPOT at this batch and context (the configured k when fixed)."""
    if search.k_fixed is not None:
        return search.k_fixed
    choice = best_k(step, search.method, search.acceptance, max(1, batch), max(1, context), search.k_max,
                    search.draft)
    return max(1, choice.k)  # off is the twin without speculation


def spec_view(step, mem, cand: Candidate, search: SpecSearch | None, context: int, min_kv_tokens: int):
    """(cost model, memory plan, candidate) the screen uses for ``cand``: unchanged without
    speculation; else the mean-field speculative cost, the KV capacity left with the draft
    loaded (the plan no longer fits when it cannot hold one longest request), and the
    candidate with its chosen k."""
    if not isinstance(cand, SpecCandidate) or search is None or cand.spec is None:
        return step, mem, cand
    k = choose_k(step, search, int(cand.max_num_seqs * K_BATCH_SHARE), context or DEFAULT_CONTEXT)
    cand = replace(cand, spec=search.config(k))
    cost = SpecMeanFieldCost(step, cand.spec)
    if not mem.fits:
        return cost, mem, cand
    try:
        kv = speculative_kv(cost.spec, mem.kv_capacity_tokens, 1.0, 1.0).kv_capacity_tokens \
            if mem.kv_capacity_tokens > 0 else 0
    except InfeasibleDeployment:  # the draft's weights fill this shape's KV memory: this candidate
        kv = 0                    # does not fit (below), not the whole plan a bad input
    if kv < min_kv_tokens:
        return cost, replace(mem, fits=False, kv_capacity_tokens=kv,
                             reason=f"with the {cand.spec.method} draft loaded the KV cache holds {kv} tokens, "
                                    f"fewer than the {min_kv_tokens} one request needs"), cand
    return cost, replace(mem, kv_capacity_tokens=kv), cand


def setting(cand: Candidate) -> dict | None:
    """plan.json's ``speculation`` of one pool (None: off)."""
    s = getattr(cand, "spec", None)
    if s is None:
        return None
    return {"method": s.method, "k": s.k, "topk": s.topk, "verify_tokens": s.verify_width,
            "draft_model": s.draft.key if s.draft is not None else None,
            "acceptance_rates": [round(x, 4) for x in s.acceptance.rates],
            "acceptance_source": s.acceptance.source, "tokens_per_step": round(s.tokens_per_step, 4)}


def annotate(res) -> None:
    """Set ``speculation`` on every evaluation (report.py writes it per deployment in plan.json)."""
    for e in res.evaluations:
        e.speculation = setting(e.candidate)

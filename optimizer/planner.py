"""The planning pipeline: enumerate -> evaluate -> verify -> select -> (re-simulate).

Inputs are typed values (already resolved from config); the output is a PlanResult that
`optimizer.report` renders and writes. No printing here besides the progress callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.enumerate import enumerate_candidates
from llmplan.errors import UserError
from llmplan.optimizer.evaluate import ReplicaAnalyzer
from llmplan.optimizer.infeasible import Diagnosis, diagnose
from llmplan.optimizer.mode_select import check_modes, disagg_skip_reason, select_mode
from llmplan.optimizer.slo_check import binding_target, target_values
from llmplan.optimizer.select_ilp import alternatives, solve
from llmplan.optimizer.types import Candidate, Evaluation, Selection, SLOTarget, WorkloadStats
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.types import EngineProfile

Progress = Callable[[str, int, int], None]  # (stage, done, total)


#: fewest requests a finalist's verification may simulate (fewer leave no stable p90/p99 after the warm-up cut)
MIN_VERIFY_REQUESTS = 50


@dataclass(frozen=True)
class SearchSpace:
    # the defaults here are the only ones: the CLI schema (SearchConfig) mirrors this class
    tp: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    pp: list[int] = field(default_factory=lambda: [1, 2])
    ep: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # attention data-parallel ranks (MoE models, one GPU of attention per rank: the layout
    # TensorRT-LLM, SGLang and vLLM all launch; docs/SIMULATOR.md "Attention DP and wide EP")
    dp: list[int] = field(default_factory=lambda: [1])
    precision: list[str] = field(default_factory=lambda: ["bf16", "fp8"])
    max_batch: list[int] = field(default_factory=lambda: [64, 256])
    kv_cache_dtype: str = "auto"
    max_replicas: int = 256
    finalists: int = 3
    verify_requests: int = 600
    alternatives: int = 4
    max_load: float = 0.95
    uniform: bool = False  # one GPU type and one parallel shape for the whole deployment
    # meet every SLO with at least this probability (optimizer/risk.py); None = point prediction
    confidence: Optional[float] = None
    # serving modes searched side by side (optimizer/mode_select.py): agg (prefill and decode on
    # the same replicas) and disagg (xPyD prefill and decode pools); the cheapest meeting the SLOs wins
    modes: list[str] = field(default_factory=lambda: ["agg", "disagg"])


@dataclass
class PlanResult:
    selection: Selection
    evaluations: list[Evaluation]
    alternatives: list[Selection]
    workload: WorkloadStats
    slos: list[SLOTarget]
    verification: dict = field(default_factory=dict)   # filled by optimizer.verify
    notes: list[str] = field(default_factory=list)
    diagnosis: Diagnosis | None = None                  # when infeasible: the cause and the closest candidate
    uniform: bool = False                               # search.uniform: one candidate for the whole deployment
    fleet: dict | None = None                           # fleet mode: the maximum rate a given fleet sustains
    confidence: dict | None = None                      # search.confidence: level and tightened limits (optimizer/risk.py)
    disaggregated: dict | None = None                   # the cheapest xPyD option beside the selection (disagg_candidates)
    chosen_mode: str | None = "agg"                     # agg | disagg | None (nothing meets the SLOs): mode_select
    mode_selection: list[dict] = field(default_factory=list)  # the mode table's rows (optimizer/mode_select.py)

    @property
    def feasible(self) -> bool:
        """A deployment of an allowed mode meets the SLOs (aggregated or disaggregated)."""
        return self.chosen_mode is not None if self.mode_selection else self.selection.feasible


def check_space(space: SearchSpace) -> None:
    """Refuse search settings that would silently change the question (UserError names the key)."""
    for name in ("tp", "pp", "ep", "dp", "max_batch"):
        values = list(getattr(space, name))
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise UserError(f"needs a non-empty list of integers >= 1, got {values}", key=f"search.{name}",
                            fix=f"e.g. search.{name}=[1,2]")
    if not space.precision:
        raise UserError("needs at least one precision", key="search.precision", fix="e.g. search.precision=[bf16,fp8]")
    fixes = {"finalists": "0 = analytical screen only", "alternatives": "e.g. 4", "max_replicas": "e.g. 256",
             "verify_requests": "e.g. 600 (fewer leave no stable p90/p99 after the warm-up cut)"}
    for name, low in (("finalists", 0), ("alternatives", 0), ("max_replicas", 1), ("verify_requests", MIN_VERIFY_REQUESTS)):
        v = getattr(space, name)
        if not isinstance(v, int) or v < low:
            raise UserError(f"must be an integer >= {low}, got {v!r}", key=f"search.{name}", fix=fixes[name])
    if not isinstance(space.uniform, bool):
        raise UserError(f"must be true or false, got {space.uniform!r}", key="search.uniform", fix="search.uniform=true")
    if not 0 < space.max_load <= 1:
        raise UserError(f"must be in (0, 1], got {space.max_load}", key="search.max_load", fix="e.g. 0.95")
    check_modes(space.modes)


def evaluate_candidates(model: ModelSpec, cands: list[Candidate], engine: EngineProfile, wl: WorkloadStats,
                        slos: list[SLOTarget], calibration: str | None,
                        progress: Progress | None = None, speculative=None) -> list[Evaluation]:
    """Memory fit + analytical SLO capacity for each candidate (one step model and memory plan per engine limit)."""
    out: list[Evaluation] = []
    cache: dict[tuple, tuple] = {}
    siblings: dict[tuple, object] = {}  # (GPU, parallelism, precision) -> its first step model
    for i, c in enumerate(cands):
        eng = _engine_for(engine, c)
        # max_num_seqs is part of the key: the KV budget (activations, CUDA-graph pool, linear
        # state) and the CUDA-graph padding of the step both depend on it; the kernel model (and
        # its query cache) is shared across the keys of a GPU anyway
        key = (c.gpu.key, c.par, c.prec, c.max_num_seqs)
        if key not in cache:
            dep = Deployment(model, c.gpu, c.par, c.prec, eng)
            cache[key] = build(dep, calibration, min_kv_tokens=wl.max_request_tokens)
            # the batch caps of one shape time the same operators: one set of operator caches
            # (AnalyticalStepModel.share_op_caches; same answers, each list derived once)
            first = siblings.setdefault(key[:3], cache[key][0])
            if first is not cache[key][0]:
                cache[key][0].share_op_caches(first)
        step, mem = cache[key]
        if speculative is not None:  # a speculating twin (optimizer/spec_candidates.py)
            from llmplan.optimizer.spec_candidates import spec_view

            step, mem, c = spec_view(step, mem, c, speculative, int(wl.mean_input_tokens + wl.mean_output_tokens / 2),
                                     wl.max_request_tokens)
        ev = Evaluation(c, "ok", kv_capacity_tokens=mem.kv_capacity_tokens, weights_gb=mem.weights_gb)
        if not mem.fits:
            ev.verdict, ev.reason = "memory", mem.reason
            ev.memory_shortfall_gb = _shortfall_gb(mem, wl.max_request_tokens)
        else:
            an = ReplicaAnalyzer(step, wl, c.max_num_seqs, eng.max_num_batched_tokens, mem.kv_capacity_tokens,
                                 eng.chunked_prefill)
            cap, binding, at_cap, light = an.capacity(slos)
            ev.capacity_rps, ev.binding, ev.analyzer = cap, binding, an
            ev.tier = _tier(step)
            ev.at_capacity = target_values(at_cap.ttft_ms, at_cap.tpot_ms, slos)
            ev.light = target_values(light.ttft_ms, light.tpot_ms, slos)
            ev.ttft_ms, ev.tpot_ms = _binding_values(ev.at_capacity, slos)
            ev.light_ttft_ms, ev.light_tpot_ms = _binding_values(ev.light, slos)
            if cap <= 0:
                ev.verdict, ev.reason = "slo", f"misses {binding} even at light load"
        out.append(ev)
        if progress:
            progress("evaluate", i + 1, len(cands))
    return out


def _shortfall_gb(mem, request_tokens: int) -> float:
    """HBM per GPU missing for weights + runtime reserve + the KV of one longest request."""
    need_kv_gb = request_tokens * mem.kv_bytes_per_token_gpu / 1e9
    return max(0.0, need_kv_gb - mem.kv_gb)


def _binding_values(values: dict[str, float], slos: list[SLOTarget]) -> tuple[float, float]:
    """(TTFT, TPOT) of the binding target of each metric (NaN where the metric has none)."""
    out = []
    for metric in ("ttft", "tpot"):
        s = binding_target(values, slos, metric)
        out.append(values[s.key] if s else float("nan"))
    return out[0], out[1]


def _engine_for(engine: EngineProfile, c: Candidate) -> EngineProfile:
    from dataclasses import replace

    return replace(engine, max_num_seqs=c.max_num_seqs)


def _tier(step) -> str:
    return getattr(step.kernels, "tier", "spec")


def check_inputs(space: SearchSpace, wl: WorkloadStats, slos: list[SLOTarget], gpus: list) -> None:
    """Refuse a plan with nothing to plan for (UserError names the key)."""
    check_space(space)
    if not wl.rate_rps > 0:
        raise UserError(f"the rate to plan for must be > 0, got {wl.rate_rps}", key="workload.rate_rps")
    if not slos:
        raise UserError("no SLO target set", key="slo", fix="set e.g. slo.ttft_p90_ms=1000 slo.tpot_p90_ms=50")
    if not gpus:
        raise UserError("no candidate GPU type", key="gpu", fix="e.g. gpu=h100_sxm or gpu=all")


def plan(model: ModelSpec, gpus: list[tuple[GPUSpec, float]], engine: EngineProfile, wl: WorkloadStats,
         slos: list[SLOTarget], space: SearchSpace, max_gpus: dict[str, int], calibration: str | None,
         progress: Progress | None = None,
         verifier: Callable[[list[Evaluation]], dict] | None = None, speculative=None) -> PlanResult:
    check_inputs(space, wl, slos, gpus)
    for key, limit in sorted(max_gpus.items()):
        if not isinstance(limit, int) or limit < 0:
            raise UserError(f"must be an integer >= 0, got {limit!r}", key=f"gpu.max_gpus.{key}")
    evals, verification = screen(model, gpus, engine, wl, slos, space, calibration, progress, verifier, speculative)
    if progress:
        progress("ILP", 0, 1)
    sel = select_verified(lambda: solve(evals, wl.rate_rps, max_gpus, space.max_replicas, space.max_load,
                                        space.uniform), evals, verification, verifier)
    operating_points(sel, wl.rate_rps, slos)
    alts = (alternatives(evals, wl.rate_rps, sel, max_gpus, space.max_replicas, space.alternatives, space.max_load,
                         space.uniform) if sel.feasible else [])
    diagnosis = None
    if not sel.feasible:
        diagnosis = diagnose(evals, slos, wl.rate_rps, max_gpus, space.max_replicas, space.max_load)
        sel.binding = f"{diagnosis.cause}: {diagnosis.message}"
    for s in alts:
        operating_points(s, wl.rate_rps, slos)
    if progress:
        progress("ILP", 1, 1)
    modes = list(space.modes)
    skipped = disagg_skip_reason(modes, space.uniform, engine.name)
    disagg = None if skipped else disagg_side_by_side(model, evals, wl, slos, space, max_gpus, engine, sel,
                                                      calibration, verifier is not None)
    res = PlanResult(sel, evals, alts, wl, slos, verification, diagnosis=diagnosis, uniform=space.uniform,
                     disaggregated=disagg)
    res.chosen_mode, res.mode_selection, notes = select_mode(sel, disagg, modes, skipped)
    if disagg is not None:  # plan.json's block says whether it is the plan's answer
        disagg["chosen"] = disagg["recommended"] = res.chosen_mode == "disagg"
    res.notes += notes
    return res


def disagg_side_by_side(model: ModelSpec, evals: list[Evaluation], wl: WorkloadStats, slos: list[SLOTarget],
                        space: SearchSpace, max_gpus: dict[str, int], engine: EngineProfile,
                        sel: Selection, calibration: str | None = None, simulate: bool = False) -> dict | None:
    """The cheapest disaggregated (xPyD) option over the same screened shapes, priced as its
    GPUs, stated beside the aggregated selection (None when no pair meets the SLOs); with
    ``simulate`` (the plan verifies finalists) it is simulated in the disaggregated DES and a pool
    whose target the simulation misses grows by a worker at a time (``verify_and_grow``)."""
    from llmplan.optimizer.disagg_candidates import best_disagg, verify_and_grow

    # search.uniform, search.modes and the engine are judged by the caller (mode_select.disagg_skip_reason)
    opt = best_disagg(evals, wl, slos, model, engine.name, max_gpus, space.max_load, space.max_replicas)
    if opt is None:
        return None
    if simulate:
        verify_and_grow(opt, model, engine, wl, slos, calibration, space.verify_requests, max_gpus)
    from llmplan.optimizer.disagg_figures import annotate  # per-pool headroom, KV budget, power

    return annotate(opt.as_dict(sel.total_usd_per_hour if sel.feasible else None, model.key), opt, wl, slos, model,
                    engine)


def screen(model: ModelSpec, gpus: list[tuple[GPUSpec, float]], engine: EngineProfile, wl: WorkloadStats,
           slos: list[SLOTarget], space: SearchSpace, calibration: str | None, progress: Progress | None = None,
           verifier: Callable[[list[Evaluation]], dict] | None = None,
           speculative=None) -> tuple[list[Evaluation], dict]:
    """Enumerate, screen analytically and (with a verifier) simulate the finalists. Returns (evaluations, verification)."""
    cands, rejected = enumerate_candidates(model, gpus, space.tp, space.pp, space.ep, space.precision,
                                           space.max_batch, space.kv_cache_dtype, dps=space.dp)
    if speculative is not None:  # optimizer/spec_candidates.py: speculation on next to off
        from llmplan.optimizer.spec_candidates import expand

        cands = expand(cands, speculative)
    evals = [Evaluation(c, verdict, reason) for c, verdict, reason in rejected]
    evals += evaluate_candidates(model, cands, engine, wl, slos, calibration, progress, speculative)
    evals.sort(key=lambda e: e.candidate.name)
    verification: dict = {}
    if verifier is not None:  # sets sim_capacity_rps on the finalists
        from llmplan.optimizer.verify import pick_finalists

        verification["finalists"] = verifier(pick_finalists(evals, space.finalists))
        verification["correction"] = correct_unverified(evals)
    return evals, verification


def select_verified(select: Callable[[], Selection], evals: list[Evaluation], verification: dict,
                    verifier: Callable[[list[Evaluation]], dict] | None) -> Selection:
    """Run the ILP `select`; the ILP may pick a candidate the simulator has not checked: verify it and re-solve."""
    sel = select()
    for _ in range(3 if verifier is not None else 0):
        unverified = [a.evaluation for a in sel.allocations if a.evaluation.sim_capacity_rps is None]
        if not unverified:
            break
        verification["finalists"].update(verifier(unverified))
        verification["correction"] = correct_unverified(evals)
        sel = select()
    return sel


def correct_unverified(evals: list[Evaluation]) -> dict[str, float]:
    """Scale the analytical capacity of candidates the simulator has not checked by the median
    simulated/analytical ratio of verified ones (per GPU type, else overall), so the ILP
    compares like with like. Returns the ratios used."""
    import statistics

    ratios: dict[str, list[float]] = {}
    for e in evals:
        if e.sim_capacity_rps is not None and e.capacity_rps > 0:
            ratios.setdefault(e.candidate.gpu.key, []).append(e.sim_capacity_rps / e.capacity_rps)
    if not ratios:
        return {}
    overall = statistics.median([r for rs in ratios.values() for r in rs])
    used = {k: round(statistics.median(v), 4) for k, v in sorted(ratios.items())} | {"overall": round(overall, 4)}
    for e in evals:
        if e.sim_capacity_rps is None and e.verdict == "ok":
            e.adjusted_capacity_rps = e.capacity_rps * used.get(e.candidate.gpu.key, overall)
    return used


def operating_points(sel: Selection, rate_rps: float, slos: list[SLOTarget]) -> None:
    """Per-replica load (capacity-proportional routing) and predicted latency there, per target."""
    total = sum(a.replicas * a.evaluation.effective_capacity_rps for a in sel.allocations)
    pcts = sorted({s.percentile for s in slos})
    for a in sel.allocations:
        ev = a.evaluation
        a.share_rps = rate_rps * ev.effective_capacity_rps / total if total > 0 else 0.0
        an = ev.analyzer
        if isinstance(an, ReplicaAnalyzer):
            op = an.operating_point(a.share_rps, pcts)
            a.analytical = target_values(op.ttft_ms, op.tpot_ms, slos)
            a.ttft_ms, a.tpot_ms = _binding_values(a.analytical, slos)
            a.bands = prediction_bands(an, op)


def prediction_bands(an: ReplicaAnalyzer, op) -> dict:
    """Error bands (from held-out kernel residuals) of the decode and prefill steps at an operating point."""
    from llmplan.sim.types import StepShape
    from llmplan.sim.uncertainty import step_band

    out = {}
    decode = StepShape.build([], [int(an.I + an.O / 2)] * max(1, int(round(op.decode_seqs))))
    prefill = StepShape.build([(int(min(an.I, an.budget)), 0)], [])
    for name, shape in (("tpot", decode), ("ttft", prefill)):
        b = step_band(an.step, shape)
        if b is not None:
            out[name] = {"p50_pct": b.p50_pct, "p90_pct": b.p90_pct, "tier": b.tier, "extrapolated": list(b.extrapolated)}
    return out


"""Disaggregated (xPyD) candidates for the planner, screened analytically beside the aggregated ones.

Every screened replica shape whose memory fits (an :class:`~optimizer.types.Evaluation` with
an analyzer) can serve as a **prefill worker** or a **decode worker**; the two pools may use
different GPU types and parallelism (heterogeneous pools). Each unit is priced as its GPUs
(``usd_per_replica_hour`` = GPUs x $/GPU-h), as in the ILP.

* **Prefill worker capacity** (req/s within the TTFT target): one prompt of the mean length
  takes ``t_p`` (the step model, chunked at the token budget); a TTFT adds the KV transfer
  (``sim.kv_transfer``: payload per TP rank over the pools' link) and the engine's fitted
  hand-off delay (``sim.disagg_handoff``). Prompts queue FCFS at the worker; with Poisson
  arrivals (M/D/1) the mean wait is ``rho t_p / (2 (1 - rho))`` and its tail is taken as
  exponential, so the p-th percentile wait is ``ln(1 / (1 - p)) x`` the mean. The capacity
  is the largest ``rho / t_p`` whose percentile TTFT meets the target.
* **Decode worker capacity** (req/s within the TPOT target): the largest batch ``b``
  (``max_num_seqs``, KV of ``b`` requests of mean length above the watermark) whose decode
  step at mean context meets the TPOT target; ``b / (O x step(b))`` requests per second.
* **Pools**: the integer program :func:`optimizer.select_ilp.solve_disagg` picks one shape and
  a worker count per pool (x prefill, y decode workers, each priced as its GPUs) serving the
  plan's rate ``R`` at ``max_load`` in both pools, with GPU availability shared by the pools;
  prefill shapes need a KV link the catalog knows to every decode shape offered.

The option is stated in plan.json beside the aggregated selection with its analytical figures,
its simulation (:func:`verify_option`, when the plan verifies finalists) and the command that
simulates it with the real workload (``llmplan simulate deployment.mode=disagg ...``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from llmplan.errors import UserError
from llmplan.optimizer.types import Evaluation, SLOTarget, WorkloadStats
from llmplan.sim.types import StepShape

#: shapes kept per role before pairing (cheapest per request/s)
TOP_PER_ROLE = 6


@dataclass
class PoolPick:
    """One role's choice: a replica shape, its worker count and per-worker capacity."""

    role: str                 # prefill | decode
    evaluation: Evaluation
    workers: int
    capacity_rps: float       # per worker, within the role's SLO
    latency_ms: float         # prefill: TTFT at that load (percentile); decode: TPOT at its batch
    batch: int = 1            # decode: the batch the capacity assumes
    transfer_ms: float = 0.0  # prefill: the KV transfer its TTFT counts
    link: str = ""            # prefill: that transfer's link (nvlink | network)

    @property
    def usd_per_hour(self) -> float:
        return self.workers * self.evaluation.candidate.usd_per_replica_hour

    @property
    def gpus(self) -> int:
        return self.workers * self.evaluation.candidate.gpus_per_replica

    def as_dict(self) -> dict:
        c = self.evaluation.candidate
        return {"role": self.role, "gpu": c.gpu.key, "workers": self.workers, "gpus_per_worker": c.gpus_per_replica,
                "gpus": self.gpus, "tp": c.par.tp, "pp": c.par.pp, "ep": c.par.ep, "precision": c.precision_label,
                "kv_cache_dtype": c.prec.kv_cache, "max_num_seqs": c.max_num_seqs,
                "usd_per_hour": round(self.usd_per_hour, 4),
                "capacity_rps_per_worker": round(self.capacity_rps, 4),
                ("ttft_ms" if self.role == "prefill" else "tpot_ms"): round(self.latency_ms, 3),
                **({"decode_batch": self.batch} if self.role == "decode" else {})}


@dataclass
class DisaggOption:
    """The cheapest xPyD deployment the screen found."""

    prefill: PoolPick
    decode: PoolPick
    transfer_ms: float
    handoff_ms: float
    link: str
    notes: list[str] = field(default_factory=list)
    simulated: Optional[dict] = None   # verify_option's result (None: not simulated)

    @property
    def usd_per_hour(self) -> float:
        return self.prefill.usd_per_hour + self.decode.usd_per_hour

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    def simulate_command(self, model_key: str) -> str:
        p, d = self.prefill.evaluation.candidate, self.decode.evaluation.candidate
        keys = []
        for role, c, pick in (("prefill", p, self.prefill), ("decode", d, self.decode)):
            keys += [f"deployment.{role}.gpu={c.gpu.key}", f"deployment.{role}.tp={c.par.tp}",
                     f"deployment.{role}.pp={c.par.pp}", f"deployment.{role}.ep={c.par.ep}",
                     f"deployment.{role}.precision={c.prec.weights}", f"deployment.{role}.workers={pick.workers}"]
        return f"llmplan simulate model={model_key} deployment.mode=disagg " + " ".join(keys)

    def as_dict(self, aggregated_usd_per_hour: Optional[float], model_key: str) -> dict:
        cheaper = aggregated_usd_per_hour is None or self.usd_per_hour < aggregated_usd_per_hour
        # recommended: cheaper, and the simulation (when run) meets every SLO target; the planner then
        # sets it (and 'chosen') to optimizer/mode_select.py's choice between the modes
        ok = self.simulated is None or bool(self.simulated.get("slo_met"))
        return {"mode": "disaggregated", "xpyd": f"{self.prefill.workers}P{self.decode.workers}D",
                "pools": [self.prefill.as_dict(), self.decode.as_dict()], "speculation": None,
                "total_usd_per_hour": round(self.usd_per_hour, 4), "total_gpus": self.gpus,
                "kv_transfer_ms": round(self.transfer_ms, 3), "kv_link": self.link,
                "handoff_ms": self.handoff_ms, "cheaper_than_aggregated": cheaper,
                "recommended": bool(cheaper and ok),
                "source": ("analytical screen + ILP (optimizer/disagg_candidates.py), "
                           + ("simulated (sim/disaggregated.py)" if self.simulated else "not simulated")),
                "simulated": self.simulated,
                "simulate_with": self.simulate_command(model_key), "notes": self.notes}


MEAN_AS_PERCENTILE = 100.0 * (1.0 - math.exp(-1.0))  # see _limits


def _limits(slos: list[SLOTarget], metric: str) -> tuple[float, float]:
    """(tightest limit, its percentile) of a metric; (inf, 50) when it has none. A mean target
    counts as the percentile 100 (1 - 1/e): there the exponential-tail wait of
    :func:`prefill_capacity` (k = ln(1 / (1 - q)) = 1) is the M/D/1 mean wait rho S / (2 (1 - rho))."""
    mine = [s for s in slos if s.metric == metric]
    if not mine:
        return math.inf, 50.0
    s = min(mine, key=lambda s: (s.limit_ms, -s.percentile))
    return s.limit_ms, (MEAN_AS_PERCENTILE if s.is_mean else s.percentile)


def prefill_ms(ev: Evaluation) -> float:
    """Time of one mean-length prompt on a worker (chunks of the token budget), timed by the
    prefill pool's step model as the disaggregated simulator runs it: the eager host launch under
    the prompt's device work (``sim.disagg_launch``, ``DisaggSpec.context_launch``'s default)."""
    from llmplan.sim.disagg_launch import DEFAULT_CONTEXT_LAUNCH, context_step_model

    an = ev.analyzer
    step = context_step_model(an.step, DEFAULT_CONTEXT_LAUNCH)
    left, done, t = int(round(an.I)), 0, 0.0
    budget = max(1, int(an.budget))
    while left > 0:
        c = min(left, budget)
        t += float(step.step_time_ms(StepShape.build([(c, done)], [])))
        done, left = done + c, left - c
    return t


#: the highest load a prefill worker is sized to (its M/D/1 queue), and the share of a decode
#: worker's KV cache its sequences may fill; disagg_figures.pool_headroom names the same limits
MAX_PREFILL_LOAD = 0.95
KV_FILL = 0.95


def decode_batch_limits(an: Any) -> tuple[int, int]:
    """(max_num_seqs, the requests of mean length the KV cache holds at :data:`KV_FILL`) of a decode worker."""
    e_seqs = int(an.max_seqs)
    per_req = an.I + an.O
    return e_seqs, (int(an.kv_cap * KV_FILL // per_req) if per_req > 0 else e_seqs)


def prefill_capacity(t_p_ms: float, overhead_ms: float, limit_ms: float, percentile: float) -> tuple[float, float]:
    """(req/s, percentile TTFT) of one prefill worker: the M/D/1 load whose percentile wait
    (exponential tail) plus the prompt and the overhead meets ``limit_ms`` (0 when none does)."""
    slack = limit_ms - t_p_ms - overhead_ms
    if t_p_ms <= 0 or slack <= 0:
        return 0.0, t_p_ms + overhead_ms
    k = math.log(1.0 / max(1e-9, 1.0 - percentile / 100.0))
    if not math.isfinite(slack):
        rho = MAX_PREFILL_LOAD
    else:
        rho = min(MAX_PREFILL_LOAD, 2.0 * slack / (k * t_p_ms + 2.0 * slack))
    wait = k * rho * t_p_ms / (2.0 * (1.0 - rho))
    return 1000.0 * rho / t_p_ms, t_p_ms + overhead_ms + wait


def decode_capacity(ev: Evaluation, limit_ms: float) -> tuple[float, float, int]:
    """(req/s, TPOT at that batch, batch) of one decode worker within the TPOT limit."""
    an = ev.analyzer
    e_seqs, kv_b = decode_batch_limits(an)
    hi = max(0, min(e_seqs, kv_b))
    ctx = int(an.I + an.O / 2)

    def tpot(b: int) -> float:
        return float(an.step.step_time_ms(StepShape(0, 0, 0.0, 0, b, b * ctx)))

    if hi < 1 or tpot(1) > limit_ms:
        return 0.0, tpot(1) if hi >= 1 else math.inf, 0
    lo = 1
    while lo < hi:   # largest b with tpot(b) <= limit (step time grows with the batch)
        mid = (lo + hi + 1) // 2
        if tpot(mid) <= limit_ms:
            lo = mid
        else:
            hi = mid - 1
    t = tpot(lo)
    return 1000.0 * lo / (max(an.O, 1.0) * t), t, lo


def best_disagg(evals: list[Evaluation], wl: WorkloadStats, slos: list[SLOTarget], model: Any, engine_name: str,
                max_gpus: dict[str, int] | None = None, max_load: float = 0.95,
                max_workers: int = 256) -> Optional[DisaggOption]:
    """The cheapest xPyD option over the screened shapes: per KV dtype, the cheapest
    :data:`TOP_PER_ROLE` shapes of each role (per request/s) go to the ILP
    (:func:`optimizer.select_ilp.solve_disagg`: units priced as their GPUs, shared GPU
    availability, one shape per pool); None when no pair meets the SLOs."""
    from llmplan.optimizer.select_ilp import solve_disagg
    from llmplan.sim.disagg_handoff import handoff_ms

    ttft_lim, ttft_pct = _limits(slos, "ttft")
    tpot_lim, _ = _limits(slos, "tpot")
    handoff = handoff_ms(engine_name)
    # speculating twins (optimizer/spec_candidates.py) are left out: the disaggregated DES has no
    # speculation, so the option could not be checked; plan.json states speculation None
    usable = [e for e in evals if e.analyzer is not None and e.kv_capacity_tokens
              and getattr(e.candidate, "spec", None) is None]
    best: Optional[DisaggOption] = None
    for kv in sorted({e.candidate.prec.kv_cache for e in usable}):
        group = [e for e in usable if e.candidate.prec.kv_cache == kv]
        decodes = []
        for e in group:
            cap, t, b = decode_capacity(e, tpot_lim)
            if cap > 0:
                decodes.append(PoolPick("decode", e, 0, cap, t, b))
        decodes = _cheapest(decodes)
        prefills = _prefill_picks(group, decodes, wl, model, handoff, ttft_lim, ttft_pct)
        if not decodes or not prefills:
            continue
        picks = {f"{p.role}:{p.evaluation.candidate.name}": p for p in prefills + decodes}
        units = [(k, p.role, p.evaluation.candidate.gpu.key, p.evaluation.candidate.gpus_per_replica,
                  p.evaluation.candidate.usd_per_replica_hour, p.capacity_rps) for k, p in picks.items()]
        counts = solve_disagg(units, wl.rate_rps, max_gpus, max_workers, max_load)
        if not counts:
            continue
        chosen = {role: next(picks[k] for k in counts if k.startswith(role + ":")) for role in ("prefill", "decode")}
        for role, pick in chosen.items():
            pick.workers = counts[f"{role}:{pick.evaluation.candidate.name}"]
        p, d = chosen["prefill"], chosen["decode"]
        opt = DisaggOption(p, d, p.transfer_ms, handoff, p.link)
        if best is None or (opt.usd_per_hour, opt.gpus) < (best.usd_per_hour, best.gpus):
            best = opt
    if best is not None and ttft_lim == math.inf:
        best.notes.append("no TTFT target: the prefill pool is sized at 95% load")
    return best


def _cheapest(picks: list[PoolPick]) -> list[PoolPick]:
    """The :data:`TOP_PER_ROLE` picks with the lowest $/h per request/s (then fewer GPUs, name)."""
    key = lambda p: (p.evaluation.candidate.usd_per_replica_hour / p.capacity_rps,   # noqa: E731
                     p.evaluation.candidate.gpus_per_replica, p.evaluation.candidate.name)
    return sorted(picks, key=key)[:TOP_PER_ROLE]


def _prefill_picks(group: list[Evaluation], decodes: list[PoolPick], wl: WorkloadStats, model: Any, handoff: float,
                   ttft_lim: float, ttft_pct: float) -> list[PoolPick]:
    """Prefill shapes with a known KV link to every decode shape in ``decodes``; the TTFT
    counts the slowest of those transfers (a worst case: transfers are ms, the hand-off ~1 s)."""
    from llmplan.sim.disagg_handoff import request_terms
    from llmplan.sim.engine_terms import cost_model_request_ttft_ms
    from llmplan.sim.kv_transfer import pool_link, request_kv_payload, transfer_ms

    out = []
    tokens = int(round(wl.mean_input_tokens))
    for e in group:
        c = e.candidate
        worst, kind = 0.0, ""
        try:
            for d in decodes:
                dc = d.evaluation.candidate
                link = pool_link(c.gpu, dc.gpu, c.gpus_per_replica, dc.gpus_per_replica)
                x = transfer_ms(request_kv_payload(model, c.prec.kv_cache, tokens, c.par.tp, dc.par.tp), link)
                if x >= worst:
                    worst, kind = x, link.kind
        except UserError:
            continue   # the catalog has no link figure for one of the GPU pairs
        # the engine's per-request TTFT outside the steps (front end, tokenisation), as the
        # aggregated screen counts it (optimizer/evaluate.py): the two modes on the same footing
        # (in the form the engine's hand-off was fitted with: sim/disagg_request_terms.py; "request" = the
        # per-request constant only, Dynamo's front end)
        front = cost_model_request_ttft_ms(e.analyzer.step, 0.0 if request_terms(
            getattr(getattr(e.analyzer.step, "engine", None), "name", "")) == "request" else tokens)
        cap, ttft = prefill_capacity(prefill_ms(e), worst + handoff + front, ttft_lim, ttft_pct)
        if cap > 0:
            pick = PoolPick("prefill", e, 0, cap, ttft)
            pick.transfer_ms, pick.link = worst, kind
            out.append(pick)
    return _cheapest(out)


def verify_option(opt: DisaggOption, model: Any, engine: Any, wl: WorkloadStats, slos: list[SLOTarget],
                  calibration: Optional[str], requests: int, seed: int = 0) -> dict:
    """Simulate the option in the disaggregated DES (``sim.disaggregated``): Poisson arrivals at
    the plan's rate, prompt and output lengths fixed at the workload means (the planner has the
    workload's statistics, not its generator), the engine's fitted hand-off. Returns the
    simulated value of every SLO target and whether all hold."""
    from dataclasses import replace

    from llmplan.sim.deployment import Deployment
    from llmplan.sim.disagg_build import disagg_from_deployments
    from llmplan.sim.disaggregated import simulate_disaggregated
    from llmplan.sim.workload import LengthSpec, WorkloadSpec

    deps = []
    for pick in (opt.prefill, opt.decode):
        c = pick.evaluation.candidate
        deps.append(Deployment(model, c.gpu, c.par, c.prec, replace(engine, max_num_seqs=c.max_num_seqs)))
    i, o = max(1, int(round(wl.mean_input_tokens))), max(1, int(round(wl.mean_output_tokens)))
    spec = disagg_from_deployments(deps[0], deps[1], opt.prefill.workers, opt.decode.workers, i + o, calibration,
                                   handoff_ms=opt.handoff_ms)
    # each pool's step model times the operators of its screened candidate: one set of operator
    # caches (AnalyticalStepModel.share_op_caches; same answers, each list derived once)
    for pool, pick in ((spec.prefill, opt.prefill), (spec.decode, opt.decode)):
        screened = getattr(pick.evaluation.analyzer, "step", None)
        if screened is not None and hasattr(pool.replica.cost_model, "share_op_caches"):
            pool.replica.cost_model.share_op_caches(screened)
    work = WorkloadSpec(preset=None, arrival="poisson", rate_rps=wl.rate_rps, num_requests=requests,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=i),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=o), seed=seed)
    res = simulate_disaggregated(work, spec, seed=seed)
    s = res.summary
    targets = {}
    for t in slos:
        v = s.get(f"{t.metric}_ms_mean" if t.is_mean else f"{t.metric}_ms_p{t.percentile:g}")
        if v is None:
            import numpy as np

            col = res.requests.loc[res.requests["measured"] & res.requests["finished"], f"{t.metric}_ms"].dropna()
            v = (float(col.mean()) if t.is_mean else float(np.percentile(col, t.percentile))) if len(col) else math.nan
        targets[t.key] = {"limit_ms": t.limit_ms, "simulated_ms": round(float(v), 3)}
    met = (not res.overloaded) and all(x["simulated_ms"] <= x["limit_ms"] for x in targets.values())
    from llmplan.optimizer.disagg_sim_stats import pool_activity, targets_log_sd

    from llmplan.sim.engine_terms import fit_range_note, operating_point

    done = res.requests[res.requests["measured"] & res.requests["finished"]]
    far = fit_range_note(engine.name, operating_point(wl.rate_rps / opt.decode.workers, done, decode_only=True)) if len(done) else ""
    return {"requests": requests, "workload": "poisson at the plan's rate, lengths fixed at the workload means",
            # the decode pool's operating point against the served rows the engine terms were fitted on
            "outside_fit": far,
            "overloaded": bool(res.overloaded), "targets": targets, "slo_met": bool(met),
            "kv_transfer_ms_mean": s.get("transfer_ms_mean"),
            # the sampling spread of each simulated statistic and each pool's activity, for the
            # split's P(SLO met) and energy (optimizer/disagg_figures.py)
            "log_sd": targets_log_sd(res.requests, slos), "pools": pool_activity(res, opt.prefill.workers)}


#: extra workers tried per pool when the split's simulation misses a target (the aggregated
#: selection's counterpart: finalists re-verified and the ILP re-solved, optimizer/planner.py)
MAX_GROW_STEPS = 3


def _roles_to_grow(sim: dict, slos: list[SLOTarget]) -> set[str]:
    """The pools whose targets the simulation missed: TTFT -> prefill, TPOT -> decode; an overloaded
    run with no target named grows both."""
    metric = {t.key: t.metric for t in slos}
    missed = [k for k, t in sim["targets"].items() if not t["simulated_ms"] <= t["limit_ms"]]
    roles = {"prefill" if metric.get(k) == "ttft" else "decode" for k in missed}
    return roles or ({"prefill", "decode"} if sim.get("overloaded") else set())


def _fits(opt: DisaggOption, add: set[str], max_gpus: dict[str, int] | None) -> bool:
    """Both pools with one more worker in each role of ``add`` stay within GPU availability."""
    used: dict[str, int] = {}
    for pick in (opt.prefill, opt.decode):
        c = pick.evaluation.candidate
        used[c.gpu.key] = used.get(c.gpu.key, 0) + (pick.workers + (pick.role in add)) * c.gpus_per_replica
    return all(used[g] <= int(lim) for g, lim in (max_gpus or {}).items() if g in used)


def verify_and_grow(opt: DisaggOption, model: Any, engine: Any, wl: WorkloadStats, slos: list[SLOTarget],
                    calibration: Optional[str], requests: int, max_gpus: dict[str, int] | None = None,
                    steps: int = MAX_GROW_STEPS) -> DisaggOption:
    """Simulate the option (:func:`verify_option`); while a target is missed, add one worker to
    the pool that misses it (GPU availability respected) and simulate again, at most ``steps``
    times. ``opt.simulated`` holds the last run; a note says how the sizing grew."""
    first = f"{opt.prefill.workers}P{opt.decode.workers}D"
    sim = verify_option(opt, model, engine, wl, slos, calibration, requests)
    for _ in range(steps):
        roles = set() if sim["slo_met"] else _roles_to_grow(sim, slos)
        if not roles or not _fits(opt, roles, max_gpus):
            break
        for pick in (opt.prefill, opt.decode):
            pick.workers += pick.role in roles
        sim = verify_option(opt, model, engine, wl, slos, calibration, requests)
    opt.simulated = sim
    if sim.get("outside_fit"):
        opt.notes.append(f"decode pool: {sim['outside_fit']}")
    now = f"{opt.prefill.workers}P{opt.decode.workers}D"
    if now != first:
        opt.notes.append(f"the analytical sizing {first} missed a target in simulation; grown to {now} "
                         f"({'meets' if sim['slo_met'] else 'still misses'} every target)")
    return opt

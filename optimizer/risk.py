"""Probability that a planned deployment meets each SLO (docs/RISK.md).

Error model (``sim/served_error.py``). What an engine serves is the prediction times a
multiplicative error, ``measured = predicted x exp(e)``. ``e`` is distributed as the held-out
served residuals of the engine and metric (``sim/data/served_residuals.json``, empirical), or,
when that file does not belong to the current bands, as the normal whose central ``level``
interval is the served band ``[ln lo, ln hi]`` (``sim/serving_bands.py``).

The residuals are of *mean* TTFT/TPOT (what benchmark clients report), so a target on the mean
(``slo.ttft_mean_ms``) is the direct case: the error applies to the predicted mean as fitted.
A target at a percentile is assumed to carry the same multiplicative error (the error scales
the latency distribution). The simulated statistic is a finite-sample estimate: its spread ``s``
in log space comes from the order statistics of the simulated requests (:func:`sample_log_sd`)
or, for a mean, the standard error of the mean (:func:`target_log_sd`), and is added as an
independent normal: P(target met) = P(e + s Z <= ln(limit / predicted)).

Targets of one metric (several percentiles, several pools of one engine) share one error ``e``:
they are met together up to the sampling noise, so the metric's probability is the lowest of
its targets. TTFT and TPOT errors come from different terms (prefill vs decode steps) and are
taken as independent: P(every SLO) = product over metrics. :func:`tightened_limit` inverts this
for ``search.confidence``: with ``m`` metrics, each must hold with probability ``c^(1/m)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from llmplan.errors import UserError
from llmplan.optimizer.mode_select import split_chosen
from llmplan.optimizer.types import Selection, SLOTarget
from llmplan.sim.served_error import EmpiricalError, ErrorModel, error_model


def sample_log_sd(values: np.ndarray, percentile: float) -> float:
    """Standard deviation of the log of the ``percentile``-th sample percentile of ``values``.

    The number of samples below the true q-quantile is Binomial(n, q), so the sample quantile
    moves by about one binomial standard deviation of rank, ``d = sqrt(q (1 - q) / n)`` in
    probability: s = (ln x_(q + d) - ln x_(q - d)) / 2, read off the sample itself (no density
    estimate). NaN for fewer than 2 positive values."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) < 2:
        return math.nan
    q = percentile / 100.0
    d = math.sqrt(q * (1.0 - q) / len(v))
    lo, hi = np.quantile(v, [max(0.0, q - d), min(1.0, q + d)])
    return float((math.log(hi) - math.log(lo)) / 2.0)


def target_log_sd(values: np.ndarray, s: SLOTarget) -> float:
    """Sampling spread (log space) of the simulated statistic a target is judged on: for a
    mean target the standard error of the mean over the mean, sd / (sqrt(n) mean) (delta
    method), else :func:`sample_log_sd` at its percentile. NaN for fewer than 2 positive values."""
    if not s.is_mean:
        return sample_log_sd(values, s.percentile)
    v = np.asarray(values, float)
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) < 2:
        return math.nan
    return float(v.std(ddof=1) / (math.sqrt(len(v)) * v.mean()))


def check_confidence(value) -> float | None:
    """``search.confidence``: None (point prediction) or a probability in (0, 1)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise UserError(f"must be a probability strictly between 0 and 1, got {value!r}", key="search.confidence",
                        fix="e.g. search.confidence=0.9 (or null for the point prediction)")
    return float(value)


def metric_level(confidence: float, slos: list[SLOTarget]) -> float:
    """The probability each metric must reach so that every metric holds with ``confidence``."""
    m = len({s.metric for s in slos}) or 1
    return confidence ** (1.0 / m)


def tightened_limit(limit_ms: float, err: ErrorModel | EmpiricalError, level: float) -> float:
    """The predicted value at which the target holds with probability ``level`` (served error only)."""
    return limit_ms * math.exp(-err.log_quantile(level))


def tightened_slos(slos: list[SLOTarget], engine: str, confidence: float) -> list[SLOTarget]:
    """Targets whose point check means 'met with probability >= confidence' (raises UserError
    when the engine has no served band for a metric)."""
    level = metric_level(confidence, slos)
    out = []
    for s in slos:
        err = error_model(engine, s.metric)
        if err is None:
            raise UserError(f"engine {engine!r} has no served {s.metric.upper()} band to size a probability on",
                            key="search.confidence", fix="drop search.confidence, or plan for vllm, sglang or trtllm")
        if level >= err.max_probability:
            top = err.max_probability ** len({t.metric for t in slos})
            raise UserError(f"needs each of TTFT/TPOT met with probability {level:.4f}, beyond what the served error "
                            f"data of {engine} resolves ({err.max_probability:g}: {err.source})",
                            key="search.confidence", fix=f"use a confidence below {top:.3f}")
        out.append(SLOTarget(s.metric, s.percentile, tightened_limit(s.limit_ms, err, level), stat=s.stat))
    return out


def allocation_probabilities(predicted: Mapping[str, float], sample_sd: Mapping[str, float],
                             slos: list[SLOTarget], engine: str) -> dict[str, float | None]:
    """SLOTarget.key -> P(met) for one pool (None where the engine has no band)."""
    out: dict[str, float | None] = {}
    for s in slos:
        err = error_model(engine, s.metric)
        v = predicted.get(s.key, math.nan)
        out[s.key] = None if err is None else err.probability(v, s.limit_ms, sample_sd.get(s.key, 0.0))
    return out


def every_slo(per_pool: list[Mapping[str, float | None]], slos: list[SLOTarget]) -> float | None:
    """P(every target of every pool met): lowest per metric (one shared error), product over metrics."""
    total = 1.0
    for metric in sorted({s.metric for s in slos}):
        ps = [p.get(s.key) for p in per_pool for s in slos if s.metric == metric]
        if not ps or any(x is None for x in ps):
            return None
        total *= min(ps)
    return total


def selection_risk(sel: Selection, slos: list[SLOTarget], engine: str) -> dict:
    """Per pool and overall probabilities of meeting the SLOs for a selection. Each pool uses
    its simulated percentiles where simulated (with their sampling spread), else analytical."""
    pools = []
    for a in sel.allocations:
        sim = (a.simulated or {}).get("targets") or {}
        basis = "simulated" if sim else "analytical"
        pred = sim if sim else a.analytical
        sd = (a.simulated or {}).get("log_sd") or {}
        pools.append({"pool": a.evaluation.candidate.name, "basis": basis,
                      "probability": allocation_probabilities(pred, sd, slos, engine)})
    p_all = every_slo([p["probability"] for p in pools], slos) if pools else None
    return {"every_slo_probability": None if p_all is None else round(p_all, 4), "pools": pools,
            "error_model": error_models(slos, engine), "method": "docs/RISK.md"}


def error_models(slos: list[SLOTarget], engine: str) -> dict:
    """plan.json's description of the served error model of each metric (None: no band)."""
    models = {m: error_model(engine, m) for m in sorted({s.metric for s in slos})}
    return {m: (None if e is None else {"kind": "lognormal" if isinstance(e, ErrorModel) else "empirical",
                                         "median_factor": round(math.exp(e.log_quantile(0.5)), 4),
                                         "p90_factor": round(math.exp(e.log_quantile(0.9)), 4),
                                         "source": e.source}) for m, e in models.items()}


#: the residual set a disaggregated split is judged with (docs/RISK.md "Disaggregated splits")
SPLIT_RESIDUALS = ("the engine's aggregated served residuals (sim/data/served_residuals.json): the disaggregated "
                   "served rows are too few to fit their own; the split's TTFT (prefill queue + prompt + KV transfer "
                   "+ hand-off + decode join) takes the aggregated TTFT error, its TPOT the aggregated TPOT error")


def split_figures(dis: Mapping, slos: list[SLOTarget]) -> tuple[dict[str, float], str]:
    """SLOTarget.key -> a split's figure (simulated, else the screen's pool figure: the prefill
    pool's TTFT, the decode pool's TPOT) and its basis (``simulated`` / ``analytical``)."""
    sim = dis.get("simulated") or {}
    if sim.get("targets"):
        return {k: float(v["simulated_ms"]) for k, v in sim["targets"].items()}, "simulated"
    pools = {p["role"]: p for p in dis["pools"]}
    return ({s.key: float(pools["prefill" if s.metric == "ttft" else "decode"].get(f"{s.metric}_ms", math.nan))
             for s in slos}, "analytical")


def split_risk(dis: Mapping, slos: list[SLOTarget], engine: str) -> dict:
    """P(each SLO met) of a disaggregated split (plan.json ``disaggregated``): its simulated
    statistics with their sampling spread (``simulated.log_sd``), else the screen's figures (the
    prefill pool's TTFT, the decode pool's TPOT; their binding target's figure stands for every
    target of the metric). An overloaded simulation meets no target (probability 0)."""
    sim = dis.get("simulated") or {}
    pred, basis = split_figures(dis, slos)
    sd = {}
    if basis == "simulated":
        pred = {k: (math.nan if sim.get("overloaded") else v) for k, v in pred.items()}
        sd = {k: float(v) for k, v in (sim.get("log_sd") or {}).items() if v is not None}
    probs = allocation_probabilities(pred, sd, slos, engine)
    p_all = every_slo([probs], slos)
    return {"every_slo_probability": None if p_all is None else round(p_all, 4),
            "pools": [{"pool": f"{dis.get('xpyd', 'xPyD')} (TTFT across both pools, TPOT of the decode pool)",
                       "basis": basis, "probability": {k: _round(v) for k, v in probs.items()}}],
            "error_model": error_models(slos, engine), "residuals": SPLIT_RESIDUALS, "method": "docs/RISK.md"}


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def confidence_slos(slos: list[SLOTarget], engine: str, confidence) -> list[SLOTarget]:
    """The targets the planner checks: ``slos`` as given (no ``search.confidence``), else
    tightened so that a point prediction within them meets every SLO with that probability."""
    c = check_confidence(confidence)
    return slos if c is None else tightened_slos(slos, engine, c)


def finish_confidence(res, point: list[SLOTarget], planned: list[SLOTarget], confidence, engine: str) -> None:
    """After planning at tightened targets: report against the user's targets (``res.slos``),
    record the level and the tightened limits (``res.confidence``), and say when the chosen
    deployment's probability (which adds the simulation's sampling spread) is below the level."""
    c = check_confidence(confidence)
    if c is None:
        return
    res.slos = point
    res.confidence = {"level": c, "per_metric_level": round(metric_level(c, point), 4),
                      "planned_limits_ms": {s.key: round(s.limit_ms, 3) for s in planned},
                      "slo_limits_ms": {s.key: s.limit_ms for s in point}, "method": "docs/RISK.md"}
    split = split_chosen(res)
    if not res.selection.feasible and not split:
        res.notes.append(f"search.confidence={c:g}: planned against limits tightened to " +
                         ", ".join(f"{s.key} {s.limit_ms:.4g} ms" for s in planned) +
                         " (a prediction within them meets every SLO with that probability)")
        return
    # the chosen deployment is judged: the split (sized and simulated against the same tightened
    # limits as the aggregated side) or the aggregated selection
    rk = split_risk(res.disaggregated, point, engine) if split else selection_risk(res.selection, point, engine)
    p = rk["every_slo_probability"]
    res.confidence["every_slo_probability"] = p
    res.confidence["judged"] = "disaggregated" if split else "aggregated"
    if res.selection.feasible and split:
        res.confidence["aggregated_every_slo_probability"] = selection_risk(res.selection, point,
                                                                            engine)["every_slo_probability"]
    if p is not None and p < c:
        simulated = all(x["basis"] == "simulated" for x in rk["pools"])
        why = ("the simulated percentiles' sampling spread adds to the served band (raise search.verify_requests)"
               if simulated else "an analytical figure stands for a pool that was not simulated (search.finalists=0)")
        res.notes.append(f"the chosen deployment meets every SLO with probability {p:.3f}, below "
                         f"search.confidence={c:g}: {why}")

"""Why no deployment meets the targets: the real cause and the closest candidate.

Causes, in the order a candidate meets them: ``parallelism``/``precision`` (no valid
shape), ``memory`` (nothing fits), ``slo`` (nothing meets a target even at light load, in
the analytical screen or in simulation), ``availability`` (``gpu.max_gpus`` too small) and
``replicas`` (``search.max_replicas`` too small). The closest candidate is the one that
misses by the least: HBM per GPU for memory, value/limit of its worst target for SLOs,
GPUs or replicas short for the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmplan.optimizer.slo_check import worst_miss
from llmplan.optimizer.types import Evaluation, SLOTarget


@dataclass(frozen=True)
class Diagnosis:
    cause: str          # parallelism | precision | memory | slo | availability | replicas
    message: str        # one line naming the cause and the closest candidate
    closest: dict = field(default_factory=dict)  # candidate, miss and what it misses by

    def as_dict(self) -> dict:
        return {"cause": self.cause, "message": self.message, "closest": self.closest}


def _slo_closest(evals: list[Evaluation], slos: list[SLOTarget]) -> Diagnosis | None:
    best = None
    for e in evals:
        t, r = worst_miss(e.light, slos)
        if t is not None and (best is None or r < best[2]):
            best = (e, t, r)
    if best is None:
        return None
    e, t, r = best
    v = e.light[t.key]
    value = f"{v:.4g} ms" if math.isfinite(v) else "unbounded"
    return Diagnosis("slo", f"no candidate meets the SLOs even at light load; closest: {e.candidate.name} with "
                            f"{t.label.split(' <=')[0]} {value} at light load vs {t.limit_ms:g} ms "
                            f"({r - 1:+.0%})",
                     {"candidate": e.candidate.name, "target": t.key, "light_load_ms": round(v, 2) if math.isfinite(v) else None,
                      "limit_ms": t.limit_ms, "miss_fraction": round(r - 1, 4) if math.isfinite(r) else None})


def diagnose(evals: list[Evaluation], slos: list[SLOTarget], rate_rps: float, max_gpus: dict[str, int],
             max_replicas: int, max_load: float) -> Diagnosis:
    valid = [e for e in evals if e.verdict not in ("parallelism", "precision")]
    if not valid:
        kinds = sorted({e.verdict for e in evals})
        cause = "precision" if kinds == ["precision"] else "parallelism"
        example = evals[0].reason if evals else "the search space is empty"
        return Diagnosis(cause, f"no valid tp/pp/ep/precision combination in search.*: e.g. {example}")
    fit = [e for e in valid if e.verdict != "memory"]
    if not fit:
        e = min(valid, key=lambda x: (x.memory_shortfall_gb, x.candidate.gpus_per_replica, x.candidate.name))
        return Diagnosis("memory", f"the model fits on no candidate; closest: {e.candidate.name} is "
                                   f"{e.memory_shortfall_gb:.1f} GB per GPU short ({e.reason})",
                         {"candidate": e.candidate.name, "shortfall_gb_per_gpu": round(e.memory_shortfall_gb, 2)})
    ok = [e for e in fit if e.verdict == "ok" and e.effective_capacity_rps > 0]
    if not ok:
        sim_failed = [e for e in fit if e.verdict == "ok" and e.sim_capacity_rps == 0.0]
        if sim_failed:  # passed the analytical screen, but the simulator finds no rate meeting the SLOs
            e = max(sim_failed, key=lambda x: (x.capacity_rps, x.candidate.name))
            why = "; ".join(n for n in e.notes if n.startswith("simulation:")) or "simulation: SLOs missed"
            return Diagnosis("slo", f"the analytical screen passes {len(sim_failed)} candidate(s) but the simulator "
                                    f"finds the SLOs missed at every rate it tried; closest: {e.candidate.name} "
                                    f"(analytical capacity {e.capacity_rps:.3g} req/s; {why})",
                             {"candidate": e.candidate.name, "analytical_capacity_rps": round(e.capacity_rps, 4),
                              "simulated_capacity_rps": 0.0})
        d = _slo_closest([e for e in fit if e.verdict == "slo"] or fit, slos)
        return d or Diagnosis("slo", "no candidate meets the SLOs")
    # candidates serve some load: the rate needs more GPUs or replicas than allowed
    e = min(ok, key=lambda x: (x.usd_per_request_rps, x.candidate.name))
    need = math.ceil(rate_rps / (max_load * e.effective_capacity_rps))
    limit = max_gpus.get(e.candidate.gpu.key)
    if limit is not None and need * e.candidate.gpus_per_replica > limit:
        short = need * e.candidate.gpus_per_replica - limit
        return Diagnosis("availability", f"{rate_rps:g} req/s needs more GPUs than gpu.max_gpus allows; cheapest per "
                                         f"req/s: {need}x {e.candidate.name} ({need * e.candidate.gpus_per_replica} GPUs, "
                                         f"{short} over the limit of {limit})",
                         {"candidate": e.candidate.name, "replicas_needed": need, "gpus_short": short})
    if need > max_replicas:
        return Diagnosis("replicas", f"{rate_rps:g} req/s needs {need} replicas of {e.candidate.name}, more than "
                                     f"search.max_replicas={max_replicas}",
                         {"candidate": e.candidate.name, "replicas_needed": need})
    limited = ", ".join(f"{k}<={v}" for k, v in sorted(max_gpus.items()))
    return Diagnosis("availability", f"the rate cannot be served within gpu.max_gpus ({limited})",
                     {"candidate": e.candidate.name, "replicas_needed": need})

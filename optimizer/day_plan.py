"""A day of traffic: replicas per interval over price tiers, the day's cost, and the saving
against static provisioning for the peak. One PuLP/CBC integer program (docs/AUTOSCALING.md).

For candidates ``c`` (verified deployments: GPU type, GPUs per replica, SLO capacity per
replica), intervals ``t`` of a load profile (duration ``d_t`` hours, rate ``r_t``) and tiers
reserved (R), on-demand (D) and spot (S)::

    minimise  sum_c p^R_c R_c H  +  sum_t d_t sum_c (p^D_c y^D_ct + p^S_c y^S_ct)
    s.t.      sum_c u cap_c (R_c + x^D_ct + (1 - q_g) x^S_ct) >= r_t        (serve the rate)
              sum_c (R_c + x^D_ct + x^S_ct) >= min_replicas                  (every interval)
              y^k_ct >= x^k_ct'  for every t' whose scale-up window
                    [start_t' - scale_up_s, start_t') overlaps interval t, and t' = t   (lead)
              sum_{c on g} gpus_c (R_c + y^D_ct + y^S_ct) <= avail_g        (availability)
              R, x integer >= 0;  y >= 0

``x`` are the replicas serving interval t, ``y`` those running (paid), which includes
replicas still starting for a later interval; reserved replicas run all day (``H`` = the
profile's hours) and need no lead. ``p`` are $/replica-hour (GPUs x $/GPU-hour of the
tier), ``u`` the planner's max load per replica, ``q_g`` the spot interruption rate of the
GPU type (expected capacity after interruptions; ``price_tiers.py``). The profile repeats
(cyclic, a day after a day) unless ``cyclic=False``: then the first interval's replicas are
assumed running at the start. Static provisioning for the peak is the same program on a flat
profile at the peak rate (same tiers), so a flat profile saves exactly nothing.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pulp

from llmplan.errors import Infeasible, UserError
from llmplan.optimizer.price_tiers import PriceTiers, check
from llmplan.optimizer.select_ilp import _solver, prune
from llmplan.optimizer.types import Evaluation

TIERS = ("reserved", "on_demand", "spot")
_TIE_GPU = 1e-6   # $ per GPU-interval: among equal-cost plans prefer fewer running GPUs
_TIE_SERVE = 1e-7  # per serving replica: report the fewest replicas that serve


#: relative MIP gap at which CBC stops: the day's cost is within 1% of the optimum. Proving
#: optimality on 48+ intervals takes CBC minutes (at 0.1%: 96 15-minute intervals x 12
#: candidates 220 s; at 1%: 5 s, $321.75 against the optimum $320.40; benchmarks/bench_day_plan.py).
GAP_REL = 1e-2


class DayInfeasible(Infeasible):
    """No replica schedule serves the profile within availability and the limits."""


@dataclass(frozen=True)
class LoadProfile:
    t_start_s: tuple[float, ...]
    duration_s: tuple[float, ...]
    rate_rps: tuple[float, ...]
    source: str = "rates"

    @property
    def horizon_s(self) -> float:
        return self.t_start_s[-1] + self.duration_s[-1] - self.t_start_s[0]

    @property
    def peak_rps(self) -> float:
        return max(self.rate_rps)


@dataclass(frozen=True)
class DayCandidate:
    name: str
    gpu: str
    gpus_per_replica: int
    capacity_rps_per_replica: float   # highest per-replica rate meeting every SLO
    usd_per_gpu_hour: float = math.nan  # catalog (on-demand) price, used when the GPU has no tiers


def _check_profile(p: LoadProfile, key: str) -> LoadProfile:
    if not p.rate_rps:
        raise UserError("the load profile is empty", key=key, fix="give at least one interval with a rate")
    for i, (s, d, r) in enumerate(zip(p.t_start_s, p.duration_s, p.rate_rps)):
        if not (math.isfinite(r) and r >= 0):
            raise UserError(f"interval {i}: rate {r!r} req/s is not a finite number >= 0", key=key, fix="fix the rate")
        if not (math.isfinite(d) and d > 0):
            raise UserError(f"interval {i} (t_start_s={s:g}): duration {d!r} s must be > 0", key=key,
                            fix="t_start_s must increase strictly")
    return p


def profile_from_rates(rates_rps: Sequence[float], interval_s: float = 3600.0, t0_s: float = 0.0,
                       key: str = "day.profile") -> LoadProfile:
    """Equal intervals (hourly by default, 60 for per-minute rates)."""
    if not (interval_s > 0):
        raise UserError(f"interval must be > 0 s, got {interval_s!r}", key=f"{key}.interval_s", fix="e.g. 3600")
    rates = tuple(float(r) for r in rates_rps)
    return _check_profile(LoadProfile(tuple(t0_s + i * interval_s for i in range(len(rates))),
                                      (float(interval_s),) * len(rates), rates, "rates"), key)


def profile_from_table(t_start_s: Sequence[float], rate_rps: Sequence[float], horizon_s: float | None = None,
                       key: str = "day.profile") -> LoadProfile:
    """Rows ``t_start_s, rate_rps``: each rate holds until the next start; the last until
    ``horizon_s`` (default: as long as the interval before it, or one hour alone)."""
    starts, rates = [float(s) for s in t_start_s], [float(r) for r in rate_rps]
    if len(starts) != len(rates) or not starts:
        raise UserError("needs as many t_start_s as rate_rps, at least one", key=key, fix="columns t_start_s, rate_rps")
    if horizon_s is None:
        horizon_s = starts[-1] + (starts[-1] - starts[-2] if len(starts) > 1 else 3600.0)
    ends = starts[1:] + [float(horizon_s)]
    return _check_profile(LoadProfile(tuple(starts), tuple(e - s for s, e in zip(starts, ends)), tuple(rates), "table"), key)


#: load profiles shipped with llmplan (``day.profile=diurnal_24h`` names diurnal_24h.csv here)
SHIPPED_PROFILES = Path(__file__).resolve().parent / "day_profiles"


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in SHIPPED_PROFILES.glob("*.csv"))


def resolve_profile(text: str) -> Path:
    """``day.profile`` as a path (relative to the working directory), else the name of a
    shipped profile (with or without ``.csv``); a missing file is named by read_profile_csv."""
    p = Path(text)
    if p.exists() or p.is_absolute() or len(p.parts) > 1:
        return p
    shipped = SHIPPED_PROFILES / (p.name if p.suffix == ".csv" else f"{p.name}.csv")
    return shipped if shipped.exists() else p


def read_profile_csv(path: Path, horizon_s: float | None = None, key: str = "day.profile",
                     interval_s: float | None = None) -> LoadProfile:
    """A CSV with header columns ``t_start_s`` and ``rate_rps`` (others ignored), each rate
    holding until the next start; or a trace, one arrival per row in a column ``timestamp_s``
    (seconds from the start), binned into ``interval_s`` intervals (default 3600). With
    ``interval_s`` a rate table is re-binned to it (:func:`rebin`)."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as err:
        raise UserError(f"cannot read {path.name}: {err.strerror}", key=key,
                        fix="give an existing CSV file or a shipped profile: " + ", ".join(shipped_profiles())) from None
    if rows and "timestamp_s" in rows[0]:
        try:
            ts = [float(r["timestamp_s"]) for r in rows]
        except (TypeError, ValueError):
            raise UserError(f"{path.name}: every timestamp_s must be a number", key=key, fix="fix the CSV") from None
        return profile_from_trace(ts, 3600.0 if interval_s is None else float(interval_s), horizon_s, key)
    if not rows or not {"t_start_s", "rate_rps"} <= set(rows[0]):
        raise UserError(f"{path.name} needs the columns t_start_s and rate_rps (a rate table) or timestamp_s (a trace)",
                        key=key, fix="add a header line: t_start_s,rate_rps")
    try:
        starts = [float(r["t_start_s"]) for r in rows]
        rates = [float(r["rate_rps"]) for r in rows]
    except (TypeError, ValueError):
        raise UserError(f"{path.name}: every t_start_s and rate_rps must be a number", key=key, fix="fix the CSV") from None
    prof = profile_from_table(starts, rates, horizon_s, key)
    return prof if interval_s is None else rebin(prof, float(interval_s), key)


def rebin(profile: LoadProfile, interval_s: float, key: str = "day.profile") -> LoadProfile:
    """The profile on equal ``interval_s`` intervals from its start: each new interval's rate is
    the time-weighted mean of the rates it covers (the same requests in every interval); the
    last interval ends with the profile (shorter when the horizon is no multiple)."""
    if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
        raise UserError(f"must be > 0 s, got {interval_s!r}", key="day.interval_s", fix="e.g. 3600 or 900")
    t0, horizon = profile.t_start_s[0], profile.horizon_s
    n = max(1, math.ceil(horizon / interval_s - 1e-9))
    starts = [t0 + i * interval_s for i in range(n)]
    durs = [min(interval_s, t0 + horizon - s) for s in starts]
    rates = []
    for s, d in zip(starts, durs):
        reqs = sum(r * max(0.0, min(s + d, a + w) - max(s, a))
                   for a, w, r in zip(profile.t_start_s, profile.duration_s, profile.rate_rps))
        rates.append(reqs / d)
    return _check_profile(LoadProfile(tuple(starts), tuple(durs), tuple(rates), f"{profile.source}, re-binned"), key)


def profile_from_trace(timestamps_s: Iterable[float], interval_s: float = 3600.0, horizon_s: float | None = None,
                       key: str = "day.profile") -> LoadProfile:
    """Arrival timestamps (s from the start) binned into intervals: rate = arrivals / interval.
    ``horizon_s`` defaults to whole intervals covering the last arrival; arrivals at or after
    it are refused (never silently dropped)."""
    ts = sorted(float(t) for t in timestamps_s)
    if not ts:
        raise UserError("the trace has no arrivals", key=key, fix="give at least one timestamp")
    if ts[0] < 0 or not all(math.isfinite(t) for t in ts):
        raise UserError("timestamps must be finite and >= 0 s", key=key, fix="use seconds from the start of the day")
    if not interval_s > 0:
        raise UserError(f"interval must be > 0 s, got {interval_s!r}", key=f"{key}.interval_s", fix="e.g. 3600")
    if horizon_s is None:
        horizon_s = (math.floor(ts[-1] / interval_s) + 1) * interval_s
    if ts[-1] >= horizon_s:
        raise UserError(f"an arrival at {ts[-1]:g} s is past the horizon {horizon_s:g} s", key=key,
                        fix="raise the horizon or trim the trace")
    n = math.ceil(horizon_s / interval_s - 1e-9)
    counts = [0] * n
    for t in ts:
        counts[min(int(t // interval_s), n - 1)] += 1
    durs = [min(interval_s, horizon_s - i * interval_s) for i in range(n)]
    return _check_profile(LoadProfile(tuple(i * interval_s for i in range(n)), tuple(durs),
                                      tuple(c / d for c, d in zip(counts, durs)), "trace"), key)


def candidates_from_evaluations(evals: list[Evaluation], per_gpu: int = 4) -> list[DayCandidate]:
    """The planner's verified candidates (verdict ok; simulated capacity where it was simulated),
    the ``per_gpu`` cheapest per request/s of each GPU type."""
    return [DayCandidate(e.candidate.name, e.candidate.gpu.key, e.candidate.gpus_per_replica,
                         float(e.effective_capacity_rps), float(e.candidate.usd_per_gpu_hour))
            for e in prune(evals, per_gpu)]


@dataclass
class DayPlan:
    profile: LoadProfile
    candidates: list[DayCandidate]
    tiers: dict[str, PriceTiers]
    serving: dict[tuple[str, str], tuple[int, ...]]  # (candidate, tier) -> replicas serving each interval
    running: dict[tuple[str, str], tuple[int, ...]]  # (candidate, tier) -> replicas paid each interval
    cost_usd: float                 # the profile's cost (a day for a 24 h profile)
    interval_cost_usd: tuple[float, ...]
    static_cost_usd: float          # static provisioning for the peak, same tiers
    static_fleet: dict[tuple[str, str], int]
    static_on_demand_cost_usd: float  # the same, on-demand only (what `plan` prices today)
    scale_up_s: float
    min_replicas: int
    max_load: float
    cyclic: bool
    assumptions: list[str] = field(default_factory=list)

    @property
    def saving_usd(self) -> float:
        return self.static_cost_usd - self.cost_usd

    @property
    def saving_pct(self) -> float:
        return 100.0 * self.saving_usd / self.static_cost_usd if self.static_cost_usd > 0 else 0.0

    def _cand(self, name: str) -> DayCandidate:
        return next(c for c in self.candidates if c.name == name)

    def capacity_rps(self) -> tuple[float, ...]:
        """Expected SLO capacity serving each interval (spot after interruptions, times max load)."""
        out = [0.0] * len(self.profile.rate_rps)
        for (name, tier), xs in self.serving.items():
            c = self._cand(name)
            f = self.max_load * c.capacity_rps_per_replica * self.tiers[c.gpu].capacity_factor(tier)
            for i, x in enumerate(xs):
                out[i] += f * x
        return tuple(out)

    def frame(self) -> pd.DataFrame:
        """One row per interval: rate, replicas serving per ``candidate:tier``, capacity, GPUs running, cost."""
        p = self.profile
        df = pd.DataFrame({"interval": range(len(p.rate_rps)), "t_start_s": p.t_start_s, "duration_s": p.duration_s,
                           "rate_rps": p.rate_rps})
        for (name, tier), xs in sorted(self.serving.items()):
            df[f"{name}:{tier}"] = xs
        df["capacity_rps"] = [round(c, 6) for c in self.capacity_rps()]
        gpus = [0] * len(p.rate_rps)
        for (name, _), ys in self.running.items():
            for i, y in enumerate(ys):
                gpus[i] += y * self._cand(name).gpus_per_replica
        df["gpus_running"] = gpus
        df["cost_usd"] = [round(c, 6) for c in self.interval_cost_usd]
        return df

    def as_dict(self) -> dict:
        """JSON-ready summary (the ``day`` block of plan.json)."""
        def fleet(d):
            return [{"candidate": n, "tier": t, "replicas": v} for (n, t), v in sorted(d.items())]
        return {
            "intervals": len(self.profile.rate_rps), "horizon_h": round(self.profile.horizon_s / 3600.0, 4),
            "peak_rps": self.profile.peak_rps, "scale_up_s": self.scale_up_s, "min_replicas": self.min_replicas,
            "max_load": self.max_load, "cyclic": self.cyclic,
            "cost_usd": round(self.cost_usd, 4), "static_peak_cost_usd": round(self.static_cost_usd, 4),
            "static_peak_on_demand_cost_usd": round(self.static_on_demand_cost_usd, 4),
            "saving_usd": round(self.saving_usd, 4), "saving_pct": round(self.saving_pct, 2),
            "static_fleet": fleet(self.static_fleet),
            "schedule": self.frame().to_dict(orient="records"),
            "price_tiers": [{"gpu": t.gpu, "on_demand_usd_per_gpu_hour": t.on_demand_usd_per_gpu_hour,
                             "reserved_usd_per_gpu_hour": t.reserved_usd_per_gpu_hour,
                             "spot_usd_per_gpu_hour": t.spot_usd_per_gpu_hour,
                             "spot_interruption_rate": t.spot_interruption_rate, "source": t.source}
                            for _, t in sorted(self.tiers.items()) if any(c.gpu == t.gpu for c in self.candidates)],
            "assumptions": list(self.assumptions),
        }

    def plot(self, path: Path, title: str = "") -> None:
        """Rate against the capacity in place over the day, stacked by tier (PNG, Agg)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        p = self.profile
        hours = [(s - p.t_start_s[0]) / 3600.0 for s in p.t_start_s] + [p.horizon_s / 3600.0]
        layers = []
        for tier in TIERS:
            cap = [0.0] * len(p.rate_rps)
            for (name, t), xs in self.serving.items():
                if t == tier:
                    c = self._cand(name)
                    f = self.max_load * c.capacity_rps_per_replica * self.tiers[c.gpu].capacity_factor(tier)
                    cap = [a + f * x for a, x in zip(cap, xs)]
            if any(cap):
                layers.append((tier.replace("_", "-"), cap))
        fig, ax = plt.subplots(figsize=(8, 4))
        base = [0.0] * len(p.rate_rps)
        colors = {"reserved": "#4c72b0", "on-demand": "#dd8452", "spot": "#55a868"}
        for label, cap in layers:
            top = [b + c for b, c in zip(base, cap)]
            ax.stairs(top, hours, baseline=base, fill=True, alpha=0.6, color=colors[label], label=f"SLO capacity: {label}" + (" (expected)" if label == "spot" else ""))
            base = top
        ax.stairs(list(p.rate_rps), hours, color="black", linewidth=2, label="request rate")
        ax.set_xlabel("time (h from start of profile)")
        ax.set_ylabel("requests per second (req/s)")
        ax.set_title(title or f"Replicas over the profile: \\${self.cost_usd:,.0f} vs \\${self.static_cost_usd:,.0f} "
                              f"static for the peak ({self.saving_pct:.0f}% saved)")
        ax.set_xlim(hours[0], hours[-1])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def _lead_pairs(p: LoadProfile, scale_up_s: float, cyclic: bool) -> list[tuple[int, int]]:
    """(t, t'): a replica serving t' runs (and is paid) during t while it starts up."""
    h = p.horizon_s
    out = []
    for j, sj in enumerate(p.t_start_s):
        wins = [(sj - scale_up_s, sj)]
        if cyclic:
            wins.append((sj - scale_up_s + h, sj + h))
        for i, (si, di) in enumerate(zip(p.t_start_s, p.duration_s)):
            if i == j:
                continue
            if any(si < hi and si + di > lo and lo < hi for lo, hi in wins):
                out.append((i, j))
    return out


def _tiers_for(candidates: list[DayCandidate], tiers: Mapping[str, PriceTiers]) -> dict[str, PriceTiers]:
    out = {}
    for c in candidates:
        if c.gpu in out:
            continue
        t = tiers.get(c.gpu)
        if t is None:
            if not math.isfinite(c.usd_per_gpu_hour):
                raise UserError(f"no price for GPU type {c.gpu}", key=f"day.price_tiers.{c.gpu}",
                                fix="set on_demand_usd_per_gpu_hour (or reserved/spot)")
            t = PriceTiers(c.gpu, c.usd_per_gpu_hour, source="catalog on-demand price")
        out[c.gpu] = check(t)
    return out


def _solve(p: LoadProfile, cands: list[DayCandidate], tiers: dict[str, PriceTiers], allowed: tuple[str, ...],
           scale_up_s: float, min_replicas: int, max_load: float, cyclic: bool, max_gpus: Mapping[str, int],
           max_replicas: int):
    n_t = len(p.rate_rps)
    hours = [d / 3600.0 for d in p.duration_s]
    horizon_h = p.horizon_s / 3600.0
    prob = pulp.LpProblem("llmplan_day", pulp.LpMinimize)
    R, X, Y = {}, {}, {}
    for ci, c in enumerate(cands):
        for tier in tiers[c.gpu].tiers():
            if tier not in allowed:
                continue
            if tier == "reserved":
                R[ci] = prob.add_variable(f"r_{ci}", lowBound=0, upBound=max_replicas, cat="Integer")
            else:
                for t in range(n_t):
                    X[ci, tier, t] = prob.add_variable(f"x_{ci}_{tier}_{t}", lowBound=0, upBound=max_replicas,
                                                       cat="Integer")
                    Y[ci, tier, t] = prob.add_variable(f"y_{ci}_{tier}_{t}", lowBound=0, upBound=max_replicas)
    if not R and not X:
        raise UserError("no candidate has a price in the tiers allowed", key="day.price_tiers", fix="set a price")

    def usd(ci: int, tier: str) -> float:
        c = cands[ci]
        return c.gpus_per_replica * tiers[c.gpu].usd_per_gpu_hour(tier)

    obj = [(usd(ci, "reserved") * horizon_h + _TIE_GPU * cands[ci].gpus_per_replica * n_t) * v for ci, v in R.items()]
    obj += [(usd(ci, tier) * hours[t] + _TIE_GPU * cands[ci].gpus_per_replica) * v for (ci, tier, t), v in Y.items()]
    obj += [_TIE_SERVE * v for v in X.values()]
    prob += pulp.lpSum(obj)
    for t in range(n_t):
        cap, count = [], list(R.values())
        for ci, v in R.items():
            cap.append(max_load * cands[ci].capacity_rps_per_replica * v)
        for (ci, tier, tt), v in X.items():
            if tt == t:
                f = tiers[cands[ci].gpu].capacity_factor(tier)
                cap.append(max_load * cands[ci].capacity_rps_per_replica * f * v)
                count.append(v)
        if p.rate_rps[t] > 0:
            prob += pulp.lpSum(cap) >= p.rate_rps[t], f"rate_{t}"
        if min_replicas > 0:
            prob += pulp.lpSum(count) >= min_replicas, f"min_{t}"
    pairs = _lead_pairs(p, scale_up_s, cyclic) if scale_up_s > 0 else []
    for (ci, tier, t), y in Y.items():
        prob += y >= X[ci, tier, t], f"run_{ci}_{tier}_{t}"
    pools = sorted({(ci, tier) for ci, tier, _ in Y})
    for i, j in pairs:
        for ci, tier in pools:
            prob += Y[ci, tier, i] >= X[ci, tier, j], f"lead_{ci}_{tier}_{i}_{j}"
    for g, limit in sorted(max_gpus.items()):
        members = [ci for ci, c in enumerate(cands) if c.gpu == g]
        if not members:
            continue
        for t in range(n_t):
            terms = [cands[ci].gpus_per_replica * R[ci] for ci in members if ci in R]
            terms += [cands[ci].gpus_per_replica * v for (ci, tier, tt), v in Y.items() if tt == t and ci in members]
            prob += pulp.lpSum(terms) <= int(limit), f"avail_{g}_{t}"
    status = pulp.LpStatus[prob.solve(_solver(GAP_REL))]
    if status != "Optimal":
        return None
    val = lambda v: int(round(v.value() or 0))  # noqa: E731
    serving, running = {}, {}
    for ci, v in R.items():
        if val(v):
            serving[cands[ci].name, "reserved"] = running[cands[ci].name, "reserved"] = (val(v),) * n_t
    for (ci, tier, _), _v in X.items():
        key = (cands[ci].name, tier)
        if key in serving:
            continue
        xs = tuple(val(X[ci, tier, t]) for t in range(n_t))
        ys = tuple(math.ceil((Y[ci, tier, t].value() or 0) - 1e-6) for t in range(n_t))
        if any(xs) or any(ys):
            serving[key], running[key] = xs, ys
    cost = [0.0] * n_t
    by_name = {c.name: ci for ci, c in enumerate(cands)}
    for (name, tier), ys in running.items():
        rate = usd(by_name[name], tier)
        for t, y in enumerate(ys):
            cost[t] += rate * y * hours[t]
    return serving, running, tuple(cost)


def plan_day(profile: LoadProfile, candidates: list[DayCandidate], tiers: Mapping[str, PriceTiers] | None = None,
             scale_up_s: float = 300.0, min_replicas: int = 1, max_load: float = 1.0, cyclic: bool = True,
             max_gpus: Mapping[str, int] | None = None, max_replicas: int = 256, max_candidates: int = 4) -> DayPlan:
    """Cheapest replica schedule over the profile's intervals and the price tiers; raises
    :class:`DayInfeasible` when none serves it (availability, max_replicas), naming the interval."""
    if not candidates:
        raise DayInfeasible("no candidate meets the SLOs: there is nothing to schedule")
    if not (math.isfinite(scale_up_s) and scale_up_s >= 0):
        raise UserError(f"must be >= 0 s, got {scale_up_s!r}", key="day.scale_up_s", fix="e.g. 300")
    if scale_up_s >= profile.horizon_s:
        raise UserError(f"{scale_up_s:g} s is not shorter than the profile ({profile.horizon_s:g} s)",
                        key="day.scale_up_s", fix="give a longer profile or a shorter scale-up time")
    if not (isinstance(min_replicas, int) and min_replicas >= 0):
        raise UserError(f"must be an integer >= 0, got {min_replicas!r}", key="day.min_replicas", fix="e.g. 1")
    if not 0 < max_load <= 1:
        raise UserError(f"must be in (0, 1], got {max_load!r}", key="search.max_load", fix="e.g. 0.95")
    bad = [c.name for c in candidates if not (c.capacity_rps_per_replica > 0 and c.gpus_per_replica >= 1)]
    if bad:
        raise UserError(f"candidate(s) without SLO capacity: {', '.join(bad)}", key="day.candidates",
                        fix="pass only candidates that meet the SLOs (verdict ok)")
    tiers_used = _tiers_for(candidates, tiers or {})
    cands = _shortlist(candidates, tiers_used, max_candidates)
    avail = dict(max_gpus or {})
    args = (scale_up_s, min_replicas, max_load, cyclic, avail, max_replicas)
    day = _solve(profile, cands, tiers_used, TIERS, *args)
    if day is None:
        raise DayInfeasible(_why_infeasible(profile, cands, tiers_used, max_load, avail, max_replicas, min_replicas))
    # a static fleet is the same all day: one interval as long as the profile is the same program
    flat = LoadProfile((profile.t_start_s[0],), (profile.horizon_s,), (profile.peak_rps,), "static")
    static = _solve(flat, cands, tiers_used, TIERS, *args)
    static_od = _solve(flat, cands, tiers_used, ("on_demand",), *args) if any(
        t.on_demand_usd_per_gpu_hour is not None for t in tiers_used.values()) else None
    if static is None:  # the peak is served in the day plan, but not all day long at once
        raise DayInfeasible("the peak rate cannot be provisioned statically within availability")
    serving, running, icost = day
    if sum(icost) > sum(static[2]):
        # the static fleet is a valid schedule too: never report a day dearer than it (the MIP gap)
        hours = [d / 3600.0 for d in profile.duration_s]
        serving = {k: (max(v),) * len(hours) for k, v in static[0].items()}
        running = {k: (max(v),) * len(hours) for k, v in static[1].items()}
        by_name = {c.name: c for c in cands}
        icost = tuple(sum(by_name[n].gpus_per_replica * tiers_used[by_name[n].gpu].usd_per_gpu_hour(t) * v[0] * h
                          for (n, t), v in running.items()) for h in hours)
    if len(cands) < len(candidates):
        assumptions_short = [f"the {len(cands)} candidates cheapest per req/s of capacity (best tier) are scheduled, "
                             f"of {len(candidates)} given (max_candidates)"]
    else:
        assumptions_short = []
    fleet = {k: max(v) for k, v in static[1].items()}
    assumptions = [
        f"capacity per replica = the planner's SLO capacity x max load {max_load:g}",
        f"scale-up takes {scale_up_s:g} s: a replica is paid from {scale_up_s:g} s before the interval it serves; "
        "scale-down is immediate",
        "reserved replicas are paid for every hour of the profile" + (" (a day)" if abs(profile.horizon_s - 86400) < 1
                                                                      else f" ({profile.horizon_s / 3600:g} h)"),
        ("the profile repeats (the first interval's scale-up happens at the end of the previous day)" if cyclic
         else "the first interval's replicas are running at the start of the profile (no scale-up charged)"),
        f"at least {min_replicas} replica(s) serve every interval",
        f"the integer program stops within {GAP_REL:.0%} of the cheapest schedule (CBC relative gap); the day "
        "is never reported dearer than the static plan, a valid schedule too",
    ] + assumptions_short
    if any(t.spot_usd_per_gpu_hour is not None for t in tiers_used.values()):
        assumptions.append("spot: a replica interrupted during an interval is lost for the rest of it (paid, replaced "
                           "in the next); expected spot capacity = (1 - interruption rate) x replicas, and the rate is "
                           "met by expected capacity, not in every interruption outcome")
    return DayPlan(profile, cands, tiers_used, serving, running, sum(icost), icost, sum(static[2]), fleet,
                   sum(static_od[2]) if static_od else math.nan, scale_up_s, min_replicas, max_load, cyclic, assumptions)


def _shortlist(candidates: list[DayCandidate], tiers: dict[str, PriceTiers], limit: int) -> list[DayCandidate]:
    """The ``limit`` candidates cheapest per req/s of expected capacity in their cheapest tier,
    at least the best one of each GPU type (availability may rule a type out). Keeps the ILP small."""
    def usd_per_rps(c: DayCandidate) -> float:
        t = tiers[c.gpu]
        return min(c.gpus_per_replica * t.usd_per_gpu_hour(k) / (c.capacity_rps_per_replica * t.capacity_factor(k))
                   for k in t.tiers())
    ranked = sorted(candidates, key=lambda c: (usd_per_rps(c), c.name))
    keep = {next(c for c in ranked if c.gpu == g).name for g in {c.gpu for c in ranked}}
    keep |= {c.name for c in ranked[:max(limit, 1)]}
    return sorted((c for c in ranked if c.name in keep), key=lambda c: (c.gpu, c.name))


def _why_infeasible(p: LoadProfile, cands: list[DayCandidate], tiers: dict[str, PriceTiers], max_load: float,
                    avail: Mapping[str, int], max_replicas: int, min_replicas: int) -> str:
    """Name the first interval whose rate exceeds what the GPUs available can carry."""
    best: dict[str, float] = {}
    for c in cands:
        t = tiers[c.gpu]
        f = max(t.capacity_factor(k) for k in t.tiers())
        n = min(max_replicas, avail[c.gpu] // c.gpus_per_replica) if c.gpu in avail else max_replicas
        best[c.gpu] = max(best.get(c.gpu, 0.0), n * f * max_load * c.capacity_rps_per_replica)
    top = sum(best.values())
    limits = ", ".join(f"{g} <= {v} GPUs" for g, v in sorted(avail.items())) or f"max_replicas {max_replicas}"
    for i, r in enumerate(p.rate_rps):
        if r > top:
            return (f"interval {i} (t_start_s={p.t_start_s[i]:g}) needs {r:g} req/s but the GPUs available "
                    f"({limits}) carry at most about {top:.4g} req/s within the SLOs; raise availability or lower the peak")
    return (f"no schedule serves the profile within {limits} with min_replicas {min_replicas} and the scale-up "
            "lead (replicas starting for the next interval also hold GPUs); raise availability")

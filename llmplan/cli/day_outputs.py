"""The ``day`` block of `plan` (``day.profile=...``): replicas per interval over price tiers
(optimizer/day_plan.py) and, unless ``day.attainment.enabled=false``, the SLO attainment of
the autoscaled schedule and of static provisioning for the peak, simulated
(optimizer/day_attainment.py). docs/AUTOSCALING.md."""

from __future__ import annotations

from pathlib import Path

from llmplan.optimizer.mode_select import split_chosen
from llmplan.progress import stage_progress, step


#: more intervals than this make the day ILP slow (CBC: 24 hourly 0.4 s, 96 quarter-hours 5 s,
#: benchmarks/bench_day_plan.py); such a profile is refused with the re-binning key to use
MAX_INTERVALS = 288


def read_profile(app):
    """``day.profile`` (a rate table or a trace CSV, or a shipped name) with ``day.interval_s``;
    a profile of more than :data:`MAX_INTERVALS` intervals is refused (never re-binned silently)."""
    from llmplan.errors import UserError
    from llmplan.optimizer import day_plan

    prof = day_plan.read_profile_csv(day_plan.resolve_profile(str(app.day.profile)), key="day.profile",
                                     interval_s=app.day.interval_s)
    if len(prof.rate_rps) > MAX_INTERVALS:
        raise UserError(f"{len(prof.rate_rps)} intervals: the day's integer program grows too slow beyond "
                        f"{MAX_INTERVALS} (e.g. per-minute rates over a day)", key="day.interval_s",
                        fix="re-bin the profile, e.g. day.interval_s=900 (15-minute intervals)")
    return prof


def check_day_inputs(app) -> None:
    """``day.*`` checked before any planning (not after the plan has been computed and written):
    the profile read, the scale-up time, the replica floor, the attainment settings; and a
    ``day.*`` setting without ``day.profile`` refused, since nothing would read it."""
    import dataclasses
    import math

    from llmplan.cli.config_schema import DayConfig
    from llmplan.errors import UserError
    from llmplan.optimizer import day_attainment

    d = app.day
    if not d.profile:
        default = DayConfig()
        for f in dataclasses.fields(DayConfig):
            if f.name != "profile" and getattr(d, f.name) != getattr(default, f.name):
                raise UserError(f"day.{f.name} is set but day.profile is not: no day plan would read it",
                                key=f"day.{f.name}", fix="add day.profile=diurnal_24h (or a CSV), or drop "
                                                          f"day.{f.name}")
        return
    day_attainment.check_settings(attainment_settings(app))
    profile = read_profile(app)
    scale_up_s = d.scale_up_s
    if not (isinstance(scale_up_s, (int, float)) and math.isfinite(scale_up_s) and scale_up_s >= 0):
        raise UserError(f"must be >= 0 s, got {scale_up_s!r}", key="day.scale_up_s", fix="e.g. 300")
    if scale_up_s >= profile.horizon_s:
        raise UserError(f"{scale_up_s:g} s is not shorter than the profile ({profile.horizon_s:g} s)",
                        key="day.scale_up_s", fix="give a longer profile or a shorter scale-up time")
    if not (isinstance(d.min_replicas, int) and not isinstance(d.min_replicas, bool) and d.min_replicas >= 0):
        raise UserError(f"must be an integer >= 0, got {d.min_replicas!r}", key="day.min_replicas", fix="e.g. 1")


def attainment_settings(app):
    from llmplan.optimizer.day_attainment import AttainmentSettings

    a = app.day.attainment
    return AttainmentSettings(requests_per_phase=a.requests_per_phase, lead=str(a.lead), seed=int(app.seed),
                              max_intervals=a.max_intervals)


def day_block(res, app, out: Path, png: bool, model=None) -> dict | None:
    """Replicas per interval over ``day.profile`` (raises day_plan.DayInfeasible: exit 3), with
    the simulated attainment when ``model`` is given and ``day.attainment.enabled``."""
    from llmplan.optimizer import day_attainment, day_plan, price_tiers

    if not app.day.profile:
        return None
    settings = attainment_settings(app)
    day_attainment.check_settings(settings)
    profile = read_profile(app)
    ok = [e for e in res.evaluations if e.verdict == "ok"]
    cands = day_plan.candidates_from_evaluations(ok)
    defaults = {c.gpu: c.usd_per_gpu_hour for c in cands}
    tiers = price_tiers.from_mapping(dict(app.day.price_tiers), defaults, key="day.price_tiers")
    simulate = bool(app.day.attainment.enabled) and model is not None
    with stage_progress(None, app.output.progress) as update:
        with step(update, "day ILP"):
            day = day_plan.plan_day(profile, cands, tiers, scale_up_s=float(app.day.scale_up_s),
                                    min_replicas=int(app.day.min_replicas), max_load=float(app.search.max_load),
                                    max_gpus=dict(app.gpu.max_gpus))
        attainment = (day_attainment.for_plan(day, ok, app.engine, model, app.workload, res.slos, settings, update)
                      if simulate else None)
    day.frame().to_csv(out / "day.csv", index=False, float_format="%.6g")
    files = ["day.csv"]
    if png:
        day.plot(out / "day.png")
        files.append("day.png")
    block = {"profile": Path(app.day.profile).name, "profile_source": profile.source, "files": files, **day.as_dict()}
    if profile.source != "table":
        block["assumptions"].append(f"load profile: {profile.source} ({len(profile.rate_rps)} intervals)")
    block["attainment"] = attainment
    # the day ILP schedules aggregated replicas per interval; a chosen split's pools are not
    # planned per interval, so the block says which deployment it describes (never the split silently)
    split = split_chosen(res)
    block["mode"] = "aggregated"
    block["describes"] = "the aggregated alternative" if split else "the chosen deployment"
    if split:
        xpyd = (res.disaggregated or {}).get("xpyd", "xPyD")
        block["assumptions"].append(f"the chosen deployment is disaggregated ({xpyd}); day plans schedule aggregated "
                                    "replicas per interval only, so this day plans the aggregated alternative "
                                    "(per-interval prefill/decode pools are not planned)")
    return block


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def render_lines(day: dict) -> list[str]:
    """Console lines of the day block (cost, then simulated attainment)."""
    alt = " of the aggregated alternative (day plans are aggregated only; the chosen split is not planned " \
        "per interval)" if day.get("describes") == "the aggregated alternative" else ""
    lines = [f"Day{alt} ({day['profile']}, {day['intervals']} intervals, peak {day['peak_rps']:g} req/s): "
             f"${day['cost_usd']:,.2f} with autoscaling vs ${day['static_peak_cost_usd']:,.2f} static for "
             f"the peak ({day['saving_pct']:.0f}% saved); replicas per interval in day.csv"]
    att = day.get("attainment")
    if att:
        for key, name in (("day", "autoscaled"), ("static", "static peak")):
            a = att[key]
            per = ", ".join(f"{lab.split(' <=')[0]} {_pct(v)}" for lab, v in a["share_within"].items())
            lines.append(f"  simulated SLO attainment, {name}: {per} of requests within target, "
                         f"{_pct(a['share_all_targets'])} within all; targets held in {a['intervals_met']} of "
                         f"{a['intervals_simulated']} intervals" +
                         (f" ({a['intervals_overloaded']} overloaded: the queue grows)"
                          if a["intervals_overloaded"] else "") +
                         (f"; {a['spot_interruptions']} spot interruption(s)" if a["spot_interruptions"] else ""))
        lines.append(f"  (lead {att['lead']}, seed {att['seed']}, {att['simulations']} simulations; model in "
                     "plan.json day.attainment.model)")
    return lines

"""The ``report.html`` sections for plan.json's newer blocks (optimizer/html_report.py puts
them on the page): the disaggregated xPyD alternative and its launch files, speculation per
deployment, the fleet's settled rate, the day's simulated SLO attainment, the KV budget and
the energy model. Each reads only the plan.json dict and returns '' when its block is absent.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping

from llmplan.optimizer.html_parts import deploy_label, esc, fmt, judge, kpis, pct, table, usd, verdict

HOURS_PER_MONTH = 730.0  # 8760 h / 12, the convention cloud price pages use for a month


def speculation_label(spec: Mapping | None) -> str:
    """``eagle3 k=3, 2.41 tokens/step`` or ``off`` (plan.json ``speculation`` of a pool)."""
    if not spec:
        return "off"
    parts = [f"{spec.get('method', '?')} k={spec.get('k', '?')}"]
    if spec.get("topk") not in (None, 1):
        parts.append(f"topk {spec['topk']}")
    if spec.get("draft_model"):
        parts.append(f"draft {spec['draft_model']}")
    if isinstance(spec.get("tokens_per_step"), (int, float)):
        parts.append(f"{spec['tokens_per_step']:.2f} tokens/step")
    return ", ".join(parts)


def speculation_table(plan: Mapping) -> str:
    """Per deployment: speculation off, or its method, k, acceptance rates and their source."""
    deps = plan.get("deployments") or []
    if not deps:
        return ""
    rows = []
    for d in deps:
        s = d.get("speculation")
        rows.append([esc(deploy_label(d)),
                     esc(speculation_label(s)),
                     esc(", ".join(f"{x:.2f}" for x in (s or {}).get("acceptance_rates") or []) or "-"),
                     esc((s or {}).get("acceptance_source") or "-")])
    return ("<h3>Speculative decoding</h3>"
            + table(["deployment", "speculation", "acceptance per draft position", "acceptance source"], rows,
                    left=(0, 1, 2, 3), table_id="speculation"))


def fleet(plan: Mapping) -> str:
    """Fleet mode (``fleet.gpus``): the maximum rate the GPUs on hand sustain within the SLOs."""
    fl = plan.get("fleet")
    if not isinstance(fl, Mapping) or not fl:
        return ""
    gpus = ", ".join(f"{v}x {k}" for k, v in (fl.get("gpus") or {}).items())
    used = ", ".join(f"{v}x {k}" for k, v in (fl.get("gpus_used") or {}).items())
    items = [("maximum rate within the SLOs", fmt(fl.get("max_rate_rps"), 2, "req/s")),
             ("per-replica capacities sum to (ILP)", fmt(fl.get("ilp_rate_rps"), 2, "req/s")),
             ("max load per replica", fmt(fl.get("max_load"), 2))]
    out = [f"<section id='fleet'><h2>Maximum rate of the fleet</h2><p>GPUs on hand: <b>{esc(gpus)}</b>; used: "
           f"{esc(used or '-')}</p>", kpis(items), f"<p>{esc(fl.get('rate_basis', ''))}</p>"]
    if fl.get("simulation_meets_slos") is False:
        out.append("<div class='bad'>The whole-deployment simulation at this rate misses an SLO: read the rate as an "
                   "upper bound.</div>")
    runs = fl.get("steady_state_runs") or []
    if runs:
        out.append("<details><summary>Steady-state settling runs</summary>"
                   + table(["rate req/s", "SLOs met"], [[fmt(r.get("rate_rps"), 3), verdict(r.get("met"))] for r in runs])
                   + "</details>")
    return "".join(out) + "</section>"


def disaggregated(plan: Mapping) -> str:
    """plan.json ``disaggregated``: the xPyD alternative, its pools, cost and simulated targets."""
    dis = plan.get("disaggregated")
    if not isinstance(dis, Mapping) or not dis.get("pools"):
        return ""
    usd_h = dis.get("total_usd_per_hour")
    agg_usd_h = ((plan.get("aggregated") or {}) if plan.get("mode") == "disagg" else plan).get("total_usd_per_hour")
    delta = (f"{(usd_h / agg_usd_h - 1) * 100:+.0f}%" if isinstance(usd_h, (int, float))
             and isinstance(agg_usd_h, (int, float)) and agg_usd_h else "-")
    chosen = plan.get("mode") == "disagg" or (plan.get("mode") is None and dis.get("recommended"))
    title = "Chosen deployment (disaggregated)" if chosen else "Disaggregated alternative"
    out = [f"<section id='disaggregated'><h2>{title}: {esc(dis.get('xpyd', ''))}</h2>", mode_table(plan)]
    if chosen:
        met = (dis.get("simulated") or {}).get("slo_met")
        sim_txt = {True: "meets the SLOs in simulation", False: "MISSES an SLO in simulation"}.get(met, "is not simulated")
        out.append(f"<div class='warn'><b>Chosen:</b> this prefill/decode split is the cheapest mode meeting the SLOs "
                   f"({esc(delta)} against the aggregated deployment) and {sim_txt}; <i>The answer</i> above describes "
                   "it, the aggregated deployment is the alternative (this split's launch files are under <i>Launch "
                   "artifacts</i>).</div>")
    out.append(kpis([("per hour", usd(usd_h, 2, "/h")),
                     ("per month (730 h)", usd(usd_h * HOURS_PER_MONTH if isinstance(usd_h, (int, float)) else None, 0,
                                               "/month")),
                     ("GPUs", fmt(dis.get("total_gpus"), 0)), ("vs the aggregated answer", esc(delta)),
                     ("KV transfer per request", fmt(dis.get("kv_transfer_ms"), 2, "ms")),
                     ("prefill-to-decode handoff", fmt(dis.get("handoff_ms"), 0, "ms"))]))
    rows = [[esc(p.get("role", "")), esc(p.get("gpu", "")), fmt(p.get("workers"), 0), fmt(p.get("gpus_per_worker"), 0),
             f"{esc(p.get('tp', 1))}/{esc(p.get('pp', 1))}/{esc(p.get('ep', 1))}",
             esc(f"{p.get('precision', '')}/{p.get('kv_cache_dtype', '')}"), fmt(p.get("max_num_seqs"), 0),
             usd(p.get("usd_per_hour"), 2), fmt(p.get("capacity_rps_per_worker"), 2),
             fmt(p.get("ttft_ms") if p.get("role") == "prefill" else p.get("tpot_ms"), 1, "ms")]
            for p in dis["pools"]]
    out.append(table(["role", "GPU", "workers", "GPUs/worker", "TP/PP/EP", "weights/kv", "max batch", "$/h",
                      "capacity req/s per worker", "sized at TTFT (prefill) / TPOT (decode)"], rows, left=(0, 1, 5),
                     table_id="disagg-pools"))
    out.append(f"<p>KV link: {esc(dis.get('kv_link', '-'))}; speculation: {esc(speculation_label(dis.get('speculation')))}; "
               f"source: {esc(dis.get('source', ''))}</p>")
    sim = dis.get("simulated") or {}
    targets = sim.get("targets") or {}
    if targets:
        met, bind = judge({k: t.get("simulated_ms") for k, t in targets.items()},
                          {k: t.get("limit_ms") for k, t in targets.items()})
        probs = ((dis.get("risk") or {}).get("pools") or [{}])[0].get("probability") or {}
        trows = [[esc(k) + (" <b>(binding)</b>" if k == bind else ""), fmt(t.get("limit_ms"), 1, "ms"),
                  fmt(t.get("simulated_ms"), 1, "ms"), verdict(met.get(k))]
                 + ([fmt(100 * probs[k], 1, "%") if isinstance(probs.get(k), (int, float)) else "-"] if probs else [])
                 for k, t in targets.items()]
        out.append(f"<h3>Simulated ({fmt(sim.get('requests'), 0)} requests; {esc(sim.get('workload', ''))})</h3>"
                   + table(["target", "limit", "simulated", ""] + (["P(met)"] if probs else []), trows,
                           table_id="disagg-targets")
                   + (f"<p class='muted'>mean KV transfer {fmt(sim.get('kv_transfer_ms_mean'), 2, 'ms')}"
                      + ("; <b>overloaded</b>" if sim.get("overloaded") else "") + "</p>"))
    if dis.get("simulate_with"):
        out.append("<p>Re-simulate it:</p><pre>" + esc(dis["simulate_with"]) + "</pre>")
    out += [f"<p class='muted'>note: {esc(n)}</p>" for n in dis.get("notes") or []]
    return "".join(out) + "</section>"


def chosen_split(plan: Mapping) -> str:
    """The answer's head when the plan chose the disaggregated split (plan.json ``chosen_deployment``):
    its cost and pools; the answer section's figures that follow are the aggregated alternative."""
    ch = plan.get("chosen_deployment")
    if not isinstance(ch, Mapping) or ch.get("mode") != "disaggregated":
        return ""
    usd_h = ch.get("total_usd_per_hour")
    pools = "; ".join(f"{esc(p.get('role', ''))}: {fmt(p.get('workers'), 0)} x {esc(p.get('gpu', ''))} "
                      f"TP{esc(p.get('tp', 1))}/PP{esc(p.get('pp', 1))}/EP{esc(p.get('ep', 1))} {esc(p.get('precision', ''))}"
                      for p in ch.get("pools") or [])
    return (f"<p><b>Chosen: disaggregated {esc(ch.get('xpyd', ''))}</b> ({pools}); details under <i>Chosen deployment "
            "(disaggregated)</i>.</p>"
            + kpis([("per hour", usd(usd_h, 2, "/h")),
                    ("per month (730 h)", usd(usd_h * HOURS_PER_MONTH if isinstance(usd_h, (int, float)) else None, 0,
                                              "/month")),
                    ("GPUs", fmt(ch.get("total_gpus"), 0))])
            + "<p class='muted'>The figures below (pools, targets with P(met), headroom, error bands, energy, KV "
              "budget) describe this split; the aggregated alternative follows under <i>Aggregated alternative</i>."
              "</p>")


def aggregated_alternative(plan: Mapping) -> str:
    """plan.json ``aggregated`` (present when the split is chosen): the aggregated selection's cost,
    pools, P(every SLO met) and energy, as the alternative not chosen."""
    agg = plan.get("aggregated")
    if not isinstance(agg, Mapping):
        return ""
    out = ["<section id='aggregated'><h2>Aggregated alternative (not chosen)</h2>"]
    if not agg.get("feasible"):
        return "".join(out) + "<p>No aggregated deployment meets the SLOs.</p></section>"
    usd_h, e = agg.get("total_usd_per_hour"), agg.get("energy") or {}
    p_all = agg.get("every_slo_probability")
    out.append(kpis([("per hour", usd(usd_h, 2, "/h")), ("GPUs", fmt(agg.get("total_gpus"), 0)),
                     ("per million output tokens", usd(agg.get("usd_per_million_output_tokens"), 3)),
                     ("P(every SLO met)", fmt(100 * p_all, 1, "%") if isinstance(p_all, (int, float)) else "-"),
                     ("energy per output token", fmt(e.get("joules_per_output_token"), 3, "J"))]))
    rows = []
    for d in agg.get("deployments") or []:
        h = d.get("headroom") or {}
        rows.append([esc(deploy_label(d)), usd(d.get("usd_per_hour"), 2), fmt(d.get("load_rps_per_replica"), 2),
                     fmt(d.get("capacity_rps_per_replica"), 2), fmt(h.get("headroom_pct"), 0, "%"),
                     fmt(d.get("ttft_ms"), 1, "ms"), fmt(d.get("tpot_ms"), 1, "ms")])
    out.append(table(["deployment", "$/h", "load req/s per replica", "capacity req/s per replica", "free",
                      "TTFT (binding)", "TPOT (binding)"], rows, table_id="aggregated-pools"))
    return "".join(out) + "</section>"


def mode_table(plan: Mapping) -> str:
    """plan.json ``mode_selection``: aggregated against disaggregated, which one the plan chose."""
    rows = plan.get("mode_selection") or []
    if not rows:
        return ""
    trows = [[esc(r.get("label", "")), esc(r.get("pools") if r.get("usd_per_hour") is not None else r.get("why", "")),
              fmt(r.get("gpus"), 0), usd(r.get("usd_per_hour"), 2),
              esc(("met (" + str(r.get("basis", "")) + ")" if r.get("meets_slo") else "missed")
                  if r.get("usd_per_hour") is not None else "-"),
              ("yes" if r.get("chosen") else "no") + ("" if r.get("allowed", True) else " (not allowed)")]
             for r in rows]
    heads = ["mode", "pools", "GPUs", "$/h", "SLOs", "chosen"]
    if any(isinstance(r.get("every_slo_probability"), (int, float)) for r in rows):  # each mode's P(every SLO met)
        heads.insert(5, "P(every SLO met)")
        for tr, r in zip(trows, rows):
            p = r.get("every_slo_probability")
            tr.insert(5, fmt(100 * p, 1, "%") if isinstance(p, (int, float)) else "-")
    return ("<h3>Serving mode: the cheapest mode meeting the SLOs is chosen</h3>"
            + table(heads, trows, left=(0, 1, 4, len(heads) - 1), table_id="modes"))


def disagg_artifacts(plan: Mapping, read_manifest) -> str:
    """plan.json ``deploy.disaggregated``: per-role launch commands, the router, the benchmark,
    the manifest (``read_manifest(rel_path) -> text | None``) and the files."""
    da = (plan.get("deploy") or {}).get("disaggregated")
    if not isinstance(da, Mapping) or not da:
        return ""
    out = [f"<h3 id='disagg-artifacts'>Disaggregated alternative {esc(da.get('xpyd', ''))} "
           f"({'chosen' if da.get('recommended') else 'not chosen'}), under {esc(da.get('dir', ''))}/</h3>"]
    for p in da.get("pools") or []:
        out.append(f"<p><b>{esc(p.get('role', ''))}</b> pool {esc(p.get('name', ''))}: {fmt(p.get('workers'), 0)} "
                   f"worker(s) x {fmt(p.get('gpus_per_worker'), 0)} {esc(p.get('gpu', ''))}</p>")
        if p.get("launch_argv"):
            out.append("<pre>" + esc(shlex.join(map(str, p["launch_argv"]))) + "</pre>")
        out += [f"<p class='muted'>note: {esc(n)}</p>" for n in p.get("notes") or []]
    if da.get("router_argv"):
        out.append(f"<p>Router {esc(da.get('router', ''))} (clients talk to it):</p><pre>"
                   + esc(shlex.join(map(str, da["router_argv"]))) + "</pre>")
    for f in da.get("files") or []:
        text = read_manifest(f) if str(f).endswith(".yaml") else None
        if text:
            out.append(f"<details><summary>Kubernetes manifest {esc(f)} ({text.count(chr(10)) + 1} lines)</summary><pre>"
                       + esc(text) + "</pre></details>")
    if da.get("benchmark_argv"):
        out.append("<p>Benchmark through the router:</p><pre>" + esc(shlex.join(map(str, da["benchmark_argv"]))) + "</pre>")
    if da.get("files"):
        out.append("<p class='muted'>files: " + esc(", ".join(da["files"])) + "</p>")
    return "".join(out)


def day_attainment(day: Mapping) -> str:
    """``day.attainment``: simulated SLO attainment over the profile, autoscaled vs static for
    the peak: whole-day figures, then a per-interval table."""
    att = day.get("attainment")
    if not isinstance(att, Mapping) or not att:
        return ""
    runs = [(name, att.get(name)) for name in ("day", "static") if isinstance(att.get(name), Mapping)]
    if not runs:
        return ""
    labels = list(dict.fromkeys(k for _, r in runs for k in (r.get("share_within") or {})))
    head = ["plan"] + [f"{lab}: share of requests within" for lab in labels] + [
        "within all targets", "intervals meeting every target", "overloaded intervals", "spot interruptions", "simulations"]
    rows = [[esc("autoscaled" if name == "day" else "static for the peak")]
            + [pct((r.get("share_within") or {}).get(lab)) for lab in labels]
            + [pct(r.get("share_all_targets")), f"{fmt(r.get('intervals_met'), 0)} of {fmt(r.get('intervals_simulated'), 0)}",
               fmt(r.get("intervals_overloaded"), 0), fmt(r.get("spot_interruptions"), 0), fmt(r.get("simulations"), 0)]
            for name, r in runs]
    out = [f"<h3>Simulated SLO attainment (lead {esc(att.get('lead', '?'))}, seed {esc(att.get('seed', '?'))}, "
           f"&ge; {fmt(att.get('requests_per_phase'), 0)} requests per phase)</h3>",
           table(head, rows, table_id="day-attainment")]
    by = {name: {iv.get("interval"): iv for iv in r.get("intervals") or []} for name, r in runs}
    keys = list(dict.fromkeys(i for name, _ in runs for i in by[name]))
    ihead = ["interval", "start h", "req/s"]
    for name, _ in runs:
        tag = "autoscaled" if name == "day" else "static"
        ihead += [f"{tag} replicas"] + [f"{tag} {lab}" for lab in labels] + [f"{tag} all", f"{tag} met"]
    irows = []
    for i in keys:
        first = next(by[name][i] for name, _ in runs if i in by[name])
        start = first.get("t_start_s")
        row = [fmt(i, 0), fmt(start / 3600 if isinstance(start, (int, float)) else None, 2), fmt(first.get("rate_rps"), 2)]
        for name, _ in runs:
            iv = by[name].get(i) or {}
            row += [esc("+".join(str(x) for x in iv.get("replicas") or []) or "-")]
            row += [pct(iv.get(f"share_within[{lab}]")) for lab in labels]
            row += [pct(iv.get("share_all_targets")),
                    verdict(iv.get("targets_met")) + (" <b>overloaded</b>" if iv.get("overloaded") else "")
                    if iv else "-"]
        irows.append(row)
    out.append(f"<details><summary>Attainment per interval ({len(irows)} intervals)</summary>"
               + table(ihead, irows, table_id="day-attainment-intervals") + "</details>")
    model = att.get("model") or []
    if model:
        out.append("<p class='muted'>Attainment model:</p><ul class='muted'>"
                   + "".join(f"<li>{esc(m)}</li>" for m in model) + "</ul>")
    return "".join(out)


def day_prices(day: Mapping) -> str:
    """The price tiers the day plan used, with their sources, and the static fleet for the peak."""
    out = []
    tiers = day.get("price_tiers") or []
    if tiers:
        out.append("<h3>Price tiers of the day plan</h3>" + table(
            ["GPU", "on-demand $/GPU-h", "reserved $/GPU-h", "spot $/GPU-h", "spot interruptions per interval", "source"],
            [[esc(t.get("gpu", "")), usd(t.get("on_demand_usd_per_gpu_hour"), 3), usd(t.get("reserved_usd_per_gpu_hour"), 3),
              usd(t.get("spot_usd_per_gpu_hour"), 3), fmt(t.get("spot_interruption_rate"), 3), esc(t.get("source", ""))]
             for t in tiers], left=(0, 5), table_id="day-prices"))
    static = day.get("static_fleet") or []
    if static:
        out.append("<p>Static provisioning for the peak: " + esc(", ".join(
            f"{s.get('replicas')}x {s.get('candidate')} ({s.get('tier')})" for s in static)) + "</p>")
    return "".join(out)


def kv_budget(plan: Mapping) -> str:
    """plan.json ``kv_budget``: the engine's memory split per chosen pool and its assumptions."""
    kv = plan.get("kv_budget") or []
    if not kv:
        return ""
    rows = [[esc(b.get("pool", "")), esc(b.get("engine", "")),
             esc(f"{b.get('fraction_key', '')}={b.get('fraction', '')}")
             + (" <span class='muted'>(engine default)</span>" if b.get("fraction_is_engine_default") else ""),
             fmt(b.get("device_memory_gib"), 1), fmt(b.get("budget_gib"), 1), fmt(b.get("weights_gib"), 1),
             fmt(b.get("activation_gib"), 2), fmt(b.get("cuda_graph_gib"), 2), fmt(b.get("runtime_gib"), 2),
             fmt(b.get("extra_gib"), 2), fmt(b.get("kv_gib"), 1), fmt(b.get("kv_bytes_per_token_per_gpu"), 0),
             fmt(b.get("block_size"), 0), fmt(b.get("kv_capacity_tokens_per_replica"), 0)] for b in kv]
    out = ["<h3>KV cache budget (per GPU, GiB)</h3>",
           table(["pool", "engine", "memory fraction", "device", "budget", "weights", "activations", "CUDA graphs",
                  "runtime", "extra", "KV", "KV B/token/GPU", "block", "KV tokens per replica"], rows, left=(0, 1, 2),
                 table_id="kv-budget")]
    for b in kv:
        notes = ([f"fraction: {b['fraction_source']}"] if b.get("fraction_source") else []) + list(b.get("assumptions") or [])
        if notes:
            out.append(f"<ul class='muted'>" + "".join(f"<li>{esc(b.get('pool', ''))}: {esc(n)}</li>" for n in notes)
                       + "</ul>")
    return "".join(out)


def energy(plan: Mapping) -> str:
    """plan.json ``energy``: totals, the power per pool, and the power model with its sources."""
    e = plan.get("energy")
    if not e:
        return ""
    items = [("GPU power", fmt(e.get("gpu_power_w"), 0, "W")),
             (f"facility power (PUE {e.get('pue', '?')})", fmt(e.get("facility_power_w"), 0, "W")),
             ("energy per output token", fmt(e.get("joules_per_output_token"), 3, "J")),
             ("output tokens/s", fmt(e.get("output_tokens_per_s"), 0)),
             ("electricity", usd(e.get("electricity_usd_per_hour"), 3, "/h")),
             ("GPUs + electricity", usd(e.get("total_usd_per_hour_with_electricity"), 2, "/h"))]
    what = f" of the chosen split {esc(e['xpyd'])} (per pool)" if e.get("mode") == "disaggregated" else ""
    out = [f"<section id='energy'><h2>Energy{what}</h2>", kpis(items)]
    pools = e.get("pools") or []
    if pools:
        out.append(table(["GPU", "replicas", "GPUs", "TDP W", "compute utilisation", "memory utilisation",
                          "W per GPU", "pool W", "output tokens/s", "note"],
                         [[esc(f"{p['role']} {p.get('gpu', '')}" if p.get("role") else p.get("gpu", "")),
                           fmt(p.get("replicas"), 0), fmt(p.get("gpus"), 0), fmt(p.get("tdp_w"), 0),
                           pct(p.get("utilization_compute")), pct(p.get("utilization_memory")),
                           fmt(p.get("power_w_per_gpu"), 1), fmt(p.get("power_w"), 0), fmt(p.get("output_tokens_per_s"), 0),
                           esc(p.get("note") or "")] for p in pools], left=(0, 9), table_id="energy-pools"))
    pm = e.get("power_model") or {}
    if pm:
        out.append(f"<p class='muted'>Power model (docs/ENERGY.md): idle fraction {fmt(pm.get('idle_fraction'), 2)}, "
                   f"compute weight {fmt(pm.get('compute_weight'), 2)}, memory weight {fmt(pm.get('memory_weight'), 2)}"
                   "</p><ul class='muted'>"
                   + "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in (pm.get("sources") or {}).items()) + "</ul>")
    out += [f"<p class='warn'>{esc(u)}</p>" for u in e.get("unknown") or []]
    return "".join(out) + "</section>"


def _ticks(hi: float, n: int = 5) -> list[float]:
    """Round axis ticks from 0 to about ``hi``."""
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(hi / step) + 1)]


def latency_summary_svg(sim: Mapping, slo: list, width: int = 560) -> str:
    """Inline SVG: per metric, the simulated mean/p50/p90/p99 latency (bars) of the whole
    deployment with each SLO limit of that metric (dashed red line); '' without the numbers.
    ``sim``: plan.json ``verification.deployment_simulation``; ``slo``: plan.json ``slo``."""
    panels = []
    for metric in ("ttft", "tpot"):
        stats = {k: v for k, v in (sim.get(f"{metric}_ms") or {}).items()
                 if isinstance(v, (int, float)) and v == v and v >= 0}
        if not stats:
            continue
        lims = [(s, float(s["limit_ms"])) for s in slo if s.get("metric") == metric
                and isinstance(s.get("limit_ms"), (int, float))]
        hi = 1.12 * max(list(stats.values()) + [lim for _, lim in lims] + [1e-9])
        left, right, top, bar_h = 60, 20, 50, 18
        plot_w = width - left - right
        height = top + bar_h * len(stats) + 8 * (len(stats) - 1) + 44

        def x(v: float) -> float:
            return left + plot_w * v / hi

        measured = (sim.get("window") or {}).get("requests_measured")
        count = (f"{measured} measured of {sim.get('requests', '?')} simulated requests" if measured
                 else f"{sim.get('requests', '?')} requests")
        parts = [f"<text x='8' y='14' font-size='13' font-weight='600'>{esc(metric.upper())}, ms "
                 f"({esc(count)})</text>"]
        y = top
        for k, v in stats.items():
            target = next((lim for s, lim in lims if (s.get("stat") == "mean") == (k == "mean")
                           and (k == "mean" or f"p{float(s.get('percentile') or 0):g}" == k)), None)
            color = "#4c72b0" if target is None else ("#1a7f37" if v <= target else "#b42318")
            parts.append(f"<rect x='{left}' y='{y}' width='{max(0.5, x(v) - left):.1f}' height='{bar_h}' fill='{color}'>"
                         f"<title>{esc(k)} {v:.4g} ms</title></rect>")
            parts.append(f"<text x='{left - 6}' y='{y + 13}' font-size='12' text-anchor='end'>{esc(k)}</text>")
            parts.append(f"<text x='{x(v) + 4:.1f}' y='{y + 13}' font-size='11'>{v:,.1f}</text>")
            y += bar_h + 8
        axis_y = y + 2
        parts.append(f"<line x1='{left}' y1='{axis_y}' x2='{left + plot_w}' y2='{axis_y}' stroke='#5b6475'/>")
        for tv in _ticks(hi):
            parts.append(f"<line x1='{x(tv):.1f}' y1='{axis_y}' x2='{x(tv):.1f}' y2='{axis_y + 4}' stroke='#5b6475'/>"
                         f"<text x='{x(tv):.1f}' y='{axis_y + 16}' font-size='10' text-anchor='middle'>{tv:,.4g}</text>")
        for j, (s, lim) in enumerate(lims):
            stat = "mean" if s.get("stat") == "mean" else f"p{float(s.get('percentile') or 90):g}"
            parts.append(f"<line x1='{x(lim):.1f}' y1='{top - 10}' x2='{x(lim):.1f}' y2='{axis_y}' stroke='#b42318' "
                         f"stroke-dasharray='5,3' stroke-width='1.5'/><text x='{x(lim) + (-4 if x(lim) > 220 else 4):.1f}' "
                         f"y='{top - 14 - 12 * (j % 2)}' font-size='11' fill='#b42318' "
                         f"text-anchor='{'end' if x(lim) > 220 else 'start'}'>SLO {esc(stat)} &lt;= {lim:,.4g} ms</text>")
        panels.append(f"<svg role='img' width='{width}' height='{height}' "
                      f"viewBox='0 0 {width} {height}' font-family='system-ui,sans-serif'>" + "".join(parts) + "</svg>")
    return "".join(panels)

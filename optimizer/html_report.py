"""``report.html``: one self-contained page a team can read offline (docs/REPORT.md).

Built from the ``plan.json`` dict (``optimizer/report.py``) plus optional images and
per-request latencies. Inline CSS, images embedded as base64 PNG (or inline SVG), no
script, no external URL. Every value from the dict is HTML-escaped. Optional blocks that
the dict lacks (energy, deploy, day, probabilities, assumptions) are left out, never faked.

Sections: the answer, alternatives, frontier (``pareto.png``), latency distributions with
the SLO lines, error bands and calibration tiers, assumptions (engine, link topology, prices
and their sources), launch artifacts, and, when present, energy and the day of traffic.
"""

from __future__ import annotations

import base64
import io
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from llmplan.optimizer import html_sections
from llmplan.optimizer.html_parts import deploy_label, esc, fmt, judge, kpis, table, usd, verdict

HOURS_PER_MONTH = html_sections.HOURS_PER_MONTH

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;margin:0;background:#f5f6f8}
main{max-width:1180px;margin:0 auto;padding:24px 32px 64px;background:#fff}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:32px 0 8px;border-bottom:2px solid #e3e6eb;padding-bottom:4px}
h3{font-size:16px;margin:18px 0 6px}.sub{color:#5b6475;margin:0 0 16px}
.kpis{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.kpi{border:1px solid #dfe3e8;border-radius:8px;padding:10px 14px;min-width:150px;background:#fafbfc}
.kpi b{display:block;font-size:22px}.kpi span{color:#5b6475;font-size:13px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:14px;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #dfe3e8;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f0f2f5}td.l,th.l{text-align:left}td:not(.l){white-space:nowrap}
.ok{color:#1a7f37;font-weight:600}.miss{color:#b42318;font-weight:600}.bind{background:#fff7e0}
.warn{background:#fff4e5;border-left:4px solid #f79009;padding:8px 12px;margin:8px 0}
.bad{background:#fdecea;border-left:4px solid #b42318;padding:8px 12px;margin:8px 0}
summary{cursor:pointer;margin:6px 0;color:#2f4b7c}pre{background:#0f1720;color:#e6edf3;padding:10px 12px;border-radius:6px;overflow-x:auto;font-size:12.5px;white-space:pre-wrap;word-break:break-all}
img,svg{max-width:100%;height:auto;border:1px solid #eef0f3}ul{margin:4px 0 8px 20px;padding:0}.muted{color:#5b6475;font-size:13px}
"""


_fmt, _usd, _table, _deploy_label = fmt, usd, table, deploy_label


def _image(path: Path | None, alt: str) -> str:
    """A PNG/JPEG embedded as base64, an SVG inlined (its XML prolog dropped); '' if absent."""
    if path is None or not Path(path).is_file():
        return ""
    p = Path(path)
    if p.suffix.lower() == ".svg":
        text = p.read_text()
        start = text.find("<svg")
        return text[start:] if start >= 0 else ""
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}.get(p.suffix.lower())
    if mime is None:
        return ""
    return _img_bytes(p.read_bytes(), mime, alt)


def _img_bytes(data: bytes, mime: str, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:{mime};base64,{base64.b64encode(data).decode("ascii")}">'


def _probability(d: Mapping, key: str, t: Mapping) -> float | None:
    """P(target met) where the plan carries it (per target, or a per-deployment mapping)."""
    for v in (t.get("probability"), (d.get("slo_probability") or {}).get(key)):
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def _answer(plan: Mapping) -> str:
    out = ["<section id='answer'><h2>The answer</h2>", html_sections.chosen_split(plan)]  # mode_select's split
    if not plan.get("feasible", False):
        inf = plan.get("infeasible") or {}
        msg = inf.get("message") if isinstance(inf, Mapping) else None
        none = "No aggregated deployment" if plan.get("mode") == "disagg" else "No deployment"
        out.append(f"<div class='bad'><b>{none} meets the targets.</b> {esc(msg or plan.get('binding_constraint') or '')}</div>")
        return "".join(out) + "</section>"
    usd_h = plan.get("total_usd_per_hour")
    kpi = [("per hour", _usd(usd_h, 2, "/h")),
            ("per month (730 h)", _usd(usd_h * HOURS_PER_MONTH if isinstance(usd_h, (int, float)) else None, 0, "/month")),
            ("GPUs", _fmt(plan.get("total_gpus"), 0)),
            ("per million output tokens", _usd(plan.get("usd_per_million_output_tokens"), 3))]
    p_all = plan.get("every_slo_probability")
    if isinstance(p_all, (int, float)):
        kpi.append(("P(every SLO met), docs/RISK.md", _fmt(100 * p_all, 1, "%")))
    if plan.get("uniform"):
        kpi.append(("fleet", "uniform"))
    out.append(kpis(kpi))
    dis = plan.get("disaggregated") or {}
    if dis.get("recommended") and plan.get("mode") != "disagg":  # chosen: html_sections.chosen_split heads the answer
        out.append(f"<div class='warn'>A disaggregated deployment is cheaper: <b>{esc(dis.get('xpyd', ''))} at "
                   f"{_usd(dis.get('total_usd_per_hour'), 2, '/h')}</b> (see <i>Chosen deployment (disaggregated)</i>).</div>")
    deps = plan.get("deployments") or []
    rows = [[esc(_deploy_label(d)), _fmt(d.get("gpus_per_replica"), 0), esc(d.get("kv_cache_dtype", "")),
             _fmt(d.get("max_num_seqs"), 0), _usd(d.get("usd_per_hour"), 2), _fmt(d.get("load_rps_per_replica"), 2),
             _fmt(d.get("capacity_rps_per_replica"), 2), esc(d.get("calibration_tier", "")),
             esc(html_sections.speculation_label(d.get("speculation")))] for d in deps]
    out.append(_table(["deployment", "GPUs/replica", "KV dtype", "max batch", "$/h", "load req/s per replica",
                       "SLO capacity req/s per replica", "calibration tier", "speculation"], rows))
    if any(d.get("speculation") for d in deps):
        out.append(html_sections.speculation_table(plan))
    out.append("<h3>SLO targets against the prediction</h3>")
    trows, cls = [], []
    for d in deps:
        tg = d.get("targets") or {}
        pred = {k: (t.get("simulated_ms") if t.get("simulated_ms") is not None else t.get("analytical_ms"))
                for k, t in tg.items()}
        # met and binding by optimizer/slo_check.py: value <= limit; binding = largest value/limit
        met, bind = judge(pred, {k: t.get("limit_ms") for k, t in tg.items()})
        for key, t in tg.items():
            src = "simulated" if t.get("simulated_ms") is not None else "analytical"
            lim, val = t.get("limit_ms"), pred[key]
            num = isinstance(val, (int, float)) and isinstance(lim, (int, float)) and lim > 0
            p = _probability(d, key, t)
            band = (d.get("error_band") or {}).get(key.split("_")[0], {})
            trows.append([esc(_deploy_label(d)), esc(key) + (" <b>(binding)</b>" if key == bind else ""),
                          _fmt(lim, 1, "ms"), _fmt(val, 1, "ms") + f" <span class='muted'>{esc(src)}</span>",
                          _fmt(100 * val / lim if num else None, 0, "%"), verdict(met.get(key)),
                          _fmt(band.get("p90_pct"), 0, "%") if band else "-",
                          _fmt(100 * p, 1, "%") if p is not None else "-"])
            cls.append("bind" if key == bind else "")
    out.append(_table(["deployment", "target", "limit", "predicted", "of limit", "", "p90 error band ±", "P(met)"], trows,
                      left=(0, 1), row_class=cls))
    conf = plan.get("confidence") or {}
    if conf:
        out.append(f"<p>Planned for <b>search.confidence={_fmt(conf.get('level'), 2)}</b>: limits tightened to "
                   + esc(", ".join(f"{k} {v:.4g} ms" for k, v in (conf.get("planned_limits_ms") or {}).items()))
                   + " (docs/RISK.md).</p>")
    hrows = [[esc(_deploy_label(d)), _fmt((d.get("headroom") or {}).get("load_rps_per_replica"), 2),
              _fmt((d.get("headroom") or {}).get("capacity_rps_per_replica"), 2),
              _fmt((d.get("headroom") or {}).get("headroom_pct"), 0, "%"),
              esc((d.get("headroom") or {}).get("limited_by", "")), esc((d.get("headroom") or {}).get("detail", ""))]
             for d in deps if d.get("headroom")]
    if hrows:
        out.append("<h3>Headroom</h3>" + _table(["deployment", "load req/s per replica", "capacity req/s per replica",
                                                 "free", "capacity limited by", "detail"], hrows, left=(0, 4, 5)))
    band = plan.get("error_band") or {}
    if band.get("wide"):
        out.append(f"<div class='warn'><b>Low confidence:</b> the step-time error band is ±{_fmt(band.get('max_p90_pct'), 0)}% "
                   f"({esc(band.get('tier'))} calibration tier), wider than ±{_fmt(band.get('threshold_pct'), 0)}%: "
                   "cost and latencies are indicative only.</div>")
    if plan.get("binding_constraint"):
        out.append(f"<p>Binding constraint: {esc(plan['binding_constraint'])}</p>")
    return "".join(out) + "</section>"


def _alternatives(plan: Mapping) -> str:
    # a chosen split's plan keeps the aggregated alternatives under 'aggregated' (optimizer/split_summary.py)
    alts = plan.get("alternatives") or (plan.get("aggregated") or {}).get("alternatives") or []
    if not alts:
        return "<section id='alternatives'><h2>Alternatives</h2><p class='muted'>none reported</p></section>"
    chosen = plan.get("total_usd_per_hour")
    rows = []
    for a in alts:
        usd = a.get("total_usd_per_hour")
        delta = (f"{(usd / chosen - 1) * 100:+.0f}%" if isinstance(usd, (int, float)) and isinstance(chosen, (int, float))
                 and chosen else "-")
        deps = a.get("deployments") or []
        rows.append([esc(" + ".join(_deploy_label(d) for d in deps)), _usd(usd, 2),
                     _usd(usd * HOURS_PER_MONTH if isinstance(usd, (int, float)) else None, 0), esc(delta),
                     _fmt(a.get("total_gpus"), 0), _usd(a.get("usd_per_million_output_tokens"), 3),
                     esc(", ".join(f"{d.get('ttft_ms')}/{d.get('tpot_ms')}" for d in deps)),
                     _fmt(100 * a["every_slo_probability"], 1, "%")
                     if isinstance(a.get("every_slo_probability"), (int, float)) else "-",
                     esc(", ".join(html_sections.speculation_label(d.get("speculation")) for d in deps))])
    return ("<section id='alternatives'><h2>Alternatives</h2>"
            + _table(["deployment", "$/h", "$/month", "vs chosen", "GPUs", "$/M output tokens", "TTFT/TPOT ms",
                      "P(every SLO met)", "speculation"], rows, left=(0, 8))
            + "</section>")


def _slo_stat(s: Mapping, raw: bool = False) -> str:
    """A plan.json SLO entry's statistic: ``mean`` (``stat: mean``), else ``p90`` (``p90.0`` raw)."""
    if s.get("stat") == "mean":
        return "mean"
    return f"p{s.get('percentile')}" if raw else f"p{float(s.get('percentile') or 90):g}"


def latency_figure(latencies: Mapping[str, Sequence[float]], slo: Sequence[Mapping], title: str = "") -> bytes:
    """PNG: a histogram per metric (``ttft_ms``, ``tpot_ms``, ...) of per-request latencies,
    with each SLO limit of that metric (dashed) and the observed percentile (dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = [m for m in latencies if len(latencies[m])]
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(5.2 * max(1, len(metrics)), 3.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        v = np.asarray(latencies[m], dtype=float)
        v = v[np.isfinite(v)]
        ax.hist(v, bins=40, color="#4c72b0", alpha=0.8)
        name = m.removesuffix("_ms")
        for s in (t for t in slo if t.get("metric") == name):
            lim, stat = float(s.get("limit_ms", math.nan)), _slo_stat(s)
            obs = (float(v.mean()) if stat == "mean" else float(np.percentile(v, float(stat[1:])))) if len(v) else math.nan
            ax.axvline(lim, color="#b42318", ls="--", lw=1.5, label=f"SLO {stat} <= {lim:g} ms")
            ax.axvline(obs, color="#1a7f37" if obs <= lim else "#b42318", ls=":", lw=1.5,
                       label=f"{stat} = {obs:.4g} ms ({len(v)} requests)")
        ax.set_xlabel(f"{name.upper()} (ms)")
        ax.set_ylabel("requests")
        ax.set_title(f"{name.upper()} per request")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _latency(plan: Mapping, latencies: Mapping | None) -> str:
    out = ["<section id='latency'><h2>Latency distributions</h2>"]
    if latencies:
        pools = latencies if all(isinstance(v, Mapping) for v in latencies.values()) else {"": latencies}
        for name, lat in sorted(pools.items()):
            out.append((f"<h3>{esc(name)}</h3>" if name else "") + _img_bytes(
                latency_figure(lat, plan.get("slo") or [], title=""), "image/png", f"latency distributions {name}"))
    else:
        sim = (plan.get("verification") or {}).get("deployment_simulation") or {}
        svg = html_sections.latency_summary_svg(sim, plan.get("slo") or [])
        out.append(svg + "<p class='muted'>simulated latency percentiles of the whole deployment (bars: green "
                   "within the SLO of that statistic, red beyond it); per-request histograms need per-request "
                   "latencies, which plan.json does not keep</p>" if svg else
                   "<p class='muted'>no per-request latencies were passed to the report</p>")
    rows = []
    for d in plan.get("deployments") or []:
        sim = d.get("simulated") or {}
        if sim:
            rows.append([esc(_deploy_label(d)), _fmt(sim.get("requests"), 0)] +
                        [_fmt(v, 1) for v in (sim.get("targets") or {}).values()])
    if rows:
        keys = list(((plan.get("deployments") or [{}])[0].get("simulated") or {}).get("targets", {}))
        out.append(_table(["deployment", "simulated requests"] + [f"{k} ms" for k in keys], rows))
    return "".join(out) + "</section>"


def _uncertainty(plan: Mapping) -> str:
    rows = []
    for d in plan.get("deployments") or []:
        for metric, b in sorted((d.get("error_band") or {}).items()):
            rows.append([esc(_deploy_label(d)), esc(metric), _fmt(b.get("p50_pct"), 1, "%"), _fmt(b.get("p90_pct"), 1, "%"),
                         esc(b.get("tier", "")), esc(", ".join(b.get("extrapolated") or []) or "-")])
    out = ["<section id='uncertainty'><h2>Error bands and calibration tiers</h2>"]
    out.append(_table(["deployment", "metric", "p50 error ±", "p90 error ±", "calibration tier", "extrapolated kernels"],
                      rows, left=(0, 1, 4, 5)) if rows else "<p class='muted'>no error bands in the plan</p>")
    out.append("<p class='muted'>± = error of the step time from held-out kernel residuals of the calibration tier "
               "(docs/ACCURACY.md).</p>")
    em = (plan.get("risk") or {}).get("error_model") or {}
    if em:
        out.append("<h3>Served-latency error model behind P(met) (docs/RISK.md)</h3>" + _table(
            ["metric", "kind", "median measured/predicted", "p90 measured/predicted", "source"],
            [[esc(k), esc(v.get("kind", "")), _fmt(v.get("median_factor"), 3), _fmt(v.get("p90_factor"), 3),
              esc(v.get("source", ""))] for k, v in sorted(em.items()) if isinstance(v, Mapping)],
            left=(0, 1, 4), table_id="risk-error-model"))
    sb = plan.get("served_band") or {}
    if sb:
        out.append("<h3>Served-latency band of the simulated means</h3>" + _table(
            ["metric", "simulated mean", "band low", "band high", "factors", "coverage (level)", "served rows"],
            [[esc(k), _fmt(b.get("simulated_mean_ms"), 1, "ms"), _fmt(b.get("mean_ms_low"), 1, "ms"),
              _fmt(b.get("mean_ms_high"), 1, "ms"), esc(f"x{b.get('factor_low', '?')}-x{b.get('factor_high', '?')}"),
              f"{_fmt(b.get('coverage'), 3)} ({_fmt(b.get('level'), 2)})", _fmt(b.get("rows"), 0)]
             for k, b in sorted(sb.items()) if isinstance(b, Mapping)], table_id="served-band"))
    return "".join(out) + "</section>"


def catalog_assumptions(plan: Mapping) -> dict:
    """Prices (with the catalog's source when the plan's price is the catalog's) and the host
    topology of each GPU type in the plan, from the hardware catalog; {} where unknown."""
    from llmplan.errors import UserError
    from llmplan.hardware_catalog.loader import get_gpu

    prices, topo = [], {}
    deps = list(plan.get("deployments") or []) + [d for a in plan.get("alternatives") or [] for d in a.get("deployments") or []]
    seen = set()
    for d in deps:
        key = d.get("gpu")
        if key in seen or not key:
            continue
        seen.add(key)
        try:
            spec = get_gpu(key)
        except (UserError, KeyError):
            prices.append({"gpu": key, "usd_per_gpu_hour": d.get("usd_per_gpu_hour"), "source": "not in the catalog"})
            continue
        price = d.get("usd_per_gpu_hour")
        same = isinstance(price, (int, float)) and abs(price - spec.usd_per_hour) < 5e-4
        prices.append({"gpu": key, "usd_per_gpu_hour": price,
                       "source": spec.price_source if same else f"config override (catalog: ${spec.usd_per_hour:g}, "
                                                                f"{spec.price_source})"})
        if spec.default_topology:
            t = spec.topology()
            topo[key] = f"{t.name}: {t.gpu_link}, PCIe gen {t.pcie_gen}, {t.gpus_per_host} GPUs/host" + (
                f" ({t.description})" if t.description else "")
    return {"prices": prices, "topology": topo}


def _assumptions(plan: Mapping) -> str:
    a = dict(plan.get("assumptions") or {})
    if "prices" not in a or "topology" not in a:
        cat = catalog_assumptions(plan)
        a.setdefault("prices", cat["prices"])
        a.setdefault("topology", cat["topology"])
    wl = plan.get("workload") or {}
    items = [("model", plan.get("model")), ("engine", a.get("engine", plan.get("engine"))),
             ("calibration", plan.get("calibration")), ("seed", plan.get("seed")),
             ("workload", f"{_rate(wl.get('rate_rps'))} req/s, mean {wl.get('mean_input_tokens')} input / "
                          f"{wl.get('mean_output_tokens')} output tokens, longest request {wl.get('max_request_tokens')} tokens"
              if wl else None),
             ("SLOs", ", ".join(f"{s.get('metric', '').upper()} {_slo_stat(s, raw=True)} <= {s.get('limit_ms')} ms"
                                for s in plan.get("slo") or []) or None),
             ("candidates", f"{plan.get('candidates_evaluated')} evaluated, {plan.get('candidates_meeting_slo')} meet the "
                            f"SLOs; rejected: " + (", ".join(f"{k} {v}" for k, v in (plan.get("rejected") or {}).items())
                                                    or "none") if "candidates_evaluated" in plan else None)]
    out = ["<section id='assumptions'><h2>Assumptions</h2><ul>"]
    out += [f"<li><b>{esc(k)}:</b> {esc(v)}</li>" for k, v in items if v is not None]
    out.append("</ul>")
    if a.get("topology"):
        out.append("<h3>Link topology</h3>" + _table(["GPU", "host topology"],
                                                      [[esc(k), esc(v)] for k, v in sorted(a["topology"].items())], left=(0, 1)))
    if a.get("prices"):
        out.append("<h3>Prices</h3>" + _table(["GPU", "$/GPU-hour", "source"],
                                             [[esc(p.get("gpu")), _usd(p.get("usd_per_gpu_hour"), 3), esc(p.get("source", ""))]
                                              for p in a["prices"]], left=(0, 2)))
    out.append(html_sections.kv_budget(plan))
    for key in ("notes",):
        if plan.get(key):
            out.append("<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in plan[key]) + "</ul>")
    for extra in a.get("other") or []:
        out.append(f"<p>{esc(extra)}</p>")
    return "".join(out) + "</section>"


def _safe_rel(root: Path, rel: str) -> Path | None:
    """``root/rel`` for a relative path that stays under root, else None."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        return None
    return root.joinpath(*p.parts)


def _artifacts(plan: Mapping, artifacts_dir: Path | None) -> str:
    deploy = plan.get("deploy") or {}
    pools = deploy.get("pools") or []
    out = ["<section id='artifacts'><h2>Launch artifacts</h2>"]
    if not pools:
        out.append("<p class='muted'>no launch artifacts in the plan</p>")
    for p in pools:
        out.append(f"<h3>{esc(p.get('name', ''))}: {_fmt(p.get('replicas'), 0)} replica(s) x "
                   f"{_fmt(p.get('gpus_per_replica'), 0)} {esc(p.get('gpu', ''))} ({esc(p.get('engine', ''))})</h3>")
        if p.get("launch_argv"):
            out.append("<p>Launch command (each replica):</p><pre>" + esc(shlex.join(map(str, p["launch_argv"]))) + "</pre>")
        for n in p.get("notes") or []:
            out.append(f"<p class='muted'>note: {esc(n)}</p>")
        manifest = p.get("k8s_yaml")
        if manifest is None and artifacts_dir is not None:
            for f in p.get("files") or []:
                path = _safe_rel(Path(artifacts_dir), f) if str(f).endswith(".yaml") and "k8s" in str(f) else None
                if path is not None and path.is_file():
                    manifest = path.read_text()
        if manifest:
            out.append(f"<details><summary>Kubernetes manifest ({manifest.count(chr(10)) + 1} lines)</summary><pre>"
                       + esc(manifest) + "</pre></details>")
        if p.get("benchmark_argv"):
            out.append(f"<p>Benchmark at the pool's planned load ({_fmt(p.get('load_rps'), 3, 'req/s')}):</p><pre>"
                       + esc(shlex.join(map(str, p["benchmark_argv"]))) + "</pre>")
        if p.get("files"):
            out.append("<p class='muted'>files: " + esc(", ".join(p["files"])) + "</p>")
        if p.get("docs"):
            out.append(f"<p class='muted'>flags: {esc(p['docs'])}</p>")

    def manifest_text(rel: str) -> str | None:
        path = _safe_rel(Path(artifacts_dir), rel) if artifacts_dir is not None else None
        return path.read_text() if path is not None and path.is_file() else None

    out.append(html_sections.disagg_artifacts(plan, manifest_text))
    return "".join(out) + "</section>"


def _day(plan: Mapping, image: str) -> str:
    d = plan.get("day")
    if not d:
        return ""
    if d.get("infeasible"):
        return (f"<section id='day'><h2>A day of traffic</h2><div class='bad'><b>No schedule meets the profile:</b> "
                f"{esc(d['infeasible'])}</div></section>")
    kpi = [("cost of the profile", _usd(d.get("cost_usd"), 2)), ("static for the peak", _usd(d.get("static_peak_cost_usd"), 2)),
            ("saving", _fmt(d.get("saving_pct"), 1, "%")), ("peak", _fmt(d.get("peak_rps"), 2, "req/s"))]
    prof = (f"<p>Profile {esc(d.get('profile', ''))}: {_fmt(d.get('intervals'), 0)} intervals over "
            f"{_fmt(d.get('horizon_h'), 1, 'h')}, scale-up {_fmt(d.get('scale_up_s'), 0, 's')}, at least "
            f"{_fmt(d.get('min_replicas'), 0)} replica(s)</p>" if d.get("profile") else "")
    alt = " (aggregated alternative)" if d.get("describes") == "the aggregated alternative" else ""
    out = [f"<section id='day'><h2>A day of traffic{alt}</h2>", prof, kpis(kpi), image,
           html_sections.day_attainment(d), html_sections.day_prices(d)]
    sched = d.get("schedule") or []
    if sched:
        cols = list(sched[0])
        out.append(f"<details><summary>Replicas per interval ({len(sched)} intervals)</summary>"
                   + _table(cols, [[_fmt(r.get(c), 2) if isinstance(r.get(c), float) else esc(r.get(c)) for c in cols]
                                   for r in sched]) + "</details>")
    out.append("<ul>" + "".join(f"<li>{esc(a)}</li>" for a in d.get("assumptions") or []) + "</ul>")
    return "".join(out) + "</section>"


def _rate(x) -> str:
    """A request rate to 4 significant digits (a fleet's settled rate has many)."""
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _pareto_note(plan: Mapping) -> str:
    """The frontier files of plan.json ``pareto`` (rows and frontier names)."""
    p = plan.get("pareto") or {}
    if not p.get("files"):
        return ""
    split = ""
    if p.get("split_options"):
        on = p.get("split_on_frontiers") or []
        split = (f" Disaggregated split ({esc(', '.join(p['split_options']))}, mode disagg, orange diamond): "
                 + (f"on {esc(', '.join(on))}." if on else "dominated on every frontier."))
    return (f"<p class='muted'>{esc(', '.join(p['files']))}: {_fmt(p.get('rows'), 0)} rows on the frontiers "
            f"{esc(', '.join(p.get('frontiers') or []))} (docs/PARETO.md).{split}</p>")


def build(plan: Mapping, images: Mapping[str, Path] | None = None, latencies: Mapping | None = None,
          artifacts_dir: Path | None = None, title: str | None = None) -> str:
    """The page as a string. ``images``: {"pareto": pareto.png, "day": day.png} (absent files are
    skipped); ``latencies``: {"ttft_ms": [...], "tpot_ms": [...]} per request, or {pool: {...}};
    ``artifacts_dir``: the run directory, to inline the k8s manifests listed in ``plan["deploy"]``."""
    images = dict(images or {})
    head = title or f"llmplan: {plan.get('model', 'plan')}"
    wl = plan.get("workload") or {}
    sub = (f"{_rate(wl.get('rate_rps'))} req/s; engine {plan.get('engine', '?')}; SLO "
           + ", ".join(f"{s.get('metric', '').upper()} {_slo_stat(s, raw=True)} <= {s.get('limit_ms')} ms"
                       for s in plan.get("slo") or []))
    pareto = _image(images.get("pareto"), "cost versus latency frontier")
    parts = [html_sections.fleet(plan), _answer(plan), html_sections.aggregated_alternative(plan), _alternatives(plan),
             html_sections.disaggregated(plan),
             "<section id='frontier'><h2>Frontier</h2>" + (pareto or "<p class='muted'>no frontier plot</p>")
             + _pareto_note(plan) + "</section>",
             _latency(plan, latencies), _uncertainty(plan), html_sections.energy(plan),
             _day(plan, _image(images.get("day"), "replicas over the day")), _assumptions(plan),
             _artifacts(plan, artifacts_dir)]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{esc(head)}</title><style>{_CSS}</style></head><body><main>"
            f"<h1>{esc(head)}</h1><p class='sub'>{esc(sub)}</p>" + "".join(parts) + "</main></body></html>\n")


def write(plan: Mapping, path: Path, images: Mapping[str, Path] | None = None, latencies: Mapping | None = None,
          artifacts_dir: Path | None = None, title: str | None = None) -> Path:
    path = Path(path)
    path.write_text(build(plan, images, latencies, artifacts_dir, title), encoding="utf-8")
    return path

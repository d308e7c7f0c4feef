"""`llmplan whatif whatif.curve.figure=...`: one plan per scale of a hardware figure (or of the
SLOs, or of the traffic) and the curve of tokens/s, $ per million tokens and J/token against it.

Figures (``whatif.curve.figure``):

* ``hbm_bw_gbps`` (HBM bandwidth), ``tflops`` (every dense tensor throughput of the GPU, all
  dtypes alike), ``scaleup_bw_gbps`` (NVLink / scale-up bandwidth), ``hbm_gb`` (memory capacity;
  the physical bytes scale alike): the GPU types in ``whatif.curve.gpus`` (empty = every
  candidate) get the figure x scale, through ``gpu.spec_overrides`` as `whatif.gpu_scale` does;
* ``slo``: every SLO limit x scale: the cheapest deployment for each point of an SLO sweep;
* ``rate``: the request rate x scale.

Each point is a full `plan` (the same pipeline; with ``fleet.gpus`` set, the fleet's maximum
rate) and reports the deployment that plan CHOSE (``mode``: ``agg``, or ``disagg`` when a
prefill/decode split wins, optimizer/mode_select.py). Per point, planned (serving the rate): the deployment, GPUs, $/h, $ per million output
tokens, output tokens/s (rate x mean output tokens) and J per output token (optimizer/energy.py,
PUE 1); at SLO capacity (the chosen deployment with every replica at ``search.max_load`` x its
SLO capacity: what the hardware sustains, which moves smoothly with the scale while the planned
cost moves in whole GPUs): rate, output tokens/s per GPU, $ per million output tokens and J per
output token; and P(every SLO met) at the planned rate (optimizer/risk.py). The plots show the
at-capacity curves.
Writes ``whatif_curve.csv`` and ``whatif_curve.png`` (matplotlib, when importable) and prints
the table and text plots (docs/PARETO.md).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from llmplan.cli.text_plot import text_plot
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, ConfigError

#: figure -> (axis label, what it scales)
FIGURES = {
    "hbm_bw_gbps": "HBM bandwidth",
    "tflops": "dense tensor FLOP/s (every dtype)",
    "scaleup_bw_gbps": "NVLink / scale-up bandwidth",
    "hbm_gb": "HBM capacity",
    "slo": "every SLO limit",
    "rate": "request rate",
}
GPU_FIGURES = ("hbm_bw_gbps", "tflops", "scaleup_bw_gbps", "hbm_gb")
COLUMNS = ["figure", "scale", "feasible", "mode", "deployment", "total_gpus", "usd_per_hour", "usd_per_million_output_tokens",
           "rate_rps", "output_tokens_per_s", "joules_per_output_token", "capacity_rps",
           "capacity_output_tokens_per_s_per_gpu", "capacity_usd_per_million_output_tokens",
           "capacity_joules_per_output_token", "every_slo_probability", "binding"]
#: (column, label with unit) of the plotted curves: the chosen deployment at its SLO capacity
CURVES = (("capacity_output_tokens_per_s_per_gpu", "output tokens/s per GPU at SLO capacity (tok/s)"),
          ("capacity_usd_per_million_output_tokens", "$ per million output tokens at SLO capacity ($)"),
          ("capacity_joules_per_output_token", "energy per output token at SLO capacity (J/token)"))


def check_curve(app) -> tuple[str, list[float], list[str]]:
    """(figure, scales, GPU keys) of ``whatif.curve``; ConfigError names the offending key."""
    from llmplan.hardware_catalog.loader import get_gpu

    c, w = app.whatif.curve, app.whatif
    fig = c.figure
    if fig not in FIGURES:
        raise ConfigError(f"unknown figure {fig!r}", key="whatif.curve.figure", fix="one of " + ", ".join(FIGURES))
    scales = list(c.scales)  # each a finite float > 0: the schema and config_checks (RANGES)
    if not scales:
        raise ConfigError("needs a non-empty list of positive numbers", key="whatif.curve.scales",
                          fix="e.g. whatif.curve.scales=[0.5,1,2,4]")
    if w.gpu_scale or w.price_scale or w.add_gpus or w.slo_scale != 1 or w.rate_scale != 1:
        raise ConfigError("a curve scales one figure from the baseline; other whatif keys are set too",
                          key="whatif.curve.figure", fix="drop whatif.gpu_scale/price_scale/add_gpus/slo_scale/rate_scale")
    gpus = list(c.gpus) or (list(app.fleet.gpus) if app.fleet.gpus else list(app.gpu.candidates))
    if fig in GPU_FIGURES:
        for g in gpus:
            get_gpu(g)
        # a GPU without the hardware (L40S: no scale-up fabric, 0 GB/s) has nothing to scale; it used to
        # fail inside the scenario on gpu.spec_overrides.<gpu>.<figure>, a key the user never typed
        absent = [g for g in gpus if fig != "tflops" and getattr(get_gpu(g), fig, None) == 0]
        if absent:
            rest = [g for g in gpus if g not in absent]
            raise ConfigError(f"{', '.join(absent)} {'has' if len(absent) == 1 else 'have'} no {fig} (0 in the GPU "
                              "catalog): nothing to scale", key="whatif.curve.figure",
                              fix=(f"scale the others: whatif.curve.gpus=[{','.join(rest)}]" if rest
                                   else "pick another figure"))
    elif c.gpus:
        raise ConfigError(f"whatif.curve.gpus applies to GPU figures, not {fig!r}", key="whatif.curve.gpus",
                          fix="drop it")
    return fig, sorted(float(s) for s in scales), gpus


def scaled_app(app, figure: str, scale: float, gpus: list[str]):
    """The AppConfig of one point (a deep copy): the figure x scale through `whatif.scenario`."""
    from llmplan.cli.whatif_scenario import scenario
    from llmplan.hardware_catalog.loader import get_gpu

    new = copy.deepcopy(app)
    if figure == "slo":
        new.whatif.slo_scale = scale
    elif figure == "rate":
        new.whatif.rate_scale = scale
    else:
        for g in gpus:
            figs = ([f"{d}_tflops" for d in get_gpu(g).dense_tflops] if figure == "tflops" else [figure])
            new.whatif.gpu_scale[g] = {f: scale for f in figs}
    return scenario(new)


def at_capacity(sel, wl, max_load: float):
    """(selection, workload) of the chosen deployment loaded to ``max_load`` x each replica's
    SLO capacity: what the hardware sustains within the SLOs, not just the planned rate."""
    from dataclasses import replace

    allocs = [replace(a, share_rps=a.evaluation.effective_capacity_rps * max_load) for a in sel.allocations]
    rate = sum(a.replicas * a.share_rps for a in allocs)
    return replace(sel, allocations=allocs), replace(wl, rate_rps=rate)


def point_row(res, figure: str, scale: float, engine: str, max_load: float) -> dict:
    """One curve point: the plan's CHOSEN deployment (aggregated, or the disaggregated split when
    the plan chooses it: optimizer/mode_select.py) and its figures."""
    from llmplan.optimizer.mode_select import split_chosen

    if split_chosen(res):
        return split_point_row(res, figure, scale, engine, max_load)
    from llmplan.optimizer import report
    from llmplan.optimizer.energy import selection_energy

    sel, wl = res.selection, res.workload
    row = {"figure": figure, "scale": scale, "feasible": sel.feasible, "binding": sel.binding or ""}
    if not sel.feasible:
        return row
    d = report.selection_dict(sel, res, engine)
    # fleet mode: the planned rate is the fleet's maximum, settled on the steady-state simulation
    cap_sel, cap_wl = (sel, wl) if res.fleet else at_capacity(sel, wl, max_load)
    cap_tok_s = cap_wl.rate_rps * wl.mean_output_tokens
    row.update({
        "mode": "agg", "deployment": " + ".join(f"{a.replicas}x {a.evaluation.candidate.name}" for a in sel.allocations),
        "total_gpus": sel.total_gpus, "usd_per_hour": d["total_usd_per_hour"],
        "usd_per_million_output_tokens": d["usd_per_million_output_tokens"], "rate_rps": round(wl.rate_rps, 4),
        "output_tokens_per_s": round(wl.rate_rps * wl.mean_output_tokens, 2),
        "joules_per_output_token": selection_energy(sel, wl).get("joules_per_output_token"),
        "capacity_rps": round(cap_wl.rate_rps, 4),
        "capacity_output_tokens_per_s_per_gpu": round(cap_tok_s / sel.total_gpus, 3) if sel.total_gpus else None,
        "capacity_usd_per_million_output_tokens": round(sel.total_usd_per_hour / (cap_tok_s * 3600.0) * 1e6, 4)
        if cap_tok_s > 0 else None,
        "capacity_joules_per_output_token": selection_energy(cap_sel, cap_wl).get("joules_per_output_token"),
        "every_slo_probability": d.get("every_slo_probability")})
    return row


def split_point_row(res, figure: str, scale: float, engine: str, max_load: float) -> dict:
    """A point whose plan chooses a disaggregated split: its cost, GPUs, $/M tokens, J/token and
    P(every SLO met) (plan.json's top level, optimizer/split_summary.py). At SLO capacity: the
    smaller pool's capacity (chosen_figures.split_capacity_rps); J/token at capacity is not
    computed (the split's power is simulated at the planned rate only) and stays empty."""
    from llmplan.cli.chosen_figures import deployment_label, joules_per_output_token, split_capacity_rps, split_figures

    d, wl = split_figures(res, engine), res.workload
    cap_rps = wl.rate_rps if res.fleet else split_capacity_rps(res.disaggregated, max_load)
    cap_tok_s = cap_rps * wl.mean_output_tokens if cap_rps is not None else None
    usd_h, gpus = d["total_usd_per_hour"], d["total_gpus"]
    return {"figure": figure, "scale": scale, "feasible": bool(res.feasible), "binding": d["binding_constraint"],
            "mode": "disagg", "deployment": deployment_label(d["deployments"]), "total_gpus": gpus,
            "usd_per_hour": usd_h, "usd_per_million_output_tokens": d["usd_per_million_output_tokens"],
            "rate_rps": round(wl.rate_rps, 4), "output_tokens_per_s": round(wl.rate_rps * wl.mean_output_tokens, 2),
            "joules_per_output_token": joules_per_output_token(res),
            "capacity_rps": round(cap_rps, 4) if cap_rps is not None else None,
            "capacity_output_tokens_per_s_per_gpu": round(cap_tok_s / gpus, 3) if cap_tok_s and gpus else None,
            "capacity_usd_per_million_output_tokens": round(usd_h / (cap_tok_s * 3600.0) * 1e6, 4)
            if cap_tok_s else None,
            "capacity_joules_per_output_token": None, "every_slo_probability": d["every_slo_probability"]}


def plot_png(df: pd.DataFrame, figure: str, path: Path, title: str) -> bool:
    """Three panels against the scale; False when matplotlib is not importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for ax, (col, label) in zip(axes, CURVES):
        ok = df[df[col].notna()] if col in df else df.iloc[0:0]
        ax.plot(ok["scale"], ok[col], "o-", color="C0")
        ax.axvline(1.0, color="0.6", ls=":", label="baseline (x1)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"{FIGURES[figure]} (x baseline)")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.14, top=0.85, wspace=0.3)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _cell(v, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def run_curve(app, out: Path, console: Console) -> int:
    from llmplan.cli.plan_cmd import plan_from_app
    from llmplan.parallel import map_jobs

    figure, scales, gpus = check_curve(app)

    def point(s: float) -> tuple[dict, str]:
        res, model = plan_from_app(scaled_app(app, figure, s, gpus), console)
        return point_row(res, figure, s, app.engine.name, float(app.search.max_load)), model.key

    # one independent plan per scale, side by side where cores allow (llmplan/parallel.py), in scale order
    points = map_jobs([lambda s=s: point(s) for s in scales])
    rows = [r for r, _ in points]
    model_key = points[-1][1] if points else app.model.name
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "whatif_curve.csv", index=False, float_format="%.6g")
    what = FIGURES[figure] + (f" of {', '.join(gpus)}" if figure in GPU_FIGURES else "")
    title = f"{model_key}: {what} x scale"
    t = Table(title=title, title_justify="left")
    for c in ("scale", "mode", "deployment", "GPUs", "$/h", "$/M tok\nplanned", "tok/s/GPU\nat cap.",
              "$/M tok\nat cap.", "J/tok\nat cap.", "P(all\nSLOs)"):
        t.add_column(c, justify="left" if c in ("mode", "deployment") else "right")
    for r in rows:
        if not r["feasible"]:
            t.add_row(f"x{r['scale']:g}", "-", "none meets the SLOs", *["-"] * 7)
            continue
        t.add_row(f"x{r['scale']:g}", r["mode"], r["deployment"], str(r["total_gpus"]), f"{r['usd_per_hour']:.2f}",
                  f"{r['usd_per_million_output_tokens']:.3f}", _cell(r["capacity_output_tokens_per_s_per_gpu"], ".0f"),
                  _cell(r["capacity_usd_per_million_output_tokens"], ".3f"),
                  _cell(r["capacity_joules_per_output_token"], ".3g"), _cell(r["every_slo_probability"], ".2f"))
    console.print(t)
    if any(r.get("mode") == "disagg" for r in rows):
        console.print("disagg = the plan chose a disaggregated prefill/decode split (its pools, cost and planned "
                      "J/token in whatif_curve.csv); J/tok at capacity is left empty for it: the split's power is "
                      "simulated at the planned rate only", markup=False, highlight=False)
    for col, label in CURVES:
        console.print(text_plot(df["scale"].tolist(), [None if pd.isna(v) else v for v in df[col]],
                                f"{label.split(' (')[0]} vs {FIGURES[figure]}", f"{FIGURES[figure]} (x baseline)",
                                label, log_x=max(scales) / min(scales) >= 4), markup=False, highlight=False)
    files = ["whatif_curve.csv"] + (["whatif_curve.png"] if plot_png(df, figure, out / "whatif_curve.png", title) else [])
    console.print(f"Wrote {', '.join(files)} to {out}")
    return EXIT_OK if df["feasible"].any() else EXIT_INFEASIBLE

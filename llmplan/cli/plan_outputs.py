"""The files and plan.json blocks `plan` adds after the selection: energy, launch artifacts,
the Pareto frontier, the KV budget, a day of traffic and report.html.

Each block is computed once from the PlanResult; PNGs (matplotlib, Agg) are drawn only with
``report.html=true`` (the page embeds them), so the default run stays fast.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console

from llmplan.errors import ConfigError
# the mode table (optimizer/chosen_console.py; a chosen split's own lines are printed by report.render)
from llmplan.optimizer.chosen_console import mode_probabilities, mode_table
from llmplan.optimizer.day_plan import DayInfeasible
from llmplan.optimizer.mode_select import split_chosen  # the plan's answer is the disaggregated split


def check_energy(app) -> None:
    pue, price = app.energy.pue, app.energy.usd_per_kwh
    if not (isinstance(pue, (int, float)) and math.isfinite(pue) and pue >= 1.0):
        raise ConfigError(f"must be a number >= 1 (facility power / IT power), got {pue!r}", key="energy.pue",
                          fix="e.g. energy.pue=1.2 (1.0 = GPU power only)")
    if price is not None and not (math.isfinite(price) and price >= 0):
        raise ConfigError(f"must be >= 0 $/kWh or null, got {price!r}", key="energy.usd_per_kwh", fix="e.g. 0.12")


def energy_block(res, app, aggregated: bool = False) -> dict | None:
    """Energy of the chosen deployment (the split's pools when it is chosen); ``aggregated``: of
    the aggregated selection whatever the choice."""
    from llmplan.optimizer.energy import selection_energy, split_energy

    pue, price = float(app.energy.pue), app.energy.usd_per_kwh
    if split_chosen(res) and not aggregated:
        return split_energy(res.disaggregated, res.workload, pue=pue, usd_per_kwh=price)
    if not res.selection.feasible:
        return None
    return selection_energy(res.selection, res.workload, pue=pue, usd_per_kwh=price)


def kv_budget_block(res, model, engine, aggregated: bool = False) -> list[dict]:
    """The engine's KV budget of each chosen pool (sim/memory.py plan_memory): per worker of each
    pool of a chosen split (optimizer/disagg_figures.py), else per replica of each aggregated pool."""
    from llmplan.sim.memory import plan_memory

    if split_chosen(res) and not aggregated:
        return list(res.disaggregated.get("kv_budget") or [])
    out = []
    for a in res.selection.allocations if res.selection.feasible else []:
        c = a.evaluation.candidate
        mem = plan_memory(model, c.gpu, c.par, c.prec, engine, int(res.workload.max_request_tokens))
        if mem.budget is not None:
            out.append({"pool": c.name, **mem.budget.to_dict(), "lines": mem.budget.lines()})
    return out


def deploy_block(res, model, app, out: Path) -> dict | None:
    """deploy/: the aggregated pools (deploy/<i>-<pool>/) when the aggregated selection is
    feasible and deploy/disagg/ for plan.json's disaggregated option; ``chosen_mode`` says which
    one is the plan's deployment."""
    from llmplan.optimizer import artifacts
    from llmplan.optimizer.launch import disagg  # deploy/disagg/: plan.json's disaggregated option

    dis = res.disaggregated if isinstance(getattr(res, "disaggregated", None), dict) else None
    if not res.selection.feasible and (dis is None or getattr(res, "chosen_mode", "agg") != "disagg"):
        return None
    closed = app.workload.arrival == "closed_loop"
    conc = app.workload.concurrency if closed else None
    block = {"dir": "deploy", "index": None, "pools": [], "chosen_mode": getattr(res, "chosen_mode", "agg")}
    index: dict = {"pools": []}
    if res.selection.feasible:
        arts = artifacts.build(res.selection, model, app.engine, res.workload, res.slos, app.seed,
                               arrival=app.workload.arrival, concurrency=conc)
        index = artifacts.write(arts, out)
        block["pools"] = index["pools"]
    da = disagg.build(dis, model, app.engine, res.workload, res.slos,
                      {e.candidate.gpu.key: e.candidate.gpu.vendor for e in res.evaluations}, app.seed,
                      arrival=app.workload.arrival, concurrency=conc)
    if da is not None:
        block["disaggregated"] = index["disaggregated"] = disagg.write(da, out, dis)
    if not (block["pools"] or block.get("disaggregated")):
        return None
    index["chosen_mode"] = block["chosen_mode"]  # the index names the plan's deployment too
    artifacts.write_index(out, index)
    block["index"] = "deploy/deploy.json"
    return block


def chosen_deployment(res, d: dict) -> dict | None:
    """plan.json ``chosen_deployment``: the plan's answer in either mode (None: nothing meets the SLOs)."""
    mode = getattr(res, "chosen_mode", "agg") if getattr(res, "mode_selection", None) else (
        "agg" if res.selection.feasible else None)
    if mode == "agg" and res.selection.feasible:
        return {"mode": "aggregated", "total_usd_per_hour": d.get("total_usd_per_hour"),
                "total_gpus": d.get("total_gpus"), "deployments": "plan.json 'deployments'",
                "deploy_dir": "deploy/"}
    dis = res.disaggregated
    if mode == "disagg" and dis:
        return {"mode": "disaggregated", "xpyd": dis["xpyd"], "total_usd_per_hour": dis["total_usd_per_hour"],
                "total_gpus": dis["total_gpus"], "pools": dis["pools"], "kv_link": dis.get("kv_link"),
                "simulated": dis.get("simulated"), "deploy_dir": "deploy/disagg/"}
    return None


def pareto_block(res, app, model, out: Path, png: bool) -> dict:
    from llmplan.optimizer import pareto

    title = f"{model.key}: {res.workload.rate_rps:g} req/s, " + ", ".join(s.label for s in res.slos)
    dis = res.disaggregated if isinstance(getattr(res, "disaggregated", None), dict) else None
    splits = [pareto.split_row(dis, res.workload, res.slos, chosen=split_chosen(res))] if dis else []
    front = pareto.write(res.evaluations, res.workload, res.slos, out, max_load=app.search.max_load, title=title,
                         png=png, split_rows=splits)
    files = ["pareto.csv"] + (["pareto.png"] if png and (out / "pareto.png").exists() else [])
    on_front = sorted(set(front.loc[front["mode"] == "disagg", "frontier"])) if len(front) else []
    return {"files": files, "rows": int(len(front)),
            "frontiers": sorted(set(front["frontier"])) if len(front) else [],
            "split_options": [r["option"] for r in splits],
            # the frontiers the split is on (absent from one: another option dominates it there)
            "split_on_frontiers": on_front}


def day_block(res, app, out: Path, png: bool, model=None) -> dict | None:
    """Replicas per interval over ``day.profile`` and the simulated attainment (llmplan/cli/day_outputs.py)."""
    from llmplan.cli.day_outputs import day_block as block

    return block(res, app, out, png, model)


def add_blocks(res, model, app, out: Path, d: dict) -> dict:
    """Compute every block, add it to the plan dict ``d`` and rewrite plan.json."""
    html = bool(app.report.html)
    d["mode"] = getattr(res, "chosen_mode", "agg")
    d["mode_selection"] = mode_probabilities(getattr(res, "mode_selection", []), d)
    d["chosen_deployment"] = chosen_deployment(res, d)
    d["energy"] = energy_block(res, app)
    d["kv_budget"] = kv_budget_block(res, model, app.engine)
    if isinstance(d.get("aggregated"), dict):  # the aggregated alternative's own blocks (optimizer/split_summary.py)
        d["aggregated"]["energy"] = energy_block(res, app, aggregated=True)
        d["aggregated"]["kv_budget"] = kv_budget_block(res, model, app.engine, aggregated=True)
    d["deploy"] = deploy_block(res, model, app, out)
    d["pareto"] = pareto_block(res, app, model, out, png=html)
    try:
        d["day"] = day_block(res, app, out, png=html, model=model)
    except DayInfeasible as exc:
        d["day"] = {"infeasible": str(exc)}
        raise
    finally:
        (out / "plan.json").write_text(json.dumps(d, indent=2, sort_keys=False) + "\n")
    if html:
        from llmplan.optimizer import html_report

        images = {k: out / f"{k}.png" for k in ("pareto", "day") if (out / f"{k}.png").exists()}
        html_report.write(d, out / "report.html", images=images, artifacts_dir=out)
    return d


def render(d: dict, console: Console, out: Path) -> None:
    """The console lines of the added blocks (after the plan's own table)."""
    # a chosen split's mode table, P(SLO met) and headroom lead the output (optimizer/report.py render)
    if d.get("mode_selection") and not isinstance(d.get("aggregated"), dict):
        console.print(mode_table(d["mode_selection"]))
    for kv in d.get("kv_budget") or []:
        console.print(f"{kv['pool']}: {kv['lines'][0]}", markup=False)
    e = d.get("energy")
    if e:
        if e.get("gpu_power_w") is not None:
            cost = (f", electricity ${e['electricity_usd_per_hour']:.2f}/h" if e.get("electricity_usd_per_hour")
                    is not None else "")
            who = f" ({e['xpyd']}: " + ", ".join(f"{p['role']} {p['power_w'] / 1000:.2f} kW" for p in e["pools"]) + ")" \
                if e.get("mode") == "disaggregated" else ""
            console.print(f"Energy{who}: {e['gpu_power_w'] / 1000:.2f} kW GPU power (PUE {e['pue']:g}: "
                          f"{e['facility_power_w'] / 1000:.2f} kW), {e['joules_per_output_token']:.3g} J per output "
                          f"token{cost} (docs/ENERGY.md)")
        else:
            console.print("Energy: unknown (" + "; ".join(e.get("unknown") or []) + ")")
    dep = d.get("deploy")
    if dep and dep.get("pools"):
        console.print(f"Launch: {len(dep['pools'])} pool(s), launch.sh / k8s.yaml / bench.sh under {out / 'deploy'}/"
                      + (" (aggregated alternative)" if d.get("mode") == "disagg" else ""))
    if dep and dep.get("disaggregated"):
        what = "the chosen deployment" if d.get("mode") == "disagg" else "disaggregated alternative"
        console.print(f"Launch ({what}, {dep['disaggregated']['xpyd']}): prefill/ decode/ "
                      f"router.sh k8s.yaml bench.sh under {out / 'deploy' / 'disagg'}/")
    day = d.get("day")
    if day and "infeasible" not in day:
        from llmplan.cli.day_outputs import render_lines

        for line in render_lines(day):
            console.print(line)
    files = ["plan.json", "candidates.csv", *(d.get("pareto") or {}).get("files", []),
             *((day or {}).get("files") or [])]
    if (out / "report.html").exists():
        files.append("report.html")
    console.print(f"Wrote {', '.join(files)}" + (", deploy/" if dep and (dep.get("pools") or dep.get("disaggregated")) else "") + f" to {out}")

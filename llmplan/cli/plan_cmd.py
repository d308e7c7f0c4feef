"""`llmplan plan`: the cheapest deployment that serves the workload within the SLOs."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig
from rich.console import Console

from llmplan.cli import hydra_app
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, UserError
from llmplan.progress import make_console, stage_progress, step
from llmplan.cli.resolve import (check_engine, check_search, max_gpus, resolve_gpus, resolve_model, resolve_slos,
                             resolve_space, to_app, workload_sample)
from llmplan.cli import plan_outputs
from llmplan.model_catalog.derived import checkpoint_precision_note
from llmplan.optimizer import report
from llmplan.optimizer.day_plan import DayInfeasible
from llmplan.optimizer import risk
from llmplan.optimizer.planner import plan
from llmplan.sim.trtllm_batch_wait import simulated_only_note

SUMMARY = ("Enumerate GPU type x TP/PP/EP x precision x batch, screen each analytically, verify the\n"
           "finalists in the serving simulator, and solve an ILP for the cheapest deployment\n"
           "(possibly mixing GPU types) that serves the request rate within the SLOs.\n"
           "Writes plan.json, candidates.csv, pareto.csv and deploy/ (launch.sh, k8s.yaml, bench.sh per\n"
           "pool) to the output directory (hydra.run.dir); report.html=true adds report.html and the\n"
           "PNG plots; day.profile=FILE.csv plans a day of traffic (day.csv). fleet.gpus='{h100_sxm: 8}'\n"
           "answers instead the maximum request rate that fleet sustains within the SLOs.\n"
           "search.confidence=0.9 picks the cheapest deployment meeting every SLO with that probability\n"
           "(docs/RISK.md); workload=closed_loop workload.concurrency=64 plans for 64 concurrent users.\n"
           "workload=offline target.tokens_per_s=50000: the cheapest GPUs for 50,000 output tokens/s of\n"
           "offline throughput (docs/OFFLINE.md). A day profile also simulates the SLO attainment through\n"
           "the day (docs/AUTOSCALING.md). Aggregated and disaggregated (xPyD prefill/decode pools) deployments\n"
           "are searched side by side and the cheapest meeting the SLOs is chosen; search.modes=[agg] or\n"
           "[disagg] restricts the choice (docs/DISAGG.md).")


def output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # called outside a Hydra job (tests)
        return Path.cwd()


def checkpoint_precisions(model, requested: list[str]) -> tuple[list[str], list[str]]:
    """(precisions to search, notes). A quantized checkpoint (``model.quant``) is served in its
    shipped format: engines load the checkpoint's weights as they are, so only that precision
    is searched; a requested precision it does not hold is named in a note."""
    if model.quant is None:
        return requested, []
    ckpt = model.quant.precision
    other = [p for p in requested if p != ckpt]
    if not other or ckpt in requested:
        return [ckpt], ([f"{model.hf_id} is a {ckpt} checkpoint: only {ckpt} weights are searched "
                         f"(search.precision {', '.join(other)} left out)"] if other else [])
    why = checkpoint_precision_note(model, other[0])
    return [ckpt], [f"search.precision=[{', '.join(requested)}]: {why}; planned at {ckpt}, the checkpoint's format"]


def check_checkpoint_servable(model, res, gpu_keys: list[str]) -> None:
    """A quantized checkpoint that no candidate GPU type can serve in its format is refused
    (exit 2): planning it at another precision would answer for another checkpoint."""
    if model.quant is None or not res.evaluations or any(e.verdict != "precision" for e in res.evaluations):
        return
    ckpt = model.quant.precision
    raise UserError(f"{model.hf_id} ships {model.quant.main.name} ({ckpt}) weights and none of the GPU types "
                    f"{', '.join(gpu_keys)} serves {ckpt}: {res.evaluations[0].reason}", key="gpu.candidates",
                    fix=f"choose GPU types with {ckpt} support (see `llmplan catalog gpus`), or a bf16 checkpoint "
                        "of the model")


def plan_from_app(app, console: Console, show_progress: bool = True):
    """Resolve, screen, verify, select. Returns (PlanResult, ModelSpec)."""
    if app.workload.arrival == "closed_loop":  # N users: plans for rates until their closed loop meets the SLOs
        from llmplan.cli.plan_users import plan_users

        searched = list(app.search.modes)
        if "agg" not in searched:
            raise UserError("the closed-loop users check (workload=closed_loop) simulates aggregated replicas only",
                            key="search.modes", fix="search.modes=[agg], or plan a request rate (workload=chat)")
        app.search.modes = ["agg"]
        res, model = plan_users(app, console, show_progress, plan_from_app)
        if "disagg" in searched:  # say why, not the internal search.modes=[agg]
            why = "the closed-loop users check (workload=closed_loop) simulates aggregated replicas only"
            res.notes = [n for n in res.notes if not n.startswith("disaggregated candidates not searched")]
            res.notes.append(f"disaggregated candidates not searched: {why}")
            for r in res.mode_selection:
                if r["mode"] == "disagg":
                    r.update(why=f"not searched: {why}", allowed=True)
        return res, model
    model = resolve_model(app)
    fleet = dict(app.fleet.gpus)
    if fleet and app.day.profile:
        raise UserError("a day profile plans replicas for given rates; fleet.gpus asks the rate of given GPUs",
                        key="fleet.gpus", fix="run them separately: drop day.profile or fleet.gpus")
    if fleet:  # fleet mode: only the fleet's GPU types
        app.gpu.candidates = list(fleet)
    gpus = resolve_gpus(app)
    fleet = {g.key: fleet[k] for k, g in zip(app.gpu.candidates, gpus)} if fleet else {}
    slos = resolve_slos(app)
    point_slos, slos = slos, risk.confidence_slos(slos, app.engine.name, app.search.confidence)
    check_engine(app.engine)
    check_search(model, list(app.search.tp), list(app.search.ep), list(app.search.precision))
    wl, _ = workload_sample(app, model)
    precisions, notes = checkpoint_precisions(model, list(app.search.precision))
    space = resolve_space(app, precision=precisions)
    avail = max_gpus(app, gpus)
    with stage_progress(console, show_progress and app.output.progress) as progress:
        verifier = None
        if space.finalists > 0:
            from llmplan.optimizer.verify import make_verifier

            verifier = make_verifier(model, app.engine, app.workload, wl, slos, space.verify_requests, app.seed, progress)
        if fleet:
            from llmplan.optimizer.fleet import plan_fleet  # fleet.gpus only: not imported by a plain plan

            res = plan_fleet(model, [(g, g.usd_per_hour) for g in gpus], app.engine, wl, slos, space, fleet,
                             app.calibration, progress, verifier)
            res.notes.append("disaggregated candidates not searched: fleet mode (fleet.gpus) answers the rate of "
                             "the given GPUs as aggregated replicas")
        else:
            from llmplan.optimizer.spec_candidates import search_setting

            res = plan(model, [(g, g.usd_per_hour) for g in gpus], app.engine, wl, slos, space, avail,
                       app.calibration, progress, verifier, search_setting(model, asdict(app.speculative)))
        res.notes[:0] = notes
        from llmplan.sim.frontend_ceiling import frontend_note

        if frontend_note(app.engine):   # engine.frontend=dynamo: the screen and the DES floor every step
            res.notes.append(frontend_note(app.engine))
        waits = simulated_only_note(app.engine)   # sim/trtllm_batch_wait.py: the DES waits, the screen does not
        if waits:
            res.notes.append(waits + ": the analytical screen (candidates.csv, pareto.csv, the choice of finalists) "
                             "leaves it out" + ("; search.finalists=0 simulated nothing, so this plan leaves it out too"
                                                if space.finalists <= 0 else ""))
        check_checkpoint_servable(model, res, [g.key for g in gpus])
        if res.selection.feasible and space.finalists > 0:
            from llmplan.optimizer.verify import simulate_selection

            def simulate(r) -> bool:
                return simulate_selection(r, model, app.engine, app.workload, slos, app.seed, space.verify_requests)

            with step(progress, "deployment sim"):
                if res.fleet:  # the reported rate: one the whole-deployment steady-state simulation passes
                    from llmplan.optimizer.fleet import settle_rate

                    settle_rate(res, simulate)
                else:
                    simulate(res)
        risk.finish_confidence(res, point_slos, slos, app.search.confidence, app.engine.name)
    return res, model


def run_plan(cfg: DictConfig, out_dir: Path | None = None, console: Console | None = None) -> int:
    """Plan from a composed config. Returns an exit code (0 ok, 3 infeasible)."""
    console = console or make_console()
    t0 = time.perf_counter()
    app = to_app(cfg)
    if app.colocate.models:  # several models: a shared pool or dedicated ones (optimizer/colocation_plan.py)
        from llmplan.cli.plan_colocate import run_colocate_plan

        return run_colocate_plan(app, out_dir or output_dir(), console, t0)
    from llmplan.cli.offline_plan_cmd import run_offline_plan, wants_offline

    if wants_offline(app):  # workload=offline target.tokens_per_s=N: GPUs for N tokens/s offline
        return run_offline_plan(app, out_dir or output_dir(), console, t0)
    plan_outputs.check_energy(app)
    from llmplan.cli.day_outputs import check_day_inputs

    check_day_inputs(app)  # a bad day.* input fails before the plan runs, not after it is written
    res, model = plan_from_app(app, console)
    out = out_dir or output_dir()
    context = {"model": model.key, "engine": app.engine.name, "calibration": app.calibration or "default",
               "seed": app.seed}
    from llmplan.optimizer.spec_candidates import annotate

    annotate(res)  # each deployment's speculation setting, for plan.json (optimizer/spec_candidates.py)
    d = report.write(res, out, context)
    report.render(res, d, console, None)
    try:
        d = plan_outputs.add_blocks(res, model, app, out, d)
    except DayInfeasible as exc:
        console.print(f"[bold red]No day plan:[/bold red] {exc}")
        return EXIT_INFEASIBLE
    finally:
        plan_outputs.render(d, console, out)
    console.print(f"[dim]planned in {time.perf_counter() - t0:.1f} s[/dim]")
    return EXIT_OK if res.feasible else EXIT_INFEASIBLE  # either serving mode (optimizer/mode_select.py)


def main(argv: list[str]) -> int:
    return hydra_app.run("plan", "plan", argv, lambda cfg: run_plan(cfg), SUMMARY)

"""`plan` with a closed-loop target (``workload=closed_loop workload.concurrency=64``): the
cheapest deployment whose closed loop of that many users meets every SLO
(optimizer/closed_loop.py; docs/PARETO.md). The plan function is passed in (no import cycle)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

from llmplan.cli.resolve import resolve_model, resolve_slos, workload_sample
from llmplan.errors import ConfigError
from llmplan.optimizer.closed_loop import closed_loop_check, plan_closed_loop
from llmplan.optimizer.risk import confidence_slos


def plan_users(app, console, show_progress: bool, plan_fn: Callable):
    """(PlanResult, model) for ``app.workload`` = closed loop of ``concurrency`` users."""
    if app.fleet.gpus or app.day.profile:
        raise ConfigError("a closed-loop target plans for users; fleet.gpus and day.profile plan for rates",
                          key="workload.arrival", fix="use an open-loop workload (workload=chat) with them")
    model = resolve_model(app)
    slos = resolve_slos(app)
    wl, _ = workload_sample(app, model, need_rate=False)
    # with search.confidence the closed loop must meet the tightened limits, as each round's plan does
    checked = confidence_slos(slos, app.engine.name, app.search.confidence)

    def at_rate(rate: float):
        a = copy.deepcopy(app)
        a.workload = replace(app.workload, arrival="poisson", rate_rps=rate)
        return plan_fn(a, console, show_progress)

    def check(res, m):
        return closed_loop_check(res, m, app.engine, app.workload, checked, app.seed)

    return plan_closed_loop(app, at_rate, check, slos, wl.mean_output_tokens)

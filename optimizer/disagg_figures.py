"""Headroom, KV budget and power of each pool of a disaggregated (xPyD) split
(``optimizer/disagg_candidates.py``), in the shape the aggregated selection reports them
(``optimizer/headroom.py``, ``kv_budget``, ``optimizer/energy.py``); docs/DISAGG.md
"choosing the mode".

* **Headroom**: a pool's capacity (workers x the screen's per-worker capacity within its SLO)
  against the plan's rate, which every request crosses in both pools. What limits a worker:
  prefill, the TTFT target (``slo``: M/D/1 queue + prompt + KV transfer + hand-off) or the 95%
  load cap (``compute``); decode, ``max_num_seqs`` (``batch_cap``), the KV cache (``kv_memory``)
  or the TPOT target at a larger batch (``slo``).
* **Power** of one worker's GPU: the time-average of its busy power (utilisation of the step it
  runs: one prompt chunk at the token budget for prefill, a decode step at the mean batch for
  decode, ``sim.power.step_utilization``) and idle power, weighted by its busy fraction. Busy
  fraction and decode batch come from the split's simulation (``optimizer/disagg_sim_stats.py``)
  when it ran, else from the screen: prefill ``load x prompt time``, decode the batch of
  Little's law ``n = load x output tokens x step(n)`` with busy ``min(1, n)`` (as aggregated).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from llmplan.optimizer.energy import _dtype
from llmplan.sim.power import PowerModel, duty_cycle_power_w, gpu_power_w, step_utilization, tdp_w
from llmplan.sim.types import StepShape


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def pool_headroom(pick: Any, rate_rps: float, slo_label: str) -> dict:
    """Capacity against load of one pool (per worker), utilisation, headroom and its limit."""
    from llmplan.optimizer.disagg_candidates import MAX_PREFILL_LOAD, decode_batch_limits, prefill_ms

    an, cap = pick.evaluation.analyzer, pick.capacity_rps
    load = rate_rps / pick.workers if pick.workers else math.inf
    if pick.role == "prefill":
        rho = cap * prefill_ms(pick.evaluation) / 1000.0
        limit, detail = (("compute", f"{MAX_PREFILL_LOAD:.0%} load cap of a worker")
                         if rho >= MAX_PREFILL_LOAD - 1e-9 or not slo_label
                         else ("slo", f"{slo_label} (M/D/1 queue + prompt + KV transfer + hand-off)"))
    else:
        e_seqs, kv_b = decode_batch_limits(an)
        if pick.batch >= min(e_seqs, kv_b):
            limit = "batch_cap" if e_seqs <= kv_b else "kv_memory"
            detail = (f"max_num_seqs {e_seqs}" if limit == "batch_cap"
                      else f"KV cache holds {kv_b} requests of mean length")
        else:
            limit, detail = "slo", f"{slo_label} at a batch of {pick.batch + 1}"
    util = load / cap if cap > 0 else math.inf
    return {"capacity_rps_per_worker": _r(cap, 4), "load_rps_per_worker": _r(load, 4),
            "utilisation": _r(util, 4), "headroom_pct": _r(100.0 * (1.0 - util), 1) if math.isfinite(util) else None,
            "limited_by": limit, "detail": detail, "capacity_basis": "analytical"}


def _little_batch(pick: Any, load_rps: float) -> float:
    """Decode sequences in flight at ``load_rps`` per worker: n = load x O x step(n) (fixed point)."""
    an = pick.evaluation.analyzer
    ctx = int(an.I + an.O / 2)
    n = 1.0
    for _ in range(60):
        b = max(1, int(round(n)))
        nxt = min(float(pick.batch or an.max_seqs), load_rps * an.O * an.step.step_time_ms(StepShape(0, 0, 0.0, 0, b, b * ctx)) / 1000.0)
        if abs(nxt - n) < 1e-3:
            break
        n = nxt
    return n


def pool_power(pick: Any, rate_rps: float, activity: dict | None, model: PowerModel = PowerModel()) -> dict:
    """Power of one pool (W per GPU, W in all) with the utilisation it assumes; None figures and a
    ``note`` when the GPU has no TDP in the catalog."""
    from llmplan.optimizer.disagg_candidates import prefill_ms

    ev, c = pick.evaluation, pick.evaluation.candidate
    an, gpus = ev.analyzer, pick.workers * c.gpus_per_replica
    load = rate_rps / pick.workers if pick.workers else 0.0
    tdp = tdp_w(c.gpu)
    base = {"role": pick.role, "gpu": c.gpu.key, "workers": pick.workers, "gpus": gpus, "tdp_w": tdp}
    if tdp is None:
        return base | {"power_w_per_gpu": None, "power_w": None, "note": f"{c.gpu.key}: no TDP in the GPU catalog"}
    act = activity or {}
    if pick.role == "prefill":
        shape = StepShape.build([(int(min(an.I, an.budget)), 0)], [])
        busy = act.get("busy_fraction")
        busy = min(1.0, load * prefill_ms(ev) / 1000.0) if busy is None else busy
        batch = None
    else:
        batch = act.get("mean_batch") or _little_batch(pick, load)
        shape = StepShape.build([], [int(an.I + an.O / 2)] * max(1, int(round(batch))))
        busy = act.get("busy_fraction")
        busy = min(1.0, batch) if busy is None else busy
    step = an.step
    if pick.role == "prefill":   # the prefill pool's step as the DES runs it (sim/disagg_launch.py, prefill_ms)
        from llmplan.sim.disagg_launch import DEFAULT_CONTEXT_LAUNCH, context_step_model

        step = context_step_model(an.step, DEFAULT_CONTEXT_LAUNCH)
    util = step_utilization(step.breakdown(shape), c.gpu, _dtype(c.gpu, c.prec.weights), an.step.pp)
    p_gpu = duty_cycle_power_w(gpu_power_w(util, tdp, model), model.idle_fraction * tdp, busy)
    return base | {"utilization_compute": _r(util.compute, 4), "utilization_memory": _r(util.memory, 4),
                   "busy_fraction": _r(busy, 4), "decode_batch_mean": _r(batch, 3),
                   "activity_basis": "simulated" if activity else "analytical",
                   "power_w_per_gpu": _r(p_gpu, 1), "power_w": _r(p_gpu * gpus, 1), "note": ""}


def step_error_band(pick: Any) -> dict | None:
    """p50/p90 error band (held-out kernel residuals, ``sim/uncertainty.py``) of the step a pool
    runs: a prompt chunk at the token budget (prefill) or a decode step at its batch (decode)."""
    from llmplan.sim.uncertainty import step_band

    an = pick.evaluation.analyzer
    shape = (StepShape.build([(int(min(an.I, an.budget)), 0)], []) if pick.role == "prefill"
             else StepShape.build([], [int(an.I + an.O / 2)] * max(1, int(pick.batch))))
    b = step_band(an.step, shape)
    if b is None:
        return None
    return {"metric": "ttft" if pick.role == "prefill" else "tpot", "p50_pct": b.p50_pct, "p90_pct": b.p90_pct,
            "tier": b.tier, "extrapolated": list(b.extrapolated)}


def kv_budget(pick: Any, model: Any, engine: Any, max_request_tokens: int) -> dict | None:
    """The engine's KV budget of one worker of a pool (``sim/memory.py``), as ``kv_budget`` per replica."""
    from llmplan.sim.memory import plan_memory

    c = pick.evaluation.candidate
    mem = plan_memory(model, c.gpu, c.par, c.prec, replace(engine, max_num_seqs=c.max_num_seqs), max_request_tokens)
    if mem.budget is None:
        return None
    return {"pool": f"{pick.role} {c.name}", "role": pick.role, **mem.budget.to_dict(), "lines": mem.budget.lines()}


def annotate(d: dict, opt: Any, wl: Any, slos: list, model: Any, engine: Any) -> dict:
    """Add each pool's ``headroom``, ``kv_capacity_tokens_per_worker`` and ``power`` to plan.json's
    disaggregated block ``d`` (``opt.as_dict``), and its ``kv_budget`` per pool."""
    labels = {m: next((s.label for s in sorted(slos, key=lambda s: s.limit_ms) if s.metric == m), "")
              for m in ("ttft", "tpot")}
    acts = ((opt.simulated or {}).get("pools") or {})
    budgets = []
    for pool, pick in zip(d["pools"], (opt.prefill, opt.decode)):
        pool["headroom"] = pool_headroom(pick, wl.rate_rps, labels["ttft" if pick.role == "prefill" else "tpot"])
        pool["kv_capacity_tokens_per_worker"] = pick.evaluation.kv_capacity_tokens
        pool["power"] = pool_power(pick, wl.rate_rps, acts.get(pick.role))
        pool["error_band"] = step_error_band(pick)
        b = kv_budget(pick, model, engine, int(wl.max_request_tokens))
        if b is not None:
            budgets.append(b)
    d["kv_budget"] = budgets
    return d

"""Power and J per output token of a chosen deployment (the model is in ``sim/power.py``).

Each pool's replicas run at their operating point (``Allocation.share_rps``). The analytical
replica model gives the mean iteration there: ``decode_seqs`` sequences decoding and
``prefill_tokens`` prompt tokens per iteration on average, in ``step_ms``. The step
model's breakdown of that average iteration gives the FLOPs and HBM bytes one GPU moves
per iteration; divided by the mean iteration time they give the average utilisation
(work is linear in tokens, so the average shape carries the average work). When fewer
than one sequence decodes on average (light load) the GPU idles the rest of the time:
busy fraction = min(1, decode_seqs).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from llmplan.optimizer.evaluate import ReplicaAnalyzer
from llmplan.optimizer.types import Allocation, Selection, WorkloadStats
from llmplan.sim.power import PowerModel, Utilization, duty_cycle_power_w, energy_cost, gpu_power_w, step_utilization, tdp_w
from llmplan.sim.types import StepShape

SOURCES = {
    "form": "Hong & Kim, 'An Integrated GPU Power and Performance Model', ISCA 2010; Leng et al., "
            "'GPUWattch', ISCA 2013 (idle/static power + dynamic power linear in unit activity)",
    "idle_fraction": "~70 W idle of 700 W on H100 SXM (nvidia-smi); stand-in, not measured here",
    "compute_weight": "Patel et al., 'Splitwise', ISCA 2024 (arXiv 2311.18677): prompt phase draws close to TDP",
    "memory_weight": "arXiv 2605.11999: memory-bound decode draws 137-300 W on a 700 W H200",
    "tdp_w": "hardware_catalog/data/gpus.yaml (per-GPU sources)",
}


@dataclass(frozen=True)
class PoolPower:
    gpu: str
    replicas: int
    gpus: int
    tdp_w: float | None
    utilization: Utilization | None
    busy_fraction: float
    power_w_per_gpu: float | None      # time-average board power
    power_w: float | None              # all GPUs of the pool
    output_tokens_per_s: float
    note: str = ""


def _dtype(gpu, weights: str) -> str:
    return weights if gpu.supports(weights) else "bf16"


def pool_power(a: Allocation, wl: WorkloadStats, model: PowerModel = PowerModel()) -> PoolPower:
    ev, c = a.evaluation, a.evaluation.candidate
    gpus = a.replicas * c.gpus_per_replica
    out_tps = a.replicas * a.share_rps * wl.mean_output_tokens
    tdp = tdp_w(c.gpu)
    an = ev.analyzer
    if tdp is None:
        return PoolPower(c.gpu.key, a.replicas, gpus, None, None, 0.0, None, None, out_tps,
                         f"{c.gpu.key}: no TDP in the GPU catalog; energy unknown")
    if not isinstance(an, ReplicaAnalyzer):
        return PoolPower(c.gpu.key, a.replicas, gpus, tdp, None, 0.0, None, None, out_tps,
                         "no replica model for this pool; energy unknown")
    op = an.operating_point(a.share_rps, [50.0])
    if not op.stable:
        return PoolPower(c.gpu.key, a.replicas, gpus, tdp, None, 1.0, None, None, out_tps,
                         f"operating point overloaded ({op.limit}); energy unknown")
    n_dec = max(1, int(round(op.decode_seqs)))
    pt = int(round(op.prefill_tokens))
    chunks = [(pt, int(max(0.0, an.I - pt) / 2))] if pt > 0 else []
    shape = StepShape.build(chunks, [int(an.I + an.O / 2)] * n_dec)
    timing = an.step.breakdown(shape)
    util = step_utilization(timing, c.gpu, _dtype(c.gpu, c.prec.weights), an.step.pp)
    # the breakdown's own stage time is the time of this average shape; use the replica
    # model's mean iteration time (it includes the mix of decode-only and prompt steps)
    if op.step_ms > 0 and timing.stage_ms > 0:
        scale = timing.stage_ms / op.step_ms
        util = Utilization(util.compute * scale, util.memory * scale)
    busy = min(1.0, op.decode_seqs) if a.share_rps > 0 else 0.0
    p_gpu = duty_cycle_power_w(gpu_power_w(util, tdp, model), model.idle_fraction * tdp, busy)
    return PoolPower(c.gpu.key, a.replicas, gpus, tdp, util, busy, p_gpu, p_gpu * gpus, out_tps)


def selection_energy(sel: Selection, wl: WorkloadStats, pue: float = 1.0, usd_per_kwh: float | None = None,
                     model: PowerModel = PowerModel()) -> dict:
    """JSON-ready energy summary of a selection: per-pool power, totals, J per output token.

    Totals are None (and ``unknown`` says why) when any pool's power is unknown."""
    pools = [pool_power(a, wl, model) for a in sel.allocations]
    unknown = [p.note for p in pools if p.power_w is None]
    out = {
        "power_model": asdict(model) | {"sources": SOURCES},
        "pue": pue, "usd_per_kwh": usd_per_kwh,
        "pools": [_pool_dict(p) for p in pools],
        "unknown": unknown,
        "gpu_power_w": None, "facility_power_w": None, "joules_per_output_token": None,
        "kwh_per_hour": None, "electricity_usd_per_hour": None, "total_usd_per_hour_with_electricity": None,
    }
    if unknown or not pools:
        return out
    out.update(_totals(sum(p.power_w for p in pools), sum(p.output_tokens_per_s for p in pools), pue, usd_per_kwh,
                       sel.total_usd_per_hour))
    return out


def _totals(power_w: float, out_tps: float, pue: float, usd_per_kwh: float | None, usd_per_hour: float) -> dict:
    """The energy summary's totals (``energy_cost``) for a GPU power and output token rate."""
    e = energy_cost(power_w, out_tps, pue, usd_per_kwh)
    return {"gpu_power_w": _r(e.gpu_power_w, 1), "facility_power_w": _r(e.facility_power_w, 1),
            "output_tokens_per_s": _r(e.output_tokens_per_s, 2),
            "joules_per_output_token": _r(e.joules_per_output_token, 4), "kwh_per_hour": _r(e.kwh_per_hour, 4),
            "electricity_usd_per_hour": _r(e.usd_per_hour, 4) if e.usd_per_hour is not None else None,
            "total_usd_per_hour_with_electricity":
                _r(usd_per_hour + e.usd_per_hour, 4) if e.usd_per_hour is not None else None}


def split_energy(dis: dict, wl: WorkloadStats, pue: float = 1.0, usd_per_kwh: float | None = None,
                 model: PowerModel = PowerModel()) -> dict:
    """The energy summary of a disaggregated split (plan.json ``disaggregated``), in the schema of
    :func:`selection_energy`: each pool's power (``optimizer/disagg_figures.py``: busy power of its
    step x its simulated busy fraction, idle otherwise) and the split's total over the output tokens
    at the plan's rate (every token is generated once, by the decode pool; the prefill pool's
    energy is part of each token's cost)."""
    pools = [dict(p["power"], replicas=p["workers"]) for p in dis["pools"] if p.get("power")]
    unknown = [p.get("note") or f"{p['gpu']}: power unknown" for p in pools if p.get("power_w") is None]
    if len(pools) < len(dis["pools"]):
        unknown.append("a pool has no power figure (plan.json disaggregated.pools[].power)")
    out = {"power_model": asdict(model) | {"sources": SOURCES}, "pue": pue, "usd_per_kwh": usd_per_kwh,
           "mode": "disaggregated", "xpyd": dis.get("xpyd"), "pools": pools, "unknown": unknown,
           "gpu_power_w": None, "facility_power_w": None, "joules_per_output_token": None,
           "kwh_per_hour": None, "electricity_usd_per_hour": None, "total_usd_per_hour_with_electricity": None}
    if unknown or not pools:
        return out
    out.update(_totals(sum(p["power_w"] for p in pools), wl.rate_rps * wl.mean_output_tokens, pue, usd_per_kwh,
                       float(dis["total_usd_per_hour"])))
    return out


def _r(x: float, nd: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _pool_dict(p: PoolPower) -> dict:
    return {
        "gpu": p.gpu, "replicas": p.replicas, "gpus": p.gpus, "tdp_w": p.tdp_w,
        "utilization_compute": _r(p.utilization.compute, 4) if p.utilization else None,
        "utilization_memory": _r(p.utilization.memory, 4) if p.utilization else None,
        "busy_fraction": _r(p.busy_fraction, 4),
        "power_w_per_gpu": _r(p.power_w_per_gpu, 1) if p.power_w_per_gpu is not None else None,
        "power_w": _r(p.power_w, 1) if p.power_w is not None else None,
        "output_tokens_per_s": _r(p.output_tokens_per_s, 2), "note": p.note,
    }

"""Headroom of a chosen pool: its capacity against the load assigned to it, and what limits
the capacity (docs/RISK.md).

The capacity per replica is the planner's: simulated for verified candidates, the corrected
analytical figure otherwise (``Evaluation.effective_capacity_rps``). What stops a higher rate
comes from the analytical screen's bisection (``optimizer/evaluate.py``): the first check that
fails just above the capacity. Its ``limit`` strings map to

* ``kv_memory``: the KV cache cannot hold the sequences in flight (``overloaded (KV cache)``);
* ``batch_cap``: ``max_num_seqs`` sequences in flight (``overloaded (max_num_seqs)``);
* ``compute``: the prompt work saturates the steps (``overloaded (prefill load)``), or no
  check failed inside the throughput bound;
* ``slo``: a latency target is missed first (the target is named in ``detail``).
"""

from __future__ import annotations

import math

from llmplan.optimizer.types import Allocation

LIMITS = {"KV cache": "kv_memory", "max_num_seqs": "batch_cap", "prefill load": "compute"}


def limited_by(binding: str) -> str:
    """kv_memory | batch_cap | compute | slo for an ``Evaluation.binding`` string."""
    if not binding:
        return "compute"
    if binding.startswith("overloaded"):
        for key, name in LIMITS.items():
            if key in binding:
                return name
        return "compute"
    return "slo"


def headroom(a: Allocation) -> dict:
    """Capacity, assigned load, utilisation (load / capacity), headroom (1 - utilisation) and
    the capacity limit of one pool."""
    cap, load = a.evaluation.effective_capacity_rps, a.share_rps
    util = load / cap if cap > 0 else math.inf
    return {"capacity_rps_per_replica": round(cap, 4), "load_rps_per_replica": round(load, 4),
            "utilisation": round(util, 4) if math.isfinite(util) else None,
            "headroom_pct": round(100.0 * (1.0 - util), 1) if math.isfinite(util) else None,
            "limited_by": limited_by(a.evaluation.binding), "detail": a.evaluation.binding or "throughput bound",
            "capacity_basis": "simulated" if a.evaluation.sim_capacity_rps is not None else "analytical"}

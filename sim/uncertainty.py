"""Error bands on step times, from the calibration's held-out kernel residuals.

A step's relative error is bounded by the time-weighted mean of its operators' errors
(errors of one family on one GPU are strongly correlated, so they are added, not pooled
in quadrature). Families with no calibration data (host overhead, memory ops) use the
specification tier's figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmplan.sim.types import StepShape

_FAMILY = {"gemm": "gemm", "attn_prefill": "attention_prefill", "attn_decode": "attention_decode",
           "moe": "moe", "mla": "mla_decode", "comm": "collective", "memory": "memory_op",
           "mla_bmm": "mla_bmm", "gdn": "gdn_decode", "gdn_prefill": "gdn_prefill", "gdn_decode": "gdn_decode"}


@dataclass(frozen=True)
class Band:
    p50_pct: float        # median absolute error of the step time, percent
    p90_pct: float        # 90th percentile absolute error, percent
    tier: str             # the dominant calibration tier (by time share)
    extrapolated: tuple[str, ...]  # operators queried outside the fitted shape range


def _band_gpu(step, tier: str) -> str | None:
    """The measured GPU whose own held-out figures give the band (its sibling for the
    sibling tier); None: the family's figures pooled over GPUs."""
    km = getattr(step, "kernels", None)
    if tier == "measured":
        return getattr(getattr(step, "gpu", None), "key", None)
    if tier == "sibling":
        return getattr(km, "source_gpu", None)
    return None


def step_band(step, shape: StepShape, calibration: str | None = None) -> Band | None:
    """Error band of ``step``'s time for ``shape``; None when no calibration is available."""
    try:
        from llmplan.sim.calibrated import error_band
    except ImportError:
        return None
    bd = step.breakdown(shape)
    total = sum(o.latency_ms for o in bd.ops if o.family != "host") or 1.0
    p50 = p90 = 0.0
    share_by_tier: dict[str, float] = {}
    for o in bd.ops:
        if o.family == "host":
            continue
        w = o.latency_ms / total
        share_by_tier[o.tier] = share_by_tier.get(o.tier, 0.0) + w
        try:
            b = error_band(_FAMILY.get(o.family, o.family), o.tier, calibration, gpu=_band_gpu(step, o.tier),
                           extrapolated=bool(o.extrapolated))
        except Exception:  # noqa: BLE001 - a family/tier without statistics: skip it
            continue
        p50 += w * b.get("p50_ape", 0.0)
        p90 += w * b.get("p90_ape", 0.0)
    tier = max(share_by_tier, key=share_by_tier.get) if share_by_tier else "spec"
    # error_band() returns fractions
    return Band(round(p50 * 100.0, 1), round(p90 * 100.0, 1), tier,
                tuple(sorted({o.name for o in bd.ops if o.extrapolated})))

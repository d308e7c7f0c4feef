"""Price tiers of one GPU type for a day of traffic: reserved, on-demand and spot.

* **reserved** (committed use): paid for every hour of the day whether used or not;
  always on, so it needs no scale-up lead time.
* **on-demand**: paid per interval it is running (including the scale-up lead before
  the interval it serves).
* **spot**: paid like on-demand, cheaper, and interrupted. ``spot_interruption_rate`` is
  the probability that a spot replica is interrupted during one interval. Assumption: an
  interrupted replica is lost for the rest of that interval (paid for it all, replaced in
  the next one), so a pool of ``n`` spot replicas is expected to deliver
  ``(1 - rate) x n`` replicas of capacity; spot is sized with that headroom.

Prices are $/GPU-hour; a replica of ``g`` GPUs costs ``g`` times that. Public list prices
with their sources are in ``../shared/reference/prices.csv`` (e.g. Hyperstack H100 SXM
on-demand $3.20, reserved-from $2.72, read 2026-08-26; CoreWeave HGX H100 on-demand
$49.24/instance-h, spot $19.71/instance-h, read 2026-09-20). They move: every tier is
set from config, and ``source`` travels into the report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from llmplan.errors import ConfigError

FIELDS = ("on_demand_usd_per_gpu_hour", "reserved_usd_per_gpu_hour", "spot_usd_per_gpu_hour",
          "spot_interruption_rate", "source")


@dataclass(frozen=True)
class PriceTiers:
    gpu: str
    on_demand_usd_per_gpu_hour: float | None
    reserved_usd_per_gpu_hour: float | None = None
    spot_usd_per_gpu_hour: float | None = None
    spot_interruption_rate: float = 0.0
    source: str = ""

    def tiers(self) -> tuple[str, ...]:
        """Tiers offered, in a fixed order."""
        return tuple(t for t, p in (("reserved", self.reserved_usd_per_gpu_hour),
                                    ("on_demand", self.on_demand_usd_per_gpu_hour),
                                    ("spot", self.spot_usd_per_gpu_hour)) if p is not None)

    def usd_per_gpu_hour(self, tier: str) -> float:
        return {"reserved": self.reserved_usd_per_gpu_hour, "on_demand": self.on_demand_usd_per_gpu_hour,
                "spot": self.spot_usd_per_gpu_hour}[tier]

    def capacity_factor(self, tier: str) -> float:
        """Expected fraction of a replica's capacity that serves (spot: after interruptions)."""
        return 1.0 - self.spot_interruption_rate if tier == "spot" else 1.0


def _price(value, key: str) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number ($/GPU-hour), got {value!r}", key=key, fix="e.g. 2.5, or null") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"must be a finite price >= 0 $/GPU-hour, got {value!r}", key=key, fix="e.g. 2.5")
    return v


def _rate(value, key: str) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number in [0, 1), got {value!r}", key=key, fix="e.g. 0.05") from None


def check(t: PriceTiers, key: str = "day.price_tiers") -> PriceTiers:
    """Validate one GPU type's tiers; returns it unchanged."""
    k = f"{key}.{t.gpu}"
    for f in FIELDS[:3]:
        _price(getattr(t, f), f"{k}.{f}")
    if not t.tiers():
        raise ConfigError("no price tier is set", key=k, fix="set on_demand_usd_per_gpu_hour (and optionally reserved/spot)")
    q = t.spot_interruption_rate
    if not (isinstance(q, (int, float)) and 0 <= q < 1):
        raise ConfigError(f"must be in [0, 1), got {q!r}", key=f"{k}.spot_interruption_rate",
                          fix="probability that a spot replica is interrupted in one interval, e.g. 0.05")
    return t


def from_mapping(mapping: Mapping, on_demand_defaults: Mapping[str, float] | None = None,
                 key: str = "day.price_tiers") -> dict[str, PriceTiers]:
    """``{gpu: {on_demand_usd_per_gpu_hour, reserved_usd_per_gpu_hour, spot_usd_per_gpu_hour,
    spot_interruption_rate, source}}`` -> PriceTiers per GPU type. A GPU type without an
    on-demand price gets the catalog's (``on_demand_defaults``); a GPU type only in
    ``on_demand_defaults`` gets on-demand only."""
    out: dict[str, PriceTiers] = {}
    defaults = dict(on_demand_defaults or {})
    for gpu, d in sorted((mapping or {}).items()):
        if not isinstance(d, Mapping):
            raise ConfigError(f"must be a mapping of tier prices, got {d!r}", key=f"{key}.{gpu}",
                              fix="e.g. {reserved_usd_per_gpu_hour: 2.72, spot_usd_per_gpu_hour: 2.46}")
        unknown = sorted(set(d) - set(FIELDS))
        if unknown:
            raise ConfigError(f"unknown field(s) {', '.join(unknown)}", key=f"{key}.{gpu}", fix="known: " + ", ".join(FIELDS))
        od = d.get("on_demand_usd_per_gpu_hour", defaults.get(gpu))
        out[gpu] = check(PriceTiers(
            gpu=gpu,
            on_demand_usd_per_gpu_hour=_price(od, f"{key}.{gpu}.on_demand_usd_per_gpu_hour"),
            reserved_usd_per_gpu_hour=_price(d.get("reserved_usd_per_gpu_hour"), f"{key}.{gpu}.reserved_usd_per_gpu_hour"),
            spot_usd_per_gpu_hour=_price(d.get("spot_usd_per_gpu_hour"), f"{key}.{gpu}.spot_usd_per_gpu_hour"),
            spot_interruption_rate=_rate(d.get("spot_interruption_rate", 0.0), f"{key}.{gpu}.spot_interruption_rate"),
            source=str(d.get("source", "") or "")), key)
    for gpu, price in sorted(defaults.items()):
        if gpu not in out:
            out[gpu] = check(PriceTiers(gpu, _price(price, f"{key}.{gpu}.on_demand_usd_per_gpu_hour"),
                                        source="catalog on-demand price"), key)
    return out

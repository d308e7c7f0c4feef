"""GPU power and energy per token from the step model's per-operator breakdown.

Power model (per GPU, board power, watts)::

    P = P_idle + (TDP - P_idle) * min(1, w_c * u_compute + w_m * u_memory)
    P_idle = idle_fraction * TDP

``u_compute`` is the achieved FLOP/s over the dense peak of the step's GEMM dtype and
``u_memory`` the achieved HBM bytes/s over the peak bandwidth, both averaged over the step
(``sum(op.flops) / (step time x peak)``). The form, a static/idle term plus a dynamic term
linear in the activity of each unit, is the component power model of Hong & Kim, "An
Integrated GPU Power and Performance Model" (ISCA 2010) and of GPUWattch (Leng et al.,
ISCA 2013); capping at TDP follows the board power limit (NVIDIA enforces it through
clocks, nvidia-smi ``power.limit``).

Default coefficients (stand-ins from published measurements, NOT fitted to our data; the
repository holds no power measurements; see docs/ENERGY.md):

* ``idle_fraction = 0.10``: an idle H100 SXM reads ~70 W of 700 W in nvidia-smi;
* ``compute_weight = 1.0``: compute-bound prompt processing draws close to TDP (Patel et
  al., "Splitwise", ISCA 2024, arXiv 2311.18677, Sec. III power characterisation);
* ``memory_weight = 0.45``: memory-bound decode draws far below TDP: 137-300 W on a 700 W
  H200 across attention architectures (arXiv 2605.11999, "The Illusion of Power Capping in
  LLM Decode"); 0.45 puts a decode step at 80% of HBM bandwidth at
  70 + 630 x 0.45 x 0.8 = 297 W on a 700 W GPU, the top of that range.

Host CPUs, NICs and cooling are outside the model; the facility overhead enters only
through the PUE in :func:`energy_cost`. Every function here is pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.sim.types import StepTiming


@dataclass(frozen=True)
class PowerModel:
    idle_fraction: float = 0.10   # idle board power / TDP
    compute_weight: float = 1.0   # dynamic power share at 100% tensor-core utilisation
    memory_weight: float = 0.45   # dynamic power share at 100% HBM bandwidth utilisation

    def __post_init__(self) -> None:
        for name in ("idle_fraction", "compute_weight", "memory_weight"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"PowerModel.{name} must be a finite number >= 0, got {v}")
        if self.idle_fraction > 1:
            raise ValueError(f"PowerModel.idle_fraction must be <= 1, got {self.idle_fraction}")


@dataclass(frozen=True)
class Utilization:
    compute: float   # achieved / peak dense FLOP/s (0..1, may exceed 1 only for bad inputs)
    memory: float    # achieved / peak HBM bytes/s


@dataclass(frozen=True)
class EnergyCost:
    """Energy and its price for a deployment at its operating point."""

    gpu_power_w: float                # all GPUs of the deployment, board power
    facility_power_w: float           # x PUE
    output_tokens_per_s: float
    joules_per_output_token: float    # facility energy (PUE included) per generated token
    kwh_per_hour: float               # facility energy per hour
    usd_per_hour: float | None        # electricity cost per hour (None: no price given)
    pue: float
    usd_per_kwh: float | None


def tdp_w(gpu: GPUSpec) -> float | None:
    """The catalog's TDP, or None when the catalog lists it as unknown (never guessed)."""
    if "tdp_w" in gpu.unknown or not gpu.tdp_w or gpu.tdp_w <= 0:
        return None
    return float(gpu.tdp_w)


def step_utilization(timing: StepTiming, gpu: GPUSpec, dtype: str, pp: int = 1) -> Utilization:
    """Average utilisation of one GPU over a step.

    ``timing`` comes from ``StepCostModel.breakdown``: operator FLOPs and bytes are per GPU
    and summed over the ``pp`` pipeline stages, and ``stage_ms`` is the time one GPU takes
    for its stage, so one GPU does ``sum / pp`` of the work in ``stage_ms``. Collectives
    (family ``comm``) move their bytes over NVLink/PCIe/network, not HBM: they are left out
    of the memory utilisation."""
    if timing.stage_ms <= 0:
        return Utilization(0.0, 0.0)
    secs = timing.stage_ms / 1e3
    flops = sum(o.flops for o in timing.ops) / max(1, pp)
    nbytes = sum(o.bytes for o in timing.ops if o.family != "comm") / max(1, pp)
    return Utilization(flops / (secs * gpu.peak_tflops(dtype) * 1e12), nbytes / (secs * gpu.hbm_bw_gbps * 1e9))


def gpu_power_w(util: Utilization, tdp: float, model: PowerModel = PowerModel()) -> float:
    """Board power of one GPU at a utilisation (watts)."""
    idle = model.idle_fraction * tdp
    activity = min(1.0, max(0.0, model.compute_weight * util.compute + model.memory_weight * util.memory))
    return idle + (tdp - idle) * activity


def duty_cycle_power_w(busy_power_w: float, idle_power_w: float, busy_fraction: float) -> float:
    """Time-average power when the GPU runs steps a fraction of the time and idles otherwise."""
    f = min(1.0, max(0.0, busy_fraction))
    return f * busy_power_w + (1.0 - f) * idle_power_w


def energy_cost(gpu_power_w_total: float, output_tokens_per_s: float, pue: float = 1.0,
                usd_per_kwh: float | None = None) -> EnergyCost:
    """J per output token, kWh per hour and (optionally) electricity $ per hour.

    ``pue`` (power usage effectiveness, >= 1) scales GPU power to facility power."""
    if not pue >= 1.0:
        raise ValueError(f"pue must be >= 1, got {pue}")
    if usd_per_kwh is not None and not usd_per_kwh >= 0:
        raise ValueError(f"usd_per_kwh must be >= 0, got {usd_per_kwh}")
    facility = gpu_power_w_total * pue
    jpt = facility / output_tokens_per_s if output_tokens_per_s > 0 else math.inf
    kwh_h = facility / 1e3
    usd_h = kwh_h * usd_per_kwh if usd_per_kwh is not None else None
    return EnergyCost(gpu_power_w_total, facility, output_tokens_per_s, jpt, kwh_h, usd_h, pue, usd_per_kwh)

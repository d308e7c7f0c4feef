"""The changed AppConfig of a `llmplan whatif` scenario (the `whatif` config node): scaled GPU
figures and prices, added GPU types, scaled SLOs and traffic. Used by the one-scenario
comparison (``whatif_cmd``) and the curves (``whatif_curve``)."""

from __future__ import annotations

import copy
from dataclasses import fields, replace

from llmplan.errors import ConfigError


def scenario(app):
    """The changed AppConfig (a deep copy; the baseline is untouched)."""
    from llmplan.hardware_catalog.loader import get_gpu

    w = app.whatif
    new = copy.deepcopy(app)
    if w.add_gpus and new.fleet.gpus:  # fleet mode plans the fleet's types: added candidates would be ignored
        raise ConfigError("fleet mode (fleet.gpus) plans the fleet's GPU types; added candidates would be ignored",
                          key="whatif.add_gpus", fix="drop whatif.add_gpus, or compare fleets in two runs")
    for key in w.add_gpus:
        get_gpu(key)
        if key not in new.gpu.candidates:
            new.gpu.candidates.append(key)
    # a scaled figure or price of a GPU type the plan never considers would change nothing: the
    # scenario would print "what if" columns equal to the baseline's without saying why
    # fleet mode plans the fleet's GPU types instead of gpu.candidates (llmplan/cli/plan_cmd.py)
    planned = {get_gpu(k).key for k in (list(new.fleet.gpus) or new.gpu.candidates)}
    for group in ("gpu_scale", "price_scale"):
        for key in getattr(w, group):
            if get_gpu(key).key not in planned:
                raise ConfigError(f"{key} is not a candidate GPU of this plan ("
                                  + (f"fleet.gpus: {', '.join(new.fleet.gpus)}" if new.fleet.gpus else
                                     f"gpu.candidates: {', '.join(new.gpu.candidates)}")
                                  + "), so scaling it changes nothing",
                                  key=f"whatif.{group}.{key}",
                                  fix=f"add it to fleet.gpus" if new.fleet.gpus else
                                  f"add it to the scenario with whatif.add_gpus=[{key}], or to both plans "
                                  f"with gpu.candidates")
    for key, figs in w.gpu_scale.items():
        gpu = get_gpu(key)
        over = dict(new.gpu.spec_overrides.get(key, {}))
        for fig, factor in figs.items():
            if not isinstance(factor, (int, float)) or not factor > 0:
                raise ConfigError(f"scale must be a positive number, got {factor!r}", key=f"whatif.gpu_scale.{key}.{fig}")
            if fig.endswith("_tflops"):
                base = gpu.dense_tflops.get(fig[: -len("_tflops")])
                if base is None:
                    raise ConfigError(f"{gpu.key} has no {fig}", key=f"whatif.gpu_scale.{key}.{fig}")
            elif hasattr(gpu, fig) and isinstance(getattr(gpu, fig), (int, float)):
                if fig in gpu.unknown and fig not in over:  # a catalog estimate, not a figure to scale:
                    # scaled, it would pass as given (llmplan.cli.resolve clears `unknown` for overrides)
                    raise ConfigError(f"{gpu.key}'s {fig} is unknown in the GPU catalog (its value is a placeholder)",
                                      key=f"whatif.gpu_scale.{key}.{fig}",
                                      fix=f"give the figure: gpu.spec_overrides='{{{key}: {{{fig}: <value>}}}}'")
                base = getattr(gpu, fig)
                if base == 0 and fig not in over:  # no such hardware (L40S: no scale-up fabric)
                    raise ConfigError(f"{gpu.key} has no {fig} (0 in the GPU catalog): nothing to scale",
                                      key=f"whatif.gpu_scale.{key}.{fig}", fix=f"drop {fig} for {key}")
            else:
                raise ConfigError("unknown GPU figure", key=f"whatif.gpu_scale.{key}.{fig}",
                                  fix="e.g. hbm_bw_gbps, hbm_gb, bf16_tflops, scaleup_bw_gbps")
            over[fig] = float(over.get(fig, base)) * float(factor)
        new.gpu.spec_overrides[key] = over
    # price_scale, slo_scale, rate_scale > 0 and finite: config_checks (RANGES)
    for key, factor in w.price_scale.items():
        new.gpu.usd_per_hour[key] = float(new.gpu.usd_per_hour.get(key, get_gpu(key).usd_per_hour)) * factor
    for f in fields(new.slo):  # every SLO limit (percentiles and means)
        v = getattr(new.slo, f.name)
        if v is not None:
            setattr(new.slo, f.name, v * w.slo_scale)
    if new.workload.rate_rps is not None:
        new.workload = replace(new.workload, rate_rps=new.workload.rate_rps * w.rate_scale)
    return new


def describe(w) -> str:
    parts = [f"{k}: " + ", ".join(f"{f} x{v:g}" for f, v in figs.items()) for k, figs in w.gpu_scale.items()]
    parts += [f"{k} price x{v:g}" for k, v in w.price_scale.items()]
    parts += [f"+{k}" for k in w.add_gpus]
    if w.slo_scale != 1:
        parts.append(f"SLOs x{w.slo_scale:g}")
    if w.rate_scale != 1:
        parts.append(f"rate x{w.rate_scale:g}")
    return "; ".join(parts) or "no change (set whatif.* keys)"

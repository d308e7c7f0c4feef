"""The `colocate` config group resolved: one entry per co-located model with its catalog
spec, workload, SLOs and length statistics (for `simulate` and `plan`; sim/colocation.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llmplan.cli.config_checks import check_node
from llmplan.errors import ConfigError, UserError
from llmplan.model_catalog.loader import load_model
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.types import SLOTarget
from llmplan.sim.workload import WorkloadSpec

#: keys of one ``colocate.models`` entry
ENTRY_KEYS = ("name", "workload", "slo")


@dataclass
class ColocateInput:
    key: str
    model: ModelSpec
    workload: WorkloadSpec
    slos: list[SLOTarget]
    stats: Any   # optimizer.types.WorkloadStats of the model's own workload


def _merged(base: Any, over: Any, key: str) -> Any:
    if over is None:
        return base
    if not isinstance(over, dict):
        raise ConfigError(f"must be a mapping of overrides, got {over!r}", key=key,
                          fix="e.g. {rate_rps: 1.0, input_tokens: {max_tokens: 2048}}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(base), over))
    except OmegaConfBaseException as exc:
        msg = str(exc).splitlines()[0]
        raise ConfigError(msg, key=key, fix="use the keys of the top-level group of the same name") from None


def colocate_inputs(app) -> list[ColocateInput]:
    """Resolve ``app.colocate.models``; ConfigError naming the entry and key for bad input."""
    from llmplan.cli.resolve import resolve_slos
    from llmplan.cli.simulate_run import length_stats

    entries = app.colocate.models
    if len(entries) < 2:
        raise ConfigError(f"co-location needs at least two models, got {len(entries)}", key="colocate.models",
                          fix="list two or more {name, workload, slo} entries (conf/colocate/)")
    out, seen = [], set()
    for i, raw in enumerate(entries):
        key = f"colocate.models[{i}]"
        if not isinstance(raw, dict) or not raw.get("name"):
            raise ConfigError("each entry needs a catalog model name", key=f"{key}.name", fix="e.g. {name: llama2_7b}")
        extra = sorted(set(raw) - set(ENTRY_KEYS))
        if extra:
            raise ConfigError(f"unknown key {extra[0]!r}", key=f"{key}.{extra[0]}", fix="known: " + ", ".join(ENTRY_KEYS))
        try:
            model = load_model(raw["name"])
        except UserError as exc:
            raise ConfigError(str(exc), key=f"{key}.name", fix=exc.fix) from None
        if model.key in seen:
            raise ConfigError(f"{model.key} is listed twice", key=f"{key}.name",
                              fix="list each model once; raise its workload.rate_rps instead")
        seen.add(model.key)
        wl = _merged(app.workload, raw.get("workload"), f"{key}.workload")
        check_node(wl, f"{key}.workload", "workload")  # the entry's overrides skip to_app's check_values
        if wl.arrival in ("poisson", "gamma") and wl.rate_rps is None:
            raise ConfigError(f"{model.key} has no request rate", key=f"{key}.workload.rate_rps",
                              fix="set each co-located model's workload.rate_rps")
        slo_cfg = _merged(app.slo, raw.get("slo"), f"{key}.slo")
        check_node(slo_cfg, f"{key}.slo", "slo")
        sub = replace(app, workload=wl, slo=slo_cfg)
        slos = resolve_slos(sub)
        out.append(ColocateInput(model.key, model, wl, slos, length_stats(sub, model)))
    return out

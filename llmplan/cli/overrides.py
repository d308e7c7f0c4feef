"""Command-line overrides checked against the schema before Hydra composes them.

Hydra's override grammar parses each ``key=value``; this module then decides, from the
parsed :class:`~hydra.core.override_parser.types.Override` objects and the dataclass schema
(``config_schema.AppConfig``), whether the key exists, which config group an option belongs
to, and which llmplan shortcuts apply:

* ``model=<catalog key | HF id | config.json path>`` and ``gpu=<catalog key>`` without a YAML
  file in ``conf/``;
* mapping-valued keys (``gpu.usd_per_hour={h100_sxm: 2.49}``, ``gpu.max_gpus.h100_sxm=8``)
  without Hydra's ``++`` prefix.

Sweeps (``a,b``, ``range()``, ``choice()``) expand here into one override list per job, so a
sweep's jobs are checked exactly like a single run. Every problem is a ConfigError that
names the key the user typed.
"""

from __future__ import annotations

import dataclasses
import itertools
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmplan.errors import ConfigError, suggest
from llmplan.paths import conf_dir

#: at most this many jobs in one sweep (each is composed and checked before any runs)
MAX_SWEEP_JOBS = 256
#: groups whose option may also be a catalog name (no YAML file needed)
SHORTCUT_GROUPS = ("model", "gpu")
#: groups no primary config chooses by default: added with `+group=option` (a bare
#: `group=option` gets the `+`); conf/experiment/ holds `# @package _global_` bundles
ADDED_GROUPS = ("experiment", "colocate")  # groups not in the primary defaults (colocate: sim/colocation.py)


# --------------------------------------------------------------------------- config groups


def search_dirs(overrides: list[str] = ()) -> list[Path]:
    """conf/ plus every ``file://`` folder named by a ``hydra.searchpath=[...]`` override."""
    dirs = [conf_dir()]
    for ov in overrides:
        if ov.lstrip("+").startswith("hydra.searchpath="):
            value = ov.split("=", 1)[1].strip("[]")
            dirs += [Path(p.strip().strip("'\"")[len("file://"):]) for p in value.split(",")
                     if p.strip().strip("'\"").startswith("file://")]
    return dirs


def group_options(group: str, dirs: list[Path] | None = None) -> list[str]:
    found: set[str] = set()
    for d in dirs or [conf_dir()]:
        g = Path(d) / group
        if g.is_dir():
            found |= {p.stem for p in g.glob("*.yaml")}
    return sorted(found)


def groups(dirs: list[Path] | None = None) -> list[str]:
    found: set[str] = set()
    for d in dirs or [conf_dir()]:
        if Path(d).is_dir():
            found |= {p.name for p in Path(d).iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    return sorted(found)


# --------------------------------------------------------------------------- the schema


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(t: Any) -> Any:
    if typing.get_origin(t) is typing.Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return args[0] if len(args) == 1 else t
    return t


@dataclass(frozen=True)
class SchemaKey:
    """Where a dotted key lands in the schema."""

    hint: Any            # the field's type (Optional stripped)
    in_mapping: bool     # the key is, or is inside, a Dict field (needs Hydra's `++`)


def lookup(key: str) -> SchemaKey:
    """The schema type of a dotted key; ConfigError with 'did you mean' if it does not exist."""
    from llmplan.cli.config_schema import AppConfig

    t: Any = AppConfig
    in_mapping = False
    parts = key.split(".")
    for i, part in enumerate(parts):
        t = _strip_optional(t)
        where = ".".join(parts[:i])
        if dataclasses.is_dataclass(t):
            hints = _hints(t)
            if part not in hints:
                raise ConfigError(f"unknown config key; {suggest(part, hints)}", key=key,
                                  fix=f"`llmplan <command> --cfg job -p {where}` lists the keys of {where}" if where
                                  else "`llmplan <command> --cfg job` lists every key")
            t = hints[part]
        elif typing.get_origin(t) is dict:
            in_mapping = True
            t = typing.get_args(t)[1]
        elif typing.get_origin(t) is list and part.isdigit():
            t = typing.get_args(t)[0]
        elif t is Any:
            break
        else:
            raise ConfigError(f"{where} is a single value and has no sub-key '{part}'", key=key,
                              fix=f"set {where}=<value>")
    t = _strip_optional(t)
    return SchemaKey(t, in_mapping or typing.get_origin(t) is dict)


def describe_type(t: Any) -> str:
    """'an integer', 'a list of numbers', ... for messages."""
    t = _strip_optional(t)
    origin = typing.get_origin(t)
    if origin is list:
        return "a list of " + describe_type(typing.get_args(t)[0]).split(" ", 1)[1] + "s, e.g. [1, 2]"
    if origin is dict:
        return "a mapping {key: " + describe_type(typing.get_args(t)[1]).split(" ", 1)[1] + "}"
    return {int: "an integer", float: "a number", bool: "a boolean (true/false)", str: "a text value"}.get(t, "a value")


# --------------------------------------------------------------------------- parsing


def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse(override: str):
    """One override parsed by Hydra's grammar; ConfigError naming it when it does not parse."""
    from hydra.errors import HydraException

    try:
        return _parser().parse_override(override)
    except HydraException as exc:  # OverrideParseException, or the grammar's own syntax error
        key = override.split("=", 1)[0].lstrip("+~") or override
        detail = str(exc).splitlines()[0]
        raise ConfigError(f"cannot parse '{override}': {detail}", key=key,
                          fix="quote values with spaces, commas or brackets: key='a b' (Hydra override grammar)") from None


def _is_hydra_key(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


# --------------------------------------------------------------------------- one job


def _shortcut(group: str, value: str, dirs: list[Path]) -> list[str] | None:
    """Overrides that stand for `model=<name>` / `gpu=<key>` when <name> has no YAML file."""
    if value in group_options(group, dirs):
        return None
    if group == "model":
        from llmplan.model_catalog.loader import load_model

        load_model(value)  # CatalogError (key `model`, did-you-mean) for an unknown name or path
        return [f"model.name='{_escape(value)}'", "model.config_path=null"]
    from llmplan.hardware_catalog.loader import get_gpu

    get_gpu(value)  # CatalogError (key `gpu`, did-you-mean) for an unknown GPU
    return [f"gpu.candidates=['{_escape(value)}']"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def check_job(overrides: list[str], dirs: list[Path]) -> list[str]:
    """One job's overrides (no sweeps), checked against the schema and rewritten for Hydra."""
    out: list[str] = []
    known_groups = groups(dirs)
    for line in overrides:  # a key given twice: the last wins, as in Hydra
        o = parse(line)
        key = o.key_or_group
        if not key:
            raise ConfigError(f"'{line}' names no key", key="overrides", fix="write key=value, e.g. workload.rate_rps=20")
        if _is_hydra_key(key):
            out.append(line)
            continue
        if o.is_delete():
            raise ConfigError("deleting a key is not supported", key=key,
                              fix=f"set it instead, e.g. {key}=null where the key allows no value")
        if o.package is not None:
            out.append(line)  # group@package: Hydra checks it
            continue
        value = o.value()
        if key in ADDED_GROUPS and key in known_groups:
            if not isinstance(value, str) or value not in group_options(key, dirs):
                raise ConfigError(f"unknown option '{value}'; {suggest(str(value), group_options(key, dirs))}", key=key,
                                  fix=f"pick one of conf/{key}/*.yaml: +{key}=<name>")
            out.append(f"+{key}={value}")
            continue
        if key in known_groups:
            if o.is_add() and key in groups():  # every group in conf/ is in the primary configs' defaults
                raise ConfigError(f"'+' adds a new entry, but {key} is already chosen", key=key,
                                  fix=f"drop the '+': {key}={value}")
            if not isinstance(value, str):
                raise ConfigError(f"expects one option name, got {value!r}", key=key,
                                  fix=f"one of: {', '.join(group_options(key, dirs))}")
            if key in SHORTCUT_GROUPS:
                rewritten = _shortcut(key, value, dirs)
                if rewritten:
                    out += rewritten
                    continue
            elif value not in group_options(key, dirs):
                raise ConfigError(f"unknown option '{value}'; {suggest(value, group_options(key, dirs))}", key=key,
                                  fix=f"pick one of conf/{key}/*.yaml or set single keys: {key}.<key>=<value>")
            out.append(line)
            continue
        if "." not in key and key not in _top_level_keys():
            hint = suggest(key, set(known_groups) | set(_top_level_keys()))
            raise ConfigError(f"no config group or key '{key}' ({hint})", key=key,
                              fix="config groups: " + ", ".join(known_groups) + "; `llmplan <command> --cfg job` lists keys")
        sk = lookup(key)
        if sk.in_mapping:
            out.append("++" + line.lstrip("+"))  # Hydra adds mapping entries only with ++
        elif o.is_add():
            out.append(line.lstrip("+"))  # `+key=v` on a schema key sets it
        else:
            out.append(line)
    return out


@lru_cache(maxsize=1)
def _top_level_keys() -> tuple[str, ...]:
    from llmplan.cli.config_schema import AppConfig

    return tuple(_hints(AppConfig))


# --------------------------------------------------------------------------- sweeps


@dataclass(frozen=True)
class Job:
    """One job of a run or sweep: what the user typed, and what Hydra composes."""

    typed: tuple[str, ...]       # the overrides as the user wrote them, one value per key
    swept: tuple[str, ...]       # the typed overrides that vary across the sweep
    hydra: tuple[str, ...]       # rewritten for Hydra (shortcuts, `++`)


def expand(overrides: list[str], multirun: bool) -> list[Job]:
    """The jobs an override list stands for; a sweep without -m is an error."""
    axes: list[list[str]] = []
    swept_keys: set[int] = set()
    for i, line in enumerate(overrides):
        o = parse(line)
        if o.is_sweep_override():
            if not multirun:
                raise ConfigError(f"'{line}' is a sweep", key=o.key_or_group,
                                  fix="add -m to run one job per value, or quote a text value with a comma: key='a,b'")
            if _is_hydra_key(o.key_or_group):
                raise ConfigError("hydra settings cannot be swept", key=o.key_or_group, fix="give one value")
            prefix = "+" * (1 if o.is_add() and not o.is_force_add() else 2 if o.is_force_add() else 0)
            axes.append([f"{prefix}{o.key_or_group}={v}" for v in o.sweep_string_iterator()])
            swept_keys.add(i)
        else:
            axes.append([line])
    combos = itertools.product(*axes)
    first = list(itertools.islice(combos, MAX_SWEEP_JOBS + 1))
    if len(first) > MAX_SWEEP_JOBS:
        raise ConfigError(f"the sweep has more than {MAX_SWEEP_JOBS} jobs", key="overrides",
                          fix="sweep fewer values per key or split the sweep")
    dirs = search_dirs(overrides)
    jobs = []
    for combo in first:
        typed = tuple(combo)
        jobs.append(Job(typed, tuple(c for i, c in enumerate(combo) if i in swept_keys), tuple(check_job(list(combo), dirs))))
    return jobs

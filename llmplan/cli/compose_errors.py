"""Hydra/OmegaConf composition errors as one ConfigError naming the key.

Decided by the exception's type and its structured attributes (``full_key``,
``missing_cfg_file``, ``options``, the YAML mark), never by matching message text.
"""

from __future__ import annotations

import dataclasses

from llmplan.cli.overrides import describe_type, lookup
from llmplan.errors import ConfigError, suggest


def _typed_value(key: str, overrides: list[str]) -> str | None:
    """The value the user gave for ``key`` (inside a mapping they gave, the entry's value)."""
    from llmplan.cli.overrides import parse

    for ov in reversed(overrides):
        k, _, text = ov.lstrip("+").partition("=")
        if key == k:
            return text
        if key.startswith(k + "."):
            value = parse(ov).value()
            for part in key[len(k) + 1:].split("."):
                if not isinstance(value, dict) or part not in value:
                    return text
                value = value[part]
            return repr(value)
    return None


def _type_error(key: str, overrides: list[str], detail: str) -> ConfigError:
    if key == "hydra" or key.startswith("hydra."):  # Hydra's own schema, not llmplan's
        return ConfigError(detail, key=key, fix="`llmplan <command> --cfg hydra` shows Hydra's settings")
    try:
        hint = lookup(key).hint
    except ConfigError as exc:  # a key that only a config file names
        return exc
    given = _typed_value(key, overrides)
    got = f", got {given}" if given is not None else " (set in a config file)"
    if dataclasses.is_dataclass(hint):  # a group of keys (workload.input_tokens: a LengthSpec), not one value
        names = [f.name for f in dataclasses.fields(hint)]
        fix = f"set its keys one by one: {key}.{names[0]}=<value> ..."
        if "mean_tokens" in names:  # a length distribution: the likely intent is a fixed length
            n = given if given is not None and given.lstrip("-").replace(".", "", 1).isdigit() else "1000"
            fix = f"e.g. {key}.kind=fixed {key}.mean_tokens={n} (every request {n} tokens)"
        return ConfigError(f"is a group of keys ({', '.join(names)}), not one value{got}", key=key, fix=fix)
    expected = describe_type(hint)
    return ConfigError(f"expects {expected}{got}", key=key, fix=f"give {key} {expected}")


def explain(exc: BaseException, overrides: list[str]) -> ConfigError:
    """The ConfigError for an exception raised while Hydra composed ``overrides``."""
    import yaml
    from hydra.errors import MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = mark.name if mark is not None else "config file"
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return ConfigError(f"YAML does not parse{at}: {exc.problem or exc.context}", key=where,
                           fix="fix the YAML syntax in that file")
    if isinstance(exc, MissingConfigException):
        group, _, option = (exc.missing_cfg_file or "").rpartition("/")
        if group:
            return ConfigError(f"unknown option '{option}'; {suggest(option, exc.options or [])}", key=group,
                               fix=f"pick one of conf/{group}/*.yaml or set single keys: {group}.<key>=<value>")
        return ConfigError(f"config '{exc.missing_cfg_file}' not found", key="config",
                           fix="choose the command (plan, simulate, whatif); --config-dir adds groups")
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, OmegaConfBaseException):
        cause = exc
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        detail = next((ln.strip() for ln in str(cause.msg).splitlines() if ln.strip()), type(cause).__name__)
        return _type_error(str(cause.full_key), overrides, detail)
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return ConfigError(first, key="overrides", fix="check: " + " ".join(overrides))

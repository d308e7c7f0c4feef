"""Running a Hydra-configured subcommand from the argparse-style dispatcher.

The composed config is validated first with Hydra's compose API so that a bad override
(unknown key, wrong type, unknown option, YAML that does not parse) becomes one clear
line and exit code 2 instead of a traceback; then ``hydra.main`` runs the job, which
gives output directories, ``-m`` multirun and launcher plugins for free.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from llmplan.errors import EXIT_USER_ERROR, ConfigError, UserError, suggest
from llmplan.paths import conf_dir

#: exit code of the last job run in this process (hydra.main does not return it)
_LAST_CODE: list[int] = [0]
MAX_SWEEP_CHECK = 256


def group_options(group: str) -> list[str]:
    d = conf_dir() / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def groups() -> list[str]:
    return sorted(p.name for p in conf_dir().iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


#: mapping-valued keys; Hydra only replaces/extends them with a `++` override
_DICT_KEYS = re.compile(r"((?:gpu\.(?:max_gpus|usd_per_hour|spec_overrides|topology))|(?:whatif\.(?:gpu_scale|price_scale)))(\.[^=]+)?=")


def _rewrite(overrides: list[str]) -> list[str]:
    """Shortcuts: `model=<catalog name or HF id>` and `gpu=<catalog key>` without a YAML file;
    `gpu.usd_per_hour={...}` (and the other mapping keys) without Hydra's `++` prefix."""
    out = []
    for ov in overrides:
        if _DICT_KEYS.match(ov):
            out.append("++" + ov)
            continue
        m = re.fullmatch(r"(model|gpu)=(.+)", ov)
        if m and "," not in m.group(2):
            group, value = m.groups()
            if value not in group_options(group):
                if group == "model":
                    out += [f"model.name={value}", "model.config_path=null"]
                else:
                    out.append(f"gpu.candidates=[{value}]")
                continue
        out.append(ov)
    return out


def _expand_sweeps(overrides: list[str]) -> list[list[str]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    axes: list[list[str]] = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    combos = [list(c) for c in itertools.islice(itertools.product(*axes), MAX_SWEEP_CHECK)]
    return [_rewrite(c) for c in combos]


def _explain(exc: Exception, overrides: list[str]) -> ConfigError:
    text = str(exc).replace("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "")
    if exc.__cause__ is not None:
        text += "\n" + str(exc.__cause__)
    full = re.search(r"full_key: (\S+)", text)
    if full and re.match(r"(gpu\.(usd_per_hour|max_gpus|spec_overrides)|whatif\.(gpu_scale|price_scale))\.", full.group(1)):
        what = "an integer GPU count" if ".max_gpus." in full.group(1) else "a number"
        return ConfigError(f"must be {what}", key=full.group(1),
                           fix=f"e.g. {full.group(1).split('.')[1]}='{{h100_sxm: 2}}'")
    m = re.search(r"Could not find '([^/']+)/([^']+)'", text)
    if m:
        group, opt = m.groups()
        return ConfigError(f"unknown option '{opt}'; {suggest(opt, group_options(group))}", key=group,
                           fix=f"pick one of conf/{group}/*.yaml or pass {group}.<key>=<value>")
    m = re.search(r"Key '([^']+)' not in '(\w+)'", text)
    if m:
        full = re.search(r"full_key: (\S+)", text)
        key = full.group(1) if full else m.group(1)
        return ConfigError("unknown config key", key=key, fix="check the spelling; `llmplan <command> --cfg job` prints every key")
    m = re.search(r"Value '([^']*)' (?:of type '[^']*' )?could not be converted to (\w+)", text)
    if m:
        full = re.search(r"full_key: (\S+)", text)
        key = full.group(1) if full else "config"
        return ConfigError(f"value '{m.group(1)}' is not a valid {m.group(2)}", key=key,
                           fix=f"give {key} a value of type {m.group(2).lower()}")
    m = re.search(r'in "([^"]+\.ya?ml)", line (\d+), column (\d+)', text)
    if m:
        return ConfigError(f"YAML does not parse at line {m.group(2)}, column {m.group(3)}: {text.splitlines()[0]}",
                           key=m.group(1), fix="fix the YAML syntax in that file")
    first = next((ln for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    full = re.search(r"full_key: (\S+)", text)
    detail = next((ln.strip() for ln in str(exc.__cause__ or "").splitlines() if ln.strip()), "")
    if full:
        return ConfigError(detail or first, key=full.group(1), fix="check the value's type and spelling")
    m = re.search(r"override (\S+?)=", text)
    return ConfigError(detail or first, key=m.group(1) if m else "config",
                       fix="check the overrides: " + " ".join(overrides))


def compose(config_name: str, overrides: list[str], config_dir: str | None = None) -> DictConfig:
    """Compose (and schema-check) a config; raises ConfigError with a clear message."""
    from hydra import compose as hcompose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from llmplan.cli.config_schema import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir or str(conf_dir()), version_base="1.3"):
            return hcompose(config_name=config_name, overrides=_rewrite(overrides))
    except Exception as exc:  # Hydra/OmegaConf raise many types; all are user input errors here
        raise _explain(exc, overrides) from None
    finally:
        GlobalHydra.instance().clear()


def print_help(command: str, summary: str) -> None:
    print(f"usage: llmplan {command} [group=option ...] [key=value ...] [-m]\n\n{summary}\n")
    print("config groups (conf/<group>/<option>.yaml):")
    for g in groups():
        print(f"  {g:<11} " + ", ".join(group_options(g)))
    print("\nexamples:")
    print(f"  llmplan {command} model=qwen3_32b gpu=h100_sxm slo.ttft_p90_ms=800 workload.rate_rps=20")
    print(f"  llmplan {command} -m model=llama3_1_8b,qwen3_32b gpu=h100_sxm,h200_sxm   # sweep, parallel jobs")
    print(f"  llmplan {command} --cfg job    # print the composed config")
    print("\n`model=` also takes a Hugging Face id; `model.config_path=/path/config.json` loads a local model;"
          " `gpu=<key>` any catalog GPU (`llmplan catalog gpus`).")


_VALUE_FLAGS = {"--cfg", "-c", "--config-dir", "-cd", "--package", "-p", "--config-name", "-cn"}


def _split_args(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(Hydra flags with their values, overrides, extra overrides for validation)."""
    flags: list[str] = []
    overrides: list[str] = []
    extra: list[str] = []
    it = iter(argv)
    for a in it:
        if a in _VALUE_FLAGS:
            value = next(it, None)
            if value is None:
                raise ConfigError(f"{a} needs a value", key=a)
            if a in ("--config-dir", "-cd"):
                path = Path(value).resolve()
                if not path.is_dir():
                    raise ConfigError(f"not a directory: {value}", key=a, fix="give a folder of config groups")
                value = str(path)
                extra.append(f"hydra.searchpath=[file://{path}]")
            if a in ("--config-name", "-cn"):
                raise ConfigError("choose the primary config with the command (plan/simulate)", key=a)
            flags += [a, value]
        elif a.startswith("-"):
            flags.append(a)
        else:
            overrides.append(a)
    return flags, overrides, extra


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


#: output directory of the job running in this process when it runs without hydra.main
CURRENT_OUTPUT_DIR: list[Path | None] = [None]


def _run_single(command: str, cfg: DictConfig, overrides: list[str], task: Callable[[DictConfig], int]) -> int:
    """A single run, in-process, on the config already composed and checked: the same output
    layout as Hydra (``hydra.run.dir``, ``.hydra/config.yaml`` and ``overrides.yaml``) without
    composing the config a second time."""
    import datetime

    from omegaconf import OmegaConf

    run_dir = next((o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir=")), None)
    if run_dir is None:
        run_dir = f"llmplan-out/{command}/{datetime.datetime.now():%Y-%m-%d_%H-%M-%S}"
    out = Path(run_dir)
    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create([o for o in overrides if not o.startswith("hydra.")]), out / ".hydra" / "overrides.yaml")
    CURRENT_OUTPUT_DIR[0] = out
    try:
        return task(cfg)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    finally:
        CURRENT_OUTPUT_DIR[0] = None


def run(command: str, config_name: str, argv: list[str], task: Callable[[DictConfig], int], summary: str) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print_help(command, summary)
        return 0
    multirun = any(a in ("-m", "--multirun") for a in argv)
    flags, overrides, extra = _split_args(argv)
    combos = _expand_sweeps(overrides) if multirun else [overrides]
    if not multirun:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        try:
            if any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(overrides)):
                raise ConfigError("a sweep (a,b or range) needs -m", key="overrides", fix=f"llmplan {command} -m ...")
        except ConfigError:
            raise
        except Exception as exc:
            raise _explain(exc, overrides) from None
    composed = [compose(config_name, combo + extra) for combo in combos]
    if not multirun and not flags:
        return _run_single(command, composed[0], overrides, task)

    import hydra

    from llmplan.cli.config_schema import register_configs

    register_configs()
    _LAST_CODE[0] = 0

    def job(cfg: DictConfig) -> int:
        try:
            code = task(cfg)
        except UserError as exc:
            print(exc.render(), file=sys.stderr)
            code = EXIT_USER_ERROR
        _LAST_CODE[0] = code
        if code and not _is_multirun():
            sys.exit(code)  # SystemExit passes through Hydra; a multirun job records its code instead
        return code

    job.__module__ = "llmplan"
    job.__name__ = command
    main = hydra.main(config_path=str(Path(conf_dir())), config_name=config_name, version_base="1.3")(job)
    old = sys.argv
    sys.argv = [f"llmplan {command}"] + flags + _rewrite(overrides)
    try:
        main()
    finally:
        sys.argv = old
    return _LAST_CODE[0]

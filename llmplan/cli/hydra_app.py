"""The Hydra entry point of `plan`, `simulate` and `whatif`.

Each command is a plain function ``task(cfg) -> exit code`` (``run_plan`` ...), which the
tests call on a config from :func:`compose`. :func:`run` drives it through Hydra's own APIs,
with no ``sys.argv`` patching and no module state:

* the overrides are parsed with Hydra's grammar, checked against the schema and expanded
  into jobs (:mod:`llmplan.cli.overrides`), so a sweep's jobs are checked like a single run;
* every job's config is composed with ``hydra.compose`` before anything runs; composition
  errors become one ConfigError (:mod:`llmplan.cli.compose_errors`);
* a single run goes through ``hydra.core.utils.run_job`` (output directory, ``.hydra/``
  files, logging), a sweep through the configured launcher plugin (joblib by default;
  ``hydra/launcher=ray_local`` runs the jobs as Ray tasks, docs/SWEEPS.md), the API that
  Hydra's own sweepers use; every job's outcome lands in ``summary.csv``. A sweep shows one
  bar of jobs finished on stderr (a terminal only); the jobs themselves draw none.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from llmplan.cli.compose_errors import explain
from llmplan.cli.gc_tuning import few_collections
from llmplan.cli.overrides import Job, expand, group_options, groups
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, EXIT_USER_ERROR, ConfigError, UserError, suggest
from llmplan.paths import conf_dir

__all__ = ["compose", "run", "groups", "group_options", "CliArgs", "parse_args"]

EXIT_BUG = 1

#: launcher options (``hydra/launcher=NAME``) that come from an optional plugin: the module to
#: find and how to install it
LAUNCHER_PLUGINS = {
    "ray_local": ("hydra_plugins.hydra_ray_launcher", "pip install 'llmplan[ray]'"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "pip install 'llmplan[ray]'"),
    "ray_aws": ("hydra_plugins.hydra_ray_launcher", "pip install 'llmplan[ray]'"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "pip install hydra-submitit-launcher"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "pip install hydra-submitit-launcher"),
}


def check_launcher(overrides: list[str]) -> None:
    """A launcher whose plugin is not installed: one ConfigError naming the install command."""
    import importlib.util

    for ov in overrides:
        key, _, value = ov.lstrip("+").partition("=")
        if key in ("hydra/launcher", "override hydra/launcher") and value in LAUNCHER_PLUGINS:
            module, install = LAUNCHER_PLUGINS[value]
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                raise ConfigError(f"the '{value}' launcher needs its Hydra plugin ({module}), which is not installed",
                                  key="hydra/launcher", fix=f"{install}, or drop hydra/launcher= (joblib, this machine)")


# --------------------------------------------------------------------------- composing


@contextmanager
def _hydra(job_name: str) -> Iterator[object]:
    """Hydra initialised on conf/ (the schema registered) for the duration of the block."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from llmplan.cli.config_schema import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name=job_name):
            yield GlobalHydra.instance()
    finally:
        GlobalHydra.instance().clear()


def _compose(config_name: str, overrides: list[str], hydra_config: bool = False) -> DictConfig:
    from hydra import compose as hydra_compose

    try:
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra_config)
    except Exception as exc:  # Hydra, OmegaConf and YAML raise many types; all are input errors here
        raise explain(exc, overrides) from None


def compose(config_name: str, overrides: list[str]) -> DictConfig:
    """The checked config of one job (no sweeps); raises ConfigError with a clear message."""
    (job,) = expand(list(overrides), multirun=False)
    with _hydra(config_name):
        return _compose(config_name, list(job.hydra))


# --------------------------------------------------------------------------- arguments


@dataclass
class CliArgs:
    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    help: bool = False
    cfg: str | None = None          # --cfg job|hydra|all: print the config instead of running
    package: str | None = None      # --package: print only this node
    resolve: bool = False


_FLAGS = ("-m", "--multirun", "-h", "--help", "--cfg", "-c", "--package", "-p", "--resolve", "--config-dir", "-cd")


def parse_args(argv: list[str]) -> CliArgs:
    a = CliArgs()
    it = iter(argv)
    for arg in it:
        if arg in ("-m", "--multirun"):
            a.multirun = True
        elif arg in ("-h", "--help"):
            a.help = True
        elif arg == "--resolve":
            a.resolve = True
        elif arg in ("--cfg", "-c", "--package", "-p", "--config-dir", "-cd"):
            value = next(it, None)
            if value is None or value.startswith("-"):
                raise ConfigError("needs a value", key=arg, fix={"--cfg": "--cfg job", "-c": "-c job"}.get(arg, f"{arg} <value>"))
            if arg in ("--cfg", "-c"):
                if value not in ("job", "hydra", "all"):
                    raise ConfigError(f"unknown config part '{value}'", key=arg, fix="--cfg job, --cfg hydra or --cfg all")
                a.cfg = value
            elif arg in ("--package", "-p"):
                a.package = value
            else:
                path = Path(value).resolve()
                if not path.is_dir():
                    raise ConfigError(f"not a directory: {value}", key=arg, fix="give a folder of config groups")
                a.overrides.append(f"hydra.searchpath=[file://{path}]")
        elif arg in ("--config-name", "-cn"):
            raise ConfigError("the command chooses the primary config", key=arg, fix="llmplan plan|simulate|whatif ...")
        elif arg.startswith("-"):
            raise ConfigError(f"unknown option; {suggest(arg, _FLAGS)}", key=arg, fix="`llmplan <command> --help`")
        else:
            a.overrides.append(arg)
    return a


def print_help(command: str, summary: str) -> None:
    print(f"usage: llmplan {command} [group=option ...] [key=value ...] [-m] [--cfg job|hydra|all [-p key]]\n\n{summary}\n")
    print("config groups (conf/<group>/<option>.yaml):")
    for g in groups():
        if g != "hydra":  # conf/hydra/launcher/: launcher options, listed below
            print(f"  {g:<11} " + ", ".join(group_options(g)))
    print("\nexamples:")
    print(f"  llmplan {command} model=qwen3_32b gpu=h100_sxm slo.ttft_p90_ms=800 workload.rate_rps=20")
    print(f"  llmplan {command} -m model=llama3_1_8b,qwen3_32b gpu=h100_sxm,h200_sxm   # sweep, parallel jobs")
    print(f"  llmplan {command} --cfg job    # print the composed config")
    print("\nsweep launchers (hydra/launcher=...; docs/SWEEPS.md): joblib (default, this machine), ray_local "
          "(Ray; pip install 'llmplan[ray]'), submitit_slurm (SLURM; pip install hydra-submitit-launcher)")
    print("\n`model=` also takes a Hugging Face id or a config.json path; `gpu=<key>` any catalog GPU"
          " (`llmplan catalog gpus`).\nOutputs: llmplan-out/<command>/<time>/ (hydra.run.dir=...);"
          " sweeps: llmplan-out/<command>-multirun/<time>/ with summary.csv (hydra.sweep.dir=...),\n"
          "one row per job with its status; a sweep exits 2 if a job had bad input, 1 on an internal error,"
          " 3 if a job found no deployment, else 0.")


def _print_cfg(cfg: DictConfig, args: CliArgs) -> None:
    node: object = cfg
    if args.cfg == "job":
        node = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    elif args.cfg == "hydra":
        node = OmegaConf.masked_copy(cfg, ["hydra"])
    if args.package:
        node = OmegaConf.select(node, args.package)
        if node is None:
            raise ConfigError("no such config node", key=args.package, fix="e.g. -p search")
    print(OmegaConf.to_yaml(node, resolve=args.resolve) if OmegaConf.is_config(node) else node)


# --------------------------------------------------------------------------- running


def writable_dir(path: Path, key: str) -> Path:
    """Create the output folder, or a ConfigError naming the key that set it."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"'{path}' is an existing file, not a folder", key=key, fix=f"give a folder: {key}=<dir>")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder '{path}': {exc.strerror or exc}", key=key,
                          fix=f"give a writable folder: {key}=<dir>") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder '{path}' is not writable", key=key, fix=f"give a writable folder: {key}=<dir>")
    return path


@dataclass(frozen=True)
class JobOutcome:
    code: int
    reason: str = ""


@dataclass(frozen=True)
class Task:
    """The Hydra task function around a command: a UserError becomes exit code 2 and a
    reason; in a sweep an internal error is recorded (with its traceback on stderr) so the
    other jobs still run and the summary lists it. Picklable for the joblib launcher."""

    run: Callable[[DictConfig], int]
    multirun: bool = False

    def __call__(self, cfg: DictConfig) -> JobOutcome:
        if self.multirun and "output" in cfg:  # parallel jobs sharing a terminal: the sweep draws one bar
            with open_dict(cfg):
                cfg.output.progress = False
        try:
            code = int(self.run(cfg) or 0)
        except UserError as exc:
            print(exc.render(), file=sys.stderr)
            return JobOutcome(EXIT_USER_ERROR, exc.render().removeprefix("error: ").replace("\n  fix: ", "; fix: "))
        except Exception as exc:
            if not self.multirun:
                raise
            traceback.print_exc()
            return JobOutcome(EXIT_BUG, f"internal error: {type(exc).__name__}: {exc}")
        return JobOutcome(code)


def _context(cfg: DictConfig):
    from hydra._internal.callbacks import Callbacks  # what Hydra.run/multirun hand to run_job and launchers
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext

    return HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=Callbacks(cfg))


def _run_single(cfg: DictConfig, task: Task) -> int:
    from hydra.core.utils import run_job
    from hydra.types import RunMode

    writable_dir(Path(str(cfg.hydra.run.dir)), "hydra.run.dir")
    with open_dict(cfg.hydra):
        cfg.hydra.mode = RunMode.RUN
    ret = run_job(task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                  hydra_context=_context(cfg))
    return ret.return_value.code  # re-raises an internal error (a bug keeps its traceback)


def _subdir(num: int, job: Job) -> str:
    safe = "".join(c if c.isalnum() or c in "._=,-" else "_" for c in ",".join(job.swept))
    return f"hydra.sweep.subdir='{num}_{safe}'" if safe else f"hydra.sweep.subdir={num}"


def sweep_exit_code(codes: list[int]) -> int:
    """Bad input (2) before an internal error (1) before infeasible (3); 0 when all succeeded."""
    for code in (EXIT_USER_ERROR, EXIT_BUG, EXIT_INFEASIBLE):
        if code in codes:
            return code
    return max(codes, default=EXIT_OK)


def _run_sweep(config_name: str, jobs: list[Job], task: Task) -> int:
    from hydra.core.plugins import Plugins
    from hydra.types import RunMode

    from llmplan.cli.sweep_summary import SweptJob, report

    hydra_lines = [o for o in jobs[0].hydra if o.lstrip("+").startswith("hydra")]
    master = _compose(config_name, hydra_lines, hydra_config=True)
    with open_dict(master.hydra):
        master.hydra.mode = RunMode.MULTIRUN
    sweep_dir = writable_dir(Path(str(master.hydra.sweep.dir)), "hydra.sweep.dir")
    own_subdir = any(o.lstrip("+").startswith("hydra.sweep.subdir=") for o in hydra_lines)
    job_overrides = [[o for o in j.hydra if o not in hydra_lines] + ([] if own_subdir else [_subdir(i, j)])
                     for i, j in enumerate(jobs)]
    launcher = Plugins.instance().instantiate_launcher(hydra_context=_context(master), task_function=task, config=master)
    with _sweep_progress(sweep_dir, len(jobs)):
        rets = launcher.launch(job_overrides, initial_job_idx=0)
    swept = []
    for i, (job, ret) in enumerate(zip(jobs, rets)):
        try:
            outcome = ret.return_value  # a JobOutcome; re-raises what escaped the task (recorded, not fatal)
        except Exception as exc:
            outcome = JobOutcome(EXIT_BUG, f"internal error: {type(exc).__name__}: {exc}")
        typed = " ".join(o for o in job.typed if not o.lstrip("+").startswith("hydra"))
        swept.append(SweptJob(i, typed, " ".join(job.swept), Path(ret.hydra_cfg.hydra.runtime.output_dir), outcome.code,
                              outcome.reason))
    report(sweep_dir, swept)
    return sweep_exit_code([s.code for s in swept])


#: files a job writes when it ends (plan / simulate / whatif); the sweep bar counts them
JOB_OUTPUTS = ("plan.json", "summary.json", "whatif.json")


@contextmanager
def _sweep_progress(sweep_dir: Path, total: int) -> Iterator[None]:
    """One bar on stderr of jobs whose output file exists (a job that fails counts at the end)."""
    import threading

    from llmplan.progress import stage_progress

    with stage_progress(None, True) as update:
        if update is None:
            yield
            return
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(0.5):
                done = sum(1 for d in sweep_dir.iterdir() if d.is_dir() and any((d / f).is_file() for f in JOB_OUTPUTS))
                update("sweep jobs", min(done, total), total)

        update("sweep jobs", 0, total)
        t = threading.Thread(target=poll, daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
            update("sweep jobs", total, total)


def run(command: str, config_name: str, argv: list[str], task: Callable[[DictConfig], int], summary: str) -> int:
    """`llmplan <command> argv...`: compose, check and run (or sweep) ``task``; an exit code."""
    args = parse_args(argv)
    if args.help:
        print_help(command, summary)
        return EXIT_OK
    jobs = expand(args.overrides, args.multirun)
    check_launcher(list(jobs[0].hydra))
    with _hydra(command), few_collections():  # speed only (llmplan/cli/gc_tuning.py)
        if not args.multirun:
            cfg = _compose(config_name, list(jobs[0].hydra), hydra_config=True)
            if args.cfg:
                _print_cfg(cfg, args)
                return EXIT_OK
            return _run_single(cfg, Task(task))
        for i, job in enumerate(jobs):  # every job composes before any runs
            try:
                cfg = _compose(config_name, list(job.hydra), hydra_config=args.cfg is not None)
            except ConfigError as exc:
                if len(jobs) > 1:
                    exc.fix = (exc.fix + "; " if exc.fix else "") + f"in sweep job {i}: {' '.join(job.swept)}"
                raise
            if args.cfg:
                print(f"# job {i}: {' '.join(job.swept)}")
                _print_cfg(cfg, args)
        if args.cfg:
            return EXIT_OK
        return _run_sweep(config_name, jobs, Task(task, multirun=True))

"""The ``llmplan`` command: a thin dispatcher over subcommands.

Hydra-driven subcommands (plan, simulate, whatif) take Hydra overrides and ``-m`` for
multirun. Plain subcommands (catalog, calibrate, validate, measure) use argparse and
expose ``main(argv) -> int`` in their own module.
"""

from __future__ import annotations

import importlib
import sys

from llmplan.errors import EXIT_USER_ERROR, UserError

#: subcommand -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("llmplan.cli.plan_cmd:main", "cheapest deployment that meets the SLOs (Hydra overrides, -m for sweeps)"),
    "simulate": ("llmplan.cli.simulate_cmd:main", "simulate one deployment: latency percentiles, throughput, breakdown"),
    "whatif": ("llmplan.cli.whatif_cmd:main", "SLO-constrained what-if: change a GPU figure, price or SLO and re-plan"),
    "catalog": ("llmplan.cli.catalog_cmd:main", "list catalog entries: `llmplan catalog gpus|models`"),
    "calibrate": ("llmplan.calibration.cli_calibrate:main", "fit kernel efficiencies to measured latencies"),
    "validate": ("llmplan.calibration.cli_validate:main", "hold predictions against measurements: `validate kernels|serving`"),
    "measure": ("llmplan.calibration.microbench:main", "run the GPU microbenchmark sweep (needs llmplan[measure])"),
}


def _usage() -> str:
    lines = ["usage: llmplan <command> [args]", "",
             "Plan the cheapest GPU deployment for an LLM that meets TTFT/TPOT targets.", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`llmplan <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in ("-V", "--version"):
        from llmplan import __version__

        print(f"llmplan {__version__}")
        return 0
    if cmd not in COMMANDS:
        from llmplan.errors import suggest

        print(f"error: unknown command '{cmd}'; {suggest(cmd, COMMANDS)}", file=sys.stderr)
        return EXIT_USER_ERROR
    target, _ = COMMANDS[cmd]
    mod_name, func_name = target.split(":")
    func = getattr(importlib.import_module(mod_name), func_name)
    try:
        from llmplan.parallel import WORKERS_ENV, workers_env_error

        bad_workers = workers_env_error()  # worker processes of independent plans and simulations (llmplan/parallel.py)
        if bad_workers:
            raise UserError(bad_workers, key=WORKERS_ENV, fix="e.g. LLMPLAN_WORKERS=2 (1: one process)")
        code = func(rest)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

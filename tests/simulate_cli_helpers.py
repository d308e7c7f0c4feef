"""Run the CLI in-process for the simulate tests: exit code and captured output."""

from llmplan.cli import main


def run_cli(argv, capsys, out_dir):
    """(exit code, stdout, stderr) of ``llmplan <argv> hydra.run.dir=<out_dir>``."""
    try:
        code = main(argv + [f"hydra.run.dir={out_dir}"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err

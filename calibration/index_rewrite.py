"""The command line shared by the tools that rewrite one entry of a calibration index in place of
``llmplan calibrate`` (``crossgen_bands``, ``kernel_bands_cli``): the source index and the output
index, which must be a ``.json`` file beside the section files (those are not rewritten, so the
hashes the index holds for them stay valid).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from llmplan.errors import UserError


def index_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with ``--measurements``, ``--calibration`` and ``--out``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--measurements", required=True)
    p.add_argument("--calibration", default=None, help="calibration index (default: the shipped one)")
    p.add_argument("--out", required=True, help="index file to write, in the calibration's folder")
    return p


def index_paths(calibration: str | None, out: str) -> tuple[Path, Path]:
    """(source index, output index), refusing an output that is not a .json file beside the sections."""
    from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

    src = Path(calibration) if calibration else DEFAULT_PATH
    dst = Path(out)
    if dst.suffix.lower() != ".json":
        raise UserError(f"--out '{dst}' is not a .json file", key="out", fix="use a .json file name")
    if dst.resolve().parent != src.resolve().parent:
        raise UserError(f"--out '{dst}' is not beside the calibration's sections ({src.resolve().parent})",
                        key="out", fix="write the index into the calibration's folder")
    return src, dst

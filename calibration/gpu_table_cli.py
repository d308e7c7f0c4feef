"""The command line of the per-GPU table builders (``python -m llmplan.calibration.<builder> --measurements
DIR --out FILE``): build ``{gpu: table}`` from the measurements folder, write it with its provenance as
compact sorted JSON, and refuse a folder without the rows (exit 2, the builder's message)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from llmplan.errors import EXIT_USER_ERROR, UserError


def table_main(argv: list[str] | None, prog: str, description: str, build: Callable[[Path], dict[str, Any]],
               provenance: str) -> int:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--measurements", required=True, help="folder with one sub-folder per GPU")
    p.add_argument("--out", required=True, help="JSON file to write")
    a = p.parse_args(argv)
    try:
        gpus = build(Path(a.measurements))
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    doc = {"_provenance": provenance, "gpus": gpus}
    Path(a.out).write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {a.out}: {', '.join(sorted(gpus))}")
    return 0

"""Recompute only the cross-gen residual statistics (error bands) of a calibration index.

    python -m llmplan.calibration.crossgen_bands --measurements DIR [--calibration FILE] --out FILE

``llmplan calibrate`` stores, besides the fitted sections, the leave-one-GPU-out error
statistics of the cross-gen tier (``residuals["cross-gen"]``: p50/p90 APE per family, per GPU
and per GEMM/MoE dtype; :func:`llmplan.calibration.fit.residual_stats`). They depend on the
fitted sections *and* on the cross-gen tier's code, so a change to the tier alone leaves them
stale. This command rescores them with the current code on the calibration's own sections
(the same rows cap, ``crossgen_rows`` of its provenance) and writes a copy of the index with
only that entry replaced; the section files are not rewritten (their hashes in the index stay
valid), so ``--out`` must sit beside them (the same folder as ``--calibration``). Deterministic:
the same inputs give a byte-identical index.
"""

from __future__ import annotations

import json
import sys

from llmplan.calibration.index_rewrite import index_parser, index_paths
from llmplan.errors import UserError


def refreshed_index(index_text: str, cal: object, meas: object) -> str:
    """The index text with ``residuals["cross-gen"]`` rescored on ``meas`` (every other key kept)."""
    from llmplan.calibration.fit import FitOptions, residual_stats
    from llmplan.sim.kernel_calibration.calib_file import _dumps

    d = json.loads(index_text)
    rows = int(d.get("provenance", {}).get("options", {}).get("crossgen_rows", FitOptions().crossgen_rows))
    d.setdefault("residuals", {})["cross-gen"] = residual_stats(cal, meas, "cross-gen", "leave-one-GPU-out",
                                                                max_rows=rows)
    return _dumps(d)


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.reader import read_measurements
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    p = index_parser("python -m llmplan.calibration.crossgen_bands", __doc__.splitlines()[0])
    a = p.parse_args(argv)
    try:
        src, out = index_paths(a.calibration, a.out)
        cal = load_calibration(src)
        if len(cal.measured) < 2:
            raise UserError("the calibration has fewer than two measured GPUs: no leave-one-GPU-out",
                            key="calibration", fix="use a calibration fitted on two or more GPUs")
        meas = read_measurements(a.measurements, gpus=sorted(cal.measured))
        text = refreshed_index(src.read_text(encoding="utf-8"), cal, meas)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    out.write_text(text, encoding="utf-8")
    stats = json.loads(text)["residuals"]["cross-gen"]
    fams = [f for f in sorted(stats) if "@" not in f and ":" not in f]
    print(f"wrote {out}: cross-gen p90 APE " + ", ".join(f"{f} {100 * stats[f]['p90_ape']:.1f}%" for f in fams))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

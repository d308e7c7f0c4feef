"""Recompute only the measured-tier bands of the few-configuration kernel families of a
calibration index (calibration/kernel_bands.py says how they are computed).

    python -m llmplan.calibration.kernel_bands_cli --measurements DIR [--calibration FILE] --out FILE

Refits only the K folds of those families and rewrites only their ``residuals["measured"]``
entries in a copy of the index; the section files are not rewritten, so ``--out`` must sit
beside them. Deterministic: the same inputs give a byte-identical index.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from llmplan.calibration import kernel_bands as KB
from llmplan.calibration.index_rewrite import index_parser, index_paths
from llmplan.errors import UserError


def refreshed_index(index_text: str, meas: Any, opts: Any, progress: Any = None) -> str:
    """The index text with the band families' measured-tier entries recomputed (all else kept)."""
    from llmplan.sim.kernel_calibration.calib_file import _dumps
    from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

    d = json.loads(index_text)
    rows = d.get("provenance", {}).get("options", {}).get("crossgen_rows", opts.crossgen_rows)
    gpus = {k: GPUFeatures.from_spec(s) for k, s in sorted(meas.gpu_specs.items())}
    from llmplan.calibration.fit import fit_collectives, fit_measured, residual_stats

    pairs = KB.fold_pairs(meas, gpus, opts, (fit_measured, fit_collectives), progress)
    new = KB.band_stats(pairs, opts.residual_split, int(rows) if rows is not None else None, residual_stats)
    res = d.setdefault("residuals", {})
    res["measured"] = KB.replace_band_stats(res.get("measured", {}), new)
    return _dumps(d)


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.fit import FitOptions
    from llmplan.calibration.reader import read_measurements

    p = index_parser("python -m llmplan.calibration.kernel_bands_cli", __doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    try:
        src, out = index_paths(a.calibration, a.out)
        text = src.read_text(encoding="utf-8")
        prov = json.loads(text).get("provenance", {}).get("options", {})
        gpus = sorted({s["gpu"] for s in json.loads(text).get("provenance", {}).get("data", [])}) or None
        meas = read_measurements(a.measurements, gpus=gpus,
                                 tables=("moe", "mla_context", "mla_generation", "mla_bmm", "gdn", "moe_a2a"))
        from llmplan.calibration.splits import parse_split

        opts = FitOptions(workers=a.workers, residual_split=parse_split(prov.get("residual_split", "grouped:0.2:0")))
        text = refreshed_index(text, meas, opts)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    out.write_text(text, encoding="utf-8")
    stats = json.loads(text)["residuals"]["measured"]
    print(f"wrote {out}: measured p90 APE " + ", ".join(
        f"{f} {100 * stats[f]['p90_ape']:.1f}%" for f in KB.band_families_names() if f in stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

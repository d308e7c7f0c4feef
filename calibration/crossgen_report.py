"""Leave-one-GPU-out table of the cross-gen tier (docs/ACCURACY.md, "Cross-gen tier").

    python -m llmplan.calibration.crossgen_report --measurements DIR [--gpus a100_sxm,b200]
                                                  [--no-twin] [--max-rows 20000] [--calibration FILE]
                                                  [--decompose]

For every measured GPU of the calibration (or the ``--gpus`` given), ``validate kernels --tier
cross-gen`` on its rows: the pooled model of the other measured GPUs, from its specification
only. ``--no-twin`` also leaves out of the pool every measured GPU with the same compute
silicon as the scored one (:func:`llmplan.sim.kernel_calibration.crossgen.same_compute`, e.g.
H200 when scoring H100): such a GPU would get the sibling tier, so the plain leave-one-GPU-out
figure of a twin says nothing about a new generation. Prints one markdown row per GPU, MAPE %
per family with the roofline's in brackets (bold where the tier is worse), then the mean over
the cells and the number of cells worse than the roofline. ``--decompose`` prints instead where
the error sits per GPU and family (signed bias per roofline regime) and the oracle bounds of a
per-GPU offset (:mod:`llmplan.calibration.crossgen_decompose`).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from llmplan.errors import UserError
from llmplan.sim.kernel_calibration.calib_file import Calibration, load_calibration
from llmplan.sim.kernel_calibration.crossgen import same_compute

#: table columns: (family score name, header)
COLUMNS = (("gemm", "GEMM"), ("attention_prefill", "prefill attn"), ("attention_decode", "decode attn"),
           ("moe", "MoE"), ("mla_prefill", "MLA prefill"), ("mla_decode", "MLA decode"), ("mla_bmm", "MLA bmm"),
           ("gdn_prefill", "GDN prefill"), ("gdn_decode", "GDN decode"), ("collective", "collectives"))


@dataclass(frozen=True)
class Cell:
    mape: float            # fraction
    roofline_mape: float   # fraction, same rows

    @property
    def worse(self) -> bool:
        return math.isfinite(self.roofline_mape) and self.mape > self.roofline_mape


def twins(cal: Calibration, gpu: str) -> list[str]:
    """Measured GPUs other than ``gpu`` with the same compute silicon."""
    me = cal.gpus.get(gpu)
    if me is None:
        return []
    return [k for k in sorted(cal.measured) if k != gpu and k in cal.gpus and same_compute(cal.gpus[k], me)]


def pool_without(cal: Calibration, gpus: list[str]) -> Calibration:
    for g in gpus:
        cal = cal.without_gpu(g)
    return cal


def gpu_cells(meas: object, gpu: str, cal: Calibration, no_twin: bool, max_rows: int) -> dict[str, Cell]:
    """{family: Cell} of the cross-gen tier on ``gpu``'s measured rows."""
    from llmplan.calibration.validate_kernels import validate_kernels

    pool = pool_without(cal, twins(cal, gpu)) if no_twin else cal
    res = validate_kernels(meas, gpu, pool, force_tier="cross-gen", max_rows=max_rows, band_cal=cal)
    names = {c for c, _ in COLUMNS}
    return {s.family: Cell(s.mape, s.roofline_mape) for s in res.scores
            if s.family in names and s.scored and math.isfinite(s.mape)}


def gpu_decomposition(meas: object, gpu: str, cal: Calibration, no_twin: bool, max_rows: int) -> list:
    """:class:`crossgen_decompose.Decomposition` of every decomposed family on ``gpu``'s rows."""
    from llmplan.calibration import crossgen_decompose as D
    from llmplan.calibration.validate_kernels import validate_kernels
    from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

    pool = pool_without(cal, twins(cal, gpu)) if no_twin else cal
    res = validate_kernels(meas, gpu, pool, force_tier="cross-gen", max_rows=max_rows, band_cal=cal,
                           families=list(D.FAMILIES))
    feat = GPUFeatures.from_spec(meas.gpu_specs[gpu])
    out = []
    for fam in D.FAMILIES:
        f = res.frame[res.frame["family"] == fam] if len(res.frame) else res.frame
        d = D.decompose(D.with_regimes(f, fam, feat), fam) if len(f) else None
        if d is not None:
            out.append(d)
    return out


def markdown(rows: dict[str, dict[str, Cell]]) -> list[str]:
    """The table (one row per GPU) and a summary line."""
    out = ["| GPU | " + " | ".join(h for _, h in COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    cells = []
    for gpu, fams in rows.items():
        parts = []
        for fam, _ in COLUMNS:
            c = fams.get(fam)
            if c is None:
                parts.append("-")
                continue
            cells.append(c)
            txt = f"{100 * c.mape:.1f} ({100 * c.roofline_mape:.1f})"
            parts.append(f"**{txt}**" if c.worse else txt)
        out.append(f"| {gpu} | " + " | ".join(parts) + " |")
    if cells:
        mean = 100 * sum(c.mape for c in cells) / len(cells)
        roof = [c.roofline_mape for c in cells if math.isfinite(c.roofline_mape)]
        out.append(f"mean over {len(cells)} cells {mean:.1f}% (roofline {100 * sum(roof) / max(len(roof), 1):.1f}%); "
                   f"worse than the roofline in {sum(c.worse for c in cells)}")
    return out


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.reader import read_measurements

    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.crossgen_report",
                                description="leave-one-GPU-out table of the cross-gen kernel tier")
    p.add_argument("--measurements", required=True, help="measurement folder (one sub-folder per GPU)")
    p.add_argument("--gpus", default="", help="comma-separated GPU keys (default: every measured GPU of the calibration)")
    p.add_argument("--no-twin", action="store_true", help="also leave GPUs with the same compute silicon out of the pool")
    p.add_argument("--max-rows", type=int, default=20000, help="rows scored per family (deterministic sample)")
    p.add_argument("--calibration", default=None, help="calibration file (default: the shipped one)")
    p.add_argument("--decompose", action="store_true",
                   help="per GPU and family: signed bias per roofline regime and the oracle bounds of a "
                        "per-GPU offset (calibration/crossgen_decompose.py) instead of the table")
    a = p.parse_args(argv)
    try:
        if a.max_rows < 1:
            raise UserError(f"--max-rows must be >= 1, got {a.max_rows}", key="max-rows", fix="e.g. --max-rows 20000")
        cal = load_calibration(a.calibration)
        gpus = [g for g in a.gpus.split(",") if g] or sorted(cal.measured)
        unknown = [g for g in gpus if g not in cal.measured]
        if unknown:
            raise UserError(f"not measured in the calibration: {', '.join(unknown)}", key="gpus",
                            fix="use keys of measured GPUs: " + ", ".join(sorted(cal.measured)))
        rows = {}
        for g in gpus:
            meas = read_measurements(a.measurements, gpus=[g])
            if g not in meas.gpu_specs:
                raise UserError(f"no measurement folder for {g} under {a.measurements}", key="measurements",
                                fix="pass the folder that holds one sub-folder per GPU")
            label = g + (" (no " + ", ".join(twins(cal, g)) + ")" if a.no_twin and twins(cal, g) else "")
            rows[label] = (gpu_decomposition(meas, g, cal, a.no_twin, a.max_rows) if a.decompose
                           else gpu_cells(meas, g, cal, a.no_twin, a.max_rows))
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    if a.decompose:
        from llmplan.calibration import crossgen_decompose as D
        print("\n".join(D.markdown(rows)))
    else:
        print("\n".join(markdown(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Per-operator decomposition of a measured serving row's steps (issue 9, kernel mapping).

For one row of an ``e2e_serving.csv`` file (by its ``id`` or its 0-based index) this builds
the deployment the serving replay builds (:func:`calibration.serving_rows.map_row`, with the
shipped engine terms of the row's engine-version family) and prints the operators of two
representative steps, each with its kernel family, the engine whose table answered that
family, the calibration tier, whether the query was extrapolated, and the milliseconds:

* ``prefill``: one whole prompt of ``isl`` tokens (no decodes), i.e. the step that bounds
  TTFT at low concurrency;
* ``decode``: ``concurrency`` sequences at the mean KV length ``isl + osl / 2``, the step
  that sets TPOT.

The measured TTFT and TPOT are printed beside the step sums (TTFT also holds queueing and the
per-request term; TPOT the host time of every step), so a kernel family that is off by a
factor shows directly. ``--simulate`` also replays the row in the DES.

    python -m llmplan.calibration.row_breakdown --measurements ../shared/measurements --row 123
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmplan.calibration.engine_fit import corrected, load_engine_overrides
from llmplan.calibration.serving_rows import SimOptions, read_serving_files, simulate_case, step_model
from llmplan.calibration.validate_serving import map_row_with_terms
from llmplan.errors import EXIT_USER_ERROR, UserError
from llmplan.sim.types import StepShape

@dataclass(frozen=True)
class OpLine:
    """One operator of a step."""

    name: str
    family: str
    engine_table: str   # engine whose fitted table answered the query ("" for roofline / cross-gen)
    tier: str
    extrapolated: bool
    latency_ms: float


@dataclass(frozen=True)
class RowBreakdown:
    """The two representative steps of a row and what was measured."""

    row_id: str
    label: str
    prefill: tuple[OpLine, ...]
    decode: tuple[OpLine, ...]
    prefill_ms: float        # step time incl. host terms
    decode_ms: float
    measured_ttft_ms: float
    measured_tpot_ms: float


def find_row(df: Any, row: str) -> int:
    """Index of the row whose ``id`` is ``row``, else ``row`` read as a 0-based index."""
    if "id" in df.columns:
        hits = [i for i, v in enumerate(df["id"].astype(str)) if v == row]
        if hits:
            return hits[0]
    try:
        i = int(row)
    except ValueError:
        raise UserError(f"no row with id '{row}'", key="--row", fix="give a value of the file's id column or a 0-based index") from None
    if not 0 <= i < len(df):
        raise UserError(f"row index {i} outside the file (0..{len(df) - 1})", key="--row",
                        fix="give a value of the file's id column or a 0-based index")
    return i


def _lines(step: Any, shape: StepShape) -> tuple[tuple[OpLine, ...], float]:
    # each operator carries the engine whose table answered its own query (OpTime.table), so
    # the column does not depend on what the cached kernel model answered before
    timing = step.breakdown(shape)
    out = tuple(OpLine(o.name, o.family, o.table, o.tier, bool(o.extrapolated), float(o.latency_ms))
                for o in timing.ops)
    return out, float(timing.latency_ms)


def breakdown_case(case: Any, calibration: str | None = None) -> RowBreakdown:
    """The prefill and decode step decomposition of a mapped :class:`ServingCase`."""
    step = step_model(case, calibration)
    pf, pf_ms = _lines(step, StepShape.build([(case.isl, 0)], []))
    kv = case.isl + case.osl // 2
    dc, dc_ms = _lines(step, StepShape.build([], [kv] * case.concurrency))
    d = case.dep
    label = (f"{case.backend} {case.version} {case.model_path} on {d.gpu.key}: tp {d.par.tp} pp {d.par.pp} ep {d.par.ep} "
             f"dp {d.par.dp}, weights {d.prec.weights}, kv {d.prec.kv_cache}, isl {case.isl} osl {case.osl} "
             f"N {case.concurrency}")
    return RowBreakdown(case.row_id, label, pf, dc, pf_ms, dc_ms, case.measured_ttft_ms, case.measured_tpot_ms)


def case_of(df: Any, index: int, profiles: str | None = "default") -> tuple[Any, dict[str, Any]]:
    """(ServingCase, the row's engine terms) of row ``index`` with the shipped (or given) terms."""
    overrides, _ = load_engine_overrides(profiles)
    m, mine = map_row_with_terms(df.to_dict("records")[index], index, overrides)   # as the replay maps it
    if m.case is None:
        raise UserError(f"row {index} is not simulated: {m.status}", key="--row", fix="pick an aggregated, simulable row")
    return m.case, mine


def render(b: RowBreakdown) -> str:
    lines = [f"row {b.row_id}: {b.label}"]
    for title, ops, total, meas in (("prefill step (one prompt)", b.prefill, b.prefill_ms,
                                     f"measured mean TTFT {b.measured_ttft_ms:.2f} ms"),
                                    ("decode step (N sequences)", b.decode, b.decode_ms,
                                     f"measured mean TPOT {b.measured_tpot_ms:.2f} ms")):
        lines.append(f"  {title}: {total:.3f} ms incl. host ({meas})")
        lines.append(f"    {'operator':<22} {'family':<15} {'table':<7} {'tier':<9} {'ms':>9} {'share':>6}")
        for o in sorted(ops, key=lambda o: -o.latency_ms):
            share = o.latency_ms / total if total > 0 else 0.0
            flag = " (extrapolated)" if o.extrapolated else ""
            lines.append(f"    {o.name:<22} {o.family:<15} {o.engine_table or '-':<7} {o.tier:<9} "
                         f"{o.latency_ms:9.3f} {share:6.1%}{flag}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.row_breakdown", description=__doc__.split("\n\n")[0])
    p.add_argument("--measurements", nargs="+", required=True, help="e2e_serving.csv files or folders")
    p.add_argument("--row", action="append", required=True, help="the row's id (or 0-based index); repeatable")
    p.add_argument("--engine-profiles", default="default", help="'default' (shipped terms), 'none' or a JSON file")
    p.add_argument("--calibration", default=None, help="kernel calibration file (default: the shipped one)")
    p.add_argument("--simulate", action="store_true", help="also replay the row in the simulator")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        df = read_serving_files([Path(p) for p in a.measurements])
        for r in a.row:
            case, mine = case_of(df, find_row(df, r), a.engine_profiles)
            print(render(breakdown_case(case, a.calibration)))
            if a.simulate:
                opts = SimOptions(calibration=a.calibration, osl_jitter=float(mine.get("osl_jitter", 0.0)))
                p = simulate_case(case, opts, wrap=corrected(float(mine.get("prefill_scale", 1.0))))
                print(f"  simulated mean TTFT {p.ttft_ms:.2f} ms / TPOT {p.tpot_ms:.3f} ms "
                      f"(measured {case.measured_ttft_ms:.2f} / {case.measured_tpot_ms:.3f})")
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``llmplan calibrate``: fit the kernel latency model to measured kernel tables.

    llmplan calibrate --measurements DIR --out FILE [--gpus a,b] [--holdout-gpu NAME]
                      [--fit-date YYYY-MM-DD] [--no-residuals] [--workers N] [--quiet]

Writes a portable JSON calibration (never pickle): the index FILE (provenance, GPU figures,
collectives, the validation residuals used for error bands) and one section file per
measured GPU beside it (FILE.<gpu>.json). Checks that FILE can be written before reading
anything, shows progress and prints a summary table. The output is byte-identical for the
same input, whatever --workers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

from llmplan.calibration.cli_validate import add_moe_form_arg
from llmplan.errors import UserError

from llmplan.sim.kernel_calibration.calib_file import Calibration

DESCRIPTION = "Fit kernel latency models (per GPU, engine, operator family) to measured kernel tables."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmplan calibrate", description=DESCRIPTION)
    p.add_argument("--measurements", required=True, metavar="DIR",
                   help="folder with one sub-folder per GPU holding <table>.csv[.gz] files")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="calibration index to write (.json); per-GPU sections FILE.<gpu>.json go beside it")
    p.add_argument("--gpus", metavar="A,B", help="fit only these GPUs (catalog keys or aliases)")
    p.add_argument("--holdout-gpu", metavar="NAME", help="leave every row of this GPU out of the fit")
    p.add_argument("--fit-date", metavar="YYYY-MM-DD",
                   help="date recorded in the provenance (default: newest input file's date)")
    p.add_argument("--no-residuals", action="store_true",
                   help="skip the held-out residual statistics (faster; no error bands)")
    p.add_argument("--workers", type=int, default=2, metavar="N",
                   help="processes to fit with (default 2; the result does not depend on it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_moe_form_arg(p)
    return p


def _fit_date(arg: str | None, paths: list[Path]) -> str:
    if arg:
        try:
            return dt.date.fromisoformat(arg).isoformat()
        except ValueError as exc:
            raise UserError(f"bad --fit-date '{arg}'", key="fit-date", fix="use YYYY-MM-DD") from exc
    newest = max((p.stat().st_mtime for p in paths), default=0.0)
    return dt.datetime.fromtimestamp(newest, dt.timezone.utc).date().isoformat()


def check_out_file(out: Path) -> None:
    """Refuse (exit 2) before any work when ``out`` cannot be written: a directory, a path
    through an existing file, or a folder this process may not write into."""
    import os
    import tempfile

    fix = "pass --out FILE.json in a folder you can write to"
    if out.is_dir():
        raise UserError(f"--out {out} is a directory", key="out", fix=fix)
    if out.exists() and not os.access(out, os.W_OK):
        raise UserError(f"--out {out} is not writable", key="out", fix=fix)
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--out {out}: '{parent}' is a file, not a folder", key="out", fix=fix)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: folder '{parent}' is not writable", key="out", fix=fix)
    if parent == out.parent:     # the folder exists: prove it by creating a file in it
        try:
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".llmplan-write-test-"):
                pass
        except OSError as exc:
            raise UserError(f"--out {out}: cannot write into '{parent}' ({exc.strerror})", key="out",
                            fix=fix) from exc


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from rich.console import Console

    from llmplan.calibration.fit import FitOptions, fit_calibration, without_gpu
    from llmplan.sim.kernel_calibration.gpu_features import resolve_gpu
    from llmplan.calibration.reader import read_measurements

    out = Path(args.out)
    if out.suffix.lower() in (".pkl", ".pickle"):
        raise UserError(f"refusing to write '{out}': calibration files are JSON, never pickle", key="out",
                        fix="use a .json file name")
    check_out_file(out)      # before reading and fitting (minutes), not after
    if args.workers < 1:     # likewise: not after ~10 s of reading 4.7 million rows
        raise UserError(f"--workers {args.workers}: must be >= 1", key="workers", fix="e.g. --workers 2")
    console = Console(stderr=True)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    t0 = time.perf_counter()
    with console.status("reading measurements..."):
        meas = read_measurements(args.measurements, gpus=gpus)
    if args.holdout_gpu:
        key = resolve_gpu(args.holdout_gpu).key
        if key not in meas.gpu_specs:
            raise UserError(f"--holdout-gpu {key} has no measurements under {args.measurements}",
                            key="holdout-gpu", fix="measured GPUs: " + ", ".join(meas.gpus))
        meas = without_gpu(meas, key)
        if not meas.gpu_specs:
            raise UserError("nothing left to fit after the holdout", key="holdout-gpu")
    console.print(f"read {meas.rows():,} rows from {len(meas.sources)} tables of "
                  f"{', '.join(meas.gpus)} in {time.perf_counter() - t0:.1f}s")
    opts = FitOptions(residuals=not args.no_residuals, workers=args.workers, moe_form=args.moe_form,
                      fit_date=_fit_date(args.fit_date, [meas.root / s.path for s in meas.sources]))
    cal = _fit_with_progress(meas, opts, console, args.quiet, fit_calibration)
    # the folder's name only: shipped files carry no absolute path of the fitting machine
    # (every data entry's path is relative to this folder)
    cal.provenance["measurements"] = Path(args.measurements).resolve().name
    if args.holdout_gpu:
        cal.provenance["holdout_gpu"] = resolve_gpu(args.holdout_gpu).key
    path = cal.save(out)
    names = sorted(cal.files(path.name))
    size = sum((path.parent / n).stat().st_size for n in names) / 1e6
    from llmplan.calibration.cli_validate import _console

    print_summary(cal, _console())
    console.print(f"wrote {path} and {len(names) - 1} section file(s) beside it ({size:.1f} MB in all) "
                  f"in {time.perf_counter() - t0:.0f}s")
    return 0


def _fit_with_progress(meas, opts, console, quiet, fit):  # type: ignore[no-untyped-def]
    if quiet:
        return fit(meas, opts)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<48}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("fitting", total=1)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label[:48], completed=done, total=max(total, 1))

        return fit(meas, opts, progress)


def print_summary(cal: Calibration, console) -> None:  # type: ignore[no-untyped-def]
    """Per (GPU, engine, family): rows, dtype groups, base parameters; then residuals."""
    from rich.table import Table

    t = Table(title="fitted kernel models (base parameters of the largest group)")
    for col in ("GPU", "engine", "family", "groups", "rows", "floor us", "eta_c", "eta_m", "trees"):
        t.add_column(col, justify="right" if col not in ("GPU", "engine", "family", "groups") else "left")
    for gpu, by_b in sorted(cal.measured.items()):
        for backend, fams in sorted(by_b.items()):
            for fam, fm in sorted(fams.items()):
                big = max(fm.groups.values(), key=lambda g: g.rows)
                trees = sum(g.gbt.n_trees for g in fm.groups.values() if g.gbt is not None)
                t.add_row(gpu, backend, fam, ",".join(sorted(fm.groups)), f"{sum(g.rows for g in fm.groups.values()):,}",
                          f"{big.base.floor_us:.1f}", f"{big.base.eta_c:.2f}", f"{big.base.eta_m:.2f}", str(trees))
    for gpu, coll in sorted(cal.collectives.items()):
        n = sum(len(v) for cs in (coll.custom_ar, coll.nccl, coll.moe_a2a) for v in cs.curves.values())
        t.add_row(gpu, "-", "collectives", coll.fabric, f"{n} curves", "", "", "", "")
    console.print(t)
    if cal.residuals:
        r = Table(title="held-out residuals (absolute percentage error) used for error bands")
        for col in ("tier", "family", "rows", "MAPE %", "p50 %", "p90 %", "method"):
            r.add_column(col, justify="right" if col in ("rows", "MAPE %", "p50 %", "p90 %") else "left")
        for tier, fams in sorted(cal.residuals.items()):
            for fam, st in sorted(fams.items()):
                if ":" in fam or "@" in fam:
                    continue
                r.add_row(tier, fam, f"{st['rows']:,}", f"{100 * st['mape']:.1f}", f"{100 * st['p50_ape']:.1f}",
                          f"{100 * st['p90_ape']:.1f}", st.get("method", ""))
        console.print(r)

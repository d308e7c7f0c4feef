"""``llmplan validate``: hold predictions against measurements.

    llmplan validate kernels --measurements DIR --gpu NAME [--calibration FILE]
                             [--holdout-gpu NAME] [--split random:0.5:SEED | grouped:0.5:SEED]
                             [--tier auto|cross-gen] [--out FILE.csv] [--family F[,G]]
                             [--max-rows N] [--no-roofline]
    llmplan validate serving ...     (see ``llmplan validate serving --help``)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from llmplan.errors import EXIT_USER_ERROR, UserError, suggest

USAGE = ("usage: llmplan validate kernels --measurements DIR --gpu NAME [options]\n"
         "       llmplan validate serving --measurements FILE [options]\n\n"
         "`llmplan validate kernels --help` / `llmplan validate serving --help` for the options.")

FAMILY_ALIASES = {"attn_prefill": "attention_prefill", "prefill": "attention_prefill",
                  "attn_decode": "attention_decode", "decode": "attention_decode",
                  "all_reduce": "custom_allreduce", "allreduce": "custom_allreduce", "mla": "mla_prefill,mla_decode,mla_bmm",
                  "gdn": "gdn_prefill,gdn_decode",
                  "collective": "custom_allreduce,nccl,moe_a2a", "collectives": "custom_allreduce,nccl,moe_a2a",
                  "comm": "custom_allreduce,nccl,moe_a2a"}


def add_moe_form_arg(p: argparse.ArgumentParser) -> None:
    """``--moe-form``: the MoE work terms of a fit (features.MOE_FORMS; the shipped file's is the default)."""
    from llmplan.sim.kernel_calibration import features as F

    p.add_argument("--moe-form", choices=F.MOE_FORMS, default=F.MOE_FORM,
                   help=f"MoE work terms of the fit (default {F.MOE_FORM}, the shipped calibration's; "
                        "'routed': the tables' own routing, docs/ACCURACY.md 'MoE kernels (session 9)')")


def _kernels_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmplan validate kernels",
                                description="Predict every measured kernel row of one GPU and score the errors "
                                            "per operator family, next to the specification roofline.")
    p.add_argument("--measurements", required=True, metavar="DIR", help="folder with one sub-folder per GPU")
    p.add_argument("--gpu", required=True, metavar="NAME", help="the GPU whose rows are predicted")
    p.add_argument("--calibration", metavar="FILE", help="calibration file (default: the shipped fit); "
                   "ignored with --holdout-gpu/--split, which refit from --measurements")
    p.add_argument("--holdout-gpu", metavar="NAME", help="refit without any row of this GPU first")
    p.add_argument("--split", metavar="KIND:FRAC:SEED",
                   help="refit the GPU on part of its rows and score the rest: random:0.5:0 or grouped:0.5:0")
    p.add_argument("--tier", choices=("auto", "cross-gen"), default="auto",
                   help="auto: the tier users get for the GPU (measured, sibling or cross-gen); cross-gen: "
                        "score the pooled cross-generation model even for a measured GPU")
    p.add_argument("--out", metavar="FILE.csv", help="write one row per scored kernel (inputs + measured_ms, "
                   "predicted_ms, tier, roofline_ms)")
    p.add_argument("--family", action="append", metavar="F", help="only these families (repeat or comma-separate)")
    p.add_argument("--max-rows", type=int, default=100_000, metavar="N",
                   help="score at most N rows per family (deterministic sample; default 100000)")
    p.add_argument("--no-roofline", action="store_true", help="skip the roofline comparison")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_moe_form_arg(p)
    return p


def _families(values: list[str] | None) -> list[str] | None:
    from llmplan.calibration.validate_kernels import FAMILY_ORDER

    if not values:
        return None
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if not name:
                continue
            for f in FAMILY_ALIASES.get(name, name).split(","):
                if f not in FAMILY_ORDER:
                    raise UserError(f"unknown family '{name}'", key="family",
                                    fix=suggest(name, list(FAMILY_ORDER) + list(FAMILY_ALIASES)))
                out.append(f)
    return list(dict.fromkeys(out))


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def kernels_main(argv: list[str]) -> int:
    a = _kernels_parser().parse_args(argv)
    from rich.console import Console

    from llmplan.sim.kernel_calibration.calib_file import load_calibration
    from llmplan.sim.kernel_calibration.gpu_features import resolve_gpu
    from llmplan.calibration.reader import KERNEL_TABLES, SPLIT_TABLES, TABLES, read_measurements
    from llmplan.calibration.splits import parse_split
    from llmplan.calibration.validate_kernels import validate_kernels

    split = parse_split(a.split) if a.split else None
    from llmplan.calibration.fit import FitOptions
    from llmplan.sim.kernel_calibration import features as F

    if a.moe_form != F.MOE_FORM and not (split or a.holdout_gpu):
        raise UserError(f"--moe-form {a.moe_form} applies to a refit: the calibration file's MoE models keep the form "
                        "they were fitted with", key="moe-form", fix="add --split KIND:FRAC:SEED or --holdout-gpu NAME")
    if a.max_rows is not None and a.max_rows < 1:
        raise UserError("--max-rows must be >= 1", key="max-rows")
    families = _families(a.family)
    gpu = resolve_gpu(a.gpu).key
    holdout = resolve_gpu(a.holdout_gpu).key if a.holdout_gpu else None
    if a.out and Path(a.out).suffix.lower() != ".csv":
        raise UserError(f"--out {a.out}: expected a .csv file name", key="out")
    err = Console(stderr=True)
    t0 = time.perf_counter()
    tables = KERNEL_TABLES if not families else tuple(
        t for t in KERNEL_TABLES if TABLES[t][0] in families or set(SPLIT_TABLES.get(t, ())) & set(families))
    with err.status("reading measurements..."):
        # only what was asked for: the GPU's own tables, or every GPU for a holdout refit;
        # folders naming no catalog GPU are skipped (and listed in the report's notes)
        meas = read_measurements(a.measurements, gpus=None if holdout else [gpu], tables=tables,
                                 skip_unknown=True)
    if gpu not in meas.gpu_specs:
        raise UserError(f"no measurements for GPU {gpu} under {a.measurements}", key="gpu",
                        fix="measured GPUs there: " + ", ".join(meas.gpus))
    if holdout is not None and holdout not in meas.gpu_specs:
        raise UserError(f"--holdout-gpu {holdout} has no measurements under {a.measurements}", key="holdout-gpu",
                        fix="measured GPUs there: " + ", ".join(meas.gpus))
    cal = None if (split or holdout) else load_calibration(a.calibration)
    band_cal = load_calibration(a.calibration)
    status = err.status("refitting...") if (split or holdout) and not a.quiet else None
    progress = None
    if status is not None:
        status.start()
        progress = lambda label, done, total: status.update(f"refitting: {label} ({done}/{total})")  # noqa: E731
    try:
        res = validate_kernels(meas, gpu, cal, split, holdout, families, a.max_rows,
                               opts=FitOptions(residuals=False, moe_form=a.moe_form), progress=progress,
                               roofline=not a.no_roofline, force_tier=None if a.tier == "auto" else a.tier,
                               band_cal=band_cal)
    finally:
        if status is not None:
            status.stop()
    print_report(res, _console())
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        drop = [c for c in ("latency_ms",) if c in res.frame]
        res.frame.drop(columns=drop).to_csv(out, index=False)
        err.print(f"wrote {len(res.frame):,} rows to {out}")
    err.print(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


def _console():  # type: ignore[no-untyped-def]
    try:
        from llmplan.progress import make_console

        return make_console()
    except ImportError:  # pragma: no cover
        from rich.console import Console

        return Console()


def print_report(res, console) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    t = Table(title=f"kernel validation on {res.gpu}: {res.mode}")
    for col, right in (("family", False), ("rows", True), ("tier", False), ("MAPE %", True), ("p50 %", True),
                       ("p90 %", True), ("band p90 %", True), ("coverage %", True), ("roofline MAPE %", True), ("worst row (measured -> predicted ms)", False)):
        t.add_column(col, justify="right" if right else "left")
    for s in res.scores:
        tiers = ", ".join(f"{k} {v}" for k, v in sorted(s.tiers.items(), key=lambda kv: -kv[1]))
        worst = f"{s.worst[0][0]}: {s.worst[0][1]:.4g} -> {s.worst[0][2]:.4g}" if s.worst else ""
        style = "dim" if ":" in s.family else None
        t.add_row(s.family, f"{s.scored:,}" if s.scored == s.rows else f"{s.scored:,}/{s.rows:,}", tiers,
                  _pct(s.mape), _pct(s.p50), _pct(s.p90), _pct(s.band_p90), _pct(s.coverage),
                  _pct(s.roofline_mape), worst, style=style)
    console.print(t)
    for n in res.notes:
        console.print(f"[yellow]note:[/yellow] {n}")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else EXIT_USER_ERROR
    sub, rest = argv[0], argv[1:]
    if sub == "kernels":
        return kernels_main(rest)
    if sub == "serving":
        from llmplan.calibration.validate_serving import main as serving_main

        return int(serving_main(rest) or 0)
    print(f"error: unknown validate target '{sub}'; {suggest(sub, ['kernels', 'serving'])}\n{USAGE}",
          file=sys.stderr)
    return EXIT_USER_ERROR

"""Engine-level terms fitted to measured serving runs (host overhead, prefill correction).

Per engine (vllm, sglang, trtllm) we fit the per-iteration host overhead
``host_overhead_ms`` (h0), the per-running-sequence overhead ``host_overhead_per_seq_ms``
(h1) and, optionally, a multiplicative correction ``prefill_scale`` (s) on the marginal
cost of the prefill chunks of a step, by minimising the squared log error of the mean
TTFT and mean TPOT over that engine's simulable aggregated rows (robust ``soft_l1`` loss,
so the few runs that exhaust the KV cache do not dominate).

Method (exact, and fast): in a closed loop without think time, one replica with ``pp=1``
makes the same scheduling decisions whatever the step durations are: requests arrive
only when others finish, i.e. at step boundaries, so the sequence of batches depends on
step counts alone. Every request's TTFT and TPOT is therefore a *linear* function of the
step-time function, and so are their means. The step time under parameters ``(h0, h1, s)``
is ``base(shape) + (s - 1) * prefill(shape) + h0 + h1 * seqs(shape)``, so four DES runs per
row with probe cost models (``base``; 1 ms per step; 1 ms per sequence; ``prefill`` + 1 ms)
give coefficients from which the DES result for any parameters is a dot product. The fit
then costs nothing per evaluation; ``tests/test_validate_serving.py`` checks the identity
against direct simulation.

Hold-out: the rows of each engine are split at random (``seed``) into halves; the
parameters fitted on one half are scored on the other, before (the conf/engine
placeholders) and after. The values written to ``calibration/data/engine_profiles.json``
are then fitted on all rows of the engine.

Run: ``python -m calibration.engine_fit --measurements FILE.csv --out calibration/data/engine_profiles.json``
(or ``llmplan validate serving --measurements FILE.csv --fit-engines``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from calibration.serving_rows import (BACKENDS, SIMULATED, ServingCase, SimOptions, engine_profiles, map_row,
                                      map_rows, parallel_map, read_serving_csv, resolve_calibration, simulate_case)
from llmplan.errors import UserError
from sim.types import StepShape

DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "engine_profiles.json"
#: (lower, upper) bounds of (h0 ms, h1 ms, prefill scale)
BOUNDS = ((0.0, 50.0), (0.0, 2.0), (0.25, 4.0))
#: soft_l1 scale of the log residuals (about 25% error before the loss turns linear)
F_SCALE = 0.25


@dataclass(frozen=True)
class EngineParams:
    """The fitted engine-level terms."""

    host_overhead_ms: float
    host_overhead_per_seq_ms: float
    prefill_scale: float = 1.0

    def vector(self) -> np.ndarray:
        return np.array([self.host_overhead_ms, self.host_overhead_per_seq_ms, self.prefill_scale])


# ----------------------------------------------------------------------------- cost models


def _host_ms(step: Any, shape: StepShape) -> float:
    e = step.engine
    return e.host_overhead_ms + e.host_overhead_per_seq_ms * (shape.decode_seqs + shape.prefill_seqs)


def prefill_extra_ms(step: Any, shape: StepShape) -> float:
    """Marginal device time of a step's prefill chunks: the step minus its decode part
    (host overhead excluded)."""
    if not shape.prefill_seqs:
        return 0.0
    dec = StepShape(0, 0, 0.0, 0, shape.decode_seqs, shape.decode_kv_tokens)
    full = step.step_time_ms(shape) - _host_ms(step, shape)
    rest = step.step_time_ms(dec) - _host_ms(step, dec)
    return max(0.0, full - rest)


class PrefillScaled:
    """A step cost model whose prefill chunks cost ``scale`` times their marginal time."""

    def __init__(self, step: Any, scale: float):
        self.step, self.scale, self.pp = step, float(scale), step.pp

    def step_time_ms(self, shape: StepShape) -> float:
        return self.step.step_time_ms(shape) + (self.scale - 1.0) * prefill_extra_ms(self.step, shape)

    def stage_time_ms(self, shape: StepShape) -> float:
        return self.step.stage_time_ms(shape) + (self.scale - 1.0) * prefill_extra_ms(self.step, shape) / self.pp

    def breakdown(self, shape: StepShape) -> Any:
        return self.step.breakdown(shape)


def corrected(scale: float) -> Callable[[Any], Any] | None:
    """The wrap for :func:`calibration.serving_rows.simulate_case` applying a prefill scale."""
    if abs(scale - 1.0) < 1e-12:
        return None
    return lambda step: PrefillScaled(step, scale)


class _Probe:
    """Cost model returning one basis function of the shape (pp = 1 only)."""

    pp = 1

    def __init__(self, step: Any, kind: str):
        self.step, self.kind = step, kind

    def step_time_ms(self, shape: StepShape) -> float:
        if self.kind == "steps":
            return 1.0
        if self.kind == "seqs":
            return float(max(1, shape.decode_seqs + shape.prefill_seqs))
        return 1.0 + prefill_extra_ms(self.step, shape)   # "prefill" (+1: step times must be > 0)

    stage_time_ms = step_time_ms


# ----------------------------------------------------------------------------- basis


@dataclass(frozen=True)
class Basis:
    """Linear coefficients of one row: mean = c[0] + h0 c[1] + h1 c[2] + (s - 1) c[3]."""

    index: int
    backend: str
    model: str
    dense: bool
    measured_ttft_ms: float
    measured_tpot_ms: float
    ttft: tuple[float, float, float, float]
    tpot: tuple[float, float, float, float]
    tier: str

    def predict(self, p: EngineParams) -> tuple[float, float]:
        x = np.array([1.0, p.host_overhead_ms, p.host_overhead_per_seq_ms, p.prefill_scale - 1.0])
        return float(np.dot(self.ttft, x)), float(np.dot(self.tpot, x))


def zero_host(case: ServingCase) -> ServingCase:
    """The case with the engine's host overhead removed (the ``base`` probe)."""
    e = replace(case.dep.engine, host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0)
    return replace(case, dep=replace(case.dep, engine=e))


def basis_for(case: ServingCase, opts: SimOptions) -> Basis | str:
    """Four DES runs of one case -> its linear coefficients, or a status string."""
    if case.dep.par.pp != 1:
        return "invalid: pipeline parallel rows are not used by the engine fit (schedule depends on timing)"
    base = zero_host(case)
    runs = [simulate_case(base, opts)]
    for kind in ("steps", "seqs", "prefill"):
        runs.append(simulate_case(base, opts, wrap=lambda s, k=kind: _Probe(s, k)))
    for r in runs:
        if r.status != SIMULATED:
            return r.status
    t = [r.ttft_ms for r in runs]
    p = [r.tpot_ms for r in runs]
    t[3] -= t[1]
    p[3] -= p[1]
    return Basis(case.index, case.backend, case.dep.model.key, case.dense, case.measured_ttft_ms,
                 case.measured_tpot_ms, (t[0], t[1], t[2], t[3]), (p[0], p[1], p[2], p[3]), runs[0].tier)


def _basis_task(task: tuple[dict, int, SimOptions]) -> Basis | str:
    row, index, opts = task
    m = map_row(row, index, engine_profiles())
    if m.case is None:
        return m.status
    return basis_for(m.case, opts)


def compute_bases(rows: list[dict], indices: list[int], opts: SimOptions, workers: int = 2,
                  progress: Callable[[int, int], None] | None = None) -> list[Basis | str]:
    """Bases of the given rows (parallel)."""
    return parallel_map(_basis_task, [(rows[i], i, opts) for i in indices], workers, progress)


# ----------------------------------------------------------------------------- fit and scores


@dataclass(frozen=True)
class Errors:
    """Absolute percentage errors of mean TTFT and TPOT over a set of rows (fractions)."""

    rows: int
    ttft_mape: float
    ttft_median: float
    ttft_p90: float
    tpot_mape: float
    tpot_median: float
    tpot_p90: float


def ape_stats(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float, float]:
    """(MAPE, median APE, p90 APE) as fractions; NaN when empty."""
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0)
    if not ok.any():
        return math.nan, math.nan, math.nan
    e = np.abs(pred[ok] / meas[ok] - 1.0)
    return float(e.mean()), float(np.median(e)), float(np.quantile(e, 0.9))


def score(bases: list[Basis], p: EngineParams) -> Errors:
    if not bases:
        nan = math.nan
        return Errors(0, nan, nan, nan, nan, nan, nan)
    pred = np.array([b.predict(p) for b in bases])
    mt = np.array([b.measured_ttft_ms for b in bases])
    mp = np.array([b.measured_tpot_ms for b in bases])
    return Errors(len(bases), *ape_stats(pred[:, 0], mt), *ape_stats(pred[:, 1], mp))


def fit_params(bases: list[Basis], start: EngineParams, prefill_scale: bool = False) -> EngineParams:
    """Least-squares fit of (h0, h1[, s]) to the log errors of mean TTFT and TPOT."""
    from scipy.optimize import least_squares

    if not bases:
        return start
    T = np.array([b.ttft for b in bases])
    P = np.array([b.tpot for b in bases])
    y = np.log(np.concatenate([[b.measured_ttft_ms for b in bases], [b.measured_tpot_ms for b in bases]]))
    k = 3 if prefill_scale else 2
    lo = np.array([BOUNDS[i][0] for i in range(k)])
    hi = np.array([BOUNDS[i][1] for i in range(k)])

    def full(v: np.ndarray) -> np.ndarray:
        return np.array([1.0, v[0], v[1], (v[2] - 1.0) if k == 3 else 0.0])

    def resid(v: np.ndarray) -> np.ndarray:
        x = full(v)
        pred = np.concatenate([T @ x, P @ x])
        return np.log(np.maximum(pred, 1e-9)) - y

    x0 = np.clip(start.vector()[:k], lo + 1e-9, hi - 1e-9)
    best = None
    for guess in (x0, np.clip(np.array([1.0, 0.01, 1.0])[:k], lo, hi), np.clip(np.array([10.0, 0.1, 1.0])[:k], lo, hi)):
        r = least_squares(resid, guess, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE, x_scale=[1.0, 0.01, 0.1][:k])
        if best is None or r.cost < best.cost:
            best = r
    v = best.x
    return EngineParams(float(v[0]), float(v[1]), float(v[2]) if k == 3 else 1.0)


def random_halves(bases: list[Basis], seed: int) -> tuple[list[Basis], list[Basis]]:
    """Deterministic random split into (train, test) halves."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(bases))
    half = (len(bases) + 1) // 2
    return [bases[i] for i in sorted(order[:half])], [bases[i] for i in sorted(order[half:])]


@dataclass
class EngineFit:
    """Fit of one engine: parameters, hold-out and in-sample scores."""

    backend: str
    start: EngineParams                 # conf/engine values (before)
    holdout: EngineParams               # fitted on the training half
    final: EngineParams                 # fitted on all rows (written to the profile file)
    rows: int
    scores: dict[str, Errors] = field(default_factory=dict)  # before/after x train/test/all/dense


def fit_engine(backend: str, bases: list[Basis], start: EngineParams, seed: int,
               prefill_scale: bool) -> EngineFit:
    train, test = random_halves(bases, seed)
    hold = fit_params(train, start, prefill_scale)
    final = fit_params(bases, start, prefill_scale)
    dense = [b for b in bases if b.dense]
    sc = {"before/train": score(train, start), "before/test": score(test, start),
          "after/train": score(train, hold), "after/test": score(test, hold),
          "before/all": score(bases, start), "final/all": score(bases, final),
          "before/dense": score(dense, start), "final/dense": score(dense, final)}
    return EngineFit(backend, start, hold, final, len(bases), sc)


# ----------------------------------------------------------------------------- provenance, files


def data_dates(sources: list[str]) -> tuple[str | None, str | None]:
    """Earliest and latest ``measured=`` date named in ``silicon_data_source`` fields."""
    dates = sorted(m for s in sources for m in re.findall(r"measured=(\d{4}-\d{2}-\d{2})", str(s)))
    return (dates[0], dates[-1]) if dates else (None, None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_profiles(path: Path, fits: dict[str, EngineFit], provenance: dict[str, Any]) -> Path:
    """Write fitted values and provenance as JSON (stable key order)."""
    engines = {}
    for b, f in fits.items():
        engines[b] = {"host_overhead_ms": round(f.final.host_overhead_ms, 4),
                      "host_overhead_per_seq_ms": round(f.final.host_overhead_per_seq_ms, 5),
                      "prefill_scale": round(f.final.prefill_scale, 4),
                      "rows": f.rows,
                      "holdout": {"fitted_on_half": {k: round(v, 5) for k, v in asdict(f.holdout).items()},
                                  **{k: _rounded(asdict(v)) for k, v in f.scores.items()}}}
    doc = {"_provenance": provenance, "engines": engines}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


def _rounded(d: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else (None if isinstance(v, float) else v))
            for k, v in d.items()}


def load_engine_overrides(spec: str | None) -> tuple[dict[str, dict[str, float]], str]:
    """Engine overrides from ``--engine-profiles``: ``default`` (the packaged fit, when
    present), ``none`` (conf/engine values) or a JSON file. Returns (overrides, description)."""
    if spec is None or spec == "default":
        if not DEFAULT_OUT.is_file():
            return {}, "conf/engine placeholders (no fitted engine_profiles.json installed)"
        path = DEFAULT_OUT
    elif spec == "none":
        return {}, "conf/engine values (--engine-profiles none)"
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UserError(f"engine profiles file not found: {path}", key="--engine-profiles",
                            fix="give a file written by `python -m calibration.engine_fit`, 'default' or 'none'")
    try:
        doc = json.loads(path.read_text())
        engines = doc["engines"]
        out = {b: {k: float(v[k]) for k in ("host_overhead_ms", "host_overhead_per_seq_ms", "prefill_scale") if k in v}
               for b, v in engines.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"cannot read engine profiles {path}: {e}", key="--engine-profiles") from e
    return out, str(path)


# ----------------------------------------------------------------------------- driver


@dataclass
class FitResult:
    fits: dict[str, EngineFit]
    skipped: dict[str, int]            # reason -> rows not used
    provenance: dict[str, Any]


def run_fit(measurements: str | Path, opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
            backends: tuple[str, ...] = BACKENDS, workers: int = 2,
            progress: Callable[[int, int], None] | None = None) -> FitResult:
    """Read a measurements file and fit every engine in it (see :func:`fit_frame`)."""
    path = Path(measurements).expanduser()
    return fit_frame(read_serving_csv(path), path, opts, seed, prefill_scale, backends, workers, progress)


def fit_frame(df: Any, path: Path, opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
              backends: tuple[str, ...] = BACKENDS, workers: int = 2,
              progress: Callable[[int, int], None] | None = None) -> FitResult:
    """Bases for every simulable row of ``df`` (read from ``path``), then a fit per engine."""
    base = engine_profiles()
    maps = map_rows(df, base)
    skipped: dict[str, int] = {}
    for m in maps:
        if m.case is None:
            skipped[m.reason] = skipped.get(m.reason, 0) + 1
    idx = [m.index for m in maps if m.case is not None and m.case.backend in backends]
    rows = df.to_dict("records")
    out = compute_bases(rows, idx, opts, workers, progress)
    bases: list[Basis] = []
    for b in out:
        if isinstance(b, str):
            r = b.split(":", 1)[0]
            skipped[r] = skipped.get(r, 0) + 1
        else:
            bases.append(b)
    fits = {}
    for be in backends:
        mine = [b for b in bases if b.backend == be]
        if not mine:
            continue
        e = base[be]
        fits[be] = fit_engine(be, mine, EngineParams(e.host_overhead_ms, e.host_overhead_per_seq_ms, 1.0), seed,
                              prefill_scale)
    first, last = data_dates(df["silicon_data_source"].tolist())
    tiers = sorted({b.tier for b in bases})
    prov = {"data_file": path.name, "data_sha256": _sha256(path) if path.is_file() else None,
            "rows_in_file": int(len(df)),
            "rows_fitted": {b: f.rows for b, f in fits.items()}, "rows_not_used": dict(sorted(skipped.items())),
            "measured_from": first, "measured_to": last, "gpus": sorted(df["system"].astype(str).unique().tolist()),
            "kernel_calibration": opts.calibration or "default", "kernel_tiers": tiers,
            "sim_options": asdict(opts), "split": f"random halves per engine, seed {seed}",
            "method": ("least squares on log(mean TTFT) and log(mean TPOT), soft_l1 loss (f_scale "
                       f"{F_SCALE}); exact linear decomposition of closed-loop DES runs (calibration/engine_fit.py)"),
            "prefill_scale_fitted": prefill_scale}
    return FitResult(fits, skipped, prov)


def print_fit(res: FitResult, console: Any = None) -> None:
    """Rich tables: fitted values, before/after errors on the training and hold-out halves."""
    from rich.table import Table

    from llmplan.progress import make_console

    console = console or make_console()
    t = Table(title="Engine terms (before: conf/engine; half: fitted on the training half; final: all rows)")
    for c in ("engine", "rows", "h0 ms before", "h1 ms before", "h0 half", "h1 half", "s half",
              "h0 final", "h1 final", "s final"):
        t.add_column(c, justify="right" if c != "engine" else "left")
    for b, f in res.fits.items():
        t.add_row(b, str(f.rows), f"{f.start.host_overhead_ms:.3f}", f"{f.start.host_overhead_per_seq_ms:.4f}",
                  f"{f.holdout.host_overhead_ms:.3f}", f"{f.holdout.host_overhead_per_seq_ms:.4f}",
                  f"{f.holdout.prefill_scale:.3f}", f"{f.final.host_overhead_ms:.3f}",
                  f"{f.final.host_overhead_per_seq_ms:.4f}", f"{f.final.prefill_scale:.3f}")
    console.print(t)
    e = Table(title="Errors of mean TTFT / TPOT (MAPE, median APE, p90 APE, %)")
    for c in ("engine", "set", "rows", "TTFT MAPE", "TTFT med", "TTFT p90", "TPOT MAPE", "TPOT med", "TPOT p90"):
        e.add_column(c, justify="left" if c in ("engine", "set") else "right")
    for b, f in res.fits.items():
        for k, s in f.scores.items():
            e.add_row(b, k, str(s.rows), *(f"{100 * x:.1f}" for x in (s.ttft_mape, s.ttft_median, s.ttft_p90,
                                                                     s.tpot_mape, s.tpot_median, s.tpot_p90)))
    console.print(e)
    if res.skipped:
        console.print("rows not used: " + ", ".join(f"{k} {v}" for k, v in sorted(res.skipped.items())))


def add_sim_args(ap: argparse.ArgumentParser) -> None:
    """Options shared with ``llmplan validate serving``."""
    d = SimOptions()
    ap.add_argument("--calibration", default=None,
                    help="kernel calibration file, or 'spec' for the specification roofline (default: packaged fit)")
    ap.add_argument("--waves", type=int, default=d.waves, help=f"requests = max(waves x concurrency, {d.min_requests})")
    ap.add_argument("--window", choices=("steady", "all"), default=d.window,
                    help="requests averaged: steady (skip start-up burst and drain) or all")
    ap.add_argument("--osl-jitter", type=float, default=d.osl_jitter,
                    help="output lengths uniform in osl x [1-j, 1+j] (breaks lock-step of identical clients)")
    ap.add_argument("--workers", type=int, default=2, help="simulation processes")


def sim_options(a: argparse.Namespace) -> tuple[SimOptions, str]:
    """SimOptions from parsed arguments, with the calibration resolved (and a note)."""
    if a.waves < 1 or not (0.0 <= a.osl_jitter < 1.0):
        raise UserError("need --waves >= 1 and 0 <= --osl-jitter < 1", key="--waves/--osl-jitter")
    cal, note = resolve_calibration(a.calibration)
    return SimOptions(calibration=cal, waves=a.waves, window=a.window, osl_jitter=a.osl_jitter), note


def main(argv: list[str] | None = None) -> int:
    from llmplan.errors import EXIT_USER_ERROR
    from llmplan.progress import make_console, stage_progress

    ap = argparse.ArgumentParser(prog="python -m calibration.engine_fit", description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", required=True, help="serving runs in the e2e_serving.csv layout")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="fitted profiles JSON (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random hold-out split")
    ap.add_argument("--prefill-scale", action="store_true", help="also fit a per-engine prefill-time multiplier")
    ap.add_argument("--backend", action="append", choices=BACKENDS, help="engines to fit (default: all)")
    add_sim_args(ap)
    a = ap.parse_args(argv)
    console = make_console()
    try:
        opts, note = sim_options(a)
        if note:
            console.print(f"[yellow]note:[/] {note}")
        with stage_progress(console) as upd:
            prog = (lambda d, t: upd("simulate", d, t)) if upd else None
            res = run_fit(a.measurements, opts, a.seed, a.prefill_scale, tuple(a.backend or BACKENDS), a.workers, prog)
    except UserError as e:
        console.print(e.render(), style="red", markup=False, highlight=False)
        return EXIT_USER_ERROR
    print_fit(res, console)
    out = write_profiles(Path(a.out), res.fits, res.provenance)
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Engine-level terms fitted to measured serving runs.

Per engine (vllm, sglang, trtllm) we fit the per-iteration host overhead
``host_overhead_ms`` (h0), the per-running-sequence overhead ``host_overhead_per_seq_ms``
(h1), optionally a multiplicative correction ``prefill_scale`` (s) on the marginal cost of
the prefill chunks of a step, and the engine's *desynchronisation* ``osl_jitter`` (chosen
from :data:`JITTER_GRID`), by minimising the squared log error of the mean TTFT and mean
TPOT over that engine's simulable aggregated rows (robust ``soft_l1`` loss, so the few runs
that exhaust the KV cache do not dominate).

Desynchronisation: N identical closed-loop clients stay in lock-step forever in a
deterministic simulator (they arrive, prefill and finish together), while a real engine
and client drift apart to a degree that depends on the engine's request intake. The
simulator breaks lock-step by drawing output lengths uniformly in ``osl x [1 - j, 1 + j]``
(mean unchanged); ``j`` is picked per engine on the training rows.

Scheduling policy: SGLang does not mix prefill chunks into decode batches unless started
with ``--enable-mixed-chunk`` (off by default); it runs prefill batches first. That is the
simulator's ``chunked_prefill: false`` policy, set here for sglang (:data:`SCHEDULER`)
and written to the profile file with the fitted terms.

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

Hold-out: the rows of each engine are split at random (``seed``) into halves; the terms
fitted on one half (jitter included) are scored on the other, before (the conf/engine
placeholders, no jitter) and after. The values written to
``calibration/data/engine_profiles.json`` are then fitted on all rows of the engine.

Run: ``python -m llmplan.calibration.engine_fit --measurements FILE.csv --out calibration/data/engine_profiles.json``
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

from llmplan.calibration.serving_rows import (BACKENDS, SIMULATED, ServingCase, SimOptions, engine_profiles, map_row,
                                      map_rows, parallel_map, read_serving_csv, resolve_calibration, simulate_case)
from llmplan.errors import UserError
from llmplan.sim.types import StepShape

DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "engine_profiles.json"
#: (lower, upper) bounds of (h0 ms, h1 ms, prefill scale)
BOUNDS = ((0.0, 50.0), (0.0, 2.0), (0.25, 4.0))
#: soft_l1 scale of the log residuals (about 25% error before the loss turns linear)
F_SCALE = 0.25
#: desynchronisation values tried per engine (osl_jitter, see the module docstring)
JITTER_GRID = (0.0, 0.01, 0.02, 0.04)
#: scheduling policy of the measured engine versions where it differs from conf/engine
SCHEDULER: dict[str, dict[str, Any]] = {"sglang": {"chunked_prefill": False}}


@dataclass(frozen=True)
class EngineParams:
    """The fitted engine-level terms."""

    host_overhead_ms: float
    host_overhead_per_seq_ms: float
    prefill_scale: float = 1.0
    osl_jitter: float = 0.0

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


def _basis_task(task: tuple[dict, int, dict, SimOptions]) -> Basis | str:
    row, index, overrides, opts = task
    m = map_row(row, index, engine_profiles(overrides))
    if m.case is None:
        return m.status
    return basis_for(m.case, opts)


def compute_bases(rows: list[dict], indices: list[int], opts: SimOptions, workers: int = 2,
                  progress: Callable[[int, int], None] | None = None,
                  overrides: dict[str, dict[str, Any]] | None = None) -> list[Basis | str]:
    """Bases of the given rows (parallel); ``overrides`` as for :func:`engine_profiles`."""
    ov = SCHEDULER if overrides is None else overrides
    return parallel_map(_basis_task, [(rows[i], i, ov, opts) for i in indices], workers, progress)


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
    return fit_with_cost(bases, start, prefill_scale)[0]


def fit_with_cost(bases: list[Basis], start: EngineParams, prefill_scale: bool = False
                  ) -> tuple[EngineParams, float]:
    """:func:`fit_params` and the final robust cost (comparable between bases of the same rows)."""
    from scipy.optimize import least_squares

    if not bases:
        return start, math.inf
    T = np.array([b.ttft for b in bases])
    P = np.array([b.tpot for b in bases])
    y = np.log(np.concatenate([[b.measured_ttft_ms for b in bases], [b.measured_tpot_ms for b in bases]]))
    k = 3 if prefill_scale else 2
    lo = np.array([BOUNDS[i][0] for i in range(k)])
    hi = np.array([BOUNDS[i][1] for i in range(k)])

    def resid(v: np.ndarray) -> np.ndarray:
        x = np.array([1.0, v[0], v[1], (v[2] - 1.0) if k == 3 else 0.0])
        pred = np.concatenate([T @ x, P @ x])
        return np.log(np.maximum(pred, 1e-9)) - y

    x0 = np.clip(start.vector()[:k], lo + 1e-9, hi - 1e-9)
    best = None
    for guess in (x0, np.clip(np.array([1.0, 0.01, 1.0])[:k], lo, hi), np.clip(np.array([10.0, 0.1, 1.0])[:k], lo, hi)):
        r = least_squares(resid, guess, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE, x_scale=[1.0, 0.01, 0.1][:k])
        if best is None or r.cost < best.cost:
            best = r
    v = best.x
    return EngineParams(float(v[0]), float(v[1]), float(v[2]) if k == 3 else 1.0), float(best.cost)


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
    start: EngineParams                 # conf/engine values, no jitter (before)
    holdout: EngineParams               # fitted on the training half
    final: EngineParams                 # fitted on all rows (written to the profile file)
    rows: int
    scores: dict[str, Errors] = field(default_factory=dict)  # before/after x train/test/all/dense


def _pick(by_jitter: dict[float, list[Basis]], start: EngineParams, prefill_scale: bool) -> EngineParams:
    """Best (h0, h1[, s]) for each jitter; the jitter with the lowest cost wins."""
    best: tuple[float, EngineParams] | None = None
    for j, bases in sorted(by_jitter.items()):
        p, cost = fit_with_cost(bases, start, prefill_scale)
        if best is None or cost < best[0] - 1e-12:
            best = (cost, replace(p, osl_jitter=j))
    assert best is not None
    return best[1]


def fit_engine(backend: str, by_jitter: dict[float, list[Basis]], start: EngineParams, seed: int,
               prefill_scale: bool) -> EngineFit:
    """Hold-out fit on random halves, then the final fit on all rows. ``by_jitter`` maps each
    desynchronisation value to the bases of the same rows (in the same order)."""
    j0 = min(by_jitter)
    halves = {j: random_halves(b, seed) for j, b in by_jitter.items()}
    hold = _pick({j: h[0] for j, h in halves.items()}, start, prefill_scale)
    final = _pick(by_jitter, start, prefill_scale)
    train0, test0 = halves[j0]
    train, test = halves[hold.osl_jitter]
    every0, every = by_jitter[j0], by_jitter[final.osl_jitter]
    sc = {"before/train": score(train0, start), "before/test": score(test0, start),
          "after/train": score(train, hold), "after/test": score(test, hold),
          "before/all": score(every0, start), "final/all": score(every, final),
          "before/dense": score([b for b in every0 if b.dense], start),
          "final/dense": score([b for b in every if b.dense], final)}
    return EngineFit(backend, start, hold, final, len(every), sc)


# ----------------------------------------------------------------------------- provenance, files


def data_dates(sources: list[str]) -> tuple[str | None, str | None]:
    """Earliest and latest ``measured=`` date named in ``silicon_data_source`` fields."""
    dates = sorted(m for s in sources for m in re.findall(r"measured=(\d{4}-\d{2}-\d{2})", str(s)))
    return (dates[0], dates[-1]) if dates else (None, None)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _calibration_sha(calibration: str | None) -> str | None:
    """sha256 of the kernel calibration file used (None for the specification roofline)."""
    if calibration is not None and calibration.lower() in ("spec", "none", "roofline"):
        return None
    from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

    p = Path(calibration).expanduser() if calibration else DEFAULT_PATH
    return _sha256(p) if p.is_file() else None


def write_profiles(path: Path, fits: dict[str, EngineFit], provenance: dict[str, Any]) -> Path:
    """Write fitted values and provenance as JSON (stable key order)."""
    engines = {}
    for b, f in fits.items():
        engines[b] = {"host_overhead_ms": round(f.final.host_overhead_ms, 4),
                      "host_overhead_per_seq_ms": round(f.final.host_overhead_per_seq_ms, 5),
                      "prefill_scale": round(f.final.prefill_scale, 4),
                      "osl_jitter": f.final.osl_jitter,
                      **SCHEDULER.get(b, {}),
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


#: numeric per-engine keys of the profile file
NUMERIC_KEYS = ("host_overhead_ms", "host_overhead_per_seq_ms", "prefill_scale", "osl_jitter")


def load_engine_overrides(spec: str | None) -> tuple[dict[str, dict[str, Any]], str]:
    """Engine overrides from ``--engine-profiles``: ``default`` (the packaged fit, when
    present), ``none`` (conf/engine values) or a JSON file. Returns (overrides, description)."""
    if spec is None or spec == "default":
        if not DEFAULT_OUT.is_file():
            return dict(SCHEDULER), "conf/engine placeholders (no fitted engine_profiles.json installed)"
        path = DEFAULT_OUT
    elif spec == "none":
        return {}, "conf/engine values (--engine-profiles none)"
    else:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise UserError(f"engine profiles file not found: {path}", key="--engine-profiles",
                            fix="give a file written by `python -m llmplan.calibration.engine_fit`, 'default' or 'none'")
    try:
        doc = json.loads(path.read_text())
        engines = doc["engines"]
        out: dict[str, dict[str, Any]] = {}
        for b, v in engines.items():
            out[b] = {k: float(v[k]) for k in NUMERIC_KEYS if k in v}
            if "chunked_prefill" in v:
                out[b]["chunked_prefill"] = bool(v["chunked_prefill"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"cannot read engine profiles {path}: {e}", key="--engine-profiles") from e
    return out, str(path)


def staleness_note(profiles: str, calibration: str | None) -> str:
    """A note when a profile file was fitted against another kernel calibration than the
    one in use ("" when they match or cannot be compared)."""
    try:
        doc = json.loads(Path(profiles).read_text())
        fitted = doc["_provenance"].get("kernel_calibration_sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    now = _calibration_sha(calibration)
    if fitted is None or now is None or fitted == now:
        return ""
    return ("the engine terms were fitted against another kernel calibration (sha256 "
            f"{fitted[:12]}..., now {now[:12]}...); refit with `python -m llmplan.calibration.engine_fit`")


# ----------------------------------------------------------------------------- driver


@dataclass
class FitResult:
    fits: dict[str, EngineFit]
    skipped: dict[str, int]            # reason -> rows not used
    provenance: dict[str, Any]
    bases: dict[float, list[Basis]] = field(default_factory=dict)   # jitter -> bases


def run_fit(measurements: str | Path, opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
            backends: tuple[str, ...] = BACKENDS, workers: int = 2,
            progress: Callable[[int, int], None] | None = None,
            jitters: tuple[float, ...] = JITTER_GRID) -> FitResult:
    """Read a measurements file and fit every engine in it (see :func:`fit_frame`)."""
    path = Path(measurements).expanduser()
    return fit_frame(read_serving_csv(path), path, opts, seed, prefill_scale, backends, workers, progress, jitters)


def fit_frame(df: Any, path: Path, opts: SimOptions, seed: int = 0, prefill_scale: bool = False,
              backends: tuple[str, ...] = BACKENDS, workers: int = 2,
              progress: Callable[[int, int], None] | None = None,
              jitters: tuple[float, ...] = JITTER_GRID) -> FitResult:
    """Bases for every simulable row of ``df`` (read from ``path``) at each jitter of
    ``jitters`` (:func:`collect_bases`), then a fit per engine (:func:`fit_bases`)."""
    by_j, skipped = collect_bases(df, opts, backends, workers, progress, jitters)
    return fit_bases(by_j, skipped, df, path, opts, seed, prefill_scale)


def collect_bases(df: Any, opts: SimOptions, backends: tuple[str, ...] = BACKENDS, workers: int = 2,
                  progress: Callable[[int, int], None] | None = None,
                  jitters: tuple[float, ...] = JITTER_GRID) -> tuple[dict[float, list[Basis]], dict[str, int]]:
    """{jitter: bases of the same rows, in order} and {reason: rows not used}. Rows without
    a basis at some jitter are left out at every jitter."""
    if not jitters:
        raise UserError("no desynchronisation values to try", key="--jitter-grid")
    maps = map_rows(df, engine_profiles(SCHEDULER))
    skipped: dict[str, int] = {}
    for m in maps:
        if m.case is None:
            skipped[m.reason] = skipped.get(m.reason, 0) + 1
    idx = [m.index for m in maps if m.case is not None and m.case.backend in backends]
    rows = df.to_dict("records")
    grid = sorted(set(float(j) for j in jitters))
    per_j: dict[float, list[Basis | str]] = {}
    for k, j in enumerate(grid):
        prog = (lambda d, t, k=k: progress(k * t + d, len(grid) * t)) if progress else None
        per_j[j] = compute_bases(rows, idx, replace(opts, osl_jitter=j), workers, prog)
    bad: dict[int, str] = {}
    for j in grid:
        for i, b in zip(idx, per_j[j]):
            if isinstance(b, str) and i not in bad:
                bad[i] = b.split(":", 1)[0]
    for r in bad.values():
        skipped[r] = skipped.get(r, 0) + 1
    keep = [n for n, i in enumerate(idx) if i not in bad]
    by_j: dict[float, list[Basis]] = {j: [per_j[j][n] for n in keep] for j in grid}  # type: ignore[misc]
    return by_j, skipped


def fit_bases(by_j: dict[float, list[Basis]], skipped: dict[str, int], df: Any, path: Path, opts: SimOptions,
              seed: int = 0, prefill_scale: bool = False) -> FitResult:
    """Fit every engine present in the bases; provenance from the measurements ``df``/``path``."""
    base = engine_profiles(SCHEDULER)
    grid = sorted(by_j)
    fits = {}
    for be in BACKENDS:
        mine = {j: [b for b in bs if b.backend == be] for j, bs in by_j.items()}
        if not mine[grid[0]]:
            continue
        e = base[be]
        fits[be] = fit_engine(be, mine, EngineParams(e.host_overhead_ms, e.host_overhead_per_seq_ms), seed,
                              prefill_scale)
    first, last = data_dates(df["silicon_data_source"].tolist())
    prov = {"data_file": path.name, "data_sha256": _sha256(path) if path.is_file() else None,
            "rows_in_file": int(len(df)),
            "rows_fitted": {b: f.rows for b, f in fits.items()}, "rows_not_used": dict(sorted(skipped.items())),
            "measured_from": first, "measured_to": last, "gpus": sorted(df["system"].astype(str).unique().tolist()),
            "kernel_calibration": opts.calibration or "default",
            "kernel_calibration_sha256": _calibration_sha(opts.calibration),
            "kernel_tiers": sorted({b.tier for b in by_j[grid[0]]}),
            "sim_options": {k: v for k, v in asdict(opts).items() if k != "osl_jitter"},
            "jitter_grid": grid, "scheduler": SCHEDULER, "split": f"random halves per engine, seed {seed}",
            "method": ("least squares on log(mean TTFT) and log(mean TPOT), soft_l1 loss (f_scale "
                       f"{F_SCALE}) per desynchronisation value, lowest cost wins; exact linear decomposition "
                       "of closed-loop DES runs (calibration/engine_fit.py)"),
            "prefill_scale_fitted": prefill_scale}
    return FitResult(fits, skipped, prov, by_j)


def print_fit(res: FitResult, console: Any = None) -> None:
    """Rich tables: fitted values, before/after errors on the training and hold-out halves."""
    from rich.table import Table

    from llmplan.progress import make_console

    console = console or make_console()
    t = Table(title="Engine terms (before: conf/engine; half: fitted on the training half; final: all rows)")
    for c in ("engine", "rows", "h0 ms before", "h1 ms before", "h0 half", "h1 half", "s half", "j half",
              "h0 final", "h1 final", "s final", "j final"):
        t.add_column(c, justify="right" if c != "engine" else "left")
    for b, f in res.fits.items():
        t.add_row(b, str(f.rows), f"{f.start.host_overhead_ms:.3f}", f"{f.start.host_overhead_per_seq_ms:.4f}",
                  f"{f.holdout.host_overhead_ms:.3f}", f"{f.holdout.host_overhead_per_seq_ms:.4f}",
                  f"{f.holdout.prefill_scale:.3f}", f"{f.holdout.osl_jitter:.2f}", f"{f.final.host_overhead_ms:.3f}",
                  f"{f.final.host_overhead_per_seq_ms:.4f}", f"{f.final.prefill_scale:.3f}",
                  f"{f.final.osl_jitter:.2f}")
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
    ap.add_argument("--window", choices=("all", "steady"), default=d.window,
                    help="requests averaged: all (as benchmark clients report) or steady (skip start-up burst "
                         "and drain)")
    ap.add_argument("--osl-jitter", type=float, default=None,
                    help="output lengths uniform in osl x [1-j, 1+j] for every engine (default: each engine's "
                         "fitted desynchronisation from the profile file, else 0)")
    ap.add_argument("--workers", type=int, default=2, help="simulation processes")


def add_jitter_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--jitter-grid", default=",".join(str(j) for j in JITTER_GRID),
                    help="desynchronisation values tried per engine (comma separated; default %(default)s)")


def parse_grid(text: str) -> tuple[float, ...]:
    try:
        grid = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise UserError(f"bad --jitter-grid '{text}': {e}", key="--jitter-grid") from e
    if not grid or any(not (0.0 <= j < 1.0) for j in grid):
        raise UserError(f"--jitter-grid values must be in [0, 1), got '{text}'", key="--jitter-grid")
    return grid


def sim_options(a: argparse.Namespace) -> tuple[SimOptions, str]:
    """SimOptions from parsed arguments, with the calibration resolved (and a note)."""
    if a.waves < 1 or (a.osl_jitter is not None and not (0.0 <= a.osl_jitter < 1.0)):
        raise UserError("need --waves >= 1 and 0 <= --osl-jitter < 1", key="--waves/--osl-jitter")
    cal, note = resolve_calibration(a.calibration)
    return SimOptions(calibration=cal, waves=a.waves, window=a.window, osl_jitter=a.osl_jitter or 0.0), note


def main(argv: list[str] | None = None) -> int:
    from llmplan.errors import EXIT_USER_ERROR
    from llmplan.progress import make_console, stage_progress

    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.engine_fit", description=__doc__.split("\n")[0])
    ap.add_argument("--measurements", required=True, help="serving runs in the e2e_serving.csv layout")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="fitted profiles JSON (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random hold-out split")
    ap.add_argument("--prefill-scale", action="store_true", help="also fit a per-engine prefill-time multiplier")
    ap.add_argument("--backend", action="append", choices=BACKENDS, help="engines to fit (default: all)")
    add_jitter_arg(ap)
    add_sim_args(ap)
    a = ap.parse_args(argv)
    console = make_console()
    try:
        opts, note = sim_options(a)
        if note:
            console.print(f"[yellow]note:[/] {note}")
        with stage_progress(console) as upd:
            prog = (lambda d, t: upd("simulate", d, t)) if upd else None
            res = run_fit(a.measurements, opts, a.seed, a.prefill_scale, tuple(a.backend or BACKENDS), a.workers, prog,
                          parse_grid(a.jitter_grid))
    except UserError as e:
        console.print(e.render(), style="red", markup=False, highlight=False)
        return EXIT_USER_ERROR
    print_fit(res, console)
    out = write_profiles(Path(a.out), res.fits, res.provenance)
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

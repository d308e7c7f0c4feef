"""Reliability of the planner's probability of meeting an SLO, on measured served runs
(issue 11; docs/ACCURACY.md "Risk: reliability of the probability of meeting an SLO").

Rows: the served runs replayed by ``llmplan validate serving --holdout`` (the same code path
users get: :func:`calibration.validate_serving.validate_serving`, the held-out deployment half,
engine terms fitted on the other half), or a CSV that command wrote (``--predictions``).

Synthetic SLOs. For each simulated row, metric (mean TTFT, mean TPOT: what the rows measure)
and probability level ``p_k`` in :data:`LEVELS`, the SLO is ``predicted x exp(mu + sigma
z(p_k))``: the limit the error model (``sim/served_error.py``) says is met with probability
``p_k``. The limit depends on the prediction only, never on the measurement, and the predicted
probabilities cover [0, 1] evenly. Observed: the share of those cases whose measured value is
within the limit. A reliable model has observed ~ predicted in every bin.

Columns:

* ``cross-fold empirical``: the held-out rows split again by deployment
  (:func:`engine_fit.deployment_half` with another seed); each half scored with the other half's
  residual distribution: the planner's method (``sim/served_error.EmpiricalError``) out of sample;
* ``cross-fold lognormal``: the same with the lognormal through the other half's central 90%
  interval (as a served band is built): the planner's fallback when no current residual file;
* ``shipped``: what `plan` uses now (``sim/served_error.error_model``): with the residual file
  written from these rows (``--write-quantiles``) this is in sample, a consistency check only;
* ``shipped, both SLOs``: both metrics at once, P = q^2 (the planner's independence).

Usage::

    python -m llmplan.calibration.risk_reliability --measurements ../shared/measurements
    python -m llmplan.calibration.risk_reliability --predictions holdout_pred.csv   # reuse a replay
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmplan.calibration.engine_fit import deployment_half, load_engine_overrides, profile_seed, sim_options
from llmplan.calibration.serving_bands import LEVEL, interval
from llmplan.calibration.serving_rows import SIMULATED, deployment_key, read_serving_files, serving_files
from llmplan.calibration.validate_serving import validate_serving
from llmplan.errors import EXIT_USER_ERROR, UserError
from llmplan.sim.served_error import ErrorModel, error_model, from_interval

#: predicted probabilities of the synthetic SLOs (bin centres of ten equal bins)
LEVELS = tuple(round(0.05 + 0.1 * k, 2) for k in range(10))
METRICS = ("ttft", "tpot")
#: seed of the second (cross-fold) split of the held-out rows
CROSS_SEED = 1


def simulated_rows(res: pd.DataFrame) -> pd.DataFrame:
    """Simulated rows with finite positive predictions and measurements of both metrics."""
    sim = res[res["status"] == SIMULATED].copy()
    for m in METRICS:
        p, y = sim[f"predicted_{m}_ms"].astype(float), sim[f"silicon_{m}_ms"].astype(float)
        sim = sim[np.isfinite(p) & np.isfinite(y) & (p > 0) & (y > 0)]
    sim["backend"] = sim["backend"].astype(str).str.strip().str.lower()
    return sim.reset_index(drop=True)


@dataclass(frozen=True)
class EmpiricalModel:
    """The empirical distribution of log residuals (the alternative to the lognormal fit:
    what the bands would give if they stored their residual quantiles)."""

    residuals: tuple[float, ...]  # sorted log(measured / predicted)

    def log_quantile(self, p: float) -> float:
        return float(np.quantile(self.residuals, p))

    def probability(self, predicted_ms: float, limit_ms: float) -> float:
        x = math.log(limit_ms / predicted_ms)
        return float(np.searchsorted(self.residuals, x, side="right")) / len(self.residuals)


def cases(rows: pd.DataFrame, models: dict[tuple[str, str], Any], metric: str) -> pd.DataFrame:
    """One case per row and level: predicted probability p, SLO limit and whether it was met.
    A model gives ``log_quantile(p)`` and ``probability(predicted, limit)``."""
    recs = []
    for r in rows.itertuples(index=False):
        err = models.get((r.backend, metric))
        if err is None:
            continue
        pred, meas = float(getattr(r, f"predicted_{metric}_ms")), float(getattr(r, f"silicon_{metric}_ms"))
        for p in LEVELS:
            limit = pred * math.exp(err.log_quantile(p))
            recs.append({"backend": r.backend, "metric": metric, "p": err.probability(pred, limit),
                         "met": meas <= limit})
    return pd.DataFrame(recs)


def reliability_table(c: pd.DataFrame) -> pd.DataFrame:
    """Per predicted-probability bin: cases, mean predicted p, observed fraction met."""
    if not len(c):
        return pd.DataFrame(columns=["bin", "cases", "predicted", "observed"])
    b = np.minimum((c["p"].to_numpy() * 10).astype(int), 9)
    out = []
    for k in range(10):
        g = c[b == k]
        if len(g):
            out.append({"bin": f"{k / 10:.1f}-{(k + 1) / 10:.1f}", "cases": len(g), "predicted": float(g["p"].mean()),
                        "observed": float(g["met"].mean())})
    return pd.DataFrame(out)


def calibration_error(c: pd.DataFrame) -> float:
    """Case-weighted mean |observed - predicted| over the bins (expected calibration error)."""
    t = reliability_table(c)
    return float((t["cases"] * (t["observed"] - t["predicted"]).abs()).sum() / t["cases"].sum()) if len(t) else math.nan


def shipped_models(backends: list[str]) -> dict[tuple[str, str], ErrorModel | None]:
    return {(b, m): error_model(b, m) for b in backends for m in METRICS}


def _log_res(rows: pd.DataFrame, metric: str) -> np.ndarray:
    return np.log(rows[f"silicon_{metric}_ms"].to_numpy(float) / rows[f"predicted_{metric}_ms"].to_numpy(float))


def cross_fold_cases(rows: pd.DataFrame, metric: str, seed: int = CROSS_SEED, empirical: bool = False) -> pd.DataFrame:
    """Cases of each half scored with the error model sized on the other half: the lognormal
    through its central 90% interval (as the shipped band is built), or (``empirical``) the
    other half's residual distribution itself."""
    half = np.array([deployment_half(deployment_key(r), seed) for r in rows.to_dict("records")])
    out = []
    for test in (0, 1):
        train_rows, test_rows = rows[half != test], rows[half == test]
        models: dict[tuple[str, str], Any] = {}
        for b, g in train_rows.groupby("backend"):
            res = _log_res(g, metric)
            if len(g) < 10:
                models[(b, metric)] = None
            elif empirical:
                models[(b, metric)] = EmpiricalModel(tuple(np.sort(res)))
            else:
                lo, hi = interval(res, LEVEL)
                models[(b, metric)] = from_interval(b, metric, lo, hi, LEVEL, "cross-fold")
        out.append(cases(test_rows, models, metric))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def residual_correlation(rows: pd.DataFrame) -> dict[str, float]:
    """Per engine: correlation of the TTFT and TPOT log residuals (the planner treats them as independent)."""
    return {b: round(float(np.corrcoef(_log_res(g, "ttft"), _log_res(g, "tpot"))[0, 1]), 3)
            for b, g in rows.groupby("backend") if len(g) > 2}


def joint_cases(rows: pd.DataFrame, models: dict[tuple[str, str], ErrorModel | None]) -> pd.DataFrame:
    """Both SLOs at once: TTFT and TPOT limits at the same per-metric level q, predicted
    P(both) = q^2 (the planner's product), observed: both met."""
    recs = []
    for r in rows.itertuples(index=False):
        et, ep = models.get((r.backend, "ttft")), models.get((r.backend, "tpot"))
        if et is None or ep is None:
            continue
        for q in LEVELS:
            lt = r.predicted_ttft_ms * math.exp(et.log_quantile(q))
            lp = r.predicted_tpot_ms * math.exp(ep.log_quantile(q))
            recs.append({"backend": r.backend, "metric": "both", "p": q * q,
                         "met": bool(r.silicon_ttft_ms <= lt and r.silicon_tpot_ms <= lp)})
    return pd.DataFrame(recs)


def analyse(res: pd.DataFrame) -> dict[str, Any]:
    """Every table of the reliability report from a replay (validate_serving output)."""
    rows = simulated_rows(res)
    shipped = shipped_models(sorted(rows["backend"].unique()))
    out: dict[str, Any] = {"rows": int(len(rows)), "rows_per_engine": rows["backend"].value_counts().sort_index().to_dict(),
                           "residual_correlation": residual_correlation(rows), "tables": {}}
    for name, c in (("cross-fold empirical", pd.concat([cross_fold_cases(rows, m, empirical=True) for m in METRICS],
                                                       ignore_index=True)),
                    ("cross-fold lognormal", pd.concat([cross_fold_cases(rows, m) for m in METRICS], ignore_index=True)),
                    ("shipped", pd.concat([cases(rows, shipped, m) for m in METRICS], ignore_index=True)),
                    ("shipped, both SLOs", joint_cases(rows, shipped))):
        out["tables"][name] = {"ece": round(calibration_error(c), 4), "bins": reliability_table(c).round(4).to_dict("records"),
                               "per_metric_ece": {m: round(calibration_error(g), 4) for m, g in c.groupby("metric")}
                               if len(c) else {},
                               "per_engine_metric_ece": {f"{b} {m}": round(calibration_error(g), 4)
                                                         for (b, m), g in c.groupby(["backend", "metric"])}
                               if len(c) else {}}
    return out


def markdown(rep: dict[str, Any]) -> str:
    """The report as Markdown tables (what docs/ACCURACY.md shows)."""
    lines = [f"{rep['rows']} held-out served rows ({', '.join(f'{k} {v}' for k, v in rep['rows_per_engine'].items())}); "
             f"TTFT/TPOT log-residual correlation per engine: "
             + ", ".join(f"{k} {v:+.2f}" for k, v in rep["residual_correlation"].items()), ""]
    names = list(rep["tables"])
    lines.append("| predicted P(met) | " + " | ".join(f"{n}: cases, predicted, observed" for n in names) + " |")
    lines.append("|---|" + "---|" * len(names))
    bins = sorted({b["bin"] for t in rep["tables"].values() for b in t["bins"]})
    for bn in bins:
        cells = []
        for n in names:
            b = next((x for x in rep["tables"][n]["bins"] if x["bin"] == bn), None)
            cells.append(f"{b['cases']}, {b['predicted']:.2f}, **{b['observed']:.2f}**" if b else "-")
        lines.append(f"| {bn} | " + " | ".join(cells) + " |")
    lines.append("| mean abs. gap (ECE) | " + " | ".join(
        f"{rep['tables'][n]['ece']:.3f} (" + ", ".join(f"{m} {v:.3f}" for m, v in rep["tables"][n]["per_metric_ece"].items())
        + ")" for n in names) + " |")
    for n in names:
        per = rep["tables"][n].get("per_engine_metric_ece") or {}
        if per:
            lines.append("")
            lines.append(f"ECE per engine and metric ({n}): " + ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    return "\n".join(lines)


#: probabilities at which --write-quantiles stores the held-out log residuals
QUANTILE_P = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8,
              0.85, 0.9, 0.95, 0.975, 0.99)


#: residual sets kept in the file (one per engine-profile fit, newest last)
KEEP_SETS = 3


def residual_quantiles(res: pd.DataFrame, profiles: Path, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``sim/data/served_residuals.json`` document: per engine and metric the held-out log
    residuals at :data:`QUANTILE_P`, filed under the sha256 of the engine profile file they
    belong to; the sets of ``previous`` (the file as it was) for other fits are kept, the last
    :data:`KEEP_SETS`."""
    import hashlib

    rows = simulated_rows(res)
    engines: dict[str, Any] = {}
    for b, g in rows.groupby("backend"):
        for m in METRICS:
            r = _log_res(g, m)
            if len(r) >= 20:
                engines.setdefault(b, {})[m] = {"p": list(QUANTILE_P), "rows": int(len(r)),
                                                "log_residual": [round(float(x), 5) for x in np.quantile(r, QUANTILE_P)]}
    sha = hashlib.sha256(profiles.read_bytes()).hexdigest()
    sets = {k: v for k, v in ((previous or {}).get("by_engine_profiles_sha256") or {}).items() if k != sha}
    sets[sha] = {"rows": int(len(rows)), "engines": engines}
    return {"_provenance": {
        "source": "held-out half of `llmplan validate serving --holdout` on the served rows (H100, H200): "
                  "log(measured / predicted) of mean TTFT and TPOT, terms fitted on the other half; one set per "
                  "sha256 of sim/data/engine_profiles.json (the planner uses the current file's)",
        "written_by": "python -m llmplan.calibration.risk_reliability --write-quantiles"},
        "by_engine_profiles_sha256": dict(list(sets.items())[-KEEP_SETS:])}


def replay(measurements: list[str], workers: int, limit: int | None, argv_sim: list[str]) -> pd.DataFrame:
    """The held-out replay of ``llmplan validate serving --holdout`` (shipped engine profiles)."""
    ap = argparse.ArgumentParser()
    from llmplan.calibration.engine_fit import add_sim_args

    add_sim_args(ap)
    opts, _ = sim_options(ap.parse_args(argv_sim))
    overrides, engines = load_engine_overrides("default", holdout=True)
    if not Path(engines).is_file():
        raise UserError("the held-out replay needs the shipped engine profile file", key="--measurements")
    bands = json.loads(Path(engines).read_text()).get("bands")
    df = read_serving_files(serving_files(measurements))
    return validate_serving(df, opts, overrides, limit, workers, None, None, profile_seed(engines), bands)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.risk_reliability",
                                 description="Reliability of the planner's P(SLO met) on held-out served runs.")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--measurements", nargs="+", help="served runs (e.g. ../shared/measurements): replayed held-out")
    src.add_argument("--predictions", help="a CSV written by `llmplan validate serving --holdout --out FILE`")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="replay at most N held-out rows")
    ap.add_argument("--json", default=None, help="also write the tables as JSON here")
    ap.add_argument("--write-quantiles", default=None,
                    help="write the held-out residual quantiles the planner's error model reads "
                         "(sim/data/served_residuals.json to update the shipped file)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.predictions:
            p = Path(a.predictions).expanduser()
            if not p.is_file():
                raise UserError(f"not a file: {p}", key="--predictions",
                                fix="write one with `llmplan validate serving --holdout --out FILE`")
            res = pd.read_csv(p)
        else:
            res = replay(a.measurements, a.workers, a.limit, [])
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    if a.write_quantiles:
        from llmplan.sim.engine_terms import PATH as profiles

        target = Path(a.write_quantiles)
        try:
            previous = json.loads(target.read_text()) if target.is_file() else None
        except ValueError:
            previous = None
        target.write_text(json.dumps(residual_quantiles(res, profiles, previous), indent=1) + "\n")
        print(f"wrote {a.write_quantiles}")
    rep = analyse(res)
    print(markdown(rep))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

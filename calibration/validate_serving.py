"""``llmplan validate serving``: replay measured serving runs in the simulator and score them.

Every row of a file in the ``e2e_serving.csv`` layout is mapped to a deployment
(:mod:`calibration.serving_rows`); simulable rows are replayed in the discrete-event
simulator as closed-loop runs: concurrency N, fixed prompt length, output length ``osl``
(drawn in ``osl x [1 - j, 1 + j]`` with the engine's fitted desynchronisation ``j``),
``max(10 N, 60)`` requests, every request counted, as a benchmark client reports. The
predicted TTFT and TPOT are the *means* over those requests (TPOT per request
``(e2e - TTFT) / (output - 1)``, then averaged), as benchmark clients report them. Rows that
cannot be simulated get a status with the reason; they are counted and listed, never dropped.

Engine terms (host time, desynchronisation, SGLang's prefill-first scheduling; per engine
version family where fitted) come from the shipped fit ``sim/data/engine_profiles.json`` by
default (``--engine-profiles``); ``--holdout`` scores only the held-out deployment half with
the terms fitted on the other half. The report adds the per-engine targets, a table of
predicted/measured per concurrency bucket, the coverage of the served p90 bands, and a
warning for rows outside the range the terms were fitted on.
kernel times from the kernel calibration (``--calibration``; ``spec`` for the
specification roofline). ``--fit-engines`` refits the engine terms on the rows first (see
:mod:`calibration.engine_fit`), writes them to the output folder (``--fit-out`` to name the
shipped file) and validates with them.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmplan.calibration.engine_fit import (add_jitter_arg, add_sim_args, ape_stats, bands_from_fit, corrected,
                                            deployment_half, fit_frame, load_engine_overrides, overrides_for,
                                            parse_grid, print_fit, profile_seed, sim_options, staleness_note,
                                            subsample, write_profiles)
from llmplan.calibration.serving_rows import (BACKENDS, SIMULATED, Prediction, SimOptions, concurrency_of,
                                              engine_profiles, map_row, map_rows, parallel_map,
                                              read_serving_files, serving_files)
from llmplan.calibration.benchmark_clients import prompt_pool_size, repeated_prompts_note
from llmplan.calibration.serving_disagg_rows import disagg_targets, replay_disagg
from llmplan.calibration.serving_regimes import queued_rows, regime_flags
from llmplan.errors import EXIT_USER_ERROR, UserError
from llmplan.sim.engine_terms import outside_range

#: accuracy targets per engine for aggregated rows (issue 9: median APE of mean TTFT / TPOT)
TARGET_TTFT = 0.10
TARGET_TPOT = 0.05
#: closed-loop concurrency buckets of the flatness table (issue 12), upper bounds inclusive
BUCKETS = (1, 4, 16, 64, 256, 1024, 4096)
ADDED_COLUMNS = ("predicted_ttft_ms", "predicted_tpot_ms", "tier", "status", "outside_fit", "in_band_ttft",
                 "in_band_tpot", "regime")
HELPER_COLUMNS = ("model_key", "dense", "gpu", "ttft_ape", "tpot_ape", "concurrency")


def map_row_with_terms(row: dict, index: int, overrides: dict) -> tuple[Any, dict[str, Any]]:
    """(the row's :func:`map_row` with its engine-version family's terms, those terms)."""
    backend = str(row.get("backend") or "").strip().lower()
    mine = overrides_for(overrides, backend, str(row.get("backend_version") or ""))
    return map_row(row, index, engine_profiles({**overrides, backend: mine})), mine


def _predict_task(task: tuple[dict, int, dict, SimOptions, float | None]) -> Prediction:
    row, index, overrides, opts, jitter = task
    m, mine = map_row_with_terms(row, index, overrides)
    if m.case is None:
        return Prediction(math.nan, math.nan, "", m.status)
    from llmplan.calibration.serving_rows import simulate_case

    j = float(mine.get("osl_jitter", 0.0)) if jitter is None else jitter
    return simulate_case(m.case, replace(opts, osl_jitter=j), wrap=corrected(float(mine.get("prefill_scale", 1.0))))


def select_rows(df: pd.DataFrame, model: str | None, backend: str | None) -> pd.DataFrame:
    """Rows of one model (model_path substring, or the same catalog model) and/or engine."""
    keep = np.ones(len(df), bool)
    if backend:
        keep &= df["backend"].astype(str).str.lower().eq(backend.lower()).to_numpy()
    if model:
        paths = df["model_path"].astype(str)
        sub = paths.str.lower().str.contains(model.lower(), regex=False).to_numpy()
        same = np.zeros(len(df), bool)
        try:
            from llmplan.model_catalog.loader import load_model, resolve_key

            key = load_model(model).key
            for p in paths.unique():
                try:
                    if resolve_key(p) == key:
                        same |= (paths == p).to_numpy()
                except UserError:
                    pass
        except UserError:
            pass
        keep &= sub | same
    return df[keep].reset_index(drop=True)


spread = subsample


def validate_serving(df: pd.DataFrame, opts: SimOptions, overrides: dict[str, dict[str, Any]],
                     limit: int | None = None, workers: int = 2, progress: Any = None,
                     jitter: float | None = None, holdout_seed: int | None = None,
                     bands: dict[str, Any] | None = None) -> pd.DataFrame:
    """Simulate the simulable rows of ``df`` with the engine ``overrides`` (fitted terms, per
    version family where fitted); ``jitter`` replaces every engine's desynchronisation when
    given; ``holdout_seed``: only rows of the held-out deployment half are run (the others get
    status ``train``). Returns ``df`` plus :data:`ADDED_COLUMNS` and :data:`HELPER_COLUMNS`."""
    engines = engine_profiles(overrides)
    maps = map_rows(df, engines)
    ok = [m.index for m in maps if m.case is not None]
    if holdout_seed is not None:
        train = {m.index for m in maps if m.case is not None and deployment_half(m.case.deployment, holdout_seed) == 0}
        ok = [i for i in ok if i not in train]
    run = spread(ok, limit)
    rows = df.to_dict("records")
    preds = parallel_map(_predict_task, [(rows[i], i, overrides, opts, jitter) for i in run], workers, progress)
    out = df.copy()
    status = [m.status for m in maps]
    if holdout_seed is not None:
        for i in train:
            status[i] = f"train: deployment in the training half (seed {holdout_seed}), not scored"
    for i in set(ok) - set(run):
        status[i] = f"limit: not run (--limit {limit})"
    ttft = np.full(len(df), np.nan)
    tpot = np.full(len(df), np.nan)
    tier = [""] * len(df)
    for i, p in zip(run, preds):
        ttft[i], tpot[i], tier[i], status[i] = p.ttft_ms, p.tpot_ms, p.tier, p.status
    # disaggregated rows: both pools and worker counts (calibration.serving_disagg_rows)
    disagg = replay_disagg(df, opts, overrides, None, limit, workers, progress, jitter, holdout_seed)
    for i, (p, _) in disagg.items():
        ttft[i], tpot[i], tier[i], status[i] = p.ttft_ms, p.tpot_ms, p.tier, p.status
    out["predicted_ttft_ms"] = ttft
    out["predicted_tpot_ms"] = tpot
    out["tier"] = tier
    out["status"] = status
    out["model_key"] = [disagg[k][1] if k in disagg else m.case.dep.model.key if m.case else str(r.get("model_path"))
                        for k, (m, r) in enumerate(zip(maps, rows))]
    out["dense"] = [bool(m.case.dense) if m.case else False for m in maps]
    out["gpu"] = df["system"].astype(str)
    out["concurrency"] = [concurrency_of(r) for r in rows]
    out["outside_fit"] = [outside_fit(r, overrides) if m.case else "" for m, r in zip(maps, rows)]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ttft_ape"] = np.abs(ttft / df["silicon_ttft_ms"].to_numpy(float) - 1.0)
        out["tpot_ape"] = np.abs(tpot / df["silicon_tpot_ms"].to_numpy(float) - 1.0)
    for metric, pred, col in (("ttft", ttft, "silicon_ttft_ms"), ("tpot", tpot, "silicon_tpot_ms")):
        meas = df[col].to_numpy(float)
        inside = []
        for k, r in enumerate(rows):
            b = (bands or {}).get(str(r.get("backend") or "").strip().lower(), {}).get(metric)
            if b is None or not np.isfinite(pred[k]) or b.get("lo") is None:
                inside.append(None)
            else:
                inside.append(bool(pred[k] * b["lo"] <= meas[k] <= pred[k] * b["hi"]))
        out[f"in_band_{metric}"] = inside
    queued = queued_rows(df)
    out["regime"] = ["; ".join(regime_flags(m.case, queued, r)) if m.case else "" for m, r in zip(maps, rows)]
    return out


def outside_fit(row: dict, overrides: dict[str, dict[str, Any]]) -> str:
    """Which of the row's concurrency / isl / osl lies outside the range the engine's terms
    were fitted on ("" when inside or when the file has no range)."""
    rng = overrides.get(str(row.get("backend") or "").strip().lower(), {}).get("fitted_range") or {}
    vals = {"concurrency": concurrency_of(row), "isl": row.get("isl"), "osl": row.get("osl")}
    return "; ".join(outside_range(rng, vals))


# ----------------------------------------------------------------------------- aggregates


def aggregate(res: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """rows, MAPE, median APE, p90 APE of TTFT and TPOT (percent) per group of simulated rows."""
    sim = res[res["status"] == SIMULATED]
    recs = []
    for key, g in sim.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        t = ape_stats(g["predicted_ttft_ms"].to_numpy(float), g["silicon_ttft_ms"].to_numpy(float))
        p = ape_stats(g["predicted_tpot_ms"].to_numpy(float), g["silicon_tpot_ms"].to_numpy(float))
        recs.append({**dict(zip(by, key)), "rows": len(g), "ttft_mape": 100 * t[0], "ttft_median": 100 * t[1],
                     "ttft_p90": 100 * t[2], "tpot_mape": 100 * p[0], "tpot_median": 100 * p[1],
                     "tpot_p90": 100 * p[2]})
    return pd.DataFrame(recs)


def not_simulated(res: pd.DataFrame) -> pd.DataFrame:
    """Rows not simulated, counted per reason, with a few row ids and the first detail."""
    rest = res[res["status"] != SIMULATED]
    recs = []
    ids = rest["id"].astype(str) if "id" in rest.columns else rest.index.astype(str)
    for reason, g in rest.groupby(rest["status"].str.split(":").str[0], sort=True):
        recs.append({"reason": reason, "rows": len(g), "example": g["status"].iloc[0],
                     "ids": ", ".join(ids.loc[g.index[:3]])})
    return pd.DataFrame(recs)


def targets(res: pd.DataFrame) -> pd.DataFrame:
    """Median APE of aggregated rows per engine against the targets."""
    sel = res[res["mode"].astype(str) == "agg"]
    agg = aggregate(sel, ["backend"])
    if not len(agg):
        return agg
    agg["ttft_met"] = agg["ttft_median"] <= 100 * TARGET_TTFT
    agg["tpot_met"] = agg["tpot_median"] <= 100 * TARGET_TPOT
    return agg


def bucket_of(n: int) -> str:
    """Concurrency bucket label of :data:`BUCKETS`."""
    lo = 1
    for hi in BUCKETS:
        if n <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
        lo = hi + 1
    return f">{BUCKETS[-1]}"


def flatness(res: pd.DataFrame) -> pd.DataFrame:
    """Per engine and concurrency bucket: median predicted / measured of mean TTFT, mean TPOT
    and closed-loop throughput (N x osl / (TTFT + (osl - 1) TPOT), so its ratio is the
    measured over the predicted request latency)."""
    sim = res[res["status"] == SIMULATED]
    if not len(sim):
        return pd.DataFrame()
    osl = sim["osl"].to_numpy(float)
    e2e_p = sim["predicted_ttft_ms"].to_numpy(float) + (osl - 1) * sim["predicted_tpot_ms"].to_numpy(float)
    e2e_m = sim["silicon_ttft_ms"].to_numpy(float) + (osl - 1) * sim["silicon_tpot_ms"].to_numpy(float)
    d = pd.DataFrame({"backend": sim["backend"].to_numpy(), "n": sim["concurrency"].to_numpy(int),
                      "ttft": sim["predicted_ttft_ms"].to_numpy(float) / sim["silicon_ttft_ms"].to_numpy(float),
                      "tpot": sim["predicted_tpot_ms"].to_numpy(float) / sim["silicon_tpot_ms"].to_numpy(float),
                      "thr": e2e_m / e2e_p})
    d["bucket"] = [bucket_of(n) for n in d["n"]]
    order = {bucket_of(b): k for k, b in enumerate(BUCKETS)}
    recs = []
    for (be, bk), g in d.groupby(["backend", "bucket"]):
        recs.append({"backend": be, "bucket": bk, "order": order.get(bk, 99), "rows": len(g),
                     "ttft_ratio": float(g["ttft"].median()), "tpot_ratio": float(g["tpot"].median()),
                     "throughput_ratio": float(g["thr"].median())})
    return pd.DataFrame(recs).sort_values(["backend", "order"]).drop(columns="order").reset_index(drop=True)


def band_coverage(res: pd.DataFrame) -> pd.DataFrame:
    """Share of simulated rows whose measured mean lies in the engine's served band."""
    sim = res[res["status"] == SIMULATED]
    recs = []
    for be, g in sim.groupby("backend"):
        rec: dict[str, Any] = {"backend": be}
        for m in ("ttft", "tpot"):
            v = g[f"in_band_{m}"].dropna()
            rec[f"{m}_rows"] = len(v)
            rec[f"{m}_coverage"] = float(v.astype(bool).mean()) if len(v) else math.nan
        recs.append(rec)
    return pd.DataFrame(recs)


def _n(v: Any) -> str:
    """A whole number without the float tail pandas adds ("4.0" -> "4")."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    return str(int(x)) if math.isfinite(x) and x == int(x) else str(v)


def print_report(res: pd.DataFrame, console: Any, notes: list[str], engines: str, seconds: float,
                 worst: int = 5, bands: dict[str, Any] | None = None, holdout: bool = False) -> None:
    from rich.table import Table

    sim = res["status"] == SIMULATED
    tiers = ", ".join(f"{t} {n}" for t, n in res.loc[sim, "tier"].value_counts().sort_index().items())
    console.print(f"[bold]validate serving[/]: {int(sim.sum())} of {len(res)} rows simulated in {seconds:.0f} s; "
                  f"engine terms: {engines}; kernel tiers: {tiers or 'none'}")
    for n in notes:
        console.print(f"[yellow]note:[/] {n}")
    console.print("predicted = mean over the simulated requests (as benchmark clients report); "
                  "errors are |pred/meas - 1| in %")

    def table(df: pd.DataFrame, title: str, keys: list[str]) -> None:
        t = Table(title=title)
        for c in keys + ["rows", "TTFT MAPE", "TTFT med", "TTFT p90", "TPOT MAPE", "TPOT med", "TPOT p90"]:
            t.add_column(c, justify="left" if c in keys else "right")
        for r in df.to_dict("records"):
            t.add_row(*[str(r[k]) for k in keys], str(r["rows"]),
                      *(f"{r[c]:.1f}" for c in ("ttft_mape", "ttft_median", "ttft_p90", "tpot_mape", "tpot_median",
                                                "tpot_p90")))
        console.print(t)

    if sim.any():
        table(aggregate(res, ["backend"]), "Per engine", ["backend"])
        table(aggregate(res, ["backend", "model_key"]), "Per engine and model", ["backend", "model_key"])
        table(aggregate(res, ["mode"]), "Per mode", ["mode"])
        reg = res.assign(regime=res["regime"].replace("", "replayed regime"))
        table(aggregate(reg, ["backend", "regime"]),
              "Per engine and regime (calibration/serving_regimes.py; flagged rows: a regime the replay does "
              "not reproduce)", ["backend", "regime"])
        which = ("held-out half (terms fitted on the other half)" if holdout
                 else "all rows given (in-sample where the fit used them; --holdout for the held-out half)")
        targets_table(console, targets(res), f"Targets per engine, aggregated rows, {which}: median APE TTFT <= "
                                             f"{100 * TARGET_TTFT:.0f}%, TPOT <= {100 * TARGET_TPOT:.0f}%")
        targets_table(console, disagg_targets(res), "Targets per engine, disaggregated rows (issue 10: median APE "
                                                    "TTFT <= 15%, TPOT <= 10%; "
                                                    + ("held-out half)" if holdout else "all rows given)"))
        fl = flatness(res)
        if len(fl):
            t = Table(title="Flat across batch sizes: median predicted / measured per concurrency bucket "
                            "(throughput = N x osl / request latency)")
            for c in ("backend", "concurrency", "rows", "TTFT", "TPOT", "throughput"):
                t.add_column(c, justify="left" if c in ("backend", "concurrency") else "right")
            for r in fl.to_dict("records"):
                flag = "" if abs(r["throughput_ratio"] - 1) <= 0.10 else " !"
                t.add_row(r["backend"], r["bucket"], str(r["rows"]), f"{r['ttft_ratio']:.3f}",
                          f"{r['tpot_ratio']:.3f}", f"{r['throughput_ratio']:.3f}{flag}")
            console.print(t)
        cov = band_coverage(res)
        if len(cov) and bands:
            t = Table(title="Served p90 bands (measured in \\[pred x lo, pred x hi]): coverage on these rows; "
                            "cross-fold coverage on held-out deployments from the fit")
            for c in ("backend", "metric", "lo", "hi", "rows", "coverage here", "cross-fold (fit)"):
                t.add_column(c, justify="left" if c in ("backend", "metric") else "right")
            for r in cov.to_dict("records"):
                for m in ("ttft", "tpot"):
                    b = bands.get(r["backend"], {}).get(m) or {}
                    cf = b.get("cross_fold_coverage")
                    t.add_row(r["backend"], m.upper(), f"{b.get('lo', math.nan):.3f}", f"{b.get('hi', math.nan):.3f}",
                              str(r[f"{m}_rows"]), f"{100 * r[f'{m}_coverage']:.1f}%",
                              f"{100 * cf:.1f}%" if cf is not None else "-")
            console.print(t)
        out_rng = res[(res["status"] == SIMULATED) & (res["outside_fit"].astype(str) != "")]
        if len(out_rng):
            console.print(f"[yellow]warning:[/] {len(out_rng)} simulated rows lie outside the range the engine "
                          f"terms were fitted on (e.g. row {out_rng.index[0]}: {out_rng['outside_fit'].iloc[0]}); "
                          "their errors are extrapolation")
        if worst:
            w = res[sim].assign(err=res.loc[sim, ["ttft_ape", "tpot_ape"]].max(axis=1)).nlargest(worst, "err")
            t = Table(title=f"Worst {len(w)} rows (largest of the two errors)")
            for c in ("row", "engine", "model", "tp", "ep", "isl", "osl", "conc", "TTFT meas", "TTFT pred",
                      "TPOT meas", "TPOT pred"):
                t.add_column(c)
            for i, r in w.iterrows():
                t.add_row(str(i), str(r["backend"]), str(r["model_key"]), _n(r["tp_size"]), _n(r["moe_ep_size"]),
                          _n(r["isl"]), _n(r["osl"]), str(concurrency_of(r)),
                          f"{r['silicon_ttft_ms']:.0f}", f"{r['predicted_ttft_ms']:.0f}",
                          f"{r['silicon_tpot_ms']:.1f}", f"{r['predicted_tpot_ms']:.1f}")
            console.print(t)
    ns = not_simulated(res)
    if len(ns):
        t = Table(title="Rows not simulated")
        for c in ("reason", "rows", "first ids", "example status"):
            t.add_column(c)
        for r in ns.to_dict("records"):
            t.add_row(r["reason"], str(r["rows"]), r["ids"], r["example"][:110])
        console.print(t)


def targets_table(console: Any, tg: pd.DataFrame, title: str) -> None:
    """Print a targets frame (``targets`` / ``disagg_targets``) as a table (nothing when empty)."""
    from rich.table import Table

    if not len(tg):
        return
    t = Table(title=title)
    for c in ("backend", "rows", "TTFT med", "met", "TPOT med", "met "):
        t.add_column(c)
    for r in tg.to_dict("records"):
        t.add_row(r["backend"], str(r["rows"]), f"{r['ttft_median']:.1f}", "yes" if r["ttft_met"] else "NO",
                  f"{r['tpot_median']:.1f}", "yes" if r["tpot_met"] else "NO")
    console.print(t)


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llmplan validate serving",
                                 description="Replay measured serving runs in the simulator and score TTFT/TPOT.")
    ap.add_argument("--measurements", required=True, nargs="+",
                    help="served runs in the e2e_serving.csv layout: files, or folders holding */e2e_serving.csv "
                         "(e.g. shared/measurements: H100 and H200)")
    ap.add_argument("--out", default=None, help="write the rows with predicted_ttft_ms, predicted_tpot_ms, tier, status")
    ap.add_argument("--engine-profiles", default="default",
                    help="fitted engine terms: 'default' (the shipped sim/data/engine_profiles.json), 'none' "
                         "(no host time) or a JSON file")
    ap.add_argument("--holdout", action="store_true",
                    help="score only the held-out deployment half, with the terms the profile file fitted on the "
                         "other half (the honest figure for unseen deployments)")
    ap.add_argument("--limit", type=int, default=None, help="simulate at most N rows (spread over the file)")
    ap.add_argument("--model", default=None, help="only rows of this model (HF id, catalog key or substring)")
    ap.add_argument("--backend", default=None, choices=BACKENDS, help="only rows of this engine")
    ap.add_argument("--mode", default=None, choices=("agg", "disagg"),
                    help="only aggregated or only disaggregated rows (the file's mode column)")
    ap.add_argument("--fit-engines", action="store_true",
                    help="fit the engine terms on these rows first (writes --fit-out) and validate with them")
    ap.add_argument("--fit-out", default=None,
                    help="where --fit-engines writes (default: engine_profiles.json next to --out, else in "
                         "./llmplan-out/validate-serving/; name sim/data/engine_profiles.json to update the shipped fit)")
    ap.add_argument("--prefill-scale", action="store_true", help="with --fit-engines: also fit a prefill multiplier")
    ap.add_argument("--seed", type=int, default=0, help="with --fit-engines: seed of the hold-out split")
    add_jitter_arg(ap)
    ap.add_argument("--worst", type=int, default=5, help="list the N worst rows")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_sim_args(ap)
    return ap


def main(argv: list[str]) -> int:
    """Entry point of ``llmplan validate serving`` (argv: the arguments after ``serving``)."""
    from llmplan.progress import make_console, stage_progress

    a = build_parser().parse_args(argv)
    console = make_console()
    t0 = time.perf_counter()
    try:
        if a.limit is not None and a.limit < 0:
            raise UserError("--limit must be >= 0", key="--limit")
        paths = serving_files(a.measurements)
        df = select_rows(read_serving_files(paths), a.model, a.backend)
        if a.mode:
            df = df[df["mode"].astype(str).str.strip().str.lower() == a.mode].reset_index(drop=True)
        if not len(df):
            raise UserError("no rows match --model/--backend", key="--model")
        opts, note = sim_options(a)
        notes = [note] if note else []
        with stage_progress(console, not a.no_progress) as upd:
            if a.fit_engines:
                prog = (lambda d, t: upd("fit", d, t)) if upd else None
                fit = fit_frame(df, paths, opts, a.seed, a.prefill_scale, workers=a.workers, progress=prog,
                                jitters=parse_grid(a.jitter_grid))
                print_fit(fit, console)
                written = write_profiles(fit_out_path(a), fit.fits, fit.provenance, bands_from_fit(fit))
                notes.append(f"engine terms fitted on these rows and written to {written}")
                a.engine_profiles = str(written)
            overrides, engines = load_engine_overrides(a.engine_profiles, holdout=a.holdout)
            is_file = Path(engines).is_file()
            if a.holdout and not is_file:
                raise UserError("--holdout needs a fitted profile file", key="--engine-profiles")
            stale = staleness_note(engines, opts.calibration) if is_file else ""
            if stale:
                notes.append(stale)
            bands = json.loads(Path(engines).read_text()).get("bands") if is_file else None
            seed = profile_seed(engines) if a.holdout else None
            if a.holdout:
                notes.append(f"held-out half: deployments of split seed {seed} the terms were not fitted on")
            prog = (lambda d, t: upd("simulate", d, t)) if upd else None
            res = validate_serving(df, opts, overrides, a.limit, a.workers, prog, a.osl_jitter, seed, bands)
        # only the rows replayed (not those of the training half or left out by --limit)
        pooled = sum(1 for r in res[res["status"] == SIMULATED].to_dict("records") if prompt_pool_size(r))
        if pooled:
            notes.append(repeated_prompts_note(pooled))
    except UserError as e:
        console.print(e.render(), style="red", markup=False, highlight=False)
        return EXIT_USER_ERROR
    secs = time.perf_counter() - t0
    print_report(res, console, notes, engines, secs, a.worst, bands, a.holdout)
    if a.out:
        out = Path(a.out).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        res.drop(columns=list(HELPER_COLUMNS)).to_csv(out, index=False)
        console.print(f"wrote {out}")
    return 0


def fit_out_path(a: argparse.Namespace) -> Path:
    """Where --fit-engines writes: --fit-out, else next to --out, else the output folder (never
    into the installed package unless named)."""
    if a.fit_out:
        return Path(a.fit_out).expanduser()
    if a.out:
        return Path(a.out).expanduser().parent / "engine_profiles.json"
    return Path("llmplan-out") / "validate-serving" / "engine_profiles.json"


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))

"""Measured disaggregated serving runs (``mode = disagg`` rows of ``e2e_serving.csv``) ->
disaggregated simulator deployments (:class:`~sim.disaggregated.DisaggSpec`), and their replay.

A disaggregated row names two pools with the ``prefill_*`` and ``decode_*`` columns
(``tp_size, pp_size, attention_dp_size, moe_tp_size, moe_ep_size``, ``batch_size`` per
worker, ``num_workers``), the engine, model, GPU, precision, ``isl``/``osl`` and the
closed-loop concurrency (``silicon_concurrency=N`` in ``silicon_data_source``).

Mapping: each pool is mapped exactly as an aggregated row of the same engine, model, GPU and
precision with that pool's columns (:func:`calibration.serving_rows.map_row` on a row
rewritten by :func:`pool_row`), so both pools get the aggregated mapping's precision,
parallelism, memory and engine-term rules (and anything that mapping learns later, e.g.
attention data parallelism). The pool's batch limit is its own ``batch_size`` (per worker,
times its attention-DP size), not the client concurrency: the run's decode batch sizes
times decode workers equal the concurrency on every row that gives them. Workers and
batches are inputs the simulator cannot guess: a row without them is listed as
``missing_input`` naming the columns, never replayed with invented counts.

Replay (:func:`simulate_disagg_case`): closed loop, every client sends its first request at
time 0, ``max(waves x N, min_requests)`` requests, all counted (as the aggregated replay),
TTFT stamped when the decode worker takes the request (prefill queue + prefill + KV
transfer + wait for decode room: what a client of a disaggregated front end measures, see
docs/DISAGG.md), TPOT = (E2E - TTFT) / (output - 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from llmplan.calibration.disagg_row_labels import (POOL_COLUMNS, POOLS, concurrency_of_source,
                                                   disagg_deployment_key, is_disagg, label_conflicts, repeat_of,
                                                   split_keys)
from llmplan.calibration.serving_rows import (SIMULATED, Prediction, RowMapping, ServingCase, SimOptions, _int,
                                              _kernels, _text, benchmark_workload, kernel_tier, map_row)
from llmplan.sim.types import EngineProfile

#: inputs without which a disaggregated row is not replayed
NEEDED = ("num_workers", "batch_size")


@dataclass(frozen=True)
class DisaggCase:
    """One simulable disaggregated run: a case per pool (each a one-worker deployment with the
    pool's batch limit) and the worker counts."""

    index: int
    row_id: str
    backend: str
    prefill: ServingCase
    decode: ServingCase
    prefill_workers: int
    decode_workers: int
    concurrency: int
    isl: int
    osl: int
    measured_ttft_ms: float
    measured_tpot_ms: float
    version: str = ""
    deployment: str = ""
    split: str = ""          # the held-out split's key (disagg_row_labels.split_keys; "": deployment)
    request_terms: str = "prompt"   # the per-request TTFT form of the row's front end (row_request_terms)

    @property
    def dense(self) -> bool:
        return self.decode.dense

    @property
    def dep(self) -> Any:
        """The decode pool's deployment (model and GPU for reports)."""
        return self.decode.dep

    @property
    def gpus(self) -> int:
        return (self.prefill_workers * self.prefill.dep.par.gpus + self.decode_workers * self.decode.dep.par.gpus)


@dataclass(frozen=True)
class DisaggMapping:
    index: int
    case: DisaggCase | None
    status: str


def disagg_concurrency(row: Mapping[str, Any]) -> int:
    """Clients of a disaggregated run: ``silicon_concurrency=N`` in the source, else 0 (unknown).

    The decode pool's total batch (``decode_batch_size x decode_num_workers x
    decode_attention_dp_size``) equals ``N`` on every row that gives both, but it is not a
    stand-in where ``N`` is absent: on those rows (the ``*_c_tpnone_*`` runs) the measured TPOT
    is below what that many concurrent decodes can reach (e.g. Qwen3-32B, 2 decode workers of
    TP4 x 224: 8.7 ms measured, ~10 ms for the KV reads alone), so fewer clients were running."""
    return concurrency_of_source(row)


def pool_row(row: Mapping[str, Any], pool: str) -> dict[str, Any]:
    """The row as an aggregated run of one worker of ``pool`` (its ``<pool>_*`` columns)."""
    r = dict(row)
    r["mode"] = "agg"
    for c in POOL_COLUMNS:
        r[c] = row.get(f"{pool}_{c}")
    return r


def missing_inputs(row: Mapping[str, Any]) -> list[str]:
    """Columns a disaggregated replay needs that the row leaves empty."""
    out = [] if disagg_concurrency(row) >= 1 else ["silicon_concurrency (in silicon_data_source)"]
    for pool in POOLS:
        for c in NEEDED + ("tp_size",):
            if _int(row.get(f"{pool}_{c}"), 0) < 1:
                out.append(f"{pool}_{c}")
    return out


#: columns that identify one measurement: the ``2026_04_06_*`` dump repeats ``2026_03_25_*`` runs
#: verbatim (same deployment, lengths, concurrency and measured values) under other ids
MEASUREMENT_COLUMNS = ("backend", "backend_version", "model_path", "system", "precision", "isl", "osl",
                       "silicon_ttft_ms", "silicon_tpot_ms")


def measurement_key(row: Mapping[str, Any]) -> tuple:
    """One measurement's identity (ids, dump names and the model label excluded, as for the
    aggregated repeats, ``serving_rows.REPEAT_LABELS``: the dumps relabel runs): repeated rows share it."""
    key = [_text(row.get(c)) if c in ("backend", "backend_version", "system", "precision")
           else round(float(row.get(c) or 0.0), 6) for c in MEASUREMENT_COLUMNS if c != "model_path"]
    pools = [_int(row.get(f"{p}_{c}"), 0) for p in POOLS for c in POOL_COLUMNS + ("num_workers",)]
    return (*key, *pools, disagg_concurrency(row))


def _pool_case(row: Mapping[str, Any], pool: str, index: int,
               engines: Mapping[str, EngineProfile]) -> ServingCase | str:
    m: RowMapping = map_row(pool_row(row, pool), index, engines)
    if m.case is None:
        reason, _, detail = m.status.partition(":")
        return f"{reason}: {pool} pool:{detail}"
    adp = max(1, _int(row.get(f"{pool}_attention_dp_size"), 1))
    seqs = max(1, _int(row.get(f"{pool}_batch_size"), 1)) * adp
    e = m.case.dep.engine
    e = replace(e, max_num_seqs=seqs, max_num_batched_tokens=max(e.max_num_batched_tokens, seqs))
    return replace(m.case, dep=replace(m.case.dep, engine=e))


def single_client_row(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A row at concurrency 1 whose worker counts or batch sizes are empty, with 1 prefill and
    1 decode worker of batch 1 filled in: with one closed-loop client only one request is ever
    in flight, so any xPyD serves it alike (the replay is exact, not a guess). None otherwise."""
    if disagg_concurrency(row) != 1:
        return None
    if any(_int(row.get(f"{p}_tp_size"), 0) < 1 for p in POOLS):
        return None
    r = dict(row)
    for p in POOLS:
        for c in NEEDED:
            if _int(r.get(f"{p}_{c}"), 0) < 1:
                r[f"{p}_{c}"] = 1
    return r


def map_disagg_row(row: Mapping[str, Any], index: int, engines: Mapping[str, EngineProfile],
                   unidentified: str = "") -> DisaggMapping:
    """One ``mode = disagg`` row -> a case to simulate, or a status saying why not. ``unidentified``:
    why the row's labels do not identify its run (:func:`~calibration.disagg_row_labels.label_conflicts`
    of its frame): then the layout is a missing input and nothing is filled in."""
    miss = missing_inputs(row)
    if unidentified:
        return DisaggMapping(index, None, "missing_input: " + (f"{', '.join(miss)} empty; and " if miss else "")
                             + unidentified)
    filled = single_client_row(row) if miss else None
    if filled is not None:
        row, miss = filled, []
    if miss:
        return DisaggMapping(index, None, f"missing_input: {', '.join(miss)} empty (a disaggregated replay at "
                                          "concurrency > 1 needs each pool's worker count, batch size and TP)")
    cases = {}
    for pool in POOLS:
        c = _pool_case(row, pool, index, engines)
        if isinstance(c, str):
            return DisaggMapping(index, None, c)
        cases[pool] = c
    p, d = cases["prefill"], cases["decode"]
    if p.dep.prec.kv_cache != d.dep.prec.kv_cache:
        return DisaggMapping(index, None, "precision: the pools' KV dtypes differ")
    case = DisaggCase(index, p.row_id, p.backend, p, d, _int(row.get("prefill_num_workers"), 1),
                      _int(row.get("decode_num_workers"), 1), disagg_concurrency(row), p.isl, p.osl,
                      p.measured_ttft_ms, p.measured_tpot_ms, p.version, disagg_deployment_key(row),
                      request_terms=row_request_terms(row))
    return DisaggMapping(index, case, SIMULATED)


# ----------------------------------------------------------------------------- replay


def row_request_terms(row: Mapping[str, Any]) -> str:
    """The per-request TTFT form (``DisaggSpec.request_terms``, sim/disagg_request_terms.py) of a row's front
    end: ``"request"`` for a run served from a Dynamo runtime image (``nvcr.io/nvidia/ai-dynamo/...`` in
    ``silicon_data_source``: Dynamo's Rust front end tokenises the prompt), ``"prompt"`` otherwise (the
    engine's own API server, e.g. the SGLang router rows of ``lmsysorg/sglang`` images)."""
    return "request" if "ai-dynamo/" in _text(row.get("silicon_data_source")) else "prompt"


def disagg_spec(case: DisaggCase, opts: SimOptions, wrap: Callable[[Any], Any] | None = None,
                longest_tokens: int | None = None, handoff_ms: float = 0.0, request_terms: str | None = None) -> Any:
    """The :class:`~sim.disaggregated.DisaggSpec` of a case (kernel models cached per GPU,
    engine and calibration; ``wrap`` applied to both pools' step models; ``request_terms``: None = the
    case's, i.e. its row's front end, :func:`row_request_terms`)."""
    from llmplan.sim.deployment import build
    from llmplan.sim.disaggregated import DisaggSpec, PoolSpec, kv_link_transfer
    from llmplan.sim.replica import ReplicaSpec

    longest = longest_tokens or case.isl + case.osl
    pools = []
    for c, workers in ((case.prefill, case.prefill_workers), (case.decode, case.decode_workers)):
        dep = c.dep
        km = _kernels(dep.gpu.key, dep.engine.kernel_backend, opts.calibration)
        step, mem = build(dep, opts.calibration, longest, kernels=km)
        engine = dep.engine
        if not engine.chunked_prefill or engine.whole_prompts:
            # a whole prompt (plus recomputed output) must fit one step next to the running
            # decodes, as in the aggregated replay (calibration.serving_rows.simulate_case)
            engine = replace(engine, max_num_batched_tokens=max(engine.max_num_batched_tokens,
                                                                longest + engine.max_num_seqs))
        label = f"{dep.gpu.key} TP{dep.par.tp}" + (f" EP{dep.par.ep}" if dep.par.ep > 1 else "")
        rs = ReplicaSpec(wrap(step) if wrap is not None else step, engine, mem.kv_capacity_tokens, longest)
        pools.append(PoolSpec(workers, rs, tp=dep.par.tp, gpus_per_worker=dep.par.gpus, label=label))
    p, d = pools
    xfer = kv_link_transfer(case.decode.dep.model, case.decode.dep.prec.kv_cache, case.prefill.dep.gpu,
                            case.decode.dep.gpu, p, d)
    return DisaggSpec(p, d, xfer, "decode", handoff_ms=handoff_ms,
                      request_terms=case.request_terms if request_terms is None else request_terms)


def simulate_disagg_case(case: DisaggCase, opts: SimOptions, wrap: Callable[[Any], Any] | None = None,
                         handoff_ms: float = 0.0, request_terms: str | None = None) -> Prediction:
    """Replay one disaggregated run (see the module docstring) with the engine's hand-off delay."""
    from llmplan.errors import UserError
    from llmplan.sim.disaggregated import simulate_disaggregated

    lo, hi = opts.osl_range(case.osl)
    try:
        spec = disagg_spec(case, opts, wrap, case.isl + hi, handoff_ms, request_terms)
    except UserError as e:
        return Prediction(math.nan, math.nan, "", f"{'memory' if 'fit' in str(e) else 'parallelism'}: {e}")
    tier = kernel_tier(spec.decode.replica.cost_model if wrap is None else _unwrap(spec.decode.replica.cost_model))
    wl, window = benchmark_workload(case.isl, case.osl, case.concurrency, opts)
    try:
        res = simulate_disaggregated(wl, spec, seed=opts.seed, window=window)
    except UserError as e:
        return Prediction(math.nan, math.nan, tier, f"memory: {e}")
    s = res.summary
    if res.overloaded or s.get("ttft_ms_mean") is None or s.get("tpot_ms_mean") is None:
        return Prediction(math.nan, math.nan, tier, f"invalid: simulation did not finish ({res.unfinished} unfinished)")
    return Prediction(float(s["ttft_ms_mean"]), float(s["tpot_ms_mean"]), tier, SIMULATED, int(s["measured_finished"]))


def _unwrap(cost_model: Any) -> Any:
    return getattr(cost_model, "step", cost_model)


# ----------------------------------------------------------------------------- replay of a frame


def _predict_task(task: tuple[dict, int, dict, SimOptions, float | None, float]) -> Prediction:
    from llmplan.calibration.engine_fit import corrected, overrides_for
    from llmplan.calibration.serving_rows import engine_profiles

    row, index, overrides, opts, jitter, handoff = task
    backend = _text(row.get("backend"))
    mine = overrides_for(overrides, backend, str(row.get("backend_version") or ""))
    m = map_disagg_row(row, index, engine_profiles({**overrides, backend: mine}))
    if m.case is None:
        return Prediction(math.nan, math.nan, "", m.status)
    j = float(mine.get("osl_jitter", 0.0)) if jitter is None else jitter
    return simulate_disagg_case(m.case, replace(opts, osl_jitter=j),
                                corrected(float(mine.get("prefill_scale", 1.0))), handoff)


def map_disagg_rows(df: Any, overrides: Mapping[str, Mapping[str, Any]]) -> dict[int, DisaggMapping]:
    """Every ``mode = disagg`` row of a frame, by position. Rows whose labels name several runs
    (:func:`~calibration.disagg_row_labels.label_conflicts`) list the layout as a missing input; a row
    not replayable whose measurement is that of a replayable row (:func:`~calibration.disagg_row_labels.
    repeat_of`: the dumps re-export the ``cfg`` runs without worker counts) is a ``repeat`` of it."""
    from llmplan.calibration.engine_fit import overrides_for
    from llmplan.calibration.serving_rows import engine_profiles

    rows = df.to_dict("records")
    conflicts = label_conflicts(rows)
    splits = split_keys(rows)
    out = {}
    for i, r in enumerate(rows):
        if is_disagg(r):
            b = _text(r.get("backend"))
            mine = overrides_for(dict(overrides), b, str(r.get("backend_version") or ""))
            m = map_disagg_row(r, i, engine_profiles({**overrides, b: mine}), conflicts.get(i, ""))
            out[i] = replace(m, case=replace(m.case, split=splits[i])) if m.case is not None else m
    for i, j in repeat_of(rows, [k for k, m in out.items() if m.case is not None]).items():
        out[i] = DisaggMapping(i, None, f"repeat: the measurement of row {_text(rows[j].get('id')) or j} (same engine, "
                                        "version, GPU, precision, lengths, concurrency and measured TTFT/TPOT), which "
                                        "carries the worker counts and layout and is replayed; counted once")
    return out


def replayable_rows(df: Any, overrides: Mapping[str, Mapping[str, Any]], opts: SimOptions):
    """Each replayable disaggregated row of a frame, in order: ``(mapping, row, key, terms, opts)`` with
    the row's :func:`measurement_key`, its engine-version terms (``calibration.engine_fit.overrides_for``)
    and ``opts`` carrying the terms' output-length jitter (the diagnostics' common loop)."""
    from llmplan.calibration.engine_fit import overrides_for

    rows = df.to_dict("records")
    for i, mp in map_disagg_rows(df, overrides).items():
        if mp.case is None:
            continue
        r = rows[i]
        mine = overrides_for(dict(overrides), _text(r.get("backend")), str(r.get("backend_version") or ""))
        yield mp, r, measurement_key(r), mine, replace(opts, osl_jitter=float(mine.get("osl_jitter", 0.0)))


def held_out(m: DisaggMapping, seed: int) -> bool:
    """The row's deployment is in the held-out half of split ``seed`` (the aggregated rows' split:
    :func:`calibration.engine_fit.deployment_half` of the row's split key,
    :func:`~calibration.disagg_row_labels.split_keys`: two runs of one decode deployment whose prefill
    pools are spelled TP and attention DP fall in one half)."""
    from llmplan.calibration.engine_fit import deployment_half

    return m.case is not None and deployment_half(m.case.split or m.case.deployment, seed) == 1


def replay_disagg(df: Any, opts: SimOptions, overrides: Mapping[str, Mapping[str, Any]],
                  handoffs: Mapping[str, float] | None = None, limit: int | None = None, workers: int = 2,
                  progress: Any = None, jitter: float | None = None, holdout_seed: int | None = None,
                  train_only: bool = False) -> dict[int, tuple[Prediction, str]]:
    """Replay the disaggregated rows of ``df``: {row position: (prediction, model key)}.
    ``handoffs``: per-engine hand-off delay (None: the shipped fit); ``holdout_seed``: only the
    held-out half is run (``train_only``: only the training half), the others get status ``train``."""
    from llmplan.calibration.engine_fit import subsample as subsample_positions
    from llmplan.calibration.serving_rows import parallel_map
    from llmplan.sim.disagg_handoff import handoff_ms

    maps = map_disagg_rows(df, overrides)
    rows = df.to_dict("records")
    ok = [i for i, m in maps.items() if m.case is not None]
    skipped: dict[int, str] = {}
    if holdout_seed is not None:
        for i in ok:
            if held_out(maps[i], holdout_seed) == train_only:
                skipped[i] = f"train: deployment in the {'held-out' if train_only else 'training'} half " \
                             f"(seed {holdout_seed}), not scored"
        ok = [i for i in ok if i not in skipped]
    run = subsample_positions(ok, limit)
    for i in set(ok) - set(run):
        skipped[i] = f"limit: not run (--limit {limit})"

    def h(r: dict) -> float:
        b = _text(r.get("backend"))
        return float(handoffs.get(b, handoffs.get("*", 0.0))) if handoffs is not None else handoff_ms(b)

    preds = parallel_map(_predict_task, [(rows[i], i, dict(overrides), opts, jitter, h(rows[i])) for i in run],
                         workers, progress)
    out: dict[int, tuple[Prediction, str]] = {}
    for i, m in maps.items():
        key = m.case.dep.model.key if m.case else str(rows[i].get("model_path"))
        out[i] = (Prediction(math.nan, math.nan, "", skipped.get(i, m.status)), key)
    for i, p in zip(run, preds):
        out[i] = (p, out[i][1])
    return out


def best_handoff(pairs: list[tuple[float, float]], grid_ms: tuple[float, float, float] = (0.0, 5000.0, 10.0)) -> float:
    """The hand-off minimising the median APE of ``predicted + h`` against ``measured`` over
    (measured, predicted with hand-off 0) TTFT pairs (the target's own metric; a constant delay
    adds to every request's TTFT, the closed loop's feedback on the load is second order);
    ties: the smallest h."""
    import numpy as np

    m = np.array([a for a, _ in pairs], float)
    p = np.array([b for _, b in pairs], float)
    hs = np.arange(grid_ms[0], grid_ms[1] + grid_ms[2] / 2, grid_ms[2])
    err = [float(np.median(np.abs((p + h) / m - 1.0))) for h in hs]
    return round(float(hs[int(np.argmin(err))]), 1)


def fit_handoff(df: Any, opts: SimOptions, overrides: Mapping[str, Mapping[str, Any]], seed: int,
                workers: int = 2, progress: Any = None, exclude_regimes: bool = True) -> dict[str, Any]:
    """Per-engine hand-off delay from the training half of split ``seed``: each unique training
    row replayed at the hand-offs of ``calibration.disagg_handoff_fit.KNOTS_MS`` (the closed loop's
    feedback included), the value minimising the median APE of the interpolated TTFT
    (:func:`~calibration.disagg_handoff_fit.best_handoff_closed_loop`); engines without rows get the
    mean of the fitted engines' values (``pooled_handoff_ms``). ``exclude_regimes``: rows whose
    measured TTFT no prefill queue explains (:mod:`calibration.disagg_regimes`) are left out."""
    import numpy as np

    from llmplan.calibration.disagg_handoff_fit import KNOTS_MS, best_handoff_closed_loop
    from llmplan.calibration.disagg_regimes import disagg_regime

    maps = map_disagg_rows(df, overrides) if exclude_regimes else {}
    excluded: dict[str, int] = {}

    runs = [replay_disagg(df, opts, overrides, {"*": h}, None, workers, progress, None, seed, train_only=True)
            for h in KNOTS_MS]
    res = runs[0]
    meas = df["silicon_ttft_ms"].to_numpy(float)
    resid: dict[str, list[float]] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    backends = df["backend"].astype(str).str.strip().str.lower().to_numpy()
    rows = df.to_dict("records")
    seen: set[tuple] = set()
    unique: dict[str, list[tuple[int, Prediction]]] = {}
    forms: dict[str, set[str]] = {}
    for i, (p, _) in sorted(res.items()):
        if p.status != SIMULATED:
            continue
        key = measurement_key(rows[i])
        if key in seen:   # a repeated measurement counts once
            continue
        seen.add(key)
        c = maps[i].case if maps else None
        forms.setdefault(backends[i], set()).add(row_request_terms(rows[i]))
        if c is not None and disagg_regime(c, disagg_spec(c, opts, None, c.isl + c.osl)):
            excluded[backends[i]] = excluded.get(backends[i], 0) + 1
            continue
        unique.setdefault(backends[i], []).append((i, p))
    curves: dict[str, list[list[float]]] = {}
    for b, items in unique.items():
        for i, p in items:
            resid.setdefault(b, []).append(float(meas[i] - p.ttft_ms))
            pairs.setdefault(b, []).append((float(meas[i]), float(p.ttft_ms)))
            curves.setdefault(b, []).append([float(r[i][0].ttft_ms) for r in runs])
    fitted = {}
    for b, v in pairs.items():
        ok = [k for k, c in enumerate(curves[b]) if all(np.isfinite(c))]   # every knot's replay finished
        fitted[b] = best_handoff_closed_loop([v[k][0] for k in ok], [curves[b][k] for k in ok], KNOTS_MS) \
            if ok else best_handoff(v)
    doc: dict[str, Any] = {
        # an engine without rows takes the mean of the fitted engines' hand-offs (as sim.engine_terms
        # falls back to the mean of the fitted engines' terms)
        "pooled_handoff_ms": round(float(np.mean(list(fitted.values()))), 1) if fitted else 0.0,
        # the per-request TTFT form the engine's rows were replayed with (sim.disagg_handoff.request_terms: the
        # planner pairs the hand-off with it); "mixed" if its rows had both front ends
        "engines": {b: {"handoff_ms": fitted[b], "training_rows": len(v), "excluded_rows": excluded.get(b, 0),
                        "request_terms": (lambda f: f.pop() if len(f) == 1 else "mixed")(set(forms.get(b, {"prompt"}))),
                        # the prompt lengths of the rows the fit rests on: a constant hand-off is only identified
                        # at these; a per-prompt-token part of the per-request time is not, with one length
                        "training_isl": sorted({int(rows[i]["isl"]) for i, _ in unique.get(b, [])}),
                        "residual_ms_p10_p90": [round(float(np.percentile(v, 10)), 1),
                                                round(float(np.percentile(v, 90)), 1)]}
                    for b, v in sorted(resid.items())},
        "_provenance": {"seed": seed, "rows": "mode=disagg rows of the measurement files given, training half "
                                              "(calibration.engine_fit.deployment_half of the disaggregated "
                                              "split key, calibration.disagg_row_labels.split_keys)",
                        "fit": "the hand-off (0-3000 ms, 10 ms steps) minimising the median APE of the simulated "
                               "mean TTFT (the engine's per-request front-end TTFT included; each row replayed at "
                               "hand-offs 0, 250, 500, 750, 1000, 1500, 2000, 3000 ms and interpolated linearly, so "
                               "closed loops bound by a saturated prefill pool respond as they do) against the "
                               "measured mean TTFT over the engine's unique training rows "
                               "(calibration.disagg_handoff_fit)" + (
                                   "; rows whose measured TTFT exceeds a full prefill queue left out "
                                   "(calibration.disagg_regimes)" if exclude_regimes else ""),
                        "source": "aiconfigurator-core 0.12.0 served runs (Apache-2.0), shared/measurements"},
    }
    return doc


def main(argv: list[str] | None = None) -> int:
    """``python -m llmplan.calibration.serving_disagg_rows --fit --measurements DIR --out FILE``."""
    import argparse
    import json
    from pathlib import Path

    import sys

    from llmplan.calibration.engine_fit import load_engine_overrides, profile_seed
    from llmplan.calibration.serving_rows import read_serving_files
    from llmplan.errors import EXIT_USER_ERROR, UserError

    ap = argparse.ArgumentParser(description="Fit the disaggregated hand-off delay per engine (training half).")
    ap.add_argument("--measurements", nargs="+", required=True)
    ap.add_argument("--out", required=True, help="e.g. sim/data/disagg_handoff.json")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--score", action="store_true",
                    help="also replay the held-out half with the hand-offs just fitted (not the shipped file) and "
                         "print the targets (median APE, each measurement once)")
    ap.add_argument("--keep-regimes", action="store_true",
                    help="fit on every training row, also those whose measured TTFT exceeds a full prefill queue "
                         "(calibration.disagg_regimes; left out by default)")
    ap.add_argument("--engine-profiles", default="default",
                    help="engine terms the replays use: 'default' (the shipped sim/data/engine_profiles.json) or a "
                         "file written by calibration.engine_fit (to judge a scratch refit)")
    a = ap.parse_args(argv)
    try:
        overrides, engines = load_engine_overrides(a.engine_profiles)
    except UserError as e:   # one or two lines, no traceback
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    seed = profile_seed(engines) if Path(engines).is_file() else 0
    df = read_serving_files(a.measurements)
    doc = fit_handoff(df, SimOptions(), overrides, seed, a.workers, exclude_regimes=not a.keep_regimes)
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(doc, indent=1, sort_keys=True))
    if a.score:
        held, _ = load_engine_overrides(a.engine_profiles, holdout=True)   # as `llmplan validate serving --holdout`
        print(score_heldout(df, held, doc, seed, a.workers).to_string(index=False))
    return 0


def fitted_handoffs(doc: Mapping[str, Any]) -> dict[str, float]:
    """{engine: hand-off ms, "*": pooled} of a :func:`fit_handoff` document."""
    out = {b: float(v["handoff_ms"]) for b, v in doc.get("engines", {}).items()}
    out["*"] = float(doc.get("pooled_handoff_ms", 0.0))
    return out


def score_heldout(df: Any, overrides: Mapping[str, Mapping[str, Any]], doc: Mapping[str, Any], seed: int,
                  workers: int = 2) -> Any:
    """:func:`disagg_targets` of the held-out half of split ``seed`` replayed with the hand-offs of
    ``doc`` (a fit not yet shipped: judge a refit before it replaces sim/data/disagg_handoff.json).
    ``overrides``: the engine terms fitted on the other half (``load_engine_overrides(..., holdout=True)``),
    as ``llmplan validate serving --holdout`` scores."""
    res = replay_disagg(df, SimOptions(), overrides, fitted_handoffs(doc), None, workers, None, None, seed)
    frame = df.copy()
    order = range(len(frame))
    frame["predicted_ttft_ms"] = [res[i][0].ttft_ms if i in res else math.nan for i in order]
    frame["predicted_tpot_ms"] = [res[i][0].tpot_ms if i in res else math.nan for i in order]
    frame["status"] = [res[i][0].status if i in res else "" for i in order]
    return disagg_targets(frame)


#: accuracy targets for disaggregated rows (issue 10: median APE of mean TTFT / TPOT)
TARGET_TTFT = 0.15
TARGET_TPOT = 0.10


def disagg_targets(res: Any) -> Any:
    """Median APE of the simulated disaggregated rows per engine (and all engines) against the
    targets; ``res`` is :func:`calibration.validate_serving.validate_serving`'s frame."""
    import pandas as pd

    from llmplan.calibration.engine_fit import ape_stats

    sim = res[(res["mode"].astype(str) == "disagg") & (res["status"] == SIMULATED)]
    if all(c in sim.columns for c in MEASUREMENT_COLUMNS):   # a measurement repeated in two dumps is scored
        # once, by the key the hand-off fit uses (its rounding matches repeats whose floats differ in the last bit)
        sim = sim[~pd.Series([measurement_key(r) for r in sim.to_dict("records")], index=sim.index).duplicated()]
    recs = []
    for be, g in list(sim.groupby("backend", sort=True)) + ([("all", sim)] if len(sim) else []):
        t = ape_stats(g["predicted_ttft_ms"].to_numpy(float), g["silicon_ttft_ms"].to_numpy(float))
        p = ape_stats(g["predicted_tpot_ms"].to_numpy(float), g["silicon_tpot_ms"].to_numpy(float))
        recs.append({"backend": be, "rows": len(g), "ttft_median": 100 * t[1], "tpot_median": 100 * p[1],
                     "ttft_met": t[1] <= TARGET_TTFT, "tpot_met": p[1] <= TARGET_TPOT})
    return pd.DataFrame(recs)


if __name__ == "__main__":
    raise SystemExit(main())

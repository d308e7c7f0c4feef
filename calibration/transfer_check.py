"""Transfer check: the measured served rows replayed on a GPU they were not measured on.

Every served row of the shared files (aggregated and disaggregated) is replayed twice through
the one replay of ``llmplan validate serving`` (:func:`calibration.validate_serving.validate_serving`,
no second implementation): on its own GPU (``system``), and with ``system`` relabelled to the
target GPU (e.g. ``b200``). Nothing else of the row changes: engine, version, model, precision,
parallelism, lengths and concurrency are those of the measured run.

There are no served measurements on the target to score against (and none may be used), so the
check is physical: per row, the ratio of the target's predicted mean TTFT / TPOT to the source
GPU's predicted (and measured) value, against the range the catalog figures allow
(:func:`expected_range`). A step is a sum of parts each bound by one resource (HBM bandwidth,
tensor throughput of the dtype the GPU runs, the scale-up link) or by host time, which does not
change with the GPU; so the ratio of a step, and of a closed-loop mean built from steps, lies
between the smallest per-resource ratio and 1 (when the target has at least as much of every
resource). A group outside that range, or refused on the target while simulated on the source,
is flagged: each needs an explanation (a measured kernel that is slower on the target, e.g. the
B200 custom all-reduce, is data, not a bug). Two effects are told apart rather than flagged blindly:
a row whose clients need more KV than the source GPU holds (``kv_limited``) queues or preempts there,
so a target with more memory may cut its TTFT below the range (capacity, not speed); and where the
shared files measured the same run on the target too (H100 -> H200: same engine, version, model,
layout, lengths and concurrency), the measured ratio is printed beside the replayed one.

    python -m llmplan.calibration.transfer_check --measurements ../shared/measurements --to b200 --out F.csv

writes the per-row CSV to ``F.csv`` and the per-group table to ``F_groups.csv``.
``--breakdown ROW`` prints the operator breakdown of one row on the source and on the target
(:mod:`calibration.row_breakdown`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmplan.calibration.engine_fit import add_sim_args, load_engine_overrides, sim_options, subsample
from llmplan.calibration.serving_rows import (FP4_MODES, FP8_MODES, INT4_MODES, SIMULATED, concurrency_of,
                                              read_serving_files, serving_files)
from llmplan.calibration.validate_serving import select_rows, validate_serving
from llmplan.errors import EXIT_USER_ERROR, CatalogError, UserError
from llmplan.hardware_catalog.spec import GPUSpec

#: a group's median ratio may exceed its range by this much before it is flagged (the replay's
#: own noise: output-length jitter and closed-loop phase, ~1%)
TOLERANCE = 0.02
#: columns of the per-row CSV taken from the input rows
ROW_COLUMNS = ("id", "source_file", "backend", "backend_version", "model_path", "precision", "gemm_quant_mode",
               "mode", "isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
               "silicon_ttft_ms", "silicon_tpot_ms")
GROUP_KEYS = ("target", "source_gpu", "backend", "model_key", "weights", "mode")


# ----------------------------------------------------------------------------- physics


def weights_label(row: dict[str, Any]) -> str:
    """The row's weight format as the replay reads it: fp8 | fp4 | int4 | bf16 (from
    ``gemm_quant_mode``, else ``precision``; empty: the checkpoint's own format, ``native``
    when the model is not in the catalog)."""
    mode = str(row.get("gemm_quant_mode") or row.get("precision") or "").strip().lower()
    if mode in ("nan", ""):
        return _native_dtype(str(row.get("model_path") or ""))
    if mode in FP8_MODES:
        return "fp8"
    if mode in FP4_MODES:
        return "fp4"
    if mode in INT4_MODES:
        return "int4"
    return mode


def _native_dtype(model_path: str) -> str:
    from llmplan.model_catalog.loader import load_model

    try:
        d = load_model(model_path).native_dtype
    except CatalogError:
        return "native"
    return d if d in ("fp8", "fp4", "int4") else "bf16"


def compute_dtypes(gpu: GPUSpec, weights: str) -> tuple[str, ...]:
    """Tensor-core dtypes a GPU may run a row's GEMMs in: fp8 weights -> fp8 where the GPU has it;
    4-bit float weights (and a checkpoint's own, unknown format) -> fp4 (Blackwell NVFP4/MXFP4
    tensor cores), fp8 (W4A8-MXFP8) or bf16 (W4A16: Hopper has no fp4 tensor cores, its engines
    dequantize to bf16), whichever the GPU has; int4 weight-only and bf16 -> bf16 (catalog header:
    int4 runs on the bf16/fp16 tensor path). A dtype the GPU lacks runs in bf16."""
    want = {"fp8": ("fp8",), "fp4": ("fp4", "fp8", "bf16"), "native": ("fp4", "fp8", "bf16")}.get(weights, ("bf16",))
    have = tuple(d for d in want if gpu.supports(d))
    return have or ("bf16",)


@dataclass(frozen=True)
class ExpectedRange:
    """Target/source time ratios when one resource bounds, and the range a mean may take."""

    memory: float     # HBM bandwidth (decode weights and KV reads)
    compute: float    # tensor throughput, the most favourable dtype pair the engines may run
    link: float       # scale-up link bandwidth (NaN when either GPU has none)
    lo: float
    hi: float


def expected_range(src: GPUSpec, tgt: GPUSpec, weights: str = "bf16") -> ExpectedRange:
    """The physically expected range of target/source latency ratios for a row with ``weights``.

    ``compute``: the source's slowest over the target's fastest TFLOP/s among the dtypes each GPU
    may run the row in (:func:`compute_dtypes`): a lower bound, e.g. fp4 weights run W4A16 (bf16)
    on Hopper and may run NVFP4 on Blackwell.
    ``lo`` = the smallest of the three ratios (every part of a step bound by its fastest-scaling
    resource); ``hi`` = 1 when the target has at least as much of every resource (host time and
    latency floors unchanged), else the largest ratio."""
    memory = src.hbm_bw_gbps / tgt.hbm_bw_gbps
    compute = (min(src.peak_tflops(d) for d in compute_dtypes(src, weights))
               / max(tgt.peak_tflops(d) for d in compute_dtypes(tgt, weights)))
    link = (src.scaleup_bw_gbps / tgt.scaleup_bw_gbps if src.scaleup_bw_gbps > 0 and tgt.scaleup_bw_gbps > 0
            else math.nan)
    ratios = [r for r in (memory, compute, link) if math.isfinite(r)]
    return ExpectedRange(memory, compute, link, min(ratios), max([1.0, *ratios]))


# ----------------------------------------------------------------------------- replay


def relabel(df: pd.DataFrame, target: str) -> pd.DataFrame:
    """``df`` with every row's ``system`` set to ``target`` (nothing else changes)."""
    out = df.copy()
    out["system"] = target
    return out


def _gpu(key: str) -> GPUSpec:
    from llmplan.hardware_catalog.loader import get_gpu

    return get_gpu(key)


def kv_capacity_tokens(df: pd.DataFrame, overrides: dict) -> np.ndarray:
    """Per row, the KV-cache tokens one replica of the row's deployment holds (the replay's own
    memory plan: :func:`sim.memory.plan_memory` of :func:`map_rows`' case); NaN for rows not mapped
    (disaggregated rows, repeats, refusals)."""
    from llmplan.calibration.serving_rows import engine_profiles, map_rows
    from llmplan.sim.memory import plan_memory

    out = np.full(len(df), np.nan)
    for m in map_rows(df, engine_profiles(overrides)):
        if m.case is not None:
            d = m.case.dep
            out[m.index] = plan_memory(d.model, d.gpu, d.par, d.prec, d.engine, m.case.isl + m.case.osl
                                       ).kv_capacity_tokens
    return out


#: columns that, with the client concurrency, identify one run apart from its GPU
PAIR_COLUMNS = ("backend", "backend_version", "model_path", "precision", "gemm_quant_mode", "moe_quant_mode",
                "mode", "isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def measured_on_target(df: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``df`` measured on another GPU, the measured mean (TTFT, TPOT) of the same run
    (engine, version, model, precision, layout, lengths, concurrency: :data:`PAIR_COLUMNS`) in
    ``df`` measured on ``target`` (NaN where ``df`` has none): the replay's ratio can then be set
    against a measured one (e.g. H100 -> H200 rows of the shared files)."""
    def key(r: dict[str, Any]) -> tuple:
        return (*(str(r.get(c)).strip().lower() for c in PAIR_COLUMNS), concurrency_of(r))

    rows = df.to_dict("records")
    there = [_known(str(r.get("system"))) and _gpu(str(r["system"])).key == target for r in rows]
    on_target: dict[tuple, tuple[float, float]] = {}
    for r, t in zip(rows, there):
        if t:
            on_target.setdefault(key(r), (float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])))
    ttft, tpot = np.full(len(df), np.nan), np.full(len(df), np.nan)
    for i, (r, t) in enumerate(zip(rows, there)):
        hit = None if t else on_target.get(key(r))
        if hit is not None:
            ttft[i], tpot[i] = hit
    return ttft, tpot


def compare(df: pd.DataFrame, src: pd.DataFrame, tgt: pd.DataFrame, target: str,
            kv_source: np.ndarray | None = None, kv_target: np.ndarray | None = None) -> pd.DataFrame:
    """One line per input row not measured on ``target``: both replays, their ratios, the row's expected range and the KV
    capacities of both replays (``kv_source`` / ``kv_target``, tokens per replica). A row whose
    clients need more KV than the source GPU holds (``concurrency x (isl + osl)``) queues or
    preempts there; a target with more memory removes that wait, so its TTFT ratio may fall below
    the bandwidth/compute range (``kv_limited``: a capacity effect, not speed)."""
    tg = _gpu(target)
    rows = df.to_dict("records")
    out = pd.DataFrame({c: df[c] for c in ROW_COLUMNS if c in df.columns})
    out.insert(0, "target", tg.key)
    out.insert(1, "source_gpu", [_gpu(str(r["system"])).key if _known(str(r["system"])) else str(r["system"])
                                 for r in rows])
    out["model_key"] = src["model_key"].where(src["status"] == SIMULATED, tgt["model_key"])
    out["weights"] = [weights_label(r) for r in rows]
    out["concurrency"] = [concurrency_of(r) for r in rows]
    out["source_status"] = src["status"].str.split(":").str[0]
    out["target_status"] = tgt["status"].str.split(":").str[0]
    out["target_detail"] = np.where(tgt["status"] == SIMULATED, "", tgt["status"])
    for m in ("ttft", "tpot"):
        s, t = src[f"predicted_{m}_ms"].to_numpy(float), tgt[f"predicted_{m}_ms"].to_numpy(float)
        out[f"source_pred_{m}_ms"] = s
        out[f"target_pred_{m}_ms"] = t
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"ratio_{m}"] = t / s
            out[f"ratio_{m}_vs_measured"] = t / df[f"silicon_{m}_ms"].to_numpy(float)
    lo, hi, mem = [], [], []
    for r, sg in zip(rows, out["source_gpu"]):
        if not _known(sg):
            lo.append(math.nan), hi.append(math.nan), mem.append(math.nan)
            continue
        e = expected_range(_gpu(sg), tg, weights_label(r))
        lo.append(e.lo), hi.append(e.hi), mem.append(e.memory)
    out["expected_lo"], out["expected_hi"], out["memory_ratio"] = lo, hi, mem
    mt, mp = measured_on_target(df, tg.key)
    out["target_measured_ttft_ms"], out["target_measured_tpot_ms"] = mt, mp
    with np.errstate(divide="ignore", invalid="ignore"):
        out["measured_ratio_ttft"] = mt / df["silicon_ttft_ms"].to_numpy(float)
        out["measured_ratio_tpot"] = mp / df["silicon_tpot_ms"].to_numpy(float)
    demand = out["concurrency"].to_numpy(float) * (df["isl"].to_numpy(float) + df["osl"].to_numpy(float))
    nan = np.full(len(df), np.nan)
    out["kv_tokens_source"] = kv_source if kv_source is not None else nan
    out["kv_tokens_target"] = kv_target if kv_target is not None else nan
    out["kv_demand_tokens"] = demand
    out["kv_limited"] = out["kv_tokens_source"].to_numpy(float) < demand
    both = (out["source_status"] == SIMULATED) & (out["target_status"] == SIMULATED)
    out["flag"] = [_flag(r) if b else "" for r, b in zip(out.to_dict("records"), both)]
    return out[out["source_gpu"] != tg.key]   # rows measured on the target are the pairs, not moved


def _known(key: str) -> bool:
    try:
        _gpu(key)
    except CatalogError:
        return False
    return True


def _flag(r: dict[str, Any]) -> str:
    """Which ratio lies outside the row's expected range ("" when none)."""
    bad = []
    for m in ("ttft", "tpot"):
        x = r[f"ratio_{m}"]
        if x < r["expected_lo"] * (1 - TOLERANCE):
            bad.append(f"{m} below")
        elif x > r["expected_hi"] * (1 + TOLERANCE):
            bad.append(f"{m} above")
    # more KV on the target admits the clients the source queued: lower TTFT, larger decode batches
    return ", ".join(bad) + (" (KV-limited on source)" if bad and r.get("kv_limited") else "")


def groups(cmp: pd.DataFrame) -> pd.DataFrame:
    """Per target, source GPU, engine, model, weights and mode: status counts and median ratios."""
    recs = []
    for key, g in cmp.groupby(list(GROUP_KEYS), sort=True, dropna=False):
        both = g[(g["source_status"] == SIMULATED) & (g["target_status"] == SIMULATED)]
        refused = g[(g["source_status"] == SIMULATED) & (g["target_status"] != SIMULATED)]
        other = g[g["target_status"] != SIMULATED]["target_status"].value_counts()
        rec: dict[str, Any] = dict(zip(GROUP_KEYS, key))
        rec.update(rows=len(g), source_simulated=int((g["source_status"] == SIMULATED).sum()),
                   target_simulated=int((g["target_status"] == SIMULATED).sum()),
                   refused_on_target=len(refused),
                   target_not_simulated="; ".join(f"{k} {v}" for k, v in other.items()),
                   refusal_example=str(refused["target_detail"].iloc[0])[:160] if len(refused) else "")
        for m in ("ttft", "tpot"):
            rec[f"ratio_{m}"] = float(both[f"ratio_{m}"].median()) if len(both) else math.nan
            rec[f"ratio_{m}_min"] = float(both[f"ratio_{m}"].min()) if len(both) else math.nan
            rec[f"ratio_{m}_max"] = float(both[f"ratio_{m}"].max()) if len(both) else math.nan
            rec[f"ratio_{m}_vs_measured"] = float(both[f"ratio_{m}_vs_measured"].median()) if len(both) else math.nan
        paired = both[both["measured_ratio_tpot"].notna()]
        rec["paired_rows"] = len(paired)
        for m in ("ttft", "tpot"):
            rec[f"measured_ratio_{m}"] = float(paired[f"measured_ratio_{m}"].median()) if len(paired) else math.nan
            rec[f"paired_ratio_{m}"] = float(paired[f"ratio_{m}"].median()) if len(paired) else math.nan
        rec["expected_lo"] = float(g["expected_lo"].min())
        rec["expected_hi"] = float(g["expected_hi"].max())
        rec["memory_ratio"] = float(g["memory_ratio"].median())
        rec["rows_flagged"] = int((both["flag"] != "").sum())
        rec["kv_limited_on_source"] = int(both["kv_limited"].sum())
        rec["flag"] = _group_flag(rec)
        recs.append(rec)
    return pd.DataFrame(recs)


def _group_flag(rec: dict[str, Any]) -> str:
    bad = []
    for m in ("ttft", "tpot"):
        x = rec[f"ratio_{m}"]
        if not math.isfinite(x):
            continue
        if x < rec["expected_lo"] * (1 - TOLERANCE):
            bad.append(f"{m.upper()} below range")
        elif x > rec["expected_hi"] * (1 + TOLERANCE):
            bad.append(f"{m.upper()} above range")
    if rec["refused_on_target"]:
        bad.append(f"{rec['refused_on_target']} refused on target")
    return "; ".join(bad)


# ----------------------------------------------------------------------------- report


def print_report(cmp: pd.DataFrame, grp: pd.DataFrame, console: Any, seconds: float) -> None:
    from rich.table import Table

    for target, g in grp.groupby("target", sort=True):
        c = cmp[cmp["target"] == target]
        st = c["target_status"].value_counts()
        src_st = c["source_status"].value_counts()
        console.print(f"[bold]transfer check[/] -> {target}: {len(c)} rows; simulated on their own GPU "
                      f"{int(src_st.get(SIMULATED, 0))}, on {target} {int(st.get(SIMULATED, 0))} "
                      f"({seconds:.0f} s)")
        console.print("not simulated on " + target + ": "
                      + (", ".join(f"{k} {v}" for k, v in st.items() if k != SIMULATED) or "none"))
        t = Table(title=f"{target} / own GPU: median ratio of predicted means (range: min..max over rows); "
                        "expected = \\[fastest resource ratio, 1] from the catalog")
        for col in ("from", "engine", "model", "w", "mode", "sim", "TTFT", "TPOT", "TPOT rng", "TPOT/meas",
                    "HBM", "expected", "flag"):
            t.add_column(col, justify="left" if col in ("from", "engine", "model", "w", "mode", "flag") else "right")
        for r in g.to_dict("records"):
            if not r["source_simulated"] and not r["target_simulated"]:
                continue  # repeats and rows missing an input: counted in the line above
            sim = f"{r['target_simulated']}/{r['source_simulated']}"
            t.add_row(str(r["source_gpu"]).replace("_sxm", ""), str(r["backend"]), str(r["model_key"])[:22],
                      str(r["weights"]), str(r["mode"]), sim, _f(r["ratio_ttft"]), _f(r["ratio_tpot"]),
                      f"{_f(r['ratio_tpot_min'])}-{_f(r['ratio_tpot_max'])}", _f(r["ratio_tpot_vs_measured"]),
                      _f(r["memory_ratio"]), f"{_f(r['expected_lo'])}-{_f(r['expected_hi'])}",
                      ("[red]" + r["flag"] + "[/]") if r["flag"] else "")
        console.print(t)
        pg = g[g["paired_rows"] > 0]
        if len(pg):
            t = Table(title=f"Rows also measured on {target} (same run, other GPU): median ratio target / own GPU, "
                            "measured and replayed")
            for col in ("from", "engine", "model", "rows", "TTFT meas", "TTFT pred", "TPOT meas", "TPOT pred"):
                t.add_column(col, justify="left" if col in ("from", "engine", "model") else "right")
            for r in pg.to_dict("records"):
                t.add_row(str(r["source_gpu"]), str(r["backend"]), str(r["model_key"])[:22], str(r["paired_rows"]),
                          _f(r["measured_ratio_ttft"]), _f(r["paired_ratio_ttft"]), _f(r["measured_ratio_tpot"]),
                          _f(r["paired_ratio_tpot"]))
            console.print(t)
        flagged = c[c["flag"].astype(str) != ""]
        if len(flagged):
            kv = int(flagged["kv_limited"].sum())
            console.print(f"{len(flagged)} rows outside their range ({kv} of them KV-limited on the source GPU: "
                          "their clients need more KV than it holds, a capacity effect); per row in the CSV")
        ref = c[(c["source_status"] == SIMULATED) & (c["target_status"] != SIMULATED)]
        if len(ref):
            t = Table(title=f"Simulated on the own GPU, not on {target}")
            for col in ("reason", "rows", "example"):
                t.add_column(col)
            for reason, rg in ref.groupby("target_status"):
                t.add_row(str(reason), str(len(rg)), str(rg["target_detail"].iloc[0])[:140])
            console.print(t)


def _f(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.2f}"


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.transfer_check",
                                 description="Replay the measured served rows on another GPU (system relabelled) "
                                             "and check the predicted latency ratios against the catalog physics.")
    ap.add_argument("--measurements", required=True, nargs="+",
                    help="served runs in the e2e_serving.csv layout: files, or folders holding */e2e_serving.csv")
    ap.add_argument("--to", required=True, nargs="+", metavar="GPU",
                    help="target GPU(s): catalog keys or aliases (b200, b300, gb200, ...)")
    ap.add_argument("--out", default=None, help="per-row CSV (the per-group table goes to <out>_groups.csv)")
    ap.add_argument("--engine-profiles", default="default",
                    help="fitted engine terms: 'default' (shipped), 'none' or a JSON file (as validate serving)")
    ap.add_argument("--model", default=None, help="only rows of this model (HF id, catalog key or substring)")
    ap.add_argument("--backend", default=None, choices=("vllm", "sglang", "trtllm"), help="only rows of this engine")
    ap.add_argument("--mode", default=None, choices=("agg", "disagg"), help="only aggregated or disaggregated rows")
    ap.add_argument("--limit", type=int, default=None, help="at most N rows, spread over the file")
    ap.add_argument("--breakdown", default=None, metavar="ROW",
                    help="print one row's operator breakdown on its own GPU and on each target (id or index), "
                         "then stop")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_sim_args(ap)
    return ap


def breakdown(df: pd.DataFrame, row: str, targets: list[str], profiles: str, calibration: str | None) -> str:
    """The operator breakdown (:mod:`calibration.row_breakdown`) of one row on its own GPU and
    relabelled to each target."""
    from llmplan.calibration.row_breakdown import breakdown_case, case_of, find_row, render

    i = find_row(df, row)
    parts = []
    for frame in [df] + [relabel(df, t) for t in targets]:
        case, _ = case_of(frame, i, profiles)
        parts.append(render(breakdown_case(case, calibration)))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    from llmplan.progress import make_console, stage_progress

    a = build_parser().parse_args(argv)
    console = make_console()
    t0 = time.perf_counter()
    try:
        targets = []
        for t in a.to:
            try:
                targets.append(_gpu(t).key)
            except CatalogError as e:
                raise UserError(f"unknown target GPU '{t}': {e}", key="--to",
                                fix="give a catalog key (llmplan catalog gpus), e.g. b200") from None
        if a.limit is not None and a.limit < 1:
            raise UserError("--limit must be >= 1", key="--limit")
        df = select_rows(read_serving_files(serving_files(a.measurements)), a.model, a.backend)
        if a.mode:
            df = df[df["mode"].astype(str).str.strip().str.lower() == a.mode].reset_index(drop=True)
        if a.limit is not None:
            df = df.iloc[subsample(list(range(len(df))), a.limit)].reset_index(drop=True)
        if not len(df):
            raise UserError("no rows match --model/--backend/--mode", key="--model")
        if a.breakdown is not None:
            print(breakdown(df, a.breakdown, targets, a.engine_profiles, a.calibration))
            return 0
        for t in targets:   # rows measured on the target are its pairs, never moved (compare)
            if all(_known(str(s)) and _gpu(str(s)).key == t for s in df["system"]):
                raise UserError(f"every selected row was measured on {t}: nothing to move there", key="--to",
                                fix="give a GPU the rows were not measured on, or widen --model/--backend/--mode")
        opts, note = sim_options(a)
        if note:
            console.print(f"[yellow]note:[/] {note}")
        overrides, _ = load_engine_overrides(a.engine_profiles)
        parts = []
        with stage_progress(console, not a.no_progress) as upd:
            src = None
            for t in targets:
                if src is None:
                    src = validate_serving(df, opts, overrides, None, a.workers,
                                           (lambda d, n: upd("own GPU", d, n)) if upd else None)
                    kv_src = kv_capacity_tokens(df, overrides)
                moved = relabel(df, t)
                tgt = validate_serving(moved, opts, overrides, None, a.workers,
                                       (lambda d, n, t=t: upd(t, d, n)) if upd else None)
                parts.append(compare(df, src, tgt, t, kv_src, kv_capacity_tokens(moved, overrides)))
    except UserError as e:
        console.print(e.render(), style="red", markup=False, highlight=False)
        return EXIT_USER_ERROR
    cmp = pd.concat(parts, ignore_index=True)
    grp = groups(cmp)
    print_report(cmp, grp, console, time.perf_counter() - t0)
    if a.out:
        out = Path(a.out).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        cmp.to_csv(out, index=False, float_format="%.6g")
        gpath = out.with_name(out.stem + "_groups.csv")
        grp.to_csv(gpath, index=False, float_format="%.6g")
        console.print(f"wrote {out} and {gpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

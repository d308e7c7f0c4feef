"""Expert-layer time implied by served rows: how long the fused MoE of a decode step would have to
take for the replay to match the measured TPOT (docs/ACCURACY.md "TensorRT-LLM rows (session 7)").

For each simulated row of a ``validate serving --out`` file this maps the row as the replay does
(:func:`calibration.row_breakdown.case_of`), times its representative decode step (N sequences at
KV ``isl + osl / 2``, :func:`calibration.row_breakdown.breakdown_case`) and attributes the whole
TPOT error to the expert layers::

    implied per layer = (decode-step MoE ms - (predicted TPOT - measured TPOT)) / MoE layers

next to what the kernel model answers per layer (``moe_fit_ms``). Where the implied figure agrees
with a measured kernel table of the same shape (``python -m llmplan.calibration.trtllm_moe_evidence``)
the remaining error is not in the experts; where it does not, either the experts or another
operator is off. It is a diagnostic: TPOT also holds the prompts mixed into decode steps and the
host terms, which this attributes to the experts too. Rows are grouped by (half, TP, EP, N); the
half is read from a hold-out file's status column when given (``--split``).

    python -m llmplan.calibration.trtllm_moe_implied --measurements ../shared/measurements \\
        --pred all.csv --split holdout.csv --model Qwen3-235B
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from llmplan.calibration.row_breakdown import breakdown_case, case_of, find_row
from llmplan.calibration.serving_rows import read_serving_files
from llmplan.errors import EXIT_USER_ERROR, UserError

GROUP = ["half", "tp", "ep", "N"]


def implied_moe_per_layer(moe_ms: float, predicted_tpot_ms: float, measured_tpot_ms: float, layers: int) -> float:
    """Per-layer expert time that would close the TPOT error if all of it were in the experts."""
    if layers <= 0:
        raise ValueError("a model without MoE layers has no expert time to imply")
    return (moe_ms - (predicted_tpot_ms - measured_tpot_ms)) / layers


def _half(status: Any) -> str:
    return "train" if str(status).startswith("train") else "held-out"


def row_table(df: Any, pred: pd.DataFrame, profiles: str = "default") -> pd.DataFrame:
    """One line per simulated row of ``pred`` (which must carry ``id``, ``predicted_tpot_ms``,
    ``silicon_tpot_ms`` and optionally ``half``) whose model has MoE layers."""
    out = []
    for r in pred.to_dict("records"):
        case, _ = case_of(df, find_row(df, str(r["id"])), profiles)
        layers = int(case.dep.model.num_moe_layers)
        if layers <= 0:
            continue
        b = breakdown_case(case)
        moe = sum(o.latency_ms for o in b.decode if o.name == "moe_experts")
        out.append({"id": r["id"], "half": r.get("half", "all"), "tp": case.dep.par.tp, "ep": case.dep.par.ep,
                    "N": case.concurrency, "measured_tpot_ms": float(r["silicon_tpot_ms"]),
                    "predicted_tpot_ms": float(r["predicted_tpot_ms"]), "moe_fit_ms": moe / layers,
                    "moe_implied_ms": implied_moe_per_layer(moe, float(r["predicted_tpot_ms"]),
                                                            float(r["silicon_tpot_ms"]), layers)})
    return pd.DataFrame(out)


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Medians per (half, TP, EP, N)."""
    cols = ["measured_tpot_ms", "predicted_tpot_ms", "moe_fit_ms", "moe_implied_ms"]
    g = rows.groupby(GROUP)
    return g[cols].median().join(g.size().rename("rows")).reset_index()


def select(pred: pd.DataFrame, model: str | None, backend: str | None, split: pd.DataFrame | None) -> pd.DataFrame:
    """Simulated rows of ``pred`` for the model / engine, with their half from ``split``."""
    p = pred[pred["predicted_tpot_ms"].notna()]
    if backend:
        p = p[p["backend"] == backend]
    if model:
        p = p[p["model_path"].astype(str).str.contains(model, case=False, regex=False)]
    if split is not None:
        halves = dict(zip(split["id"].astype(str), split["status"].map(_half)))
        p = p.assign(half=p["id"].astype(str).map(halves).fillna("all"))
    return p


def _read_csv(path: str, key: str, columns: list[str], fix: str) -> pd.DataFrame:
    """The CSV given by option ``key``, which must hold ``columns``."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}", key=key, fix=fix) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{path} has no column {', '.join(missing)}", key=key, fix=fix)
    return df


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.trtllm_moe_implied", description=__doc__.split("\n\n")[0])
    p.add_argument("--measurements", nargs="+", required=True, help="e2e_serving.csv files or folders")
    p.add_argument("--pred", required=True, help="a `llmplan validate serving --out` file")
    p.add_argument("--split", default=None, help="a `validate serving --holdout --out` file: its status column names each row's half")
    p.add_argument("--model", default=None, help="only rows whose model_path contains this")
    p.add_argument("--backend", default="trtllm", help="only rows of this engine (default trtllm)")
    p.add_argument("--engine-profiles", default="default", help="'default' (shipped terms), 'none' or a JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        need = ["id", "predicted_tpot_ms", "silicon_tpot_ms"] + (["backend"] if a.backend else []) \
            + (["model_path"] if a.model else [])
        pred = _read_csv(a.pred, "--pred", need, "give a `validate serving --out` CSV")
        split = _read_csv(a.split, "--split", ["id", "status"], "give a `validate serving --holdout --out` CSV") \
            if a.split else None
        rows = select(pred, a.model, a.backend, split)
        if rows.empty:
            raise UserError("no simulated rows match", key="--model", fix="check --model / --backend against the file")
        df = read_serving_files([Path(p) for p in a.measurements])
        table = row_table(df, rows, a.engine_profiles)
        if table.empty:
            raise UserError("none of the selected rows has MoE layers", key="--model", fix="pick a MoE model")
        print(summary(table).round(4).to_string(index=False))
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Accuracy of the served rows that attention DP / wide EP made simulable (docs/ACCURACY.md,
"Attention DP and wide EP").

    python -m llmplan.calibration.wide_ep_accuracy ../shared/measurements [--holdout] [--out CSV]

Runs :func:`calibration.validate_serving.validate_serving` on the aggregated rows whose layout
is one of the new ones and prints the median APE of mean TTFT and mean TPOT per engine and
layout class:

* ``attention_dp``: ``dp > 1`` (attention data-parallel ranks, experts over the DP group);
* ``multi_node``: a stage of more than one scale-up domain (collectives over the network);
* ``id_layout``: rows read from their ``id`` (the product-encoded export; serving_rows): they
  repeat runs stored elsewhere in the files with the engine layout in the columns;
* ``int4`` / ``glm5``: the Kimi-K2.5 int4 weight-only rows and the renamed GLM-5 id.

A row may belong to several classes. ``--holdout`` scores only the held-out deployment half
with the engine terms fitted on the other half (as ``llmplan validate serving --holdout``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pandas as pd

from llmplan.calibration.serving_rows import (SimOptions, engine_profiles, id_layout, map_rows,
                                              read_serving_files)


def layout_classes(row: dict[str, Any], case: Any) -> list[str]:
    """The classes (module docstring) of one mapped row."""
    par, gpu = case.dep.par, case.dep.gpu
    out = []
    if par.dp > 1:
        out.append("attention_dp")
    if par.stage_gpus > max(1, gpu.scaleup_domain_size):
        out.append("multi_node")
    if id_layout(row) is not None:
        out.append("id_layout")
    if case.dep.prec.weights == "int4":
        out.append("int4")
    if str(row.get("model_path", "")).lower().startswith("zhipuai/"):
        out.append("glm5")
    return out


def select(df: pd.DataFrame) -> tuple[pd.DataFrame, list[list[str]]]:
    """The aggregated rows of a new layout class, and their classes."""
    maps = map_rows(df, engine_profiles())
    rows = df.to_dict("records")
    keep, classes = [], []
    for m, r in zip(maps, rows):
        if m.case is None:
            continue
        c = layout_classes(r, m.case)
        if c:
            keep.append(m.index)
            classes.append(c)
    return df.iloc[keep].reset_index(drop=True), classes


def summary(res: pd.DataFrame, classes: list[list[str]]) -> pd.DataFrame:
    """Median APE per (class, engine) over the rows simulated."""
    recs = []
    for i, cs in enumerate(classes):
        r = res.iloc[i]
        if r["status"] != "simulated":
            continue
        for c in cs:
            recs.append({"class": c, "backend": r["backend"], "ttft_ape": r["ttft_ape"], "tpot_ape": r["tpot_ape"]})
    if not recs:
        return pd.DataFrame(columns=["class", "backend", "rows", "ttft_mdape", "tpot_mdape"])
    d = pd.DataFrame(recs)
    g = d.groupby(["class", "backend"], sort=True)
    return pd.DataFrame({"rows": g.size(), "ttft_mdape": g["ttft_ape"].median(),
                         "tpot_mdape": g["tpot_ape"].median()}).reset_index()


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.engine_fit import load_engine_overrides, profile_seed
    from llmplan.calibration.validate_serving import validate_serving

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measurements", nargs="+")
    ap.add_argument("--holdout", action="store_true")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    df, classes = select(read_serving_files(a.measurements))
    overrides, engines = load_engine_overrides("default", holdout=a.holdout)
    seed = profile_seed(engines) if a.holdout else None
    res = validate_serving(df, SimOptions(), overrides, workers=a.workers, holdout_seed=seed)
    if a.out:
        res.assign(layout_class=[",".join(c) for c in classes]).to_csv(a.out, index=False)
    pd.set_option("display.width", 120)
    print(summary(res, classes).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    bad = res[~res["status"].isin(["simulated"]) & ~res["status"].str.startswith("train")]
    for s, n in bad["status"].str.slice(0, 120).value_counts().items():
        print(f"not simulated ({n}): {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

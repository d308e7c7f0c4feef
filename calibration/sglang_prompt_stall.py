"""How long one prompt stalls the running decodes, from measured row pairs that differ only in osl.

Diagnosis only (nothing here feeds the replay or the fit). SGLang without ``--enable-mixed-chunk``
(the InferenceX launches of DeepSeek-V3/R1, GLM-5 and Qwen3.5-397B-A17B on H200, SemiAnalysisAI/
InferenceX ``benchmarks/single_node/{dsr1,glm5,qwen3.5}_fp8_h200.sh``) runs prefill first:
``Scheduler.get_next_batch_to_run`` returns a prefill batch whenever one can be formed, and the running
decodes wait for it (sgl-project/sglang ``python/sglang/srt/managers/scheduler.py``, 0.5.9). In a
closed loop of N clients every finished request is replaced by a new prompt, so prompts arrive at
``lambda = N / E2E`` per second (Little's law, ``E2E = TTFT + (osl - 1) x TPOT``, the client's TPOT
definition) and each decode stream spends ``lambda x S`` of its wall time waiting on prompt steps of
length ``S``. With a pure decode step time ``D``::

    TPOT = D / (1 - lambda x S)

Two rows of one deployment that share isl and N but differ in osl have the same ``D`` when the decode
step does not depend on context length (true for linear-attention layers, whose state is fixed size;
for full attention the longer run's longer contexts make its ``D`` larger, which biases ``S`` low).
Solving the two equations for ``S`` (:func:`decode_stall_per_prompt_ms`)::

    S = (TPOT_a - TPOT_b) / (lambda_a TPOT_a - lambda_b TPOT_b)

The same pair scores a replay without assuming equal ``D``: the long-osl row fixes the replay's decode
step (few prompts), so the part of the short-osl row's TPOT the replay misses, beyond its error on the
long row, is stall the replay does not put on the decodes (:func:`missing_stall_per_prompt_ms`)::

    missing = (1 - (pred_a / meas_a) / (pred_b / meas_b)) / lambda_a

Run ``python -m llmplan.calibration.sglang_prompt_stall --measurements DIR [--predictions CSV]`` for
the table (``--predictions``: a ``validate serving --out`` file, or several, with predicted columns).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterable, Mapping

#: columns two rows must share to form a pair (everything that fixes the deployment and the prompt)
PAIR_KEYS = ("backend", "backend_version", "model_path", "system", "precision", "mode", "tp_size",
             "moe_ep_size", "attention_dp_size", "isl", "batch_size")


def prompts_per_s(concurrency: float, osl: int, ttft_ms: float, tpot_ms: float) -> float:
    """Prompt arrival rate of a closed loop of ``concurrency`` clients: ``N / E2E`` per second,
    ``E2E = TTFT + (osl - 1) x TPOT`` (NaN for a non-positive E2E)."""
    e2e_ms = float(ttft_ms) + (int(osl) - 1) * float(tpot_ms)
    if not e2e_ms > 0:
        return math.nan
    return float(concurrency) / (e2e_ms / 1000.0)


def decode_stall_per_prompt_ms(short: Mapping[str, Any], long: Mapping[str, Any],
                               ttft: str = "silicon_ttft_ms", tpot: str = "silicon_tpot_ms") -> float:
    """Decode stall per prompt, ms, from two rows of one deployment, isl and N that differ in osl
    (``short`` has the smaller osl), assuming the same pure decode step in both (module docstring)."""
    n = float(short["batch_size"])
    ta, tb = float(short[tpot]), float(long[tpot])
    la = prompts_per_s(n, int(short["osl"]), float(short[ttft]), ta)
    lb = prompts_per_s(n, int(long["osl"]), float(long[ttft]), tb)
    den = la * ta - lb * tb
    if not den or math.isnan(den):
        return math.nan
    return 1000.0 * (ta - tb) / den


def missing_stall_per_prompt_ms(short: Mapping[str, Any], long: Mapping[str, Any]) -> float:
    """Stall per prompt, ms, that a replay does not put on the decodes: the short-osl row's TPOT ratio
    (predicted / measured) below the long-osl row's, over the measured prompt rate (module docstring).
    Needs ``predicted_tpot_ms`` on both rows; positive = the replay stalls decodes too little."""
    ra = float(short["predicted_tpot_ms"]) / float(short["silicon_tpot_ms"])
    rb = float(long["predicted_tpot_ms"]) / float(long["silicon_tpot_ms"])
    lam = prompts_per_s(float(short["batch_size"]), int(short["osl"]), float(short["silicon_ttft_ms"]),
                        float(short["silicon_tpot_ms"]))
    if not lam > 0 or not rb > 0:
        return math.nan
    return 1000.0 * (1.0 - ra / rb) / lam


def _key(r: Mapping[str, Any]) -> tuple:
    out = []
    for k in PAIR_KEYS:
        v = r.get(k)
        if isinstance(v, float) and math.isnan(v):
            v = None
        out.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
    return tuple(out)


def osl_pairs(rows: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(shortest-osl row, longest-osl row) per group of rows that share :data:`PAIR_KEYS` and have
    at least two osl values; a repeated measurement (same osl) counts once (the first). Sorted by
    model, version, isl, N."""
    groups: dict[tuple, dict[int, Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_key(r), {}).setdefault(int(r["osl"]), r)
    out = []
    idx = {k: i for i, k in enumerate(PAIR_KEYS)}

    def order(k: tuple) -> tuple:
        return tuple(str(k[idx[c]]) for c in ("model_path", "backend_version", "system")) + tuple(
            float(k[idx[c]] or 0) for c in ("tp_size", "isl", "batch_size"))

    for key in sorted(groups, key=order):
        by_osl = groups[key]
        if len(by_osl) >= 2:
            out.append((by_osl[min(by_osl)], by_osl[max(by_osl)]))
    return out


def drop_repeats(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows less repeated measurements: a row whose model, version, GPU, isl, osl, N and measured
    TTFT / TPOT (to 0.01 ms) equal an earlier row's is the same run exported under another layout
    label (e.g. the Qwen3.5 rows also filed as TP 64, ``validate serving``'s ``repeat:`` status)."""
    seen, out = set(), []
    for r in rows:
        k = (str(r.get("model_path")), str(r.get("backend_version")), str(r.get("system")), int(r["isl"]),
             int(r["osl"]), int(float(r["batch_size"])), round(float(r["silicon_ttft_ms"]), 2),
             round(float(r["silicon_tpot_ms"]), 2))
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def stall_table(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per osl pair (:func:`osl_pairs`) of the rows less repeats (:func:`drop_repeats`): the
    measured stall per prompt and, where the rows carry ``predicted_tpot_ms``, the replay's missing
    stall per prompt."""
    out = []
    for a, b in osl_pairs(drop_repeats(rows)):
        e = {"model": str(a["model_path"]), "version": str(a["backend_version"]), "tp": int(float(a["tp_size"])),
             "isl": int(a["isl"]), "concurrency": int(float(a["batch_size"])), "osl_short": int(a["osl"]),
             "osl_long": int(b["osl"]), "tpot_short_ms": float(a["silicon_tpot_ms"]),
             "tpot_long_ms": float(b["silicon_tpot_ms"]),
             "prompts_per_s": prompts_per_s(float(a["batch_size"]), int(a["osl"]), float(a["silicon_ttft_ms"]),
                                            float(a["silicon_tpot_ms"])),
             "stall_ms": decode_stall_per_prompt_ms(a, b), "missing_ms": math.nan}
        pa, pb = a.get("predicted_tpot_ms"), b.get("predicted_tpot_ms")
        if pa is not None and pb is not None and not (math.isnan(float(pa)) or math.isnan(float(pb))):
            e["missing_ms"] = missing_stall_per_prompt_ms(a, b)
        out.append(e)
    return out


def main(argv: list[str] | None = None) -> int:
    from pathlib import Path

    import pandas as pd

    from llmplan.calibration.serving_rows import read_serving_csv

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", nargs="+", help="e2e_serving.csv files or folders")
    ap.add_argument("--predictions", nargs="+", help="validate-serving --out CSVs (scored rows only are used)")
    ap.add_argument("--backend", default="sglang", choices=("sglang", "vllm", "trtllm"))
    args = ap.parse_args(argv)
    if not args.measurements and not args.predictions:
        ap.error("give --measurements or --predictions")
    if args.predictions:
        df = pd.concat([pd.read_csv(f) for f in args.predictions], ignore_index=True)
        df = df[df["status"].astype(str) == "simulated"]
        print("rows: replayed rows of the given files (status 'simulated'); missing = stall the replay does not put "
              "on the decodes")
    else:
        files = []
        for m in args.measurements:
            p = Path(m)
            files += sorted(p.rglob("e2e_serving.csv")) if p.is_dir() else [p]
        df = pd.concat([read_serving_csv(f) for f in files], ignore_index=True)
        print("rows: measurements only")
    df = df[(df["backend"] == args.backend) & (df["mode"] == "agg")]
    print(f"{'model':28} {'version':12} {'tp':>3} {'isl':>5} {'N':>4} {'osl a/b':>11} {'TPOT a/b ms':>13} "
          f"{'prompts/s':>9} {'stall ms':>9} {'missing ms':>10}")
    for e in stall_table(df.to_dict("records")):
        print(f"{e['model'][-28:]:28} {e['version'][:12]:12} {e['tp']:>3} {e['isl']:>5} {e['concurrency']:>4} "
              f"{e['osl_short']:>5}/{e['osl_long']:<5} {e['tpot_short_ms']:>6.2f}/{e['tpot_long_ms']:<6.2f} "
              f"{e['prompts_per_s']:>9.2f} {e['stall_ms']:>9.1f} {e['missing_ms']:>10.1f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""Delivered output-token rate of the SGLang generator runs: a front-end ceiling, not an engine step.

Diagnosis only (nothing here feeds the replay or the fit). The SGLang rows of aiconfigurator's
generator (per-engine-version collection files, :func:`calibration.benchmark_clients.collection_file`)
were served through Dynamo: ``python3 -m dynamo.frontend`` in front of ``python3 -m dynamo.sglang``
workers, driven by ``aiperf profile`` (ai-dynamo/aiconfigurator
``generator/config/backend_templates/sglang/run.sh.j2`` and ``benchmark/bench_run.sh.j2``). Every
streamed chunk crosses the worker's Python: Dynamo documents that its Rust <-> Python bridge "crosses
the GIL once per token (``spawn_blocking`` + ``with_gil`` + deserialize), so aggregate throughput is
GIL-bound and stays roughly flat as concurrency rises", the lever being the engine's
``--stream-interval`` (ai-dynamo/dynamo PR #10609, 2026-06-11, a docs-only PR for
``components/src/dynamo/common/backend/README.md``, closed; it says the unified bridge is at parity with
the legacy per-token path, i.e. the behaviour predates it); SGLang's own TokenizerManager is a single-core process with the same limit at high
concurrency (sgl-project/sglang issue #6553; ``--tokenizer-worker-num``, PR #8964), and Dynamo's
SGLang worker forced incremental ``stream_output`` from v0.9.0 (PR #5510), which ai-dynamo/dynamo
PR #7910 reports as a high-concurrency throughput and TTFT regression (C = 2,048: TTFT 1.3 -> 10.2 s,
decode ``#running-req`` 77-166 -> 36-44). The generator's SGLang templates pass no
``--stream-interval`` (default 1: one chunk per token per request).

What the rows show (:func:`delivered_rates`): in a closed loop the delivered output rate is
``N x osl / E2E`` with ``E2E = TTFT + (osl - 1) x TPOT`` (Little's law, the client's TPOT
definition). For Llama-3.1-8B SGLang 0.5.6.post2 on H200 at N = 512 it is 14.0-15.3k tokens/s at
TP 2, 13.5-18.9k at TP 4 and 15.2-19.6k at TP 8 (1k and 2k prompts), flat in the TP size while the replay's decode
step of 512 sequences shrinks about 2x from TP 2 to TP 8 (device time 22.8 -> 10.9 ms, docs/ACCURACY.md
"Engine terms at large batch (session 8)"). An engine-side cost (kernels, a per-sequence scheduler
time on each TP rank) would scale with the device step or stay per sequence, not cap the sum over
ranks; a single-process front end caps it. Those rows are the ``server-queued`` ones (measured TTFT
1.4-8.0 s). Session 11 models the ceiling as a physical per-token time of the front end
(sim/frontend_ceiling.py), fitted with the other engine terms on the training half
(calibration.engine_fit ``FRONTEND_GRID``) for the rows of
:func:`calibration.sglang_launch.dynamo_frontend_row`.

Run ``python -m llmplan.calibration.sglang_frontend_rate --measurements DIR`` for the table.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import generator_agg_row
from llmplan.calibration.sglang_launch import dynamo_frontend_row


def delivered_output_tokens_per_s(isl: int, osl: int, concurrency: int, ttft_ms: float, tpot_ms: float) -> float:
    """Output tokens per second a closed loop of ``concurrency`` clients received: ``N x osl / E2E``,
    ``E2E = TTFT + (osl - 1) x TPOT`` (NaN for a non-positive E2E). ``isl`` does not enter; it is
    taken for the call's symmetry with the row."""
    e2e_ms = float(ttft_ms) + (int(osl) - 1) * float(tpot_ms)
    if not e2e_ms > 0:
        return math.nan
    return int(concurrency) * int(osl) / (e2e_ms / 1000.0)


def generator_sglang_row(row: Mapping[str, Any]) -> bool:
    """True for an aggregated SGLang row of aiconfigurator's generator (Dynamo front end): the rows the
    front-end term applies to (:func:`calibration.sglang_launch.dynamo_frontend_row`)."""
    return dynamo_frontend_row(row)


def generator_row(row: Mapping[str, Any], backend: str) -> bool:
    """True for an aggregated row of ``backend`` from aiconfigurator's generator (per-engine-version
    collection file; Dynamo front end)."""
    return generator_agg_row(row, backend)


def delivered_rates(rows: list[Mapping[str, Any]], backend: str = "sglang") -> list[dict[str, Any]]:
    """Per (model, GPU, version, TP) of the generator's rows of ``backend``: the largest concurrency and
    the delivered output rates of the rows at it (tokens/s, min and max), sorted by model, GPU, version, TP."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        if not generator_row(r, backend):
            continue
        key = (str(r.get("model_path")), str(r.get("system")), str(r.get("backend_version")), int(float(r.get("tp_size") or 1)))
        groups.setdefault(key, []).append(r)
    out = []
    for key in sorted(groups):
        rs = groups[key]
        n_max = max(int(float(r["batch_size"])) for r in rs)
        rates = [delivered_output_tokens_per_s(int(r["isl"]), int(r["osl"]), n_max, float(r["silicon_ttft_ms"]),
                                               float(r["silicon_tpot_ms"]))
                 for r in rs if int(float(r["batch_size"])) == n_max]
        rates = [x for x in rates if not math.isnan(x)]
        if not rates:
            continue
        out.append({"model": key[0], "gpu": key[1], "version": key[2], "tp": key[3], "concurrency": n_max,
                    "rows": len(rates), "min_tokens_per_s": min(rates), "max_tokens_per_s": max(rates)})
    return out


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from llmplan.calibration.serving_rows import read_serving_csv

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", nargs="+", required=True, help="e2e_serving.csv files or folders")
    ap.add_argument("--backend", default="sglang", choices=("sglang", "vllm", "trtllm"),
                    help="the generator rows of this engine (default sglang)")
    args = ap.parse_args(argv)
    from pathlib import Path

    files = []
    for m in args.measurements:
        p = Path(m)
        files += sorted(p.rglob("e2e_serving.csv")) if p.is_dir() else [p]
    df = pd.concat([read_serving_csv(f) for f in files], ignore_index=True)
    print(f"{'model':34} {'gpu':9} {'version':12} {'tp':>3} {'N':>5} {'rows':>4} {'out tok/s min':>13} {'max':>9}")
    for g in delivered_rates(df.to_dict("records"), args.backend):
        print(f"{g['model'][:34]:34} {g['gpu']:9} {g['version'][:12]:12} {g['tp']:>3} {g['concurrency']:>5} "
              f"{g['rows']:>4} {g['min_tokens_per_s']:>13,.0f} {g['max_tokens_per_s']:>9,.0f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

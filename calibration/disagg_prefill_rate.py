"""Is a disaggregated row's prefill pool the bottleneck, measured and replayed? (docs/DISAGG.md,
"Prefill-pool throughput of the TensorRT-LLM DeepSeek rows").

A closed-loop benchmark with N clients and no think time completes, by Little's law, one request
per ``TTFT + (osl - 1) x TPOT`` per client: its throughput is

    rate_rps = N / ((ttft_ms + (osl - 1) x tpot_ms) / 1000)

from the measured means alone. Every request passes through one prefill worker, so each of the
``P`` prefill workers serves ``rate_rps / P`` prompts per second: ``1000 / (rate_rps / P)`` ms per
prompt is the most a worker can spend on one (``measured_ms_per_prompt_max``; reached only when
the pool is saturated). The replay's worker serves ``S`` prompts per step (``prefill_batch_size``
x attention DP) in ``prefill_ms`` (the decomposition's first-chunk-to-end mean): at most
``P x S x 1000 / prefill_ms`` prompts per second (``simulated_capacity_rps``). Two checks:

* ``measured_vs_replay_capacity`` = ``rate_rps / simulated_capacity_rps``: above 1 the measured run
  pushed more prompts through the pool than the replayed workers can serve (the replayed prefill
  step is too slow for that run); the replay's queue then grows to the closed loop's limit.
* ``replayed_ms_per_prompt`` = ``prefill_ms / S`` against ``measured_ms_per_prompt_max``: where the
  measured run is queue-bound (TTFT of seconds) and the replayed per-prompt time is well below the
  measured bound, the replayed worker is too fast.

Both are read from the measured means and the replay only (no fitted term), as a diagnostic.

``python -m llmplan.calibration.disagg_prefill_rate --decomposition rows.csv`` where ``rows.csv`` is
``python -m llmplan.calibration.disagg_decompose --measurements DIR --out rows.csv``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: the columns this module adds to a decomposition frame
RATE_COLUMNS = ("measured_rate_rps", "measured_rps_per_prefill_worker", "measured_ms_per_prompt_max",
                "replayed_ms_per_prompt", "simulated_capacity_rps", "measured_vs_replay_capacity")


def closed_loop_rate_rps(concurrency: int, ttft_ms: float, tpot_ms: float, osl: int) -> float:
    """Requests per second of a closed loop of ``concurrency`` clients with no think time whose
    requests take ``ttft_ms + (osl - 1) x tpot_ms`` each (Little's law)."""
    if concurrency < 1 or osl < 1:
        raise ValueError("concurrency and osl must be >= 1")
    e2e_ms = ttft_ms + (osl - 1) * tpot_ms
    if not e2e_ms > 0:
        raise ValueError("the request latency must be positive")
    return concurrency / (e2e_ms / 1000.0)


def prefill_rate_row(r: Mapping[str, Any]) -> dict[str, float]:
    """:data:`RATE_COLUMNS` of one decomposition row (``concurrency``, ``osl``, ``measured_ttft_ms``,
    ``measured_tpot_ms``, ``prefill_workers``, ``prefill_seqs_per_step``, ``prefill_ms``)."""
    rate = closed_loop_rate_rps(int(r["concurrency"]), float(r["measured_ttft_ms"]), float(r["measured_tpot_ms"]),
                                int(r["osl"]))
    workers, seqs, pf_ms = int(r["prefill_workers"]), int(r["prefill_seqs_per_step"]), float(r["prefill_ms"])
    per_worker = rate / workers
    cap = workers * seqs * 1000.0 / pf_ms if pf_ms > 0 else math.inf
    return {"measured_rate_rps": rate, "measured_rps_per_prefill_worker": per_worker,
            "measured_ms_per_prompt_max": 1000.0 / per_worker, "replayed_ms_per_prompt": pf_ms / seqs,
            "simulated_capacity_rps": cap, "measured_vs_replay_capacity": rate / cap}


def prefill_rates(frame: Any) -> Any:
    """The decomposition frame with :data:`RATE_COLUMNS` added (rounded to 3 decimals)."""
    need = {"concurrency", "osl", "measured_ttft_ms", "measured_tpot_ms", "prefill_workers",
            "prefill_seqs_per_step", "prefill_ms"}
    missing = sorted(need - set(frame.columns))
    if missing:
        from llmplan.errors import UserError
        raise UserError(f"the decomposition lacks the columns {', '.join(missing)}", key="--decomposition",
                        fix="write it again with `python -m llmplan.calibration.disagg_decompose`")
    out = frame.copy()
    rows = [prefill_rate_row(r) for r in frame.to_dict("records")]
    for c in RATE_COLUMNS:
        out[c] = [round(x[c], 3) for x in rows]
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    import pandas as pd

    ap = argparse.ArgumentParser(description="Measured closed-loop prefill throughput of disaggregated rows "
                                             "against the replayed prefill workers' capacity.")
    ap.add_argument("--decomposition", required=True, help="CSV of calibration.disagg_decompose")
    ap.add_argument("--out", help="CSV path (optional)")
    a = ap.parse_args(argv)
    frame = prefill_rates(pd.read_csv(a.decomposition))
    if a.out:
        frame.to_csv(a.out, index=False)
    cols = ["id", "half", "xpyd", "isl", "concurrency", "prefill_seqs_per_step", *RATE_COLUMNS,
            "measured_ttft_ms", "simulated_ttft_ms"]
    print(frame[[c for c in cols if c in frame.columns]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

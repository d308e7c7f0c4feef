"""Where a disaggregated served row's TTFT goes: the replay's TTFT split into its parts, against
the measured mean TTFT (docs/DISAGG.md, "What the hand-off stands for").

Per replayable ``mode = disagg`` row (``calibration.serving_disagg_rows``), the replay's requests
give, as means over all counted requests (ms):

* ``prefill_queue_ms``: arrival to the prefill worker scheduling the prompt's first chunk;
* ``prefill_ms``: first chunk to the prefill's end (chunks, and steps shared with other prompts);
* ``decode_room_wait_ms``: prefill end to the transfer's start (waiting for KV room and a batch
  slot on the decode worker: the engines' pre-allocation, ``reserve_decode_kv``);
* ``kv_transfer_ms``: the transfer itself (``sim.kv_transfer``), ``link_wait_ms`` its wait for a
  busy NIC;
* ``handoff_ms``: the fixed per-request delay (0 here: the residual is what it has to explain);
* ``front_end_ms``: the engine's per-request TTFT outside the steps, fitted on the aggregated rows
  (``sim.engine_terms``: client round trip, API server, tokenisation ~ prompt);
* ``decode_join_ms``: KV arrival to the decode worker taking the request (its step in flight);

and ``residual_ms`` = measured mean TTFT - simulated mean TTFT, and ``regime``: "beyond a full prefill
queue" where no prefill queue explains the measured TTFT (:mod:`calibration.disagg_regimes`; such
rows are left out of the hand-off fit). Rows whose measurements are
repeated verbatim in another dump (the ``2026_04_06_*`` dump repeats ``2026_03_25_*`` runs) are
marked ``duplicate_of`` the first copy: they are one measurement, not two.

``python -m llmplan.calibration.disagg_decompose --measurements DIR --out rows.csv``
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmplan.calibration.disagg_regimes import disagg_regime
from llmplan.calibration.serving_disagg_rows import DisaggCase, disagg_spec, held_out, replayable_rows
from llmplan.calibration.serving_rows import SimOptions, benchmark_workload

PARTS = ("front_end_ms", "prefill_queue_ms", "prefill_ms", "decode_room_wait_ms", "kv_transfer_ms", "link_wait_ms",
         "handoff_ms", "decode_join_ms")


def decompose_case(case: DisaggCase, opts: SimOptions, wrap: Any = None, handoff_ms: float = 0.0) -> dict:
    """The replay of one case split into :data:`PARTS` (means over the counted requests, ms)."""
    import numpy as np

    from llmplan.sim.disaggregated import simulate_disaggregated
    _, hi = opts.osl_range(case.osl)
    spec = disagg_spec(case, opts, wrap, case.isl + hi, handoff_ms)
    wl, window = benchmark_workload(case.isl, case.osl, case.concurrency, opts)
    res = simulate_disaggregated(wl, spec, seed=opts.seed, window=window)
    q = res.requests
    q = q[q["measured"] & q["finished"]]
    arr, sched = q["arrival_ms"].to_numpy(float), q["first_scheduled_ms"].to_numpy(float)
    done, start = q["prefill_done_ms"].to_numpy(float), q["transfer_start_ms"].to_numpy(float)
    xfer, kv = q["transfer_ms"].to_numpy(float), q["kv_arrival_ms"].to_numpy(float)
    first = arr + q["ttft_ms"].to_numpy(float)
    m = lambda x: float(np.mean(x)) if len(x) else math.nan  # noqa: E731
    from llmplan.sim.disagg_request_terms import request_ttft_fns

    f = request_ttft_fns([spec.decode.replica], spec.request_terms)[0]   # the row's front-end form
    front = 0.0 if f is None else float(f(case.isl))
    parts = {"front_end_ms": front, "prefill_queue_ms": m(sched - arr), "prefill_ms": m(done - sched), "decode_room_wait_ms": m(start - done),
             "kv_transfer_ms": m(xfer), "link_wait_ms": m(kv - start - xfer), "handoff_ms": float(handoff_ms),
             "decode_join_ms": m(first - kv - handoff_ms - front)}
    sim = float(res.summary["ttft_ms_mean"])
    return {**{k: round(v, 3) for k, v in parts.items()}, "simulated_ttft_ms": round(sim, 3),
            "simulated_tpot_ms": round(float(res.summary["tpot_ms_mean"]), 3),
            "link": str(getattr(getattr(spec.transfer, "link", None), "kind", ""))}


def decompose(df: Any, overrides: Mapping[str, Mapping[str, Any]], seed: int, opts: SimOptions | None = None) -> Any:
    """One row per replayable disaggregated row: its parts, the measured TTFT/TPOT, the residual,
    the split half and duplicates (a pandas frame)."""
    import pandas as pd

    from llmplan.calibration.engine_fit import corrected

    first_of: dict[tuple, str] = {}
    out = []
    for mp, r, key, mine, o in replayable_rows(df, overrides, opts or SimOptions()):
        c = mp.case
        dup = first_of.setdefault(key, c.row_id)
        parts = decompose_case(c, o, corrected(float(mine.get("prefill_scale", 1.0))))
        regime = disagg_regime(c, disagg_spec(c, o, None, c.isl + c.osl))   # calibration/disagg_regimes.py
        out.append({"id": c.row_id, "backend": c.backend, "gpu": c.dep.gpu.key, "model": c.dep.model.key,
                    "isl": c.isl, "osl": c.osl, "concurrency": c.concurrency, "xpyd": f"{c.prefill_workers}P"
                    f"{c.decode_workers}D", "prefill_workers": c.prefill_workers,
                    "prefill_seqs_per_step": c.prefill.dep.engine.max_num_seqs,  # batch x attention DP
                    "prefill_tp": c.prefill.dep.par.tp, "prefill_dp": c.prefill.dep.par.dp,
                    "decode_tp": c.decode.dep.par.tp, "decode_dp": c.decode.dep.par.dp,
                    "half": "held_out" if held_out(mp, seed) else "train",
                    "duplicate_of": "" if dup == c.row_id else dup, "regime": regime, **parts,
                    "measured_ttft_ms": round(c.measured_ttft_ms, 3), "measured_tpot_ms": round(c.measured_tpot_ms, 3),
                    "residual_ms": round(c.measured_ttft_ms - parts["simulated_ttft_ms"], 3)})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    from llmplan.calibration.engine_fit import load_engine_overrides, profile_seed
    from llmplan.calibration.serving_rows import read_serving_files

    ap = argparse.ArgumentParser(description="Split each disaggregated row's replayed TTFT into its parts.")
    ap.add_argument("--measurements", nargs="+", required=True)
    ap.add_argument("--out", required=True, help="CSV path")
    a = ap.parse_args(argv)
    overrides, engines = load_engine_overrides("default")
    seed = profile_seed(engines) if Path(engines).is_file() else 0
    frame = decompose(read_serving_files(a.measurements), overrides, seed)
    frame.to_csv(a.out, index=False)
    print(frame[["id", "half", "duplicate_of", "regime", *PARTS, "simulated_ttft_ms", "measured_ttft_ms",
                 "residual_ms"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

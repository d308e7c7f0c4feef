"""How much a disaggregated row's replayed TTFT depends on the prefill step and on the hand-off
(docs/DISAGG.md, "How well a closed loop's TTFT can be predicted"; docs/ACCURACY.md, session 10).

The served disaggregated rows are closed loops of ``N`` clients. Where the prefill pool is far
from saturation, the mean TTFT is the sum of the per-request parts (front end, prefill, KV
transfer, hand-off) and a relative error ``e`` of the prefill step moves it by less than ``e``.
Near saturation the loop's throughput is the pool's capacity, and by Little's law

    TTFT = N / rate - (osl - 1) x TPOT,   rate = P x S / prefill_step

(``P`` workers of ``S`` prompts per step), so the TTFT moves by about ``N x prefill_step / (P x S)``
per unit of relative step error: many times the error itself. Two numbers per row, each from two
replays of the row as ``llmplan validate serving`` replays it (no fitted term changes; the
hand-off is the engine's shipped one unless given):

* ``prefill_elasticity`` = d ln TTFT / d ln (prefill step time), a central difference over
  prefill steps scaled by ``1 -+ delta`` (every step of the prefill pool, host time included;
  decode pool untouched). The relative accuracy the prefill step needs for the row's TTFT to stay
  within a target ``t`` is about ``t / prefill_elasticity`` (``step_accuracy_for_15pct``).
* ``handoff_slope`` = d TTFT / d hand-off: 1 where the hand-off adds to every request's TTFT,
  below 1 where a saturated prefill pool's queue absorbs it (as ``calibration.disagg_handoff_fit``
  replays), so what a constant hand-off can correct on the row.

A diagnostic only: nothing here is fitted or shipped, and it judges no candidate on held-out rows
(the ``half`` column says which half a row is in).

``python -m llmplan.calibration.disagg_sensitivity --measurements DIR [--out rows.csv]``
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from llmplan.calibration.serving_disagg_rows import DisaggCase, disagg_spec, held_out, replayable_rows
from llmplan.calibration.serving_rows import SimOptions, _text, benchmark_workload

#: relative change of the prefill step time for the central difference
DELTA = 0.05
#: hand-off step for the slope (ms)
HANDOFF_STEP_MS = 100.0
#: the disaggregated TTFT target (issue 10), for ``step_accuracy_for_15pct``
TARGET = 0.15

COLUMNS = ("simulated_ttft_ms", "prefill_elasticity", "step_accuracy_for_15pct", "handoff_slope")


class ScaledSteps:
    """A step cost model whose step and stage times are ``factor`` times the wrapped model's
    (everything else, e.g. the per-request front-end TTFT, is the wrapped model's)."""

    def __init__(self, step: Any, factor: float):
        if not factor > 0:
            raise ValueError("the factor must be positive")
        self.step, self.factor, self.pp = step, float(factor), step.pp

    def step_time_ms(self, shape: Any) -> float:
        return self.factor * self.step.step_time_ms(shape)

    def stage_time_ms(self, shape: Any) -> float:
        return self.factor * self.step.stage_time_ms(shape)

    def __getattr__(self, name: str) -> Any:
        if name == "step" or name.startswith("__"):   # not set yet (copy / pickle): no recursion
            raise AttributeError(name)
        return getattr(self.step, name)


def with_prefill_scaled(spec: Any, factor: float) -> Any:
    """``spec`` (a :class:`~sim.disaggregated.DisaggSpec`) with its prefill pool's steps ``factor``
    times as long; the decode pool, the transfer and the hand-off unchanged."""
    if factor == 1.0:
        return spec
    rs = spec.prefill.replica
    scaled = replace(rs, cost_model=ScaledSteps(rs.cost_model, factor))
    return replace(spec, prefill=replace(spec.prefill, replica=scaled))


def replay_ttft_ms(case: DisaggCase, opts: SimOptions, wrap: Any = None, handoff_ms: float = 0.0,
                   prefill_factor: float = 1.0) -> float:
    """Mean TTFT of the case's replay (as ``serving_disagg_rows.simulate_disagg_case``) with its prefill
    steps scaled by ``prefill_factor``; NaN when the replay does not finish."""
    from llmplan.sim.disaggregated import simulate_disaggregated

    _, hi = opts.osl_range(case.osl)
    spec = with_prefill_scaled(disagg_spec(case, opts, wrap, case.isl + hi, handoff_ms), prefill_factor)
    wl, window = benchmark_workload(case.isl, case.osl, case.concurrency, opts)
    res = simulate_disaggregated(wl, spec, seed=opts.seed, window=window)
    v = res.summary.get("ttft_ms_mean")
    return float(v) if v is not None and not res.overloaded else math.nan


def sensitivity_case(case: DisaggCase, opts: SimOptions, wrap: Any = None, handoff_ms: float = 0.0,
                     delta: float = DELTA, handoff_step_ms: float = HANDOFF_STEP_MS) -> dict[str, float]:
    """:data:`COLUMNS` of one case (module docstring)."""
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    base = replay_ttft_ms(case, opts, wrap, handoff_ms)
    lo = replay_ttft_ms(case, opts, wrap, handoff_ms, 1.0 - delta)
    hi = replay_ttft_ms(case, opts, wrap, handoff_ms, 1.0 + delta)
    up = replay_ttft_ms(case, opts, wrap, handoff_ms + handoff_step_ms)
    el = (hi - lo) / (2.0 * delta * base) if base > 0 else math.nan
    # no finite elasticity (a replay did not finish): NaN, not an unbounded accuracy
    need = math.nan if math.isnan(el) else (TARGET / el if el > 0 else math.inf)
    return {"simulated_ttft_ms": base, "prefill_elasticity": el, "step_accuracy_for_15pct": need,
            "handoff_slope": (up - base) / handoff_step_ms}


def sensitivity(df: Any, overrides: Mapping[str, Mapping[str, Any]], seed: int, opts: SimOptions | None = None,
                handoffs: Mapping[str, float] | None = None) -> Any:
    """One row per unique replayable disaggregated measurement (repeats counted once): its
    :data:`COLUMNS`, the measured TTFT and the split half (a pandas frame)."""
    import pandas as pd

    from llmplan.calibration.engine_fit import corrected
    from llmplan.sim.disagg_handoff import handoff_ms

    seen: set[tuple] = set()
    out = []
    for mp, r, key, mine, o in replayable_rows(df, overrides, opts or SimOptions()):
        c = mp.case
        if key in seen:
            continue
        seen.add(key)
        be = _text(r.get("backend"))
        h = float(handoffs.get(be, 0.0)) if handoffs is not None else handoff_ms(be)
        s = sensitivity_case(c, o, corrected(float(mine.get("prefill_scale", 1.0))), h)
        out.append({"id": c.row_id, "backend": c.backend, "gpu": c.dep.gpu.key, "isl": c.isl,
                    "concurrency": c.concurrency, "xpyd": f"{c.prefill_workers}P{c.decode_workers}D",
                    "prefill_tp": c.prefill.dep.par.tp, "prefill_dp": c.prefill.dep.par.dp,
                    "half": "held_out" if held_out(mp, seed) else "train", "handoff_ms": h,
                    **{k: round(v, 4) for k, v in s.items()},
                    "measured_ttft_ms": round(c.measured_ttft_ms, 3),
                    "ttft_ratio": round(s["simulated_ttft_ms"] / c.measured_ttft_ms, 4)})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    from llmplan.calibration.engine_fit import load_engine_overrides, profile_seed
    from llmplan.calibration.serving_rows import read_serving_files

    ap = argparse.ArgumentParser(description="TTFT sensitivity of each disaggregated row's replay to the prefill "
                                             "step time and to the hand-off (a diagnostic).")
    ap.add_argument("--measurements", nargs="+", required=True)
    ap.add_argument("--out", help="CSV path (optional)")
    a = ap.parse_args(argv)
    overrides, engines = load_engine_overrides("default")
    seed = profile_seed(engines) if Path(engines).is_file() else 0
    frame = sensitivity(read_serving_files(a.measurements), overrides, seed)
    if a.out:
        frame.to_csv(a.out, index=False)
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(frame.sort_values(["half", "gpu", "isl", "prefill_elasticity"]).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

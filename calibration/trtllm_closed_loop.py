"""Closed-loop arithmetic of served rows: what the measured means imply about where a prompt waits
(docs/ACCURACY.md "TensorRT-LLM TTFT (session 9, round 2)").

A benchmark client with ``N`` concurrent requests, fixed output length ``osl`` and no pause between a
response and the next request runs a closed loop, so the means of a row fix its request rate::

    cycle_ms = TTFT + (osl - 1) x TPOT          (genai-perf / aiperf: TPOT = (E2E - TTFT) / (osl - 1))
    rate_rps = N / cycle_ms x 1000

and with it two quantities that do not depend on the simulator (``prefill_ms`` is one prompt's
prefill step, ``k`` the prompts a step can take whole, ``decode_ms`` a decode step of ``N``
sequences):

* ``prefill_busy = rate x prefill_ms / k``: the share of wall time the engine spends in steps
  that carry prompts, when every such step is full;
* ``prompts_ahead = (TTFT - prefill_ms - 2 x decode_ms) / prefill_ms x k``: prompts prefilled
  between a prompt's arrival and its own step, with TensorRT-LLM's overlap scheduler taking an
  arrival two steps later (``sim/trtllm_scheduling.py``); and by Little's law
  ``waiting = rate x (TTFT - prefill_ms) / 1000`` prompts wait on average;
* ``decode_prefills = (TPOT - decode_ms) x (osl - 1) / prefill_ms``: prompts prefilled in the steps
  of one request's decode phase (a step that carries a prompt is about ``prefill_ms`` longer than
  a decode step). Clients that arrive spread out meet every other client's prompt once per cycle
  (``N - 1``); clients that arrive in one burst and are prefilled one step each meet on average
  half of them, the rest having been prefilled before (``(N - 1) / 2``).

If prompts waited only while other prompts are prefilled, the engine would be in prompt steps
for at least the waiting time's share, and ``waiting / prefill_busy`` is the mean number of
prompts queued while it is (the size of the bursts the clients arrive in). The same arithmetic
on the replayed means (``predicted_*``) shows whether the replay's clients arrive in the same
bursts; where the measured TTFT is higher at the same TPOT, the replay's prompts wait behind
fewer prefills than the measured ones did.

Rows whose client draws its lengths (the InferenceX sweep rows, :mod:`calibration.benchmark_clients`:
uniform in ``[0.8 L, L]``) are computed at the recorded lengths, so their rate is ~10% low.

    python -m llmplan.calibration.trtllm_closed_loop --measurements ../shared/measurements \\
        --pred holdout.csv --model Qwen3-32B
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from llmplan.calibration.row_breakdown import breakdown_case, case_of, find_row
from llmplan.calibration.serving_rows import read_serving_files
from llmplan.calibration.trtllm_moe_implied import _read_csv, select
from llmplan.errors import EXIT_USER_ERROR, UserError

#: steps between a prompt's arrival and the step that can take it under the overlap scheduler
OVERLAP_WAIT_STEPS = 2
GROUP = ["tp", "isl", "N"]


@dataclass(frozen=True)
class ClosedLoop:
    """Closed-loop quantities of one row's means."""

    cycle_ms: float          # one request: TTFT + (osl - 1) x TPOT
    rate_rps: float          # requests per second of N clients
    prefill_busy: float      # share of time in full prompt steps
    waiting: float           # prompts waiting on average (Little's law)
    burst: float             # waiting / prefill_busy
    prompts_ahead: float     # prompts prefilled before a prompt's own step
    decode_prefills: float   # prompts prefilled during one request's decode phase


def closed_loop(concurrency: int, osl: int, ttft_ms: float, tpot_ms: float, prefill_ms: float,
                decode_ms: float, prompts_per_step: int = 1) -> ClosedLoop:
    """The closed-loop quantities (module docstring) of a row's mean TTFT / TPOT."""
    if concurrency < 1 or osl < 1 or prefill_ms <= 0 or prompts_per_step < 1:
        raise ValueError("concurrency, osl, prompts_per_step >= 1 and prefill_ms > 0 needed")
    cycle = ttft_ms + (osl - 1) * tpot_ms
    rate = concurrency / cycle * 1000.0
    busy = rate * prefill_ms / 1000.0 / prompts_per_step
    wait_ms = max(0.0, ttft_ms - prefill_ms)
    waiting = rate * wait_ms / 1000.0
    ahead = max(0.0, ttft_ms - prefill_ms - OVERLAP_WAIT_STEPS * decode_ms) / prefill_ms * prompts_per_step
    in_decode = max(0.0, tpot_ms - decode_ms) * (osl - 1) / prefill_ms
    return ClosedLoop(cycle, rate, busy, waiting, waiting / busy, ahead, in_decode)


def prompts_per_step(max_num_tokens: int, isl: int, concurrency: int) -> int:
    """Whole prompts a step takes beside ``concurrency - 1`` decodes (at least one)."""
    return max(1, (max_num_tokens - (concurrency - 1)) // max(1, isl))


def row_table(df: Any, pred: pd.DataFrame, profiles: str = "default") -> pd.DataFrame:
    """One line per row of ``pred`` (``id``, ``silicon_*`` and ``predicted_*`` TTFT / TPOT): the
    closed-loop quantities of the measured and of the replayed means."""
    out = []
    for r in pred.to_dict("records"):
        case, _ = case_of(df, find_row(df, str(r["id"])), profiles)
        b = breakdown_case(case)
        k = prompts_per_step(int(case.dep.engine.max_num_batched_tokens), case.isl, case.concurrency)
        line: dict[str, Any] = {"id": r["id"], "tp": case.dep.par.tp, "isl": case.isl, "osl": case.osl,
                                "N": case.concurrency, "k": k, "prefill_ms": b.prefill_ms, "decode_ms": b.decode_ms}
        for side, ttft, tpot in (("meas", "silicon_ttft_ms", "silicon_tpot_ms"),
                                 ("pred", "predicted_ttft_ms", "predicted_tpot_ms")):
            c = closed_loop(case.concurrency, case.osl, float(r[ttft]), float(r[tpot]), b.prefill_ms, b.decode_ms, k)
            line.update({f"ttft_{side}": float(r[ttft]), f"rate_{side}": c.rate_rps, f"busy_{side}": c.prefill_busy,
                         f"burst_{side}": c.burst, f"ahead_{side}": c.prompts_ahead,
                         f"indec_{side}": c.decode_prefills})
        out.append(line)
    return pd.DataFrame(out)


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Medians per (TP, isl, N) over the output lengths."""
    cols = ["k", "prefill_ms", "decode_ms", "ttft_meas", "ttft_pred", "rate_meas", "rate_pred",
            "ahead_meas", "ahead_pred", "indec_meas", "indec_pred"]
    g = rows.groupby(GROUP)
    return g[cols].median().join(g.size().rename("rows")).reset_index()


#: command-line options: (flag, argparse keywords)
OPTIONS = (
    ("--measurements", {"nargs": "+", "required": True, "help": "e2e_serving.csv files or folders"}),
    ("--pred", {"required": True, "help": "a `llmplan validate serving --out` file (measured and replayed means)"}),
    ("--model", {"default": None, "help": "only rows whose model_path contains this"}),
    ("--backend", {"default": "trtllm", "help": "only rows of this engine (default trtllm)"}),
    ("--engine-profiles", {"default": "default", "help": "'default' (shipped terms), 'none' or a JSON file"}),
)
#: columns the --pred file must hold
PRED_COLUMNS = ["id", "backend", "model_path", "silicon_ttft_ms", "silicon_tpot_ms", "predicted_ttft_ms",
                "predicted_tpot_ms"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llmplan.calibration.trtllm_closed_loop",
                                description=__doc__.split("\n\n")[0])
    for flag, kw in OPTIONS:
        p.add_argument(flag, **kw)
    return p


def table_for(a: argparse.Namespace) -> pd.DataFrame:
    """The grouped table of the options ``a`` (UserError on a bad file or an empty selection)."""
    pred = _read_csv(a.pred, "--pred", PRED_COLUMNS, "give a `validate serving --out` CSV")
    rows = select(pred[pred["predicted_ttft_ms"].notna()], a.model, a.backend, None)
    if rows.empty:
        raise UserError("no simulated rows match", key="--model", fix="check --model / --backend against the file")
    return summary(row_table(read_serving_files([Path(x) for x in a.measurements]), rows, a.engine_profiles))


def main(argv: list[str] | None = None) -> int:
    try:
        out = table_for(build_parser().parse_args(argv))
    except UserError as e:
        print(e.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    print(out.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

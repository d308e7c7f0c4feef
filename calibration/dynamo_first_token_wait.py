"""The first-token wait of the rows served behind Dynamo: a count of requests, not a front-end backlog.

Diagnosis only (nothing here feeds the replay or the fit). The per-engine-version collection rows
(aiconfigurator's generator: ``python3 -m dynamo.frontend`` in front of ``python3 -m dynamo.<engine>``
workers, driven by ``aiperf profile``; :func:`calibration.benchmark_clients.generator_agg_row`) of
SGLang Llama-3.1-8B-Instruct on H200 at N = 512 and of TensorRT-LLM Llama-3.1-8B-Instruct on H100 at
N = 128 (TP >= 2) carry a measured TTFT of 1-8 s that the replay does not reproduce (flag
``server-queued``, :mod:`calibration.serving_regimes`). The question here is what *kind* of wait
it is, because the two candidate mechanisms leave different traces across output lengths:

* **a serial front end's backlog** (session 13's candidate (a): Dynamo's SGLang worker embeds SGLang's
  TokenizerManager in one GIL-bound process, ``components/src/dynamo/sglang/request_handlers/llm/
  decode_handler.py``, which streams every token, ``sim/frontend_ceiling.py``, so a new request's
  dispatch would queue behind the step's streamed tokens). A FIFO server's backlog is *time*: at
  most the streaming work queued ahead of the request (``t x tokens`` of a step; 0.045 ms x 512 =
  23 ms in the shipped fit) while the engine waits for the front end, which the replay's step floor
  assumes. That wait does not depend on the output length. If the engine instead ran ahead of the
  front end (no floor), the fluid balance (:func:`run_ahead_running`) leaves ``h0 / (t - b)``
  sequences running, ``b`` the device time per sequence of a decode step: about 70 of 512 at TP 8
  (device step 10.9 ms at 512, h0 1.654 ms) and all 512 at TP 2 (22.8 ms), so 442 and 0 waiting.
  If the front end kept pace with the steps but served admissions only when no streaming work is
  left (the host time ``h0`` of each step), ``a`` ms each, at most ``h0 / a`` requests could enter
  per step while ``B / osl`` finish, so ``B <= osl x h0 / a``: the number running would grow with
  the output length.
* **a limit on requests in progress** (a slot wait: requests wait until others finish). In a closed
  loop a request then waits about ``q x E2E / N`` (Little's law, :func:`calibration.serving_regimes.queue_slopes`),
  which grows with the output length in proportion to E2E, ``q`` requests waiting whatever the output length.

What the rows show. :func:`excess_waiting` on a replay's rows (the shipped terms, in-sample; the
replay already holds the prompt queue, the prefill and the fitted per-request time): for SGLang
Llama-3.1-8B H200, N = 512, isl 1,000, the TTFT beyond the replay grows 4-5x from osl 500 to 2,000
(TP 8: 1,485 / 2,670 / 7,471 ms) while the requests it amounts to stay put: 19.9 / 21.2 / 20.5 at
TP 2, 44.0 / 31.0 / 44.5 at TP 4, 56.9 / 52.3 / 57.3 at TP 8 (isl 2,000: 27-35 at TP 4, 55-65 at
TP 8). TensorRT-LLM 1.0.0rc3 Llama-3.1-8B H100 at N = 128, isl 1,024-2,048, TP 4-8: 28-32 requests at
osl 256 and 512 (excess 0.82-0.88 s, then 1.67-1.79 s), fewer at osl 128. A slot wait, not a
backlog: a serial front end's FIFO wait is bounded by the work queued ahead of the request (23 ms
per step here) whatever the output length, and the run-ahead balance puts 442 requests outside the
engine at TP 8 and none at TP 2. For TensorRT-LLM the replay's TPOT is already at or above the
measured without any front-end floor (delivered 7-9k tokens/s, well below the SGLang front end's 22k),
so the front end's per-token work does not cause it there either. Tried and reverted: SGLang's
mixed-chunk refusal of a step's second prompt that does not fit whole (``PrefillAdder.add_one_req``
``AddReqResult.OTHER``) moves the N = 512 rows by 50-120 ms and breaks the osl-100 rows at N = 128-240
(in-sample median APE TTFT of the 46 rows 27.5 -> 34.1%). :func:`wait_forms` checks the same from the
measurements alone (fit on the shorter outputs, predict the longest): the time form (the mean TTFT)
misses the SGLang osl-2,000 TTFT by 52-68%, the count form ``a + q x E2E / N`` by +6 / -46 / -13%
at TP 2 / 4 / 8 (two points fix the line; TP 4's osl 1,000 row sits low).

No documented limit found explains the count: the generator passes ``--max-running-requests`` = N
and ``--cuda-graph-bs`` up to N (calibration/sglang_launch.py), the client is a continuous closed
loop (aiperf ``--concurrency N --num-requests k x N --warmup-request-count 2N``, aiconfigurator
``benchmark/bench_run.sh.j2``), Dynamo's TCP request plane served up to 1,500 requests per worker
(``DEFAULT_WORKER_POOL_SIZE``; ai-dynamo/dynamo PR #9090 raised it to 10,000), and the KV pools are
largest at TP 8, where the count is largest. So no term is modelled (docs/ACCURACY.md, "The
first-token wait behind Dynamo (session 13)").

Run ``python -m llmplan.calibration.dynamo_first_token_wait --measurements DIR`` for the table.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

#: output lengths a deployment needs for :func:`wait_forms` (two to fit, the longest to predict)
MIN_OSLS = 3


def e2e_ms(ttft_ms: float, tpot_ms: float, osl: int) -> float:
    """The client's end-to-end latency of a request: ``TTFT + (osl - 1) x TPOT`` (ms)."""
    return float(ttft_ms) + (int(osl) - 1) * float(tpot_ms)


def waiting_before_first_token(concurrency: int, ttft_ms: float, tpot_ms: float, osl: int) -> float:
    """Requests of a closed loop of ``concurrency`` clients that are before their first token on
    average (Little's law: ``N x TTFT / E2E``; NaN for a non-positive E2E)."""
    e2e = e2e_ms(ttft_ms, tpot_ms, osl)
    return int(concurrency) * float(ttft_ms) / e2e if e2e > 0 else math.nan


def excess_waiting(concurrency: int, ttft_ms: float, predicted_ttft_ms: float, tpot_ms: float, osl: int) -> float:
    """Requests before their first token beyond the replay's: ``N x (TTFT - predicted TTFT) / E2E``
    (Little's law on the part of the measured TTFT the replay does not have; NaN for a non-positive
    E2E). A wait for a slot keeps it constant across output lengths; a backlog of fixed time makes
    it fall as ``1 / E2E``."""
    e2e = e2e_ms(ttft_ms, tpot_ms, osl)
    return int(concurrency) * (float(ttft_ms) - float(predicted_ttft_ms)) / e2e if e2e > 0 else math.nan


def run_ahead_running(concurrency: int, host_ms: float, frontend_per_token_ms: float,
                      device_ms_per_seq: float) -> float:
    """Sequences an engine keeps running when it does *not* wait for a serial front end of
    ``frontend_per_token_ms`` per streamed token (fluid balance, decode step ``host_ms +
    device_ms_per_seq x B``): the front end's backlog grows until the engine's step takes as long as
    the front end's work for it, ``host_ms + b x B = t x B``, i.e. ``B = host_ms / (t - b)``, at most
    ``concurrency`` (the whole loop runs when the engine is the slower of the two)."""
    t, b = float(frontend_per_token_ms), float(device_ms_per_seq)
    if t <= b:
        return float(concurrency)
    return min(float(concurrency), float(host_ms) / (t - b))


def _fit_count(x: list[float], y: list[float]) -> tuple[float, float]:
    """(q, a) of the least-squares line ``y = a + q x``."""
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((xi - mx) ** 2 for xi in x)
    q = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sxx if sxx > 0 else 0.0
    return q, my - q * mx


def wait_forms(rows: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per deployment and concurrency of the rows (keys of :func:`calibration.serving_regimes.queue_slopes`)
    with at least :data:`MIN_OSLS` output lengths: the longest output's measured TTFT (the mean of its
    rows), and its predictions by the count form ``a + q x E2E / N`` and the time form (the mean TTFT),
    both fitted to the rows of the shorter outputs only; ``q`` over all of them. Rows keep their file order within a group."""
    from llmplan.calibration.serving_regimes import _slope_key
    from llmplan.calibration.serving_rows import concurrency_of

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if str(r.get("mode") or "agg").strip().lower() != "agg":
            continue
        ttft, tpot, osl = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"]), int(float(r["osl"]))
        if not (ttft > 0 and tpot > 0):
            continue
        n = concurrency_of(r)
        groups.setdefault(_slope_key(r), []).append(
            {"row": r, "n": n, "osl": osl, "ttft_ms": ttft, "x": e2e_ms(ttft, tpot, osl) / n})
    out = []
    for key in sorted(groups):
        g = sorted(groups[key], key=lambda d: d["osl"])
        if len({d["osl"] for d in g}) < MIN_OSLS:
            continue
        # every row of the longest output is predicted, none of them fitted (repeated runs of one osl)
        fit = [d for d in g if d["osl"] != g[-1]["osl"]]
        tail = [d for d in g if d["osl"] == g[-1]["osl"]]
        last = {k: sum(d[k] for d in tail) / len(tail) for k in ("ttft_ms", "x")}
        q_fit, a_fit = _fit_count([d["x"] for d in fit], [d["ttft_ms"] for d in fit])
        q_all, _ = _fit_count([d["x"] for d in g], [d["ttft_ms"] for d in g])
        r0 = g[0]["row"]
        out.append({"backend": r0.get("backend"), "version": r0.get("backend_version"),
                    "model": str(r0.get("model_path")).split("/")[-1], "gpu": r0.get("system"),
                    "tp": int(float(r0.get("tp_size") or 1)), "isl": int(float(r0["isl"])), "n": g[0]["n"],
                    "osl": "/".join(str(d["osl"]) for d in g), "queued": q_all,
                    "last_ttft_ms": last["ttft_ms"], "count_form_ms": a_fit + q_fit * last["x"],
                    "time_form_ms": sum(d["ttft_ms"] for d in fit) / len(fit)})
    return out


def excess_rows(rows: list[Mapping[str, Any]], min_concurrency: int = 1) -> list[dict[str, Any]]:
    """Rows of a replay's output (``llmplan validate serving --out``: measured and predicted TTFT) served
    behind Dynamo (:func:`calibration.benchmark_clients.collection_file`) at ``min_concurrency`` or more
    clients: the measured and replayed TTFT, their difference (ms) and :func:`excess_waiting`, sorted
    by engine, model, TP, prompt length, concurrency and output length."""
    from llmplan.calibration.benchmark_clients import collection_file
    from llmplan.calibration.serving_rows import concurrency_of

    out = []
    for r in rows:
        if collection_file(r) is None or str(r.get("mode") or "agg").strip().lower() != "agg":
            continue
        n = concurrency_of(r)
        keys = ("silicon_ttft_ms", "predicted_ttft_ms", "silicon_tpot_ms")
        ttft, pred, tpot = (float(r.get(k) if r.get(k) is not None else "nan") for k in keys)
        if n < min_concurrency or not (math.isfinite(ttft) and math.isfinite(pred) and math.isfinite(tpot)):
            continue
        osl = int(float(r["osl"]))
        out.append({"backend": r.get("backend"), "model": str(r.get("model_path")).split("/")[-1],
                    "tp": int(float(r.get("tp_size") or 1)), "isl": int(float(r["isl"])), "n": n, "osl": osl,
                    "ttft_ms": ttft, "predicted_ttft_ms": pred, "excess_ms": ttft - pred,
                    "e2e_ms": e2e_ms(ttft, tpot, osl), "excess_waiting": excess_waiting(n, ttft, pred, tpot, osl)})
    return sorted(out, key=lambda d: (str(d["backend"]), d["model"], d["tp"], d["isl"], d["n"], d["osl"]))


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.benchmark_clients import collection_file
    from llmplan.calibration.serving_rows import read_serving_csv, read_serving_files

    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.dynamo_first_token_wait",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", nargs="+", required=True, help="e2e_serving.csv files or folders")
    ap.add_argument("--min-queued", type=float, default=5.0,
                    help="list deployments with at least this many requests waiting (default 5)")
    ap.add_argument("--pred", help="a replay's rows (llmplan validate serving --out): list each row's wait beyond it")
    ap.add_argument("--min-concurrency", type=int, default=128, help="with --pred: rows of at least this many clients")
    a = ap.parse_args(argv)
    rows = [r for r in read_serving_files(a.measurements).to_dict("records") if collection_file(r) is not None]
    print("rows behind Dynamo (per-engine-version collection files); longest output's TTFT predicted from the others")
    print(f"{'backend':8} {'model':24} {'gpu':9} {'tp':>2} {'isl':>5} {'N':>4} {'osl':15} {'queued':>6} "
          f"{'TTFT ms':>8} {'count form':>10} {'time form':>9}")
    for w in wait_forms(rows):
        if not w["queued"] >= a.min_queued:
            continue
        m = w["last_ttft_ms"]
        print(f"{w['backend']:8} {w['model'][:24]:24} {w['gpu']:9} {w['tp']:>2} {w['isl']:>5} {w['n']:>4} {w['osl']:15} "
              f"{w['queued']:>6.1f} {m:>8.0f} {w['count_form_ms']:>6.0f} {w['count_form_ms'] / m - 1:+4.0%}"
              f" {w['time_form_ms']:>5.0f} {w['time_form_ms'] / m - 1:+4.0%}")
    if a.pred:
        print("\nwait beyond the replay (TTFT - predicted TTFT), in ms and in requests (N x excess / E2E)")
        print(f"{'backend':8} {'model':24} {'tp':>2} {'isl':>5} {'N':>4} {'osl':>5} {'TTFT':>6} {'pred':>6} "
              f"{'excess ms':>9} {'E2E ms':>7} {'requests':>8}")
        for d in excess_rows(read_serving_csv(a.pred).to_dict("records"), a.min_concurrency):
            print(f"{d['backend']:8} {d['model'][:24]:24} {d['tp']:>2} {d['isl']:>5} {d['n']:>4} {d['osl']:>5} "
                  f"{d['ttft_ms']:>6.0f} {d['predicted_ttft_ms']:>6.0f} {d['excess_ms']:>9.0f} {d['e2e_ms']:>7.0f} "
                  f"{d['excess_waiting']:>8.1f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

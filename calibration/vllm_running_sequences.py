"""How many sequences a measured closed-loop run had past their first token (Little's law), and
what could have capped it: evidence for the vLLM gpt-oss-120b N = 512 rows (issue 12).

In a closed loop of N clients without think time every client always has one request in the
system, so the run's request rate is ``N / E2E`` and the mean number of requests in their decode
phase (first token received, last not yet) is

    running = rate x decode_time = N x decode_time / E2E,
    decode_time = (mean output length - 1) x TPOT,   E2E = TTFT + decode_time

(the client's TPOT definition; the mean output length is the client's: ``[0.8 L, L]`` uniform for
the InferenceX sweep rows, :mod:`calibration.benchmark_clients`). The other ``N - running`` wait
for their first token: in the server's queue, in its prefill, or in front of the server. The
identity holds for any scheduler; it needs only the two measured means and the lengths.

What it shows for the nine vLLM gpt-oss-120b H100 rows at N = 512 (``2026-04-06.csv``, measured
2025-12-05/08, vLLM 0.11.2 or no version; docs/ACCURACY.md, "vLLM rows (session 10)"): 88 to 98
running sequences in every row, at TP 2, 4 and 8 and at 1k/1k, 1k/8k and 8k/1k alike, while the
KV pool the replay computes for them holds 122 (TP 2, 9k-token sequences: there the pool may be
the limit) to 3,507 whole sequences (341-3,507 at TP 4 and 8, 550 at TP 2 with 2k-token
sequences). Where the pool is the limit the estimate finds it: the vLLM 0.12.0 Qwen3-32B H100
TP 2 rows with 4k prompts at N = 128 run 63-66 sequences against a replayed pool of 62-76. And
``max_num_seqs`` is ``$CONC`` in the InferenceX gpt-oss launch of that time (``--max-num-seqs=$CONC``,
``benchmarks/gptoss_fp4_h100_docker.sh`` / ``_slurm.sh`` at SemiAnalysisAI/InferenceX 4e135fd3,
2025-12-08; session 10 read ``$CONC`` as the recorded 512, but it was the sweep's 4-64, below) and
1,024 by vLLM's own default for the OpenAI server on a >= 70 GiB GPU
(``EngineArgs.get_batch_defaults``, conf/engine/vllm.yaml).
So neither the KV pool nor a ``max_num_seqs`` of 512 explains the count: it does not move with
the sequence length or the TP size. What does (session 11, :mod:`calibration.inferencex_docker_client`):
the rows are not closed loops of 512 clients. InferenceX's H100 Docker script of 2025-11-21 to
2025-12-08 (``gptoss_fp4_h100_docker.sh`` from d22bf9ca9 until PR #310, 4e135fd3f) ran the client
with a hard-coded ``--max-concurrency 512`` over ``--num-prompts 10 x CONC`` and the server with
``--max-num-seqs=$CONC`` (CONC = 4-64, the sweep), and the result file recorded the 512. Ten
waves of prompts sent at once read, through this identity at N = 512, as ``512 / 5.5 = 93``
running sequences for any CONC <= 51 (:func:`calibration.inferencex_docker_client.burst_running`).
The replay leaves those rows out with that reason. (The aiohttp default connection limit of 100,
``TCPConnector(limit=100)``, considered in session 10, does not apply: the client opens one
``ClientSession`` per request, kimbochen/bench_serving ``backend_request_func.py``.)

The same count bounds the KV a run held (:func:`kv_tokens_in_use`). The vLLM Llama-3.1-70B
sweep rows (measured 2025-10-29) on one H200 held 240k-357k tokens at N = 32-64 (1k/8k N = 64,
8k/1k N = 32 and 64), 1.3-1.9x the 185k tokens of the bf16 pool the replay gives that GPU: their
launch wrote ``kv-cache-dtype: fp8`` (InferenceX ``benchmarks/70b_fp8_h200_slurm.sh`` at 9596d23d),
whose pool (369k) holds it. Replaying those rows with an fp8 cache was tried and reverted: it
made the training half worse (docs/ACCURACY.md, "vLLM rows (session 10)").

Run ``python -m llmplan.calibration.vllm_running_sequences --measurements DIR [--min-concurrency 256]``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import length_bounds, length_range_ratio


@dataclass(frozen=True)
class RunningEstimate:
    """Little's-law view of one measured closed-loop run."""

    concurrency: int
    mean_output_tokens: float
    e2e_ms: float
    decode_ms: float
    running: float            # mean sequences past their first token
    waiting: float            # mean requests waiting for their first token (N - running)


def mean_client_length(tokens: int, ratio: float) -> float:
    """Mean length the row's client drew for a recorded length (uniform integers in
    :func:`calibration.benchmark_clients.length_bounds`; the recorded length when fixed)."""
    lo, hi = length_bounds(int(tokens), ratio)
    return (lo + hi) / 2.0


def running_estimate(concurrency: int, ttft_ms: float, tpot_ms: float, mean_output_tokens: float) -> RunningEstimate:
    """Little's law for a closed loop of ``concurrency`` clients without think time (module docstring)."""
    decode_ms = max(0.0, mean_output_tokens - 1.0) * tpot_ms
    e2e_ms = ttft_ms + decode_ms
    if not (e2e_ms > 0 and math.isfinite(e2e_ms)):
        return RunningEstimate(concurrency, mean_output_tokens, math.nan, math.nan, math.nan, math.nan)
    running = concurrency * decode_ms / e2e_ms
    return RunningEstimate(concurrency, mean_output_tokens, e2e_ms, decode_ms, running, concurrency - running)


def row_estimate(row: Mapping[str, Any]) -> RunningEstimate:
    """:func:`running_estimate` of a measured row, with its client's mean output length."""
    from llmplan.calibration.serving_rows import concurrency_of

    isl, osl = int(float(row["isl"])), int(float(row["osl"]))
    ratio = length_range_ratio(row, isl, osl)
    return running_estimate(concurrency_of(row), float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"]),
                            mean_client_length(osl, ratio))


def kv_tokens_in_use(row: Mapping[str, Any]) -> float:
    """Lower bound of the KV tokens the run held on average: each running sequence (Little's law)
    holds its prompt and, on average over its decode, half its output (requests waiting for their
    first token, some of them mid-prefill, are not counted)."""
    isl, osl = int(float(row["isl"])), int(float(row["osl"]))
    est = row_estimate(row)
    return est.running * (mean_client_length(isl, length_range_ratio(row, isl, osl)) + est.mean_output_tokens / 2.0)


def kv_pool_tokens(row: Mapping[str, Any], index: int = 0, kv_cache: str = "") -> int:
    """KV tokens the replayed replica's pool holds (the simulator's memory plan), with the row's
    KV dtype or ``kv_cache`` ("bf16" / "fp8") instead; 0 when the row does not map."""
    from dataclasses import replace

    from llmplan.calibration.inferencex_docker_client import as_recorded
    from llmplan.calibration.serving_rows import engine_profiles, map_row
    from llmplan.sim.memory import plan_memory

    # the Docker-capped N = 512 rows are left out of the replay; their deployment's pool is still the evidence
    m = map_row(as_recorded(row), index, engine_profiles())
    if m.case is None:
        return 0
    d = m.case.dep
    prec = replace(d.prec, kv_cache=kv_cache) if kv_cache else d.prec
    return int(plan_memory(d.model, d.gpu, d.par, prec, d.engine, m.case.isl + m.case.osl).kv_capacity_tokens)


def kv_pool_sequences(row: Mapping[str, Any], index: int = 0) -> int:
    """Whole sequences of ``isl + osl`` tokens the replayed replica's KV pool holds (the
    simulator's memory plan; 0 when the row does not map)."""
    from llmplan.calibration.inferencex_docker_client import as_recorded
    from llmplan.calibration.serving_rows import engine_profiles, map_row
    from llmplan.sim.memory import plan_memory

    # the Docker-capped N = 512 rows are left out of the replay; their deployment's pool is still the evidence
    m = map_row(as_recorded(row), index, engine_profiles())
    if m.case is None:
        return 0
    d = m.case.dep
    mem = plan_memory(d.model, d.gpu, d.par, d.prec, d.engine, m.case.isl + m.case.osl)
    return int(mem.kv_capacity_tokens) // (m.case.isl + m.case.osl)


def main(argv: list[str] | None = None) -> int:
    from llmplan.calibration.serving_rows import read_serving_files

    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.vllm_running_sequences",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--measurements", nargs="+", required=True, help="e2e_serving.csv files or folders")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--model", default="", help="substring of model_path (default: all)")
    ap.add_argument("--min-concurrency", type=int, default=256)
    args = ap.parse_args(argv)
    df = read_serving_files(args.measurements)
    df = df[(df["backend"].astype(str).str.lower() == args.backend) & (df["mode"] == "agg")]
    if args.model:
        df = df[df["model_path"].astype(str).str.contains(args.model, regex=False)]
    print(f"{'id':<72} {'ver':>7} {'tp':>2} {'isl':>5} {'osl':>5} {'N':>4} {'TTFT ms':>9} {'TPOT ms':>7} "
          f"{'running':>7} {'KV seqs':>7} {'KV used':>8} {'KV pool':>8}")
    shown = 0
    for i, r in df.reset_index(drop=True).iterrows():
        row = r.to_dict()
        est = row_estimate(row)
        if est.concurrency < args.min_concurrency:
            continue
        shown += 1
        ver = str(row.get("backend_version") if isinstance(row.get("backend_version"), str) else "-")
        print(f"{str(row['id'])[:72]:<72} {ver:>7} {int(float(row['tp_size'])):>2} {int(row['isl']):>5} "
              f"{int(row['osl']):>5} {est.concurrency:>4} {row['silicon_ttft_ms']:>9.0f} {row['silicon_tpot_ms']:>7.2f} "
              f"{est.running:>7.1f} {kv_pool_sequences(row, i):>7} {kv_tokens_in_use(row):>8.0f} {kv_pool_tokens(row, i):>8}")
    print(f"{shown} row(s) at concurrency >= {args.min_concurrency}; running = N x decode time / E2E "
          "(Little's law, closed loop); KV seqs / KV pool = whole isl + osl sequences / tokens of the replayed KV pool; "
          "KV used = running x (prompt + half the output) tokens, a lower bound of what the run held")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

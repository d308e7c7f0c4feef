"""Served-row regimes the replay does not reproduce: flagged, optionally left out of the engine fit.

The engine terms (:mod:`calibration.engine_fit`) describe host time on top of the kernels. A
row whose latency is set by something else pulls them wherever it enters the fit (e.g. dense
vLLM TPOT 3.9% -> 9.6% when admission-limited gpt-oss-120b rows were added, issue 9). Four
criteria, computed from the measured rows and the simulator's own model only, never from the
prediction error:

* ``cache-served prompts``: the prompt FLOPs the run must have computed per second exceed
  the replica's peak dense compute. In a closed loop without think time the request rate is
  N / E2E (Little's law) with E2E = TTFT + (osl - 1) x TPOT (the client's TPOT definition),
  so the prefill compute rate is N x isl x flops_per_token(prefill) / E2E; above
  ``gpus x peak`` no GPU could have computed the prompts: they were served from a prefix
  (radix) cache, which the replay (unique prompts) does not model. Also flagged when that rate
  exceeds the replica's best prefill step by the simulator's own kernels, host time left out
  (:mod:`calibration.prefill_ceiling`: a tighter bound than the spec peak).
* ``server-queued`` (:func:`queued_rows`): the deployment's measured TTFT, across output
  lengths at this concurrency, shows at least :data:`QUEUED_MIN` requests waiting at the server
  (below) while the replica as replayed admits all N (not admission-limited).
* ``admission-limited``: the concurrency exceeds what the replica can run at once: the
  engine profile's default ``max_num_seqs`` (:func:`default_max_running`; for SGLang its own
  rule instead, :func:`sglang_running_limit`, at least 2,048 requests) or the sequences of
  isl + osl tokens the computed KV capacity holds above the watermark. Measured TTFT then contains queueing set by server
  settings the row does not record (max running requests, memory fraction), which the host
  terms cannot and must not absorb.
* ``below decode floor`` (:mod:`calibration.decode_floor`): the measured mean TPOT is below the
  memory-traffic floor of one decode step of N sequences (weights and KV read at peak HBM
  bandwidth): the server cannot have run N at once, or the outputs ended before ``osl``.

Rows keep being scored by ``llmplan validate serving``, which prints their flag. The engine fit
leaves them out with ``--exclude-regimes`` (on in the shipped fit since the late refit of
2026-11-24: docs/ACCURACY.md, "Held-out results").

Queued requests seen in the measurements alone (:func:`queue_slopes`): at a fixed deployment and
concurrency N, a run's request rate is N / E2E (Little's law), so a request that finds ``q``
others waiting before admission waits about ``q x E2E / N``. Regressing mean TTFT on E2E / N
over the runs that differ only in output length gives ``q``: 0 where every client is admitted
at once (the replay's assumption), about 1 where one request is always held back by the server
(e.g. a KV pool sized for fewer than N whole sequences under TensorRT-LLM's
GUARANTEED_NO_EVICT). Run ``python -m llmplan.calibration.serving_regimes --measurements DIR``.
"""

from __future__ import annotations

import math
from typing import Any

from llmplan.calibration.decode_floor import BELOW_DECODE_FLOOR, below_decode_floor
from llmplan.calibration.prefill_ceiling import beyond_prefill_ceiling, request_rate_per_s
from llmplan.calibration.serving_rows import ServingCase
from llmplan.calibration.trtllm_speculative import SPECULATIVE, speculative_row

CACHE_SERVED = "cache-served prompts"
ADMISSION_LIMITED = "admission-limited"
SERVER_QUEUED = "server-queued"
#: the flags, in the order they are reported
FLAGS = (CACHE_SERVED, ADMISSION_LIMITED, SERVER_QUEUED, BELOW_DECODE_FLOOR, SPECULATIVE)
#: requests waiting at the server (queue_slopes) from which a deployment counts as server-queued
QUEUED_MIN = 0.5


def peak_flops(case: ServingCase) -> float:
    """Peak dense FLOP/s of the replica: its GPUs x the larger of the weight dtype's and
    bf16's catalog figure (the larger bound flags fewer rows)."""
    gpu = case.dep.gpu
    per = [gpu.peak_tflops(d) for d in {case.dep.prec.weights, "bf16"} if gpu.supports(d)]
    return case.dep.par.gpus * max(per) * 1e12


def prompt_compute_ratio(case: ServingCase) -> float:
    """Prompt FLOP/s the measured run implies / the replica's peak (> 1: not computable)."""
    from llmplan.model_catalog.derived import flops_per_token

    rate = request_rate_per_s(case)   # Little's law, shared with the prefill ceiling
    if math.isnan(rate):
        return math.nan
    need = rate * case.isl * flops_per_token(case.dep.model, case.isl, "prefill")
    return need / peak_flops(case)


def admission_limit(case: ServingCase) -> int:
    """Sequences the replayed replica runs at once: min(max_num_seqs, the engine's running-request
    limit (:func:`default_max_running`; SGLang: :func:`sglang_running_limit`), KV capacity above
    the watermark / the tokens of one sequence). A sequence holds isl + osl tokens; a row whose
    client draws its lengths (``length_ratio`` < 1: uniform in ``[ratio x L, L]``,
    :mod:`calibration.benchmark_clients`) holds their mean, which is what the N clients' requests
    reserve on average (SGLang reserves the prompt and the request's ``max_tokens``, the drawn
    output length)."""
    from llmplan.calibration.benchmark_clients import length_bounds
    from llmplan.sim.memory import plan_memory

    dep = case.dep
    e = dep.engine
    mem = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, e, case.isl + case.osl)
    per_seq = float(case.isl + case.osl)
    if case.length_ratio < 1.0:
        per_seq = sum(sum(length_bounds(n, case.length_ratio)) / 2.0 for n in (case.isl, case.osl))
    kv_seqs = int(mem.kv_capacity_tokens * (1.0 - e.watermark) // max(1.0, per_seq))
    if case.backend == "sglang":
        return min(int(e.max_num_seqs), sglang_running_limit(case, mem.kv_capacity_tokens), kv_seqs)
    return min(int(e.max_num_seqs), default_max_running(case.backend), kv_seqs)


def sglang_running_limit(case: ServingCase, kv_capacity_tokens: int) -> int:
    """Requests an SGLang replica of this row runs at once by SGLang's own rule
    (:func:`llmplan.sim.sglang_scheduling.sglang_max_running_requests`, per attention-DP rank):
    the generator's launches pass ``--max-running-requests`` = the row's batch size = N
    (calibration/sglang_launch.py; ``graph_every_batch`` marks those rows), every other launch
    leaves SGLang's default, at least 2,048 requests unless the KV pool is tiny. Not the engine
    profile's ``max_num_seqs`` (256, a planning default): a server started with SGLang's
    defaults does not hold back the 257th client."""
    from llmplan.sim.sglang_scheduling import sglang_max_running_requests

    dp = max(1, case.dep.par.dp)
    requested = -(-case.concurrency // dp) if case.graph_every_batch else None
    per_rank = sglang_max_running_requests(int(kv_capacity_tokens) // dp,
                                           int(case.dep.model.max_position_embeddings), requested)
    return per_rank * dp


def default_max_running(backend: str) -> int:
    """The engine profile's limit of running requests (``max_num_seqs`` in conf/engine; not
    checked against every measured version's default, which varies). The replay raises its own limit to the row's concurrency
    (serving_rows), since the files do not record the server's setting; above the default a
    server started with defaults admits fewer than N and queues the rest."""
    from llmplan.calibration.serving_rows import base_engine

    return int(base_engine(backend).max_num_seqs)


def regime_flags(case: ServingCase, queued: frozenset[int] = frozenset(),
                 row: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The regimes of :data:`FLAGS` that apply to a row (empty: the replay's regime);
    ``queued``: row indices of :func:`queued_rows`; ``row``: the file's row, for the flags read
    from its provenance (``speculative decoding (MTP)``: calibration/trtllm_speculative.py)."""
    out = []
    # a client cycling through a prompt pool is replayed with its repeats (case.prompt_pool,
    # calibration.benchmark_clients.prompt_pool_size): the prefix cache is then the replay's own regime
    if not case.prompt_pool and (prompt_compute_ratio(case) > 1.0 or beyond_prefill_ceiling(case)):
        out.append(CACHE_SERVED)
    try:
        if case.concurrency > admission_limit(case):
            out.append(ADMISSION_LIMITED)
    except Exception:   # noqa: BLE001 - memory plan refused: the replay reports it itself
        pass
    if case.index in queued and ADMISSION_LIMITED not in out:   # queued for a reason the replay does not model
        out.append(SERVER_QUEUED)
    if below_decode_floor(case):   # fewer than N ran, or outputs ended early (calibration/decode_floor.py)
        out.append(BELOW_DECODE_FLOOR)
    if speculative_row(row):   # measured with MTP, which the replay does not run (calibration/trtllm_speculative.py)
        out.append(SPECULATIVE)
    return tuple(out)


def flags_of(rows: list[dict[str, Any]], indices: list[int], engines: Any) -> dict[int, tuple[str, ...]]:
    """{row index: flags} for the given rows (rows that do not map get none)."""
    from llmplan.calibration.serving_rows import map_row

    import pandas as pd

    queued = queued_rows(pd.DataFrame(rows))
    out: dict[int, tuple[str, ...]] = {}
    for i in indices:
        m = map_row(rows[i], i, engines)
        out[i] = regime_flags(m.case, queued, rows[i]) if m.case is not None else ()
    return out


#: columns that, with the concurrency, fix a deployment in :func:`queue_slopes` (all but osl)
SLOPE_KEYS = ("backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode", "tp_size",
              "pp_size", "moe_ep_size", "isl")


def queue_slopes(df: Any) -> Any:
    """Per aggregated deployment and concurrency measured at >= 2 output lengths: the slope
    ``q`` of mean TTFT on E2E / N (requests waiting at the server on average; see the module
    docstring), with the rows and output lengths it rests on. Measurements only."""
    import numpy as np
    import pandas as pd

    from llmplan.calibration.serving_rows import concurrency_of

    d = df[df["mode"].astype(str).str.lower() == "agg"].copy()
    d["n"] = [concurrency_of(r) for r in d.to_dict("records")]
    d["e2e_ms"] = d["silicon_ttft_ms"] + (d["osl"] - 1) * d["silicon_tpot_ms"]
    d["x"] = d["e2e_ms"] / d["n"]
    d["key"] = [_slope_key(r) for r in d.to_dict("records")]
    recs = []
    for key, g in d.groupby("key", sort=True):
        if g["osl"].nunique() < 2 or np.ptp(g["x"].to_numpy()) <= 0:
            continue
        q, a = np.polyfit(g["x"].to_numpy(float), g["silicon_ttft_ms"].to_numpy(float), 1)
        first = g.iloc[0]
        recs.append({**{k: first[k] for k in list(SLOPE_KEYS) + ["n"]}, "key": key, "rows": len(g),
                     "osl": "/".join(str(int(o)) for o in sorted(g["osl"].unique())),
                     "queued": float(q), "ttft_at_zero_ms": float(a)})
    return pd.DataFrame(recs)


def queued_rows(df: Any) -> frozenset[int]:
    """Positions (0-based, in ``df``'s order) of the rows of deployments whose measured TTFT shows
    at least :data:`QUEUED_MIN` requests waiting at the server (:func:`queue_slopes`): the
    ``server-queued`` regime. From measurements only, never from a prediction."""
    t = queue_slopes(df)
    if t.empty:
        return frozenset()
    hot = set(t.loc[t["queued"] >= QUEUED_MIN, "key"])
    return frozenset(pos for pos, r in enumerate(df.to_dict("records"))
                     if str(r.get("mode")).lower() == "agg" and _slope_key(r) in hot)


def _slope_key(r: dict[str, Any]) -> str:
    """Deployment (all but osl) and concurrency of a row, as text (empty fields compare equal)."""
    from llmplan.calibration.serving_rows import concurrency_of, deployment_key

    return f"{deployment_key({**r, 'osl': ''})}|n={concurrency_of(r)}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from llmplan.calibration.serving_rows import read_serving_files

    ap = argparse.ArgumentParser(prog="python -m llmplan.calibration.serving_regimes",
                                 description="Requests queued at the server, from measured TTFT across output lengths")
    ap.add_argument("--measurements", required=True, nargs="+", help="e2e_serving.csv files or folders")
    a = ap.parse_args(argv)
    t = queue_slopes(read_serving_files(a.measurements))
    if t.empty:
        print("no deployment measured at two output lengths")
        return 0
    t["model_path"] = t["model_path"].astype(str).str.split("/").str[-1]
    cols = ["backend", "backend_version", "model_path", "system", "tp_size", "isl", "n", "osl", "queued"]
    print(t[cols].sort_values(["backend", "model_path", "isl", "n"]).to_string(index=False, float_format="%.2f"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The benchmark client behind a served row: which prompt and output lengths it sent.

The served rows record one prompt length ``isl`` and one output length ``osl``, but the clients
that produced them did not all send exactly those lengths:

* **Sweep rows** (the CI sweeps of the aiconfigurator database dump: ``db-dump/...``,
  ``source_file=<date>.csv``, ``...-gap-analysis.csv``) run InferenceMAX's three scenarios,
  isl/osl 1024/1024, 1024/8192 and 8192/1024, at client concurrency 4-64 (up to 256-512 for some
  engines). InferenceMAX launches every such run with ``--random-range-ratio 0.8``
  (``.github/workflows/full-sweep-tmpl.yml`` and ``benchmark-tmpl.yml``, concurrency matrix
  ``[4, 8, 16, 32, 64]``; read in the fork github.com/jyothisambolu/InferenceMAX of SemiAnalysis'
  InferenceMAX, 2025), and its client (github.com/kimbochen/bench_serving ``benchmark_serving.py``,
  ``sample_random_requests``, a copy of vLLM's ``benchmarks/benchmark_serving.py``) draws each
  request's lengths as ``np.random.randint(int(L x ratio), L + 1)``: uniform integers in
  ``[0.8 L, L]``, mean 0.9 L, for the prompt and the output alike, with ``--ignore-eos`` and
  ``--num-prompts 10 x concurrency``. Exception: the gpt-oss H100 rows recorded at N = 512
  (2025-11-21..12-08) ran InferenceX's Docker script with a hard-coded ``--max-concurrency 512``
  over ``10 x CONC`` prompts and ``--max-num-seqs CONC``; they are not replayed
  (:mod:`calibration.inferencex_docker_client`).
* **Collection rows** (``source_file=.../data/<gpu>/<backend>/<version>/<model>.csv``: the
  per-engine-version collection files) and every other shape: fixed lengths, as recorded.

Why it matters: with fixed lengths the closed-loop clients of a deterministic replay finish
together and re-send together forever (lock-step), so every prompt queues behind the other
N - 1 at each cycle; with lengths drawn per request they drift apart as real clients do. The
sweep rows show the drift: their measured TTFT grows slowly with N (DeepSeek-V3 SGLang 0.5.9,
isl 8,192: 447 / 503 / 700 / 994 ms at N = 4 / 8 / 16 / 32), while the fixed-length replay
queues the burst (763 / 1,322 / 2,439 / 4,675 ms); replayed with this client the predicted /
measured TTFT is flat in N (0.81-0.96 there, before any refit). The rows do not name their
client: this mapping is inferred from their shapes, their concurrency sweep and their
``workflow_run_id`` provenance, and it is documented in docs/ACCURACY.md ("SGLang scheduling
(2026-11-24 late)").
"""

from __future__ import annotations

import re
from typing import Any, Mapping

#: InferenceMAX's isl/osl scenarios (1k1k, 1k8k, 8k1k)
SWEEP_SHAPES = frozenset({(1024, 1024), (1024, 8192), (8192, 1024)})
#: InferenceMAX's ``--random-range-ratio`` for those scenarios (full-sweep-tmpl.yml)
INFERENCEMAX_RANGE_RATIO = 0.8
#: engines whose sweep rows are replayed with their client's lengths: all three. The client is a
#: property of the harness that drove the run, not of the engine, so it is not chosen per engine
#: by how well each engine's refit scores (that would tune the mapping to the outcome); scratch
#: refits before the chain refit moved vLLM (median APE TTFT / TPOT %, training half -> held-out
#: half) from 9.6 / 6.9 -> 12.4 / 6.4 to 10.6 / 7.2 -> 11.7 / 7.3 and TensorRT-LLM from
#: 23.4 / 6.9 -> 26.8 / 7.9 to 21.9 / 7.0 -> 25.8 / 8.0 (docs/ACCURACY.md, "SGLang scheduling
#: (2026-11-24 late)"); the chain refit's figures are in docs/ACCURACY.md
CLIENT_MODEL_ENGINES = frozenset({"sglang", "vllm", "trtllm"})
#: a per-engine-version collection file: ``.../data/<gpu>/<backend>/<version>/<model>.csv`` (groups:
#: the path below ``data/``, backend, version)
_COLLECTION_FILE = re.compile(r"/data/([^/;]+/([^/;]+)/([^/;]+)/[^/;]+\.csv)")


def _collection_match(row: Mapping[str, Any]) -> re.Match | None:
    return _COLLECTION_FILE.search(str(row.get("silicon_data_source") or ""))


def collection_file(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(backend, version) of the per-engine-version collection file the row came from
    (``silicon_data_source``); None for every other source."""
    m = _collection_match(row)
    return (m.group(2), m.group(3)) if m else None


def generator_agg_row(row: Mapping[str, Any], backend: str) -> bool:
    """True for an aggregated row of ``backend`` from a per-engine-version collection file
    (:func:`collection_file`: aiconfigurator's generator, served behind Dynamo's front end)."""
    source = collection_file(row)
    return source is not None and source[0] == backend and str(row.get("mode") or "agg").strip() == "agg"


def length_range_ratio(row: Mapping[str, Any], isl: int, osl: int) -> float:
    """The row's client range ratio: lengths uniform in ``[ratio x L, L]``; 1.0 = fixed lengths
    (also for an engine outside :data:`CLIENT_MODEL_ENGINES`)."""
    if str(row.get("backend") or "").strip().lower() not in CLIENT_MODEL_ENGINES:
        return 1.0
    if (isl, osl) in SWEEP_SHAPES and collection_file(row) is None:
        return INFERENCEMAX_RANGE_RATIO
    return 1.0


def length_bounds(tokens: int, ratio: float) -> tuple[int, int]:
    """(smallest, largest) length the client draws for a recorded length ``tokens``
    (``randint(int(tokens x ratio), tokens + 1)``)."""
    if ratio >= 1.0:
        return tokens, tokens
    return max(1, int(tokens * ratio)), tokens


# ----------------------------------------------------------------------------- repeated prompts

#: aiperf's ``--num-dataset-entries`` default: the synthetic dataset holds this many distinct
#: prompts, "reused until benchmarking is complete" (aiperf docs/cli_options.md, "Conversation
#: Input", ``--num-dataset-entries ... [default: 100]``, ai-dynamo/aiperf at db4f6397, 2025-10);
#: each request draws one uniformly at random (``aiperf/dataset/dataset_manager.py``,
#: ``_conversation_query_random.choice``: synthetic datasets are not iterated sequentially)
AIPERF_DATASET_ENTRIES = 100
#: collection files (``<gpu>/<backend>/<version>/<model>.csv`` of ``silicon_data_source``) whose own
#: rows show that their prompts were served from a prefix cache (:func:`prompt_pool_size`)
REPEATED_PROMPT_FILES = frozenset({"h200_sxm/vllm/0.12.0/nvidia_Llama-3.1-8B-Instruct-FP8.csv"})
#: that client's requests per concurrent client: ``--warmup-request-count 2N`` (not reported) then
#: ``--num-requests 20N`` (``bench_run.sh.j2``, BENCH_MULTI_ROUND default 20)
AIPERF_WARMUP_WAVES = 2
AIPERF_MEASURED_WAVES = 20


def prompt_pool_size(row: Mapping[str, Any]) -> int:
    """Distinct prompts the row's client cycled through (drawn uniformly per request); 0 = every
    prompt unique (the replay's default).

    Only for the collection files of :data:`REPEATED_PROMPT_FILES`, whose own rows no GPU could
    have computed with unique prompts: Llama-3.1-8B-FP8 on one H200 (vLLM 0.12.0), 2,000 x 100
    tokens at N = 64, measured TTFT 122 ms and TPOT 9.7 ms, i.e. E2E 1.09 s per request and
    64 x 2,000 = 128k prompt tokens per 1.09 s, while one 2,000-token prefill takes 35 ms by the
    measured vLLM GEMM tables (2.2 s of prefill per 1.09 s); 15 of its 21 rows exceed that bound
    (``calibration.serving_regimes``, ``cache-served prompts``). The other vLLM 0.12.0 collection
    files (H200 Qwen3-235B-A22B-FP8, H100 Qwen3-32B) have no such row, so nothing shows that their
    prompts repeated and they keep unique prompts. The files do not name their
    client; aiconfigurator's generated benchmark (``bench_run.sh.j2``,
    ``aiperf profile --isl --osl --concurrency N --num-requests 20N --warmup-request-count 2N``,
    ai-dynamo/aiconfigurator since f90534bc, 2026-02-11) runs aiperf without
    ``--num-dataset-entries``, i.e. with :data:`AIPERF_DATASET_ENTRIES` distinct
    prompts, which vLLM V1's automatic prefix caching (on by default) serves from cached
    blocks while they stay in the KV pool. That client is the assumption of this replay (printed
    by ``llmplan validate serving``); the hit rate is the simulator's KV pool's, never taken
    from the measured TTFT."""
    m = _collection_match(row)
    return AIPERF_DATASET_ENTRIES if m and m.group(1) in REPEATED_PROMPT_FILES else 0


def repeated_prompts_note(rows: int) -> str:
    """The assumption printed with a replay that includes rows of :func:`prompt_pool_size` > 0."""
    return (f"{rows} row(s) of collection files whose rows show cache-served prompts (vLLM 0.12.0 "
            "Llama-3.1-8B-FP8 on H200) replayed with aiperf's default client: "
            f"{AIPERF_DATASET_ENTRIES} distinct prompts drawn at random, {AIPERF_WARMUP_WAVES}N warm-up then "
            f"{AIPERF_MEASURED_WAVES}N reported requests, repeats served by vLLM's prefix cache as the replayed "
            "KV pool holds them (assumed: the files do not name their client; calibration/benchmark_clients.py)")

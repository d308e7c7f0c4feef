"""SGLang server flags of the measured runs that differ from SGLang's defaults.

The per-engine-version collection rows (``source_file=.../data/<gpu>/sglang/<version>/<model>.csv``)
were launched by aiconfigurator's generator. Its SGLang rule for aggregated workers sets
``agg enable_mixed_chunk = true`` and ``max_prefill_tokens = isl + 1500``
(``src/aiconfigurator/generator/rule_plugin/benchmark/sglang.rule``; added by
https://github.com/ai-dynamo/aiconfigurator/pull/257, "add sglang enable-mix-chunk and
max-prefill-tokens for agg", merged 2026-01-19). Its per-version command templates decide whether
the flag reaches the server: ``cli_args.0.5.6.post2.j2`` emits ``--enable-mixed-chunk`` and
``--max-prefill-tokens``; ``cli_args.0.5.1.post1.j2`` only knows a key ``enable-mix-chunk`` that the
rule never sets, so 0.5.1 runs use SGLang's default prefill-first batches.

The measurements agree, each way: SGLang 0.5.6.post2 Llama-3.1-8B on H200 (46 rows) replayed
prefill-first queues every prompt behind the others (TTFT 1.5-5.3x the measured, TPOT 0.65-0.93x);
with mixed chunks (shipped engine terms, no refit) median APE TTFT 169.7 -> 27.0%, TPOT 19.8 -> 5.7%.
SGLang 0.5.1.post1 Qwen3-32B on H100 (78 rows) fits prefill-first (8.0 / 5.4%) and not mixed
chunks (60.4 / 22.4%). Rows of other sources (the CI sweeps of the database dump) keep SGLang's
defaults; their launch scripts (InferenceMAX ``benchmarks/dsr1_fp8_h200_slurm.sh``) pass no
``--enable-mixed-chunk``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import collection_file

#: aiconfigurator's generator: ``max_prefill_tokens = isl + 1500`` for aggregated SGLang workers
GENERATOR_PREFILL_EXTRA_TOKENS = 1500
#: first SGLang version whose generator template passes ``--enable-mixed-chunk``
GENERATOR_MIXED_CHUNK_FROM = (0, 5, 6)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def generator_mixed_chunk(row: Mapping[str, Any]) -> bool:
    """True when the row's SGLang server ran with ``--enable-mixed-chunk`` (aiconfigurator's generator,
    version with the flag in its template)."""
    source = collection_file(row)
    return source is not None and source[0] == "sglang" and _version(source[1]) >= GENERATOR_MIXED_CHUNK_FROM


def generator_max_prefill_tokens(isl: int) -> int:
    """``--max-prefill-tokens`` the generator passes for a run of ``isl``-token prompts."""
    return isl + GENERATOR_PREFILL_EXTRA_TOKENS

"""TensorRT-LLM settings of the InferenceX sweep runs of Llama-3.1-70B on H200 (launch script).

The TensorRT-LLM Llama-3.1-70B rows of the database dump (``source_file=2026-04-06.csv``,
``measured=2025-10-29``, no engine version recorded) are InferenceMAX/InferenceX sweep runs
(:func:`llmplan.calibration.benchmark_clients.length_range_ratio` < 1: isl/osl 1k/1k, 1k/8k, 8k/1k,
concurrency 4-128). InferenceX launched them with ``benchmarks/70b_fp8_h200_trt_slurm.sh``
(SemiAnalysisAI/InferenceX, identical from 1b563c85 of 2025-09-18, "Update 70B TRT To use latest
container and flags", to 9596d23d of 2025-10-29, the last version before the Llama-70B scripts were
removed on 2025-10-31; image ``nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2``,
``.github/workflows/70b-tmpl.yml``)::

    trtllm-serve $MODEL --tp_size $TP --max_seq_len $MAX_MODEL_LEN --max_num_tokens 16384 ...

with an extra-options file that, "for 1k/1k" (``ISL == 1024 && OSL == 1024 && TP < 8``), adds
``batch_wait_max_tokens_ratio: 0.9`` and ``batch_wait_timeout_iters: 20`` ("will improve the
performance, by default they are all zeros"); every run also sets CUDA-graph padding up to batch
1,024, an fp8 KV cache, no block reuse and ``stream_interval: 10`` (not modelled here: the first
token is always streamed at once, ``py_decoding_iter == 1`` in ``PyExecutor._handle_responses``).

What it changes in the replay (:mod:`llmplan.sim.trtllm_batch_wait`): with 0.9 x 16,384 = 14,746
tokens, fewer than ~14 waiting 1k prompts never reach the token threshold, so at N = 4-64 a prompt
that arrives while others decode waits up to 20 decode steps. The measured 1k/1k TTFT at TP 1-4
is 2.3-3.2x the 1k/8k TTFT at the same N (TP 1, N = 4: 562 against 176 ms, TPOT 20 ms: +386 ms
~ 19 steps; TP 2: 340 / 110 ms, TPOT 12 ms; TP 4: 230 / 98 ms, TPOT 8 ms), and at TP 8, where
the script leaves batch waiting off, it is not (69 against 91 ms). ``max_num_tokens`` 16,384
replaces the replay's 8,192 default for all three shapes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import length_range_ratio
from llmplan.sim.types import EngineProfile

#: ``--max_num_tokens`` of the InferenceX 70B TensorRT-LLM launch
SCRIPT_MAX_NUM_TOKENS = 16384
#: the script's batch-waiting options for 1k/1k at TP < 8
SCRIPT_BATCH_WAIT_TIMEOUT_ITERS = 20
SCRIPT_BATCH_WAIT_MAX_TOKENS_RATIO = 0.9
#: (model, GPU) of the rows that script launched
SCRIPT_ROWS = frozenset({("meta-llama/llama-3.1-70b", "h200_sxm")})


def _text(row: Mapping[str, Any], key: str) -> str:
    return str(row.get(key) or "").strip().lower()


def inferencex_llama70b_row(row: Mapping[str, Any], isl: int, osl: int) -> bool:
    """True for a TensorRT-LLM Llama-3.1-70B H200 sweep row (the InferenceX client's lengths)."""
    if _text(row, "backend") != "trtllm":
        return False
    if (_text(row, "model_path"), _text(row, "system")) not in SCRIPT_ROWS:
        return False
    return length_range_ratio(row, isl, osl) < 1.0


def sweep_engine(row: Mapping[str, Any], isl: int, osl: int, tp: int, engine: EngineProfile,
                 dp: int = 1) -> EngineProfile:
    """``engine`` with the launch script's settings for the row, or unchanged for other rows."""
    if not inferencex_llama70b_row(row, isl, osl):
        return engine
    tokens = max(SCRIPT_MAX_NUM_TOKENS * dp, engine.max_num_seqs)
    if (isl, osl) == (1024, 1024) and tp < 8:
        return replace(engine, max_num_batched_tokens=tokens,
                       batch_wait_timeout_iters=SCRIPT_BATCH_WAIT_TIMEOUT_ITERS,
                       batch_wait_max_tokens_ratio=SCRIPT_BATCH_WAIT_MAX_TOKENS_RATIO)
    return replace(engine, max_num_batched_tokens=tokens)

"""TensorRT-LLM engine settings of the measured collection runs that differ from the engine's defaults.

The per-engine-version collection rows (``source_file=.../data/<gpu>/trtllm/<version>/<model>.csv``,
:func:`llmplan.calibration.benchmark_clients.collection_file`) were launched by aiconfigurator's
automation harness, as the SGLang ones (:mod:`llmplan.calibration.sglang_launch`). Every version of
its TensorRT-LLM aggregated-worker settings sets the step's token budget from the prompt length:

* the eval harness that launched the 2025 runs (``src/aiconfigurator/cli/backends/trtllm.py``, since
  commit efcae124 of 2025-08-11, unchanged in 961028348 of 2025-08-22, "feat: automation eval"):
  ``agg_config["max_num_tokens"] = agg_config["bs"] + cfg_cfg.isl + 1500`` ("we're assuming no chunked
  prefill"), ``bs`` being the worker's batch size (the row's ``batch_size``), CUDA graphs for every
  batch 1..bs and the overlap scheduler on;
* the generator that replaced it (``src/aiconfigurator/generator/rule_plugin/trtllm.rule``, commit
  95ddf241 of 2025-12-04, and ``rule_plugin/benchmark/trtllm.rule`` from 71bb3d00 of 2026-01-30, up to
  095f58a5 of 2026-08-21): ``agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500``, rounded up
  to a multiple of ``tokens_per_block`` only since 1b41ea1b of 2026-01-29 (at most 31 tokens more; not
  applied here: the 1.0.0rc3 runs predate it).

Neither sets ``enable_chunked_prefill``, and the TensorRT-LLM templates render it with
``default(false)`` (``backend_templates/trtllm/extra_engine_args.1.0.0rc3.yaml.j2``).

What it changes: TensorRT-LLM without chunked prefill schedules a context request only when its
whole prompt fits in what is left of ``max_num_tokens`` after the step's generation tokens
(``MicroBatchScheduler``; "Tuning Max Batch Size and Max Num Tokens",
https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/tuning-max-batch-size-and-max-num-tokens.html,
1.0). With the engine default of 8,192 tokens, up to seven 1,024-token prompts or three 2,048-token
prompts of clients that arrive together share one step; with ``batch + isl + 1500`` at most
``1 + floor(1500 / isl)`` do: two prompts of 1,024 tokens, one of 2,048 or 4,096, twelve of 128.
So prompts that arrive together are prefilled in more, smaller steps: the first of them gets its
first token sooner, the last one later, and short prompts share fewer steps.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import collection_file

#: aiconfigurator's harness: ``max_num_tokens = bs + isl + 1500`` (cli/backends/trtllm.py, trtllm.rule)
GENERATOR_EXTRA_TOKENS = 1500


def generator_launch(row: Mapping[str, Any]) -> bool:
    """True when the row is a TensorRT-LLM collection run (launched by aiconfigurator's harness)."""
    source = collection_file(row)
    return source is not None and source[0] == "trtllm"


def generator_max_num_tokens(isl: int, max_batch_size: int) -> int:
    """``max_num_tokens`` the harness sets for an aggregated worker serving ``isl``-token prompts
    with ``max_batch_size`` sequences: ``max_batch_size + isl + 1500``."""
    if isl < 1 or max_batch_size < 1:
        raise ValueError(f"isl ({isl}) and max_batch_size ({max_batch_size}) must be >= 1")
    return max_batch_size + isl + GENERATOR_EXTRA_TOKENS

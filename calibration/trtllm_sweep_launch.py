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

**DeepSeek-R1-0528 FP8 on H200** (the rows labelled ``deepseek-ai/DeepSeek-R1`` or ``-V3``,
TensorRT-LLM, measured 2025-11-02 to 2026-01-28, image ``release:1.1.0rc2.post2``): InferenceX's
``benchmarks/dsr1_fp8_h200_trt_slurm.sh`` (the same budget line from ec90f3fe, 2025-09-18, through
008b91a9, 2026-01-14; ``.github/workflows/dsr1-tmpl.yml`` then ``.github/configs/nvidia-master.yaml``,
``dsr1-fp8-h200-trt``: TP 8, EP 8) launches::

    MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 ))
    trtllm-serve ... --max_num_tokens=$MAX_NUM_TOKENS --tp_size=$TP --ep_size=$EP_SIZE ...

i.e. a budget of one whole prompt plus the N decodes: TensorRT-LLM's micro-batch scheduler (no
chunked prefill, the PyTorch backend's default) then prefills **one prompt per step** (the replay's
8,192 default admitted up to seven 1k prompts together). The MTP variant of the script
(``dsr1_fp8_h200_trt_mtp_slurm.sh``: ``((MTP+1) x MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64``) also
admits one prompt per step; the rows do not say which variant ran, and MTP itself is not replayed.
Not mapped, tried: the gpt-oss-120b H200 sweep rows' ``--max_num_tokens 20000``
(``gptoss_fp4_h200_trt_slurm.sh``, every version 2025-09-19 to 2026-01-12): refitted together with
this budget, the training-half median APE of TTFT went 18.6 -> 19.7% (docs/ACCURACY.md, "TensorRT-LLM
launch budgets (session 10)"), as in session 9's trial without a refit.
Same script, not modelled: ``attention_dp_config`` (``enable_balance: true``, ``timeout_iters: 60``)
of its attention-DP runs, CUDA-graph padding up to batch 128, ``stream_interval: 10``.
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
#: (model, GPU) of the rows of InferenceX's ``dsr1_fp8_h200_trt_slurm.sh`` (DeepSeek-R1-0528; the
#: database labels the same runs R1 or V3)
DSR1_SCRIPT_ROWS = frozenset({("deepseek-ai/deepseek-r1", "h200_sxm"), ("deepseek-ai/deepseek-v3", "h200_sxm")})
#: that script's ``--max_num_tokens`` is ``CONC + ISL + 64`` rounded up to a multiple of 64
DSR1_BUDGET_SLACK_TOKENS = 64
DSR1_BUDGET_ROUND_TOKENS = 64


def dsr1_max_num_tokens(isl: int, concurrency: int) -> int:
    """``--max_num_tokens`` of InferenceX's DeepSeek-R1 FP8 H200 TensorRT-LLM launch:
    ``(CONC + ISL + 64 + 63) / 64 x 64`` (integer division), per attention-DP rank."""
    r = DSR1_BUDGET_ROUND_TOKENS
    return (concurrency + isl + DSR1_BUDGET_SLACK_TOKENS + r - 1) // r * r


def _text(row: Mapping[str, Any], key: str) -> str:
    return str(row.get(key) or "").strip().lower()


def _sweep_row(row: Mapping[str, Any], isl: int, osl: int, script_rows: frozenset) -> bool:
    """A TensorRT-LLM sweep row (the InferenceX client's lengths) of one of ``script_rows``'
    (model, GPU) pairs."""
    return (_text(row, "backend") == "trtllm" and (_text(row, "model_path"), _text(row, "system")) in script_rows
            and length_range_ratio(row, isl, osl) < 1.0)


def inferencex_llama70b_row(row: Mapping[str, Any], isl: int, osl: int) -> bool:
    """True for a TensorRT-LLM Llama-3.1-70B H200 sweep row (the InferenceX client's lengths)."""
    return _sweep_row(row, isl, osl, SCRIPT_ROWS)


def inferencex_dsr1_fp8_row(row: Mapping[str, Any], isl: int, osl: int) -> bool:
    """True for a TensorRT-LLM DeepSeek-R1/V3 FP8 H200 sweep row (the InferenceX client's lengths)."""
    return _text(row, "precision") in ("", "fp8") and _sweep_row(row, isl, osl, DSR1_SCRIPT_ROWS)


def script_sets_budget(backend: str, model_path: str, gpu_key: str, length_ratio: float) -> bool:
    """True when a replayed case's token budget is the DeepSeek launch script's (:func:`dsr1_max_num_tokens`):
    the replay then keeps it as launched instead of raising it to ``isl + longest output + N``
    (that script sized it for one whole prompt next to the N decodes; no request is ever evicted and
    recomputed under TensorRT-LLM's default ``GUARANTEED_NO_EVICT``)."""
    return (backend.strip().lower() == "trtllm" and length_ratio < 1.0
            and (model_path.strip().lower(), gpu_key.strip().lower()) in DSR1_SCRIPT_ROWS)


def sweep_engine(row: Mapping[str, Any], isl: int, osl: int, tp: int, engine: EngineProfile,
                 dp: int = 1, concurrency: int | None = None) -> EngineProfile:
    """``engine`` with the launch script's settings for the row, or unchanged for other rows.
    ``concurrency``: the row's client concurrency (the DeepSeek script's budget uses it; default
    the engine's ``max_num_seqs``)."""
    if inferencex_dsr1_fp8_row(row, isl, osl):
        conc = concurrency if concurrency is not None else engine.max_num_seqs
        tokens = max(dsr1_max_num_tokens(isl, conc) * max(1, dp), engine.max_num_seqs)
        return replace(engine, max_num_batched_tokens=tokens)
    if not inferencex_llama70b_row(row, isl, osl):
        return engine
    tokens = max(SCRIPT_MAX_NUM_TOKENS * dp, engine.max_num_seqs)
    if (isl, osl) == (1024, 1024) and tp < 8:
        return replace(engine, max_num_batched_tokens=tokens,
                       batch_wait_timeout_iters=SCRIPT_BATCH_WAIT_TIMEOUT_ITERS,
                       batch_wait_max_tokens_ratio=SCRIPT_BATCH_WAIT_MAX_TOKENS_RATIO)
    return replace(engine, max_num_batched_tokens=tokens)

"""SGLang prefill budget of the InferenceX sweep runs (the launch scripts behind the SGLang sweep rows).

The SGLang sweep rows of the database dump (``source_file=2026-03-25.csv`` / ``db-dump/2026-04-27``,
measured 2026-03-25, the InferenceX client: :mod:`calibration.benchmark_clients`) were launched by
SemiAnalysisAI/InferenceX's single-node scripts, which set SGLang's prefill budget explicitly:

* **DeepSeek-R1 / DeepSeek-V3 fp8 on H200** (``benchmarks/single_node/dsr1_fp8_h200.sh``; the same
  flags in every version from b0c4ed21 of 2026-01-22 to 1b234994 of 2026-06-02, i.e. the rows' date):
  ``--chunked-prefill-size 32768 --max-prefill-tokens 32768`` (also ``--attention-backend flashinfer
  --disable-radix-cache --stream-interval 10 --mem-fraction-static 0.82``, ``--max-running-requests``
  / ``--cuda-graph-max-bs`` 512 for 1k/1k and 256 otherwise). A prefill batch takes up to 32,768
  tokens, i.e. four 8k prompts, where SGLang's default on H200 is ``min(8192, 16384)``.
* **Qwen3.5-397B-A17B fp8 on H200** (``benchmarks/single_node/qwen3.5_fp8_h200.sh``, from f65d6b4b of
  2026-03-04 on): ``--chunked-prefill-size 16384`` with ``max_prefill_tokens`` at its 16,384 default,
  so 16,384 tokens per prefill batch (also ``--kv-cache-dtype fp8_e4m3``, not replayed here: an fp8
  cache changes the attention kernels, which the SGLang tables do not give for this model;
  ``--max-running-requests 128`` and ``--cuda-graph-max-bs $CONC``, which do not bind at N <= 64; and
  ``--enable-flashinfer-allreduce-fusion``, which does nothing for this model in SGLang 0.5.9: its
  layers normalise with ``GemmaRMSNorm``, which has no ``forward_with_allreduce_fusion``, and
  ``LayerCommunicator`` fuses only a norm that has it, ``layers/communicator.py`` / ``layers/layernorm.py``
  of the 0.5.9 wheel).
* **GLM-5 fp8 on H200** (``glm5_fp8_h200.sh``): no prefill flags; SGLang's defaults apply.

**Memory fraction.** Each script also passes ``--mem-fraction-static`` (DeepSeek-R1/V3 0.82, Qwen3.5
0.8, GLM-5 0.85; the same values at 41aff0af of 2026-03-06 and 626932a1 of 2026-03-27, around the
rows' date) where SGLang's own rule gives 0.897 at TP 8 on H200
(:func:`llmplan.sim.kv_budget.sglang_default_fraction`). The fraction is (weights + KV pool) / device
memory, so the pool is smaller than the replay assumed: DeepSeek-V3 TP 8 keeps about 40 of 51 GB for
its KV cache (MLA: every rank holds the whole latent cache). :func:`inferencex_mem_fraction` gives the
value; the row's engine profile carries it as ``mem_fraction_static`` (``calibration.serving_rows.map_row``),
so the KV capacity, the admission of the replay and the ``admission-limited`` flag follow it.

SGLang's prefill batch is ``min(chunked_prefill_size, max_prefill_tokens)`` tokens
(``PrefillAdder``: ``rem_chunk_tokens`` and ``rem_input_tokens``; :mod:`llmplan.sim.sglang_scheduling`),
so the budget below replaces the default chunk in the prefill-first replay
(:func:`llmplan.sim.sglang_scheduling.replay_engine`). Only rows that are InferenceX sweep rows
(client lengths drawn in ``[0.8 L, L]``), on H200, of these models, take it.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import length_range_ratio

#: GPU the scripts below are for (``*_h200.sh``)
INFERENCEX_GPU = "h200_sxm"
#: prefill tokens per batch, ``min(--chunked-prefill-size, --max-prefill-tokens)``, by model (the
#: lower-case name after the organisation in the row's model path, an ``-fp8`` suffix dropped)
INFERENCEX_PREFILL_TOKENS: tuple[tuple[str, int], ...] = (
    ("deepseek-r1", 32768),        # dsr1_fp8_h200.sh: 32768 / 32768
    ("deepseek-v3", 32768),        # the same runs, labelled DeepSeek-V3 in the 2026-04-27 dump
    ("qwen3.5-397b-a17b", 16384),  # qwen3.5_fp8_h200.sh: 16384 / default 16384
)


#: ``--mem-fraction-static`` of the same scripts, by model family (as above)
INFERENCEX_MEM_FRACTION: tuple[tuple[str, float], ...] = (
    ("deepseek-r1", 0.82),         # dsr1_fp8_h200.sh
    ("deepseek-v3", 0.82),
    ("qwen3.5-397b-a17b", 0.8),    # qwen3.5_fp8_h200.sh
    ("glm-5", 0.85),               # glm5_fp8_h200.sh
)


#: models whose script passes ``--disable-radix-cache`` (dsr1_fp8_h200.sh in both launch branches,
#: qwen3.5_fp8_h200.sh; glm5_fp8_h200.sh does not, 626932a1 of 2026-03-27); the client always sends
#: ``--ignore-eos`` (benchmarks/benchmark_lib.sh ``run_benchmark_serving``), so SGLang admits these
#: runs by ``PrefillAdder.add_one_req_ignore_eos`` (:mod:`llmplan.sim.sglang_admission`)
INFERENCEX_RADIX_CACHE_OFF: frozenset[str] = frozenset({"deepseek-r1", "deepseek-v3", "qwen3.5-397b-a17b"})


def _inferencex_row(row: Mapping[str, Any], isl: int, osl: int) -> str | None:
    """The row's model name (lower case, organisation and an ``-fp8`` suffix dropped) when it is an
    aggregated SGLang InferenceX sweep run on H200, else None."""
    if str(row.get("backend") or "").strip().lower() != "sglang":
        return None
    if str(row.get("system") or "").strip().lower() != INFERENCEX_GPU:
        return None
    if str(row.get("mode") or "agg").strip().lower() != "agg":   # the scripts launch one aggregated server
        return None
    if length_range_ratio(row, isl, osl) >= 1.0:   # not a sweep row of the InferenceX client
        return None
    name = str(row.get("model_path") or "").strip().lower().rsplit("/", 1)[-1]
    return name[:-4] if name.endswith("-fp8") else name


def inferencex_mem_fraction(row: Mapping[str, Any], isl: int, osl: int) -> float | None:
    """``--mem-fraction-static`` of the row's InferenceX launch script; None when the row is not such
    a run and SGLang's default rule applies."""
    model = _inferencex_row(row, isl, osl)
    if model is None:
        return None
    return dict(INFERENCEX_MEM_FRACTION).get(model)


def inferencex_prefill_tokens(row: Mapping[str, Any], isl: int, osl: int) -> int:
    """Tokens of one SGLang prefill batch set by the row's InferenceX launch script; 0 when the
    row is not such a run (another engine, GPU, model or source) and SGLang's default applies."""
    model = _inferencex_row(row, isl, osl)
    if model is None:
        return 0
    return dict(INFERENCEX_PREFILL_TOKENS).get(model, 0)


def inferencex_radix_cache_off(row: Mapping[str, Any], isl: int, osl: int) -> bool:
    """True when the row's InferenceX launch script disables SGLang's radix (prefix) cache."""
    return _inferencex_row(row, isl, osl) in INFERENCEX_RADIX_CACHE_OFF

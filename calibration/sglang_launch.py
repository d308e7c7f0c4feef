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

**CUDA graphs for every batch up to N.** The same rule captures a graph for every decode batch from 1
to the worker's ``max_batch_size`` (``agg_prefill_decode cuda_graph_batch_sizes = range(1,
max_batch_size + 1)``; in ``rule_plugin/sglang.rule`` since the generator's SGLang support, commit
95ddf241 of 2025-12-04, PR #144, and in ``rule_plugin/benchmark/sglang.rule`` from 71bb3d00 of
2026-01-30, PR #290, unchanged at 095f58a5 of 2026-08-21), ``max_batch_size`` being the row's batch size
(the rule keeps it, also as ``--max-running-requests``), and every SGLang template, 0.5.1.post1 included,
passes it as ``--cuda-graph-bs`` (``backend_config_mapping.yaml``: ``cuda_graph_batch_sizes`` ->
``cuda-graph-bs``). SGLang captures exactly the listed sizes, clipped to the request pool
(``cuda_graph_runner.get_batch_sizes_to_capture``: ``capture_bs = server_args.cuda_graph_bs``, v0.5.x),
and replays a decode batch up to the largest: so no decode batch of these runs is padded or eager,
where SGLang's default list (:func:`llmplan.sim.cuda_graphs.capture_sizes`) stops at 256 below TP4 on
H100/H200 and pads to multiples of 8. Applies to every generator version (the flag is in every
template); only the Llama-3.1-8B 0.5.6.post2 runs at TP1/TP2 with N > 256 have decode batches beyond
the default capture.

**FlashInfer AllReduce + RMSNorm fusion from SGLang 0.5.7** (:func:`allreduce_rms_fusion`): ``ServerArgs``
turns ``enable_flashinfer_allreduce_fusion`` on by default on SM90 / SM100 for DeepSeek-V3, gpt-oss,
GLM-4-MoE and Qwen3-MoE since sgl-project/sglang PR #14764 (merged 2025-12-10); 0.5.7 is the first
release after it (which models, GPUs, layouts and step sizes: sim/sglang_allreduce_rms.py). A version
that is not a release number (``glm5-hopper``) does not take it.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import collection_file, generator_agg_row
from llmplan.calibration.engine_versions import at_least

#: aiconfigurator's generator: ``max_prefill_tokens = isl + 1500`` for aggregated SGLang workers
GENERATOR_PREFILL_EXTRA_TOKENS = 1500
#: first SGLang version whose generator template passes ``--enable-mixed-chunk``
GENERATOR_MIXED_CHUNK_FROM = (0, 5, 6)
#: first SGLang release whose ServerArgs enable the FlashInfer AllReduce + RMSNorm fusion on SM90 (PR #14764)
ALLREDUCE_RMS_FUSION_FROM = (0, 5, 7)


def generator_mixed_chunk(row: Mapping[str, Any]) -> bool:
    """True when the row's SGLang server ran with ``--enable-mixed-chunk`` (aiconfigurator's generator,
    version with the flag in its template)."""
    source = collection_file(row)
    return source is not None and source[0] == "sglang" and at_least(source[1], GENERATOR_MIXED_CHUNK_FROM)


def generator_max_prefill_tokens(isl: int) -> int:
    """``--max-prefill-tokens`` the generator passes for a run of ``isl``-token prompts."""
    return isl + GENERATOR_PREFILL_EXTRA_TOKENS


def generator_cuda_graph_every_batch(row: Mapping[str, Any]) -> bool:
    """True when the row's SGLang server captured a CUDA graph for every decode batch from 1 to its
    ``max_batch_size`` (aiconfigurator's generator, every version: ``--cuda-graph-bs 1 2 ... bs``)."""
    source = collection_file(row)
    return source is not None and source[0] == "sglang"


def dynamo_frontend_row(row: Mapping[str, Any]) -> bool:
    """True for a row served behind Dynamo's front end with SGLang's per-token stream: the aggregated
    SGLang rows of aiconfigurator's generator (``dynamo.frontend`` + ``dynamo.sglang``,
    ``--stream-interval`` at its default 1; :func:`generator_mixed_chunk` for the templates). Their steps are bounded by the front
    end's per-token time (sim/frontend_ceiling.py, fitted in calibration.engine_fit). The vLLM and
    TensorRT-LLM generator rows are not included: their delivered rates grow with TP (vLLM Qwen3-32B
    H100 N = 128: up to 3.3 / 4.9 / 5.9k tokens/s at TP 2 / 4 / 8), or are flat only at one shape
    (TensorRT-LLM Llama-3.1-8B H100 1.0.0rc3, N = 128, 1k/512: 9.2k at TP 2-8) and a TensorRT-LLM fit
    with its generator rows tagged does not identify a per-token time; Dynamo's worker for them is
    another Python handler (docs/ACCURACY.md, session 11)."""
    return generator_agg_row(row, "sglang")


def allreduce_rms_fusion(version: str | None) -> bool:
    """Whether the SGLang release ``version`` (the row's ``backend_version``) enables the FlashInfer
    AllReduce + RMSNorm fusion by default on Hopper for the models of
    :data:`llmplan.sim.sglang_allreduce_rms.AUTO_ARCHITECTURES`; False for a non-release build."""
    return at_least(str(version or "").strip(), ALLREDUCE_RMS_FUSION_FROM)

"""vLLM server flags of the measured runs that differ from vLLM's defaults.

**gpt-oss on Hopper captures CUDA graphs up to 2,048 tokens.** vLLM's recipe for gpt-oss on
Hopper sets ``max-cudagraph-capture-size: 2048`` (with ``max-num-batched-tokens: 8192`` and
``no-enable-prefix-caching``; vLLM recipes, OpenAI/GPT-OSS.md, "GPT-OSS_Hopper.yaml",
https://docs.vllm.ai/projects/recipes/en/latest/OpenAI/GPT-OSS.html), and the InferenceX launch
scripts that produced the gpt-oss-120b sweep rows write the same into their ``config.yaml``
(SemiAnalysisAI/InferenceX ``benchmarks/single_node/gptoss_fp4_h100.sh`` and
``gptoss_fp4_h200.sh``, read at 626932a1 of 2026-03-27, the v0.18.0 image update, and at 34bc7c40;
``--max-num-seqs $CONC``). vLLM captures piecewise graphs (attention outside) for every step of up
to ``max_cudagraph_capture_size`` tokens (``CompilationConfig.cudagraph_capture_sizes``:
``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``; by default ``max = min(2 x max_num_seqs,
512)``, https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config/compilation.py): so a step
carrying one 1,024-token prompt replays a graph in these runs, where vLLM's default at
``max_num_seqs = 4`` (captures up to 8 tokens) runs it eagerly. The replay used the default and
charged every such step the eager launch term (``sim/engine_terms.py``): 23.1 of the 36.3 ms of a
one-prompt step at TP 8 (docs/ACCURACY.md, "vLLM and SGLang TTFT (2026-11-24, session 6)").

Which rows: the sweep rows of the database dump (InferenceMAX/InferenceX client,
:func:`calibration.benchmark_clients.length_range_ratio` < 1) of ``openai/gpt-oss-*`` served by vLLM
on H100/H200. The same scripts set ``VLLM_MXFP4_USE_MARLIN=1`` (:func:`mxfp4_marlin`, below).
Other InferenceX vLLM launches of these rows leave the capture size at vLLM's default (Kimi-K2.5
``kimik2.5_int4_h200.sh``; MiniMax-M2.5 ``minimaxm2.5_fp8_h100.sh`` passes
``--max-num-seqs 256`` with ``cudagraph_mode PIECEWISE``, whose steps of 2N-512 tokens are not
modelled either).

**AllReduce + RMSNorm fusion from vLLM 0.18** (:func:`allreduce_rms_fusion`): the default ``-O2``
level fuses each TP all-reduce with the residual add + RMSNorm that follows it on Hopper and
Blackwell ("O2 (Hopper/Blackwell + TP > 1)", vLLM's fusion table of v0.18.x,
https://docs.vllm.ai/en/v0.18.2/design/fusions/), while the ``-O2`` preset of v0.12.0-v0.14.1 has
``"fuse_allreduce_rms": False`` (https://docs.vllm.ai/en/v0.14.1/api/vllm/config/vllm/). The release
in between that switched it on was not established, so rows of 0.15-0.17 keep the unfused step, as
do rows without a version. The step model applies the fusion's own conditions (GPU, TP/DP/PP,
step size: sim/vllm_allreduce_rms.py).

**No data parallelism in the InferenceX vLLM launches** (:func:`runs_data_parallel`). The
single-node vLLM scripts behind the sweep rows (``gptoss_fp4_h100.sh`` / ``_h200.sh``,
``minimaxm2.5_fp8_h100.sh`` / ``_h200.sh``, ``kimik2.5_int4_h200.sh`` at 626932a1, the v0.18.0 image
update) start ``vllm serve --tensor-parallel-size=$TP`` with ``--enable-expert-parallel`` at most:
none passes ``--data-parallel-size``, and the master config lists MiniMax-M2.5 on H100 as
``{ tp: 4, ep: 4 }`` only (``.github/configs/nvidia-master.yaml``, 2026-03-27 to 2026-04-09). vLLM
runs attention data-parallel only with ``--data-parallel-size`` > 1
(https://docs.vllm.ai/en/v0.12.0/serving/data_parallel_deployment/), so these runs had none. One
export (``source_file=2026-04-06.csv``, 15 MiniMax-M2.5 H100 rows, ids ``..._tp4_ep4_<n>``) wrote
``attention_dp_size`` 4 and ``moe_ep_size`` 16 for that ``tp 4, ep 4`` launch (its sibling export
``2026-03-25.csv`` of the same launch writes ``attention_dp_size`` 1, ``moe_ep_size`` 4); the layout
the id names is kept (``calibration.serving_rows.id_layout``), without the attention DP.

**gpt-oss's MXFP4 experts on Marlin in the v0.18.0 launches** (:func:`mxfp4_marlin`). InferenceX's
gpt-oss vLLM scripts of the v0.18.0 image (``benchmarks/single_node/gptoss_fp4_h100.sh`` and
``gptoss_fp4_h200.sh`` at 626932a1, 2026-03-27, the measurement date of the 0.18.0 rows) export
``VLLM_MXFP4_USE_MARLIN=1``, and vLLM's ``get_mxfp4_backend`` returns ``Mxfp4Backend.MARLIN``
whenever it is set (vllm ``model_executor/layers/quantization/mxfp4.py``), where SM90's default is
OpenAI's ``triton_kernels`` path. The launches of the older rows did not set it: the scripts the
2025-11-02 rows ran (``gptoss_fp4_h200_slurm.sh`` at 69844b2e, image v0.10.2) and the 2025-12-08
0.11.2 rows (``gptoss_fp4_h100_docker.sh`` at 4e135fd3) export no ``VLLM_MXFP4_USE_MARLIN``; the
variable came and went in those scripts between 2025-12-10 and 2026-02-26, and is present in every
revision of the single-node scripts from 2026-03-06 to 2026-05-20. So the rule is: gpt-oss sweep
rows of vLLM >= 0.18 on H100/H200. The Marlin time comes from the measured Marlin MXFP4 table at
another expert shape (sim/vllm_marlin_mxfp4.py). The planner's vLLM profile keeps vLLM's default
(triton).
"""

from __future__ import annotations

from typing import Any, Mapping

from llmplan.calibration.benchmark_clients import length_range_ratio
from llmplan.calibration.engine_versions import at_least

#: ``max-cudagraph-capture-size`` of vLLM's gpt-oss Hopper recipe and of InferenceX's gpt-oss launches
GPTOSS_HOPPER_MAX_CAPTURE = 2048
#: GPUs the recipe's Hopper configuration covers (llmplan catalog keys)
HOPPER = frozenset({"h100_sxm", "h200_sxm"})
#: first vLLM release whose default -O2 level runs the AllReduce + RMSNorm fusion (documented for 0.18.x)
ALLREDUCE_RMS_FUSION_FROM = (0, 18)
#: first vLLM release of the InferenceX gpt-oss launches that export VLLM_MXFP4_USE_MARLIN=1 (the v0.18.0 image)
MXFP4_MARLIN_FROM = (0, 18)


def max_capture_tokens(row: Mapping[str, Any], isl: int, osl: int) -> int:
    """vLLM's ``max_cudagraph_capture_size`` of the launch that produced the row, where it is not
    vLLM's default; 0 = the default (``min(2 x max_num_seqs, 512)``)."""
    if str(row.get("backend") or "").strip().lower() != "vllm":
        return 0
    model = str(row.get("model_path") or "").strip().lower()
    if not model.startswith("openai/gpt-oss-"):
        return 0
    if str(row.get("system") or "").strip().lower() not in HOPPER:
        return 0
    if length_range_ratio(row, isl, osl) >= 1.0:   # not a sweep row of the InferenceX client
        return 0
    return GPTOSS_HOPPER_MAX_CAPTURE


def allreduce_rms_fusion(version: str) -> bool:
    """Whether the vLLM release ``version`` (the row's ``backend_version``) runs the AllReduce +
    RMSNorm fusion by default (module docstring); False for a version that is not a release number."""
    return at_least(str(version or "").strip(), ALLREDUCE_RMS_FUSION_FROM)


def runs_data_parallel(row: Mapping[str, Any]) -> bool:
    """Whether the launch behind the row can have run attention data-parallel: False for the
    sweep rows (:func:`calibration.benchmark_clients.length_range_ratio` < 1) of vLLM on
    H100/H200, whose InferenceX launches pass no ``--data-parallel-size`` (module docstring);
    True otherwise (the row's ``attention_dp_size`` stands)."""
    if str(row.get("backend") or "").strip().lower() != "vllm":
        return True
    if str(row.get("system") or "").strip().lower() not in HOPPER:
        return True
    try:
        isl, osl = int(float(row.get("isl") or 0)), int(float(row.get("osl") or 0))
    except (TypeError, ValueError):
        return True
    return length_range_ratio(row, isl, osl) >= 1.0


def mxfp4_marlin(model_path: str, gpu_key: str, version: str, length_ratio: float) -> bool:
    """Whether the launch behind a vLLM row ran gpt-oss's MXFP4 experts on Marlin
    (``VLLM_MXFP4_USE_MARLIN=1``, module docstring): gpt-oss sweep rows (the InferenceX client,
    ``length_ratio`` < 1) on H100/H200 of vLLM >= 0.18; False otherwise (vLLM's default kernel)."""
    if not str(model_path or "").strip().lower().startswith("openai/gpt-oss-"):
        return False
    if str(gpu_key or "").strip().lower() not in HOPPER or length_ratio >= 1.0:
        return False
    return at_least(str(version or "").strip(), MXFP4_MARLIN_FROM)

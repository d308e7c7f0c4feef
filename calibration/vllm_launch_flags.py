"""vLLM compilation flags that a served row's launch passes explicitly (beyond the version defaults
of :mod:`calibration.vllm_launch`).

**Kimi-K2.5 on H200 passes ``--compilation_config.pass_config.fuse_allreduce_rms true``.** The
InferenceX launch of the Kimi-K2.5 INT4 vLLM sweep rows (``benchmarks/single_node/kimik2.5_int4_h200.sh``,
SemiAnalysisAI/InferenceX 749096c4c of 2026-03-02, the first revision that ran, through 626932a11 of
2026-03-27; image ``vllm/vllm-openai:v0.16.0``, ``{ tp: 8 }``) starts ``vllm serve ... --tensor-parallel-size
$TP --max-num-seqs $CONC --compilation_config.pass_config.fuse_allreduce_rms true``, "following
https://docs.vllm.ai/projects/recipes/en/latest/moonshotai/Kimi-K2.5.html". Every measured Kimi-K2.5 vLLM
row is of that launch (``measured=2026-03-02T23:25:25Z`` and ``2026-03-27``, image v0.16.0). The flag turns
on, in a 0.16 release whose ``-O2`` preset leaves it off, the same FlashInfer AllReduce + RMSNorm fusion
that vLLM 0.18's ``-O2`` runs by default (:func:`calibration.vllm_launch.allreduce_rms_fusion`); the step
model applies the fusion's own conditions (GPU, TP/DP/PP, step size: ``sim/vllm_allreduce_rms.py``).
"""

from __future__ import annotations

from llmplan.calibration.vllm_launch import HOPPER

#: the model whose InferenceX vLLM launch passes fuse_allreduce_rms explicitly
KIMI_K25 = "moonshotai/kimi-k2.5"


def launch_fuses_allreduce_rms(model_path: str, gpu_key: str, length_ratio: float) -> bool:
    """Whether the launch behind a vLLM row passed ``pass_config.fuse_allreduce_rms true``: the Kimi-K2.5
    sweep rows (InferenceX client, ``length_ratio`` < 1) on H100/H200 (module docstring)."""
    if str(model_path or "").strip().lower() != KIMI_K25:
        return False
    return str(gpu_key or "").strip().lower() in HOPPER and length_ratio < 1.0


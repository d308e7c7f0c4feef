"""vLLM's AllReduce + RMSNorm fusion: the two RMSNorms of a layer run inside the TP all-reduce.

vLLM's compile pass ``fuse_allreduce_rms`` (``AllReduceFusedAddRMSNormPattern``,
vllm/compilation/passes/fusion/allreduce_rms_fusion.py) replaces each tensor-parallel all-reduce
that is followed by the residual add + RMSNorm (after attention's o_proj and after the MLP / MoE,
i.e. both norms of a layer) with FlashInfer's fused all-reduce + residual + RMSNorm kernel, so
the step runs no RMSNorm kernel of its own. When it is on:

* **Version.** The ``-O2`` default level turns it on "O2 (Hopper/Blackwell + TP > 1)" in vLLM's
  fusion table of v0.18.x (https://docs.vllm.ai/en/v0.18.2/design/fusions/); up to v0.14.1 the
  ``-O2`` preset had ``"fuse_allreduce_rms": False``
  (https://docs.vllm.ai/en/v0.14.1/api/vllm/config/vllm/, the same in v0.12.0). Which release in
  between switched it on was not established, so the replay applies it from 0.18 only
  (:func:`calibration.vllm_launch.allreduce_rms_fusion`).
* **GPU and layout.** ``enable_allreduce_rms_fusion``: TP > 1, CUDA compute capability 9.0 or
  10.x, FlashInfer installed, and (until vllm-project/vllm PR #41458, 2026-05-01, which
  re-enabled them) data parallel size 1 and pipeline parallel size 1 (issues #34458, #35426).
* **Step size.** Only for steps whose all-reduce input is at most
  ``FI_ALLREDUCE_FUSION_MAX_SIZE_MB[capability][tp]`` MiB (``{90: {2: 64, 4: 2, 8: 0.5},
  100: {2: 64, 4: 32, 8: 1}}``, https://docs.vllm.ai/en/v0.16.0/api/vllm/compilation/passes/
  fusion/allreduce_rms_fusion/), i.e. ``max_token_num = size // (hidden x 2 bytes)``; a TP size
  without an entry is not fused. On Hopper at TP 8 that is 85-91 tokens for hidden 2,880-3,072:
  decode batches, not 1k-token prompts ("num_tokens: Low" in the table).

The all-reduce itself keeps the kernel model's time (the fused kernel is an all-reduce with the
norm's arithmetic on the reduced tile); the two norm kernels per layer go, as TensorRT-LLM's
fused all-reduce does (sim/trtllm_fusions.py).
"""

from __future__ import annotations

MiB = 1024 * 1024
#: FlashInfer fused all-reduce size caps per compute capability and TP size (MiB), vLLM v0.16.0
FUSED_MAX_MB = {90: {2: 64.0, 4: 2.0, 8: 0.5}, 100: {2: 64.0, 4: 32.0, 8: 1.0}}
#: compute capability of the catalog GPUs (hardware_catalog keys) the fusion covers (Hopper 9.0, Blackwell 10.0)
CAPABILITY = {"h100_sxm": 90, "h200_sxm": 90, "b200": 100, "gb200": 100}


def fused_max_tokens(gpu_key: str, tp: int, dp: int, pp: int, hidden: int, act_bytes: float) -> int:
    """Largest step (token rows) whose all-reduces run fused with the RMSNorms; 0 = never
    (TP 1, another GPU, attention DP or pipeline stages, a TP size without a cap)."""
    if tp <= 1 or dp > 1 or pp > 1:
        return 0
    size_mb = FUSED_MAX_MB.get(CAPABILITY.get(gpu_key, 0), {}).get(tp)
    if not size_mb:
        return 0
    return int(size_mb * MiB // (hidden * act_bytes))

"""SGLang's FlashInfer AllReduce + RMSNorm fusion: both RMSNorms of a layer run inside the TP all-reduce.

With ``enable_flashinfer_allreduce_fusion`` on, SGLang's ``LayerCommunicator`` hands each tensor-parallel
all-reduce after attention's o_proj and after the MLP / MoE to the RMSNorm that follows it
(``RMSNorm.forward_with_allreduce_fusion`` -> FlashInfer's TensorRT-LLM all-reduce + residual add +
RMSNorm kernel), so the layer runs no RMSNorm kernel of its own. When it is on (sgl-project/sglang,
``python/sglang/srt/layers/communicator.py`` and ``server_args.py``):

* **Default for some architectures on Hopper, from SGLang 0.5.7.** ``ServerArgs`` switches the flag on
  for ``DeepseekV3ForCausalLM``, ``GptOssForCausalLM``, ``Glm4MoeForCausalLM`` and
  ``Qwen3MoeForCausalLM`` on SM90 or SM100, without DP attention, on one node, with
  ``moe_a2a_backend == "none"`` ("TRTLLM AllReduce Fusion supports SM90/100, enable it by default for
  models with explicit support (DeepseekV3, GptOss, Glm4Moe, Qwen3Moe)"): sgl-project/sglang PR #14764,
  "Enable TRT Allreduce Fusion by default for compatible models", merged 2025-12-10 ("It can work on
  SM90+", H200 DeepSeek-V3.1 TP 8 decode 16.2 ms -> 15.2-15.4 ms at batch 16). Before it the flag was
  a default only on SM100 (DeepSeek-V3, gpt-oss; PR #12724). The first release cut after the merge is
  0.5.7 (out by 2026-01-05, SemiAnalysisAI/InferenceX issue #385); whether 0.5.6.post2 carries it was
  not established, so the replay applies it from 0.5.7 (:func:`calibration.sglang_launch.
  allreduce_rms_fusion`). PR #23402 (2026-06) narrowed the default to SM10X and PR #28789 (2026-06-20)
  restored SM90; no measured row is of a release in that window.
* **Step size.** ``apply_flashinfer_allreduce_fusion(batch_size)``: ``0 < tokens <=
  FUSE_ALLREDUCE_MAX_BATCH_SIZE`` = 2,048 (``communicator.py``, v0.5.x), i.e. decode batches *and*
  steps of up to two 1k prompts (unlike vLLM's per-TP byte caps, sim/vllm_allreduce_rms.py).
* **Layout.** TP > 1 (no all-reduce otherwise), no attention DP (``not is_dp_attention_enabled()``),
  no pipeline stages and one node (``nnodes == 1``: at most :data:`NODE_GPUS` GPUs). SGLang also
  requires ``moe_a2a_backend == "none"``; the replay exchanges MoE tokens (sim/ep_comm.py) only under
  attention DP, which is already excluded, so EP inside the TP group (``--ep-size`` without DeepEP)
  stays fused.

The all-reduce keeps the kernel model's time (the fused kernel is the one-shot all-reduce with the
norm's arithmetic on the reduced tile); the two norm kernels per layer go, as in TensorRT-LLM's fused
all-reduce (sim/trtllm_fusions.py) and vLLM's pass.
"""

from __future__ import annotations

#: architectures whose SGLang ServerArgs turn the fusion on by default on SM90 / SM100 (PR #14764)
AUTO_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM",
                                "Qwen3MoeForCausalLM"})
#: ``communicator.FUSE_ALLREDUCE_MAX_BATCH_SIZE`` (tokens of one step), SGLang v0.5.x
FUSED_MAX_TOKENS = 2048
#: catalog GPUs (hardware_catalog keys) of compute capability 9.0 / 10.0 (``is_sm90_supported() or is_sm100_supported()``)
SM90_SM100 = frozenset({"h100_sxm", "h200_sxm", "b200", "gb200"})
#: GPUs of one HGX node (``nnodes == 1`` bound)
NODE_GPUS = 8


def fused_max_tokens(gpu_key: str, architecture: str, tp: int, dp: int, pp: int) -> int:
    """Largest step (tokens) whose all-reduces run fused with the RMSNorms under SGLang's default;
    0 = never (another architecture or GPU, TP 1, attention DP, pipeline stages, more than one node)."""
    if architecture not in AUTO_ARCHITECTURES or gpu_key not in SM90_SM100:
        return 0
    if tp <= 1 or dp > 1 or pp > 1 or tp > NODE_GPUS:
        return 0
    return FUSED_MAX_TOKENS

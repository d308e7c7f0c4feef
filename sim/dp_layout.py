"""Attention data parallelism: the share of one iteration that the busiest DP rank computes.

With attention DP a replica has ``dp`` ranks, each with its own scheduler batch and KV cache
(TensorRT-LLM ``enable_attention_dp``; SGLang ``--enable-dp-attention``; vLLM
``--data-parallel-size`` on a MoE model). Attention and the dense layers of a rank see only
its own sequences; the MoE layers see the tokens of all ranks. Ranks advance in lock-step:
every MoE layer is a collective over the whole group, so the iteration lasts as long as its
busiest rank (vLLM runs "dummy" forward passes on idle ranks for that reason:
https://docs.vllm.ai/en/v0.12.0/serving/data_parallel_deployment/).

The simulator keeps one scheduler per replica (batch limits and KV capacity summed over the
ranks) and assumes the engines' balancers spread sequences evenly (TensorRT-LLM's attention-DP
balancer; SGLang's and vLLM's round-robin / least-loaded DP routing). The busiest rank then
holds ``ceil(n / dp)`` of the ``n`` decoding sequences and ``ceil(p / dp)`` of the ``p``
prefill chunks (a single prompt is computed whole by one rank while the others decode).
"""

from __future__ import annotations

import math

from llmplan.sim.types import StepShape


def rank_shape(shape: StepShape, dp: int) -> StepShape:
    """The busiest rank's share of ``shape`` when its sequences are spread over ``dp`` ranks."""
    if dp <= 1:
        return shape
    p, d = shape.prefill_seqs, shape.decode_seqs
    p_r = -(-p // dp) if p else 0
    d_r = -(-d // dp) if d else 0
    f_p = p_r / p if p else 0.0
    f_d = d_r / d if d else 0.0
    return StepShape(prefill_tokens=int(math.ceil(shape.prefill_tokens * f_p)), prefill_seqs=p_r,
                     prefill_attn_pairs=shape.prefill_attn_pairs * f_p,
                     prefill_ctx_tokens=int(round(shape.prefill_ctx_tokens * f_p)),
                     decode_seqs=d_r, decode_kv_tokens=int(round(shape.decode_kv_tokens * f_d)))

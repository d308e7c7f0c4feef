"""Shared experts folded into the fused-MoE kernel (engine behaviour).

SGLang loads the one shared expert of DeepSeek-V3/R1 as an extra routed expert (index 256)
that every token selects: the fused-MoE kernel then runs top-(k + 1) over 257 experts and no
separate shared-expert MLP runs ("Shared experts fusion optimization enabled";
``DeepseekV2ForCausalLM.determine_num_fused_shared_experts``, python/sglang/srt/models/deepseek_v2.py,
SGLang 0.4.6-0.5.x). It is on by default (``--disable-shared-experts-fusion`` turns it off) for
``n_routed_experts == 256`` and ``n_shared_experts == 1`` on NVIDIA GPUs of capability >= 8.0,
and off under expert parallelism (EP > 1, DeepEP) and for checkpoints whose shared and routed
experts differ in format (``w4afp8``). Older releases also required the architecture
``DeepseekV3ForCausalLM``; the rule here keeps that condition (GLM-5 and Kimi-K2.x, served by
subclasses with their own gates, are not folded).

vLLM and TensorRT-LLM run the shared expert as its own MLP (dense GEMMs beside the routed
experts), which is what the step model does for them.
"""

from __future__ import annotations

from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.types import Parallelism

#: engines (kernel backends) that fold a DeepSeek-V3/R1 shared expert into the fused MoE
FUSING_ENGINES = frozenset({"sglang"})
FUSED_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM"})


def fused_shared_experts(backend: str, model: ModelSpec, par: Parallelism, routed_dtype: str,
                         shared_dtype: str) -> int:
    """Shared experts the engine runs inside its fused-MoE kernel as always-selected routed
    experts (0: it runs them as separate GEMMs)."""
    e = model.moe
    if backend not in FUSING_ENGINES or e is None or model.architecture not in FUSED_ARCHITECTURES:
        return 0
    if e.num_experts != 256 or e.num_shared_experts != 1 or par.ep > 1 or routed_dtype != shared_dtype:
        return 0
    return e.num_shared_experts

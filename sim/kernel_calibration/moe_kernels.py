"""Which fused-MoE kernel an engine runs: the kernel family of a measured row and of a query.

One dtype group of an engine's MoE table can hold rows of different kernels. aiconfigurator's
collectors (ai-dynamo/aiconfigurator, ``collector/sglang/collect_moe.py``,
``collector/vllm/collect_moe.py``) time each model case on the kernel the engine's serving path
selects for it and label the row's ``kernel_source`` with it. SGLang's choice is resolved by
``case_generator.get_sglang_moe_backend`` from ``collector/cases/base_ops/moe.yaml``
(``moe_sglang.backends``: per dtype and SM, e.g. ``bfloat16: {default: triton}``) and the model
case's own ``sglang_moe_backends`` (``collector/cases/models/*_cases.yaml``: e.g. the Nemotron-3
cases run FlashInfer CUTLASS on SM90/SM120, most SM100 cases FlashInfer TRT-LLM, the
compressed-tensors MXFP4 case Marlin), i.e. SGLang's ``--moe-runner-backend`` as its
``server_args`` picks it per model. The tables show it: H100 SGLang bf16 runs Triton for 15
expert configurations and FlashInfer CUTLASS for 3; H100 w4a16 mxfp4 runs Triton for gpt-oss and
Marlin for hidden 3,584 / 896 experts; vLLM's H100 fp8_block runs FlashInfer CUTLASS at EP > 1 and
Triton at EP 1; B200 vLLM/SGLang mix FlashInfer TRT-LLM, CUTLASS and Triton.

:func:`kernel_family` names the kernel a ``kernel_source`` label ran (the measured rows);
``calibration.fit`` fits a dtype group's rows of each family apart where the group mixes them
(:attr:`family_model.FamilyModel.kernel_groups`), and a query that names its kernel family is
answered by that family's model (:meth:`family_model.FamilyModel.resolve_group`). A query that
names none (``None``) is answered as before, by the whole dtype group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: kernel families (the fused-MoE implementations the tables time)
TRITON = "triton"                  # SGLang/vLLM fused_moe Triton kernels (and OpenAI triton_kernels)
FLASHINFER_CUTLASS = "flashinfer_cutlass"
FLASHINFER_TRTLLM = "flashinfer_trtllm"
MARLIN = "marlin"                  # weight-only Marlin MoE (int4 / mxfp4 weights, 16-bit activations)
TRTLLM_TORCH_FLOW = "trtllm"       # TensorRT-LLM's own MoE op (moe_torch_flow*: CUTLASS, or Triton fp8_block)
XPU = "xpu"
OTHER = "other"
FAMILIES = (TRITON, FLASHINFER_CUTLASS, FLASHINFER_TRTLLM, MARLIN, TRTLLM_TORCH_FLOW, XPU, OTHER)

#: substrings of ``kernel_source`` -> family, first match wins (order matters: the vLLM labels name
#: the quant method, then the backend, e.g. ``vllm_fp8moe_flashinfer_cutlass_flashinferexperts``,
#: ``vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts``,
#: ``vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic``; SGLang's ``source_by_backend``
#: in collect_moe.py: triton -> ``sglang_fused_moe_triton``, marlin -> ``sglang_marlin_moe``,
#: flashinfer_trtllm -> ``sglang_flashinfer_trtllm_moe``, flashinfer_cutlass ->
#: ``sglang_flashinfer_cutlass_moe``, mxfp4 -> ``sglang_mxfp4_flashinfer_trtllm_moe``)
_RULES: tuple[tuple[str, str], ...] = (
    ("moe_torch_flow", TRTLLM_TORCH_FLOW),
    ("xpu", XPU),
    ("marlin", MARLIN),
    ("flashinfer_trtllm", FLASHINFER_TRTLLM),
    ("flashinfer_cutlass", FLASHINFER_CUTLASS),
    ("triton", TRITON),
    ("vllm_fused_moe", TRITON),        # vLLM 0.14's label of its Triton fused_moe (A100 table)
)


def kernel_family(kernel_source: Any) -> str:
    """The kernel family of one ``kernel_source`` label (:data:`OTHER` when none matches)."""
    s = str(kernel_source)
    for sub, fam in _RULES:
        if sub in s:
            return fam
    return OTHER


def kernel_families(kernel_source: Any) -> np.ndarray:
    """:func:`kernel_family` of every label of a column (object array)."""
    vals = np.asarray(kernel_source, dtype=object)
    uniq = {v: kernel_family(v) for v in set(vals.tolist())}
    return np.array([uniq[v] for v in vals.tolist()], dtype=object)


def kernel_group_key(dtype: str, family: str) -> str:
    """Key of a dtype group's rows of one kernel family (:attr:`FamilyModel.kernel_groups`)."""
    return f"{dtype}/{family}"


# ---------------------------------------------------------------------------------------------
# the engines' kernel choice for a query (one rule for table rows and served queries)
# ---------------------------------------------------------------------------------------------
#: compute capability (SM) of the catalog's NVIDIA GPUs (hardware_catalog/data/gpus.yaml keys);
#: GPUs not listed get no kernel family (their queries are answered as before)
GPU_SM: dict[str, int] = {"a100_40gb_sxm": 80, "a100_sxm": 80, "a10g": 86, "l4": 89, "l40s": 89,
                          "h100_sxm": 90, "h100_pcie": 90, "h200_sxm": 90, "b200": 100, "b200_sxm": 100,
                          "gb200": 100, "b300": 103, "gb300": 103, "rtx_pro_6000_server": 120}

_BW = FLASHINFER_TRTLLM
#: SGLang 0.5.14's MoE runner backend per (dtype group, SM) when the model does not override it:
#: aiconfigurator ``collector/cases/base_ops/moe.yaml`` ``moe_sglang.backends`` (its comments cite
#: SGLang's server_args.py / Mxfp4MoEMethod for each entry)
SGLANG_DEFAULT: dict[str, dict[int, str]] = {
    "bf16": {80: TRITON, 89: TRITON, 90: TRITON, 100: TRITON, 103: TRITON, 120: TRITON},
    "fp8_block": {89: TRITON, 90: TRITON, 100: TRITON, 103: TRITON, 120: TRITON},
    "int4_wo": {89: MARLIN, 90: MARLIN, 100: _BW, 103: _BW, 120: MARLIN},
    "fp4": {100: _BW, 103: _BW, 120: FLASHINFER_CUTLASS},
    "w4a16_mxfp4": {89: TRITON, 90: TRITON, 100: _BW, 103: _BW, 120: MARLIN},
    "w4a8_mxfp4": {100: _BW, 103: _BW},
}
#: the models whose SGLang serving path picks another backend (per architecture, dtype group and
#: SM): the model cases' ``sglang_moe_backends`` in aiconfigurator ``collector/cases/models/*_cases.yaml``
#: (NemotronHForCausalLM: FlashInfer CUTLASS on SM90/SM120 in bf16; DeepSeek-V3, Qwen3-MoE, Qwen3-VL-MoE,
#: Qwen3.5-MoE, GLM-5 (GlmMoeDsa), Kimi-K2, Llama-4: FlashInfer TRT-LLM on SM100/103; Kimi-K3's
#: compressed-tensors MXFP4 experts: Marlin on SM90/SM120). The tables agree: H100 SGLang bf16 runs
#: FlashInfer CUTLASS exactly for the three Nemotron-3 expert configurations.
_SM100_TRTLLM = {100: _BW, 103: _BW}
SGLANG_BY_ARCH: dict[tuple[str, str], dict[int, str]] = {
    ("NemotronHForCausalLM", "bf16"): {90: FLASHINFER_CUTLASS, 100: _BW, 103: _BW, 120: FLASHINFER_CUTLASS},
    ("NemotronHForCausalLM", "fp4"): {100: _BW, 103: _BW, 120: FLASHINFER_CUTLASS},
    **{(arch, dt): _SM100_TRTLLM for arch in ("DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM",
                                               "Qwen3VLMoeForConditionalGeneration",
                                               "Qwen3_5MoeForConditionalGeneration", "GlmMoeDsaForCausalLM")
       for dt in ("bf16", "fp8_block")},
    ("KimiK25ForConditionalGeneration", "fp8_block"): _SM100_TRTLLM,
    ("Llama4ForConditionalGeneration", "fp8_block"): _SM100_TRTLLM,
    ("KimiK3ForConditionalGeneration", "w4a16_mxfp4"): {89: TRITON, 90: MARLIN, 100: _BW, 103: _BW, 120: MARLIN},
}


def engine_moe_kernel(backend: str, gpu_key: str, group: str, moe_ep: int,
                      architecture: str | None = None) -> str | None:
    """The kernel family an engine runs a fused-MoE call with (None: not known, the query is then
    answered by the whole dtype group, as before this rule).

    ``group``: the MoE dtype group the query resolves to (bf16, fp8_block, w4a16_mxfp4, ...);
    ``architecture``: the model's Hugging Face architecture (``ModelSpec.architecture``).

    * vLLM: on Hopper (SM90) block-scaled fp8 runs FlashInfer CUTLASS with expert parallelism and
      Triton without ("On Hopper for Block Fp8, prefer Triton for TP and FI CUTLASS for EP",
      ``_get_priority_backends`` in vllm/model_executor/layers/fused_moe/oracle/fp8.py); the
      tables show it (H100/H200 fp8_block: every EP > 1 row FlashInfer CUTLASS, every EP 1 row
      Triton). gpt-oss's MXFP4 experts run the Triton kernels on SM90 (``select_mxfp4_moe_backend``,
      oracle/mxfp4.py, default TRITON_MONOLITHIC; ``VLLM_MXFP4_USE_MARLIN`` launches are timed by
      sim/vllm_marlin_mxfp4.py), Kimi-K3's compressed-tensors MXFP4 experts Marlin (aiconfigurator
      collector/vllm/collect_moe.py: "serving truth for the ct-mxfp4+situ checkpoint is
      MarlinExperts W4A16 on every SM").
    * SGLang: :data:`SGLANG_BY_ARCH`, else :data:`SGLANG_DEFAULT` (a query without the model's
      architecture: None, since a per-model override cannot be ruled out).
    * TensorRT-LLM: MXFP4 experts on Hopper run its TRITON backend (sim/calibrated.py
      MOE_FP4_STAND_IN); its own tables hold one kernel per dtype group.
    """
    sm = GPU_SM.get(gpu_key)
    if sm is None:
        return None
    if backend == "vllm":
        if group == "fp8_block" and sm == 90:
            return FLASHINFER_CUTLASS if moe_ep > 1 else TRITON
        if group == "w4a16_mxfp4":
            if architecture == "KimiK3ForConditionalGeneration":
                return MARLIN
            if architecture == "GptOssForCausalLM" and sm == 90:
                return TRITON
        return None
    if backend == "sglang":
        if architecture is None:       # per-model overrides cannot be ruled out
            return None
        # get_sglang_moe_backend: the model's map for the dtype, then (no entry for this SM) the base map
        own = SGLANG_BY_ARCH.get((architecture, group), {}).get(sm)
        return own if own is not None else SGLANG_DEFAULT.get(group, {}).get(sm)
    if backend == "trtllm" and group == "w4a16_mxfp4" and sm == 90:
        return TRITON
    return None

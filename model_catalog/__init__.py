"""Model catalog: Hugging Face config.json presets and derived quantities.

``load_model("llama3_1_70b")`` (or an HF id such as ``"meta-llama/Llama-3.1-70B"``, or a
path to a config.json) returns a frozen :class:`ModelSpec`; :mod:`model_catalog.derived`
computes parameter counts, weight bytes, KV bytes per token and FLOPs per token from it.
"""

from llmplan.model_catalog.derived import (
    ParamBreakdown,
    attention_flops_per_token,
    attention_params_per_layer,
    bytes_per_element,
    expert_params,
    flops_per_token,
    kv_bytes_per_token,
    kv_bytes_per_token_per_layer,
    kv_bytes_per_token_windowed,
    kv_bytes_sequence,
    param_breakdown,
    param_count_active,
    param_count_total,
    weight_bytes,
)
from llmplan.model_catalog.loader import (
    Preset,
    get_preset,
    list_models,
    load_model,
    load_model_file,
    load_presets,
    parse_config,
    resolve_key,
)
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, MLASpec, ModelSpec, MoESpec

__all__ = [
    "BYTES_PER_ELEMENT",
    "MLASpec",
    "ModelSpec",
    "MoESpec",
    "ParamBreakdown",
    "Preset",
    "attention_flops_per_token",
    "attention_params_per_layer",
    "bytes_per_element",
    "expert_params",
    "flops_per_token",
    "get_preset",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_layer",
    "kv_bytes_per_token_windowed",
    "kv_bytes_sequence",
    "list_models",
    "load_model",
    "load_model_file",
    "load_presets",
    "param_breakdown",
    "param_count_active",
    "param_count_total",
    "parse_config",
    "resolve_key",
    "weight_bytes",
]

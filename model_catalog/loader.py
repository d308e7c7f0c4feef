"""Load :class:`ModelSpec` records from Hugging Face ``config.json`` files and presets.

``load_model(name)`` accepts a preset key (``llama3_1_70b``), a Hugging Face id or alias
(``meta-llama/Meta-Llama-3.1-70B``, case-insensitive), a bare repository name when it is
unambiguous (``Llama-3.1-70B``), or the path of a ``config.json`` (or of a folder holding
one). Presets live in ``data/presets.yaml`` and point at the configs in ``configs/``.

Parsing handles multimodal wrappers (``text_config``), GQA/MHA defaults, the MoE fields of
Mixtral, Qwen3-MoE, DeepSeek/Kimi, gpt-oss, Llama-4 and MiniMax-M2, DeepSeek-style MLA,
sliding-window / chunked-attention layers, Gated DeltaNet hybrid linear attention
(Qwen3.5/3.6), DeepSeek sparse attention with an indexer (DeepSeek-V3.2, GLM-5.x) and the
shipped weight format (``quantization_config`` or a ModelOpt ``hf_quant_config.json``
beside the config, see :mod:`model_catalog.quant`). Configs whose architecture
``ModelSpec`` cannot describe (Mamba2 hybrids, Kimi delta attention, DeepSeek-V4
compressed attention, per-layer-type head dims, heterogeneous NAS blocks) are refused
with a :class:`CatalogError` naming the feature (:func:`unsupported_reason`) rather than
mis-modelled.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmplan.errors import CatalogError, suggest
from llmplan.model_catalog.quant import parse_quant
from llmplan.model_catalog.spec import (
    BYTES_PER_ELEMENT,
    GlobalAttentionSpec,
    LinearAttentionSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    SparseAttentionSpec,
)

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"
PRESETS_FILE = PACKAGE_DIR / "data" / "presets.yaml"

#: fields every config must give (under text_config for multimodal wrappers).
REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
#: model types whose MLP is a plain 2-matrix MLP rather than a gated (SwiGLU-style) one.
_NON_GATED_TYPES = {"gpt2", "gpt_bigcode", "gptj", "gpt_neox", "opt", "bloom", "falcon", "phi", "starcoder2", "mpt",
                    "nemotron_h"}
_BLOCK_CODES = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}
_SLIDING_KINDS = {"sliding_attention", "chunked_attention"}
_FULL_KINDS = {"full_attention", "deepseek_sparse_attention"}
_LIST_FIX = "`llmplan catalog models` lists the presets; a path to a config.json also works"


@dataclass(frozen=True)
class Preset:
    """One entry of ``data/presets.yaml``."""

    key: str
    config: str                        # file name in configs/
    hf_id: str
    aliases: tuple[str, ...] = ()
    native_dtype: str | None = None    # checked against the format read from the checkpoint
    published: dict[str, Any] = field(default_factory=dict)  # total_b, active_b, source, ...
    quant_config: str | None = None    # hf_quant_config.json in configs/ (default: the sidecar)

    @property
    def config_path(self) -> Path:
        return CONFIG_DIR / self.config


# --------------------------------------------------------------------------- presets


@functools.lru_cache(maxsize=None)
def load_presets() -> dict[str, Preset]:
    """All presets by key, in file order."""
    where = str(PRESETS_FILE)
    try:
        data = yaml.load(PRESETS_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read model presets {where}: {exc}", key="model") from exc
    entries = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise CatalogError(f"{where}: expected a top-level 'presets' mapping", key="model")
    presets: dict[str, Preset] = {}
    for key, entry in entries.items():
        if not isinstance(entry, dict) or not entry.get("config") or not entry.get("hf_id"):
            raise CatalogError(f"{where}: preset '{key}' needs 'config' and 'hf_id'", key="model")
        dtype = entry.get("native_dtype")
        if dtype is not None and dtype not in BYTES_PER_ELEMENT:
            raise CatalogError(f"{where}: preset '{key}' has unknown native_dtype '{dtype}'", key="model",
                               fix=suggest(str(dtype), BYTES_PER_ELEMENT))
        presets[str(key)] = Preset(key=str(key), config=str(entry["config"]), hf_id=str(entry["hf_id"]),
                                   aliases=tuple(str(a) for a in entry.get("aliases") or ()),
                                   native_dtype=dtype, published=dict(entry.get("published") or {}),
                                   quant_config=entry.get("quant_config"))
    return presets


def _compact(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@functools.lru_cache(maxsize=None)
def _name_index() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(exact, repo-name, compact) lookup tables: lowercase name -> preset key.

    Repo-name (the part after ``/``) and compact (alphanumerics only) entries that would be
    ambiguous between presets are dropped.
    """
    exact: dict[str, str] = {}
    loose: list[dict[str, set[str]]] = [{}, {}]
    for key, p in load_presets().items():
        for name in (key, p.hf_id, *p.aliases):
            exact[name.lower()] = key
            repo = name.rsplit("/", 1)[-1].lower()
            loose[0].setdefault(repo, set()).add(key)
            loose[1].setdefault(_compact(name), set()).add(key)
            loose[1].setdefault(_compact(repo), set()).add(key)
    unique = [{k: next(iter(v)) for k, v in table.items() if len(v) == 1} for table in loose]
    return exact, unique[0], unique[1]


def resolve_key(name: str) -> str:
    """The preset key for a key, HF id, alias or unambiguous repo name (case-insensitive)."""
    exact, repo, compact = _name_index()
    low = name.strip().lower()
    for table, probe in ((exact, low), (repo, low), (compact, _compact(low))):
        if probe and probe in table:
            return table[probe]
    presets = load_presets()
    hint = suggest(name.strip(), [*presets, *(p.hf_id for p in presets.values())])
    if not hint.startswith("did you mean"):
        hint = suggest(name.strip(), presets)  # nothing close: list the short keys only
    raise CatalogError(f"unknown model '{name}'", key="model", fix=f"{hint} ({_LIST_FIX})")


def get_preset(name: str) -> Preset:
    """The preset a name resolves to (see :func:`resolve_key`)."""
    return load_presets()[resolve_key(name)]


@functools.lru_cache(maxsize=None)
def _load_preset_spec(key: str) -> ModelSpec:
    p = load_presets()[key]
    if not p.config_path.is_file():
        raise CatalogError(f"preset '{key}': config file {p.config_path} is missing", key="model")
    cfg = _read_json(p.config_path)
    hf_quant = _read_json(CONFIG_DIR / p.quant_config) if p.quant_config else _sidecar_quant(p.config_path)
    spec = parse_config(cfg, key=key, hf_id=p.hf_id, source=f"model_catalog/configs/{p.config}", hf_quant=hf_quant)
    if p.native_dtype is not None and p.native_dtype != spec.native_dtype:
        raise CatalogError(f"preset '{key}' says native_dtype {p.native_dtype} but its checkpoint files give "
                           f"{spec.native_dtype}", key="model", fix="correct model_catalog/data/presets.yaml")
    return spec


def list_models() -> list[ModelSpec]:
    """Every preset as a ModelSpec, in presets.yaml order."""
    return [_load_preset_spec(key) for key in load_presets()]


def load_model(name: str) -> ModelSpec:
    """A ModelSpec from a preset key, HF id/alias, or a config.json path (or its folder)."""
    if not isinstance(name, str) or not name.strip():
        raise CatalogError("empty model name", key="model", fix=_LIST_FIX)
    path = Path(name.strip()).expanduser()
    if path.is_file():
        return load_model_file(path)
    if path.is_dir() and (path / "config.json").is_file():
        return load_model_file(path / "config.json")
    if name.strip().lower().endswith(".json"):
        raise CatalogError(f"model config file not found: {path}", key="model", fix=_LIST_FIX)
    try:
        key = resolve_key(name)
    except CatalogError:
        if path.is_dir():
            raise CatalogError(f"folder {path} holds no config.json", key="model", fix=_LIST_FIX) from None
        raise
    return _load_preset_spec(key)


# --------------------------------------------------------------------------- files


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CatalogError(f"cannot read model config {path}: {exc.strerror or exc}", key="model") from exc
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                           key="model", fix="give a Hugging Face config.json") from exc
    if not isinstance(cfg, dict):
        raise CatalogError(f"{path}: expected a JSON object, got {type(cfg).__name__}", key="model",
                           fix="give a Hugging Face config.json")
    return cfg


def load_model_file(path: str | Path, key: str | None = None) -> ModelSpec:
    """Parse one config.json. ``key`` defaults to a slug of the file name (or of its folder
    for a file named config.json); the HF id is read from ``org--name`` file names."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise CatalogError(f"model config file not found: {path}", key="model", fix=_LIST_FIX)
    cfg = _read_json(path)
    stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    hf_quant = _sidecar_quant(path)
    hf_id = stem.replace("--", "/", 1) if "--" in stem else str(cfg.get("_name_or_path") or stem)
    if key is None:
        key = re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_") or "custom"
    return parse_config(cfg, key=key, hf_id=hf_id, source=str(path), hf_quant=hf_quant)


def _sidecar_quant(path: Path) -> dict[str, Any] | None:
    """A ModelOpt ``hf_quant_config.json`` beside a config: ``<stem>.hf_quant_config.json``
    (this catalog's naming) or ``hf_quant_config.json`` in a checkpoint folder."""
    stem = path.name[:-5] if path.name.endswith(".json") else path.name
    for cand in (path.with_name(f"{stem}.hf_quant_config.json"), path.with_name("hf_quant_config.json")):
        if cand != path and cand.is_file() and (cand.name != "hf_quant_config.json" or path.name == "config.json"):
            return _read_json(cand)
    return None


# --------------------------------------------------------------------------- parsing


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language-model settings: ``text_config`` merged over the top level."""
    inner = cfg.get("text_config")
    if not isinstance(inner, dict):
        return cfg
    outer = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config", "audio_config")}
    return {**outer, **inner}


class _Fields:
    """Typed access to config fields with errors naming the field and the file."""

    def __init__(self, cfg: dict[str, Any], source: str):
        self.cfg, self.source = cfg, source

    def error(self, message: str, fix: str | None = None) -> CatalogError:
        return CatalogError(f"{self.source}: {message}", key="model", fix=fix)

    def get_int(self, *names: str, default: int | None = None, minimum: int = 1) -> int:
        """The first of ``names`` present and not null; ``default`` if none (else error)."""
        for name in names:
            value = self.cfg.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise self.error(f"field '{name}' must be an integer >= {minimum}, got {value!r}")
            return value
        if default is None:
            raise self.error(f"missing required field '{names[0]}'",
                             fix=f"add '{names[0]}' to the config.json (it must be a Hugging Face config)")
        return default


def unsupported_reason(cfg: dict[str, Any]) -> str | None:
    """Why ModelSpec cannot describe this config (a raw or text-level config) faithfully,
    or None when it can."""
    c = _text_config(cfg)
    model_type = str(c.get("model_type", "")).lower()
    kinds = set(c.get("layer_types") or ())
    if model_type.startswith("nemotron_h") or "hybrid_override_pattern" in c or "layers_block_type" in c:
        pattern = _nemotron_pattern(c)
        if not pattern or set(pattern) - set("ME*-"):
            return "Mamba2 hybrid with block types other than M/E/*/- (hybrid_override_pattern)"
    if model_type.startswith("kimi_linear") or "linear_attn_config" in c:
        return "Kimi delta attention (KDA) hybrid layers with gated MLA"
    if "compress_ratios" in c or model_type in ("deepseek_v4", "deepseek_ref"):
        return "DeepSeek-V4 compressed sparse attention (CSA/HCA) with hyper-connections"
    if "linear_attention" in kinds or "linear_num_key_heads" in c:
        if not all(k in c for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                    "linear_value_head_dim")):
            return "linear-attention layers without Gated DeltaNet head shapes (linear_* fields)"
    if ("index_n_heads" in c or "index_topk" in c) and c.get("kv_lora_rank") is None:
        return "sparse-attention indexer without MLA"
    if c.get("num_kv_shared_layers") or c.get("hidden_size_per_layer_input"):
        return "KV-cache sharing across layers / per-layer input embeddings (Gemma-3n style)"
    if "swa_num_key_value_heads" in c or "hybrid_layer_pattern" in c:
        for swa, full in (("swa_num_attention_heads", "num_attention_heads"), ("swa_head_dim", "head_dim"),
                          ("swa_v_head_dim", "v_head_dim")):
            if c.get(swa) is not None and c.get(swa) != c.get(full):
                return f"sliding-window layers with their own {full} ({swa} {c.get(swa)} vs {c.get(full)})"
    if "block_configs" in c:
        return "heterogeneous NAS blocks (per-layer attention and FFN sizes in block_configs)"
    if isinstance(c.get("sparse_attention_config"), dict):
        return "MiniMax sparse attention (sparse_attention_config)"
    unknown = kinds - _SLIDING_KINDS - _FULL_KINDS - {"linear_attention"}
    if unknown:
        return f"layer types {sorted(unknown)}"
    return None


def _moe_layer_count(c: dict[str, Any], f: _Fields, layers: int, llama4: bool) -> int:
    kinds = c.get("mlp_layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:  # GLM-5.2: dense | sparse per layer
        return sum(1 for k in kinds if k == "sparse")
    freq = c.get("moe_layer_freq")
    if isinstance(freq, list) and len(freq) == layers:  # per-layer 0/1 flags
        return sum(1 for x in freq if x)
    if "n_routed_experts" in c or "first_k_dense_replace" in c:  # DeepSeek / Kimi / GLM / Step
        first = f.get_int("first_k_dense_replace", default=0, minimum=0)
        step = f.get_int("moe_layer_freq", default=1)
        return sum(1 for i in range(layers) if i >= first and i % step == 0)
    if isinstance(c.get("moe_layers"), list):
        return len(c["moe_layers"])
    if llama4:
        step = f.get_int("interleave_moe_layer_step", default=1)
        return len(range(step - 1, layers, step))
    step = f.get_int("decoder_sparse_step", default=1)  # Qwen-MoE
    dense = set(c.get("mlp_only_layers") or ())
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _parse_moe(c: dict[str, Any], f: _Fields, layers: int, llama4: bool) -> MoESpec | None:
    experts = f.get_int("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts",
                    default=0, minimum=0)
    if experts <= 1:
        return None
    top_k = f.get_int("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts")
    if top_k > experts:
        raise f.error(f"top-k {top_k} exceeds the {experts} experts")
    if llama4:
        width = f.get_int("intermediate_size")
    else:
        width = f.get_int("moe_intermediate_size", "intermediate_size")
    shared, shared_width, dense_beside = 0, 0, False
    if c.get("enable_moe_block"):  # Gemma-4: the dense MLP runs beside the routed experts
        shared, shared_width, dense_beside = 1, f.get_int("intermediate_size"), True
    elif f.get_int("n_shared_experts", default=0, minimum=0):
        shared, shared_width = f.get_int("n_shared_experts"), width
    elif llama4:
        shared, shared_width = 1, width
    else:
        size = f.get_int("shared_expert_intermediate_size", "shared_intermediate_size", default=0, minimum=0)
        shared, shared_width = (1, size) if size else (0, 0)
    moe_layers = _moe_layer_count(c, f, layers, llama4)
    if moe_layers == 0:
        return None
    return MoESpec(num_experts=experts, top_k=top_k, expert_intermediate_size=width,
                   num_shared_experts=shared, shared_intermediate_size=shared_width,
                   num_dense_layers=layers - moe_layers, shared_is_dense_mlp=dense_beside)


def _parse_mla(c: dict[str, Any], f: _Fields) -> MLASpec | None:
    if c.get("kv_lora_rank") is None:
        return None
    return MLASpec(q_lora_rank=f.get_int("q_lora_rank", default=0, minimum=0),
                   kv_lora_rank=f.get_int("kv_lora_rank"), qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
                   qk_rope_head_dim=f.get_int("qk_rope_head_dim"), v_head_dim=f.get_int("v_head_dim"))


def _nemotron_pattern(c: dict[str, Any]) -> str:
    """Nemotron-H block types, one character per block (M Mamba2, E MoE, * attention, - MLP)."""
    pattern = c.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return pattern
    kinds = c.get("layers_block_type")
    if isinstance(kinds, list):
        return "".join(_BLOCK_CODES.get(str(k), "?") for k in kinds)
    return ""


_SSM_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _parse_mamba2(c: dict[str, Any], f: _Fields, pattern: str) -> LinearAttentionSpec | None:
    """Mamba2 blocks of a Nemotron-H model, in the LinearAttentionSpec shape."""
    idx = tuple(i for i, k in enumerate(pattern) if k == "M")
    if not idx:
        return None
    ssm = str(c.get("mamba_ssm_cache_dtype") or c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    state = _SSM_DTYPES.get(ssm)
    if state is None:
        raise f.error(f"mamba_ssm_cache_dtype '{ssm}' is not float32, bfloat16 or float16")
    return LinearAttentionSpec(kind="mamba2", num_layers=len(idx), num_key_heads=f.get_int("n_groups"),
                               num_value_heads=f.get_int("mamba_num_heads"), key_head_dim=f.get_int("ssm_state_size"),
                               value_head_dim=f.get_int("mamba_head_dim"), conv_kernel=f.get_int("conv_kernel", default=4),
                               state_dtype=state, layer_indices=idx, conv_bias=bool(c.get("use_conv_bias", False)))


def _parse_nemotron_moe(c: dict[str, Any], f: _Fields, pattern: str) -> MoESpec | None:
    if "E" not in pattern:
        return None
    shared = f.get_int("n_shared_experts", default=0, minimum=0)
    return MoESpec(num_experts=f.get_int("n_routed_experts"), top_k=f.get_int("num_experts_per_tok"),
                   expert_intermediate_size=f.get_int("moe_intermediate_size"), num_shared_experts=shared,
                   shared_intermediate_size=f.get_int("moe_shared_expert_intermediate_size") if shared else 0,
                   num_dense_layers=len(pattern) - pattern.count("E"),
                   latent_size=f.get_int("moe_latent_size", default=0, minimum=0))


def _parse_linear(c: dict[str, Any], f: _Fields, layers: int) -> LinearAttentionSpec | None:
    """Gated DeltaNet layers of a Qwen3.5 / Qwen3-Next style hybrid."""
    if "linear_num_key_heads" not in c:
        return None
    kinds = c.get("layer_types")
    if isinstance(kinds, list) and kinds:
        if len(kinds) != layers:
            raise f.error(f"layer_types lists {len(kinds)} layers, num_hidden_layers is {layers}")
        idx = tuple(i for i, k in enumerate(kinds) if k == "linear_attention")
    else:
        every = f.get_int("full_attention_interval", default=4)
        idx = tuple(i for i in range(layers) if (i + 1) % every != 0)
    if not idx:
        return None
    if len(idx) == layers:
        raise f.error("every layer is linear attention; a hybrid needs full-attention layers too")
    ssm = str(c.get("mamba_ssm_dtype") or "float32")
    state = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(ssm)
    if state is None:
        raise f.error(f"mamba_ssm_dtype '{ssm}' is not float32, bfloat16 or float16")
    return LinearAttentionSpec(kind="gdn", num_layers=len(idx), num_key_heads=f.get_int("linear_num_key_heads"),
                               num_value_heads=f.get_int("linear_num_value_heads"),
                               key_head_dim=f.get_int("linear_key_head_dim"),
                               value_head_dim=f.get_int("linear_value_head_dim"),
                               conv_kernel=f.get_int("linear_conv_kernel_dim", default=4),
                               state_dtype=state, layer_indices=idx)


def _parse_sparse(c: dict[str, Any], f: _Fields, layers: int) -> SparseAttentionSpec | None:
    """DeepSeek sparse attention: indexer heads, key dim and top-k (DeepSeek-V3.2, GLM-5)."""
    if "index_topk" not in c and "index_n_heads" not in c:
        return None
    kinds = c.get("indexer_types")  # GLM-5.2: "full" layers run an indexer, "shared" reuse one
    indexers = sum(1 for k in kinds if k == "full") if isinstance(kinds, list) and len(kinds) == layers else layers
    return SparseAttentionSpec(index_n_heads=f.get_int("index_n_heads"), index_head_dim=f.get_int("index_head_dim"),
                               index_topk=f.get_int("index_topk"), num_indexer_layers=indexers)


def _parse_global(c: dict[str, Any], f: _Fields, layers: int, kv_heads: int, heads: int) -> GlobalAttentionSpec | None:
    """Gemma-4 full-attention layers with their own head dim and KV heads."""
    if "global_head_dim" not in c:
        return None
    kinds = c.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != layers:
        raise f.error("global_head_dim needs layer_types listing every layer")
    idx = tuple(i for i, k in enumerate(kinds) if k == "full_attention")
    g_kv = f.get_int("num_global_key_value_heads", default=kv_heads)
    if heads % g_kv:
        raise f.error(f"num_attention_heads {heads} is not a multiple of num_global_key_value_heads {g_kv}")
    return GlobalAttentionSpec(head_dim=f.get_int("global_head_dim"), num_kv_heads=g_kv,
                               k_eq_v=bool(c.get("attention_k_eq_v", False)), layer_indices=idx)


def _mimo_geometry(c: dict[str, Any], f: _Fields, is_mla: bool, head_dim: int, kv_heads: int,
                   heads: int) -> dict[str, Any]:
    """Value head dim and sliding-layer KV heads where they differ (MiMo-V2-Flash)."""
    out: dict[str, Any] = {}
    if is_mla:
        return out
    v_dim = f.get_int("v_head_dim", default=head_dim)
    if v_dim != head_dim:
        out["v_head_dim"] = v_dim
    swa_kv = f.get_int("swa_num_key_value_heads", default=kv_heads)
    pattern = c.get("hybrid_layer_pattern")
    if swa_kv != kv_heads and isinstance(pattern, list):
        if heads % swa_kv:
            raise f.error(f"num_attention_heads {heads} is not a multiple of swa_num_key_value_heads {swa_kv}")
        out["sliding_num_kv_heads"] = swa_kv
        out["sliding_layers"] = tuple(i for i, x in enumerate(pattern) if x)
    return out


def _sliding(c: dict[str, Any], f: _Fields, layers: int) -> tuple[int, int]:
    """(window tokens, number of windowed layers); chunked attention counts as a window."""
    pattern = c.get("hybrid_layer_pattern")  # MiMo-V2: 1 = sliding window, 0 = full attention
    if isinstance(pattern, list) and len(pattern) == layers:
        count = sum(1 for x in pattern if x)
        return (f.get_int("sliding_window", "sliding_window_size"), count) if count else (0, 0)
    kinds = c.get("layer_types")
    if isinstance(kinds, list) and kinds:
        if len(kinds) != layers:
            raise f.error(f"layer_types lists {len(kinds)} layers, num_hidden_layers is {layers}")
        count = sum(1 for k in kinds if k in _SLIDING_KINDS)
        if not count:
            return 0, 0
        return f.get_int("sliding_window", "attention_chunk_size"), count
    if c.get("attention_chunk_size") is not None:  # Llama-4: RoPE layers chunked, NoPE layers global
        flags = c.get("no_rope_layers")
        if isinstance(flags, list) and len(flags) == layers:
            count = sum(1 for x in flags if x)
        else:
            every = f.get_int("no_rope_layer_interval", default=4)
            count = sum(1 for i in range(layers) if (i + 1) % every != 0)
        return (f.get_int("attention_chunk_size"), count) if count else (0, 0)
    if c.get("sliding_window") is not None and c.get("use_sliding_window", True):
        window = f.get_int("sliding_window")
        first_windowed = f.get_int("max_window_layers", default=0, minimum=0)  # Qwen2 semantics
        count = max(0, layers - first_windowed)
        return (window, count) if count else (0, 0)
    return 0, 0


def parse_config(cfg: dict[str, Any], key: str, hf_id: str, source: str,
                 hf_quant: dict[str, Any] | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict; ``source`` names it in errors.
    ``hf_quant`` is a ModelOpt ``hf_quant_config.json`` shipped beside the config."""
    c = _text_config(cfg)
    pattern = _nemotron_pattern(c)
    if pattern:  # one block per layer; Nemotron-3 Ultra omits num_hidden_layers
        c = {**c, "num_hidden_layers": c.get("num_hidden_layers") or len(pattern)}
    f = _Fields(c, source or hf_id or key)
    reason = unsupported_reason(cfg)
    if reason:
        raise f.error(f"unsupported architecture: {reason}",
                      fix="this model is not in the catalog; see model_catalog/configs/PROVENANCE.md")
    for name in REQUIRED_FIELDS:
        f.get_int(name)
    hidden, layers, heads = f.get_int("hidden_size"), f.get_int("num_hidden_layers"), f.get_int("num_attention_heads")
    model_type = str(c.get("model_type", "")).lower()
    llama4 = model_type.startswith("llama4") or "intermediate_size_mlp" in c
    mla = _parse_mla(c, f)
    if pattern and len(pattern) != layers:
        raise f.error(f"hybrid_override_pattern has {len(pattern)} blocks, num_hidden_layers is {layers}")
    moe = _parse_nemotron_moe(c, f, pattern) if pattern else _parse_moe(c, f, layers, llama4)
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    else:
        head_dim = f.get_int("head_dim", "attention_head_dim", default=0, minimum=1) or 0
        if not head_dim:
            if hidden % heads:
                raise f.error(f"no 'head_dim' and hidden_size {hidden} is not divisible by {heads} heads")
            head_dim = hidden // heads
    kv_heads = f.get_int("num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise f.error(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    if llama4:
        dense_width = f.get_int("intermediate_size_mlp", "intermediate_size")
    elif moe is not None:
        dense_width = f.get_int("intermediate_size", default=moe.expert_intermediate_size)
    else:
        dense_width = f.get_int("intermediate_size")
    window, sliding_layers = _sliding(c, f, layers)
    archs = cfg.get("architectures") or c.get("architectures")
    architecture = str(archs[0]) if isinstance(archs, list) and archs else (model_type or "unknown")
    tie = c.get("tie_word_embeddings", False)  # absent: False, as in Llama/Qwen/Mixtral/DeepSeek
    linear = _parse_mamba2(c, f, pattern) if pattern else _parse_linear(c, f, layers)
    sparse = _parse_sparse(c, f, layers) if mla is not None else None
    spec = ModelSpec(
        key=key,
        hf_id=hf_id,
        architecture=architecture,
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=dense_width,
        vocab_size=f.get_int("vocab_size"),
        tie_word_embeddings=bool(tie),
        max_position_embeddings=f.get_int("max_position_embeddings", "n_positions", "max_sequence_length",
                                      "seq_length"),
        native_dtype="bf16",
        gated_mlp=model_type not in _NON_GATED_TYPES,
        sliding_window=window,
        num_sliding_layers=sliding_layers,
        moe=moe,
        mla=mla,
        source=source,
        attention_bias=bool(c.get("attention_bias", False)),
        mlp_bias=bool(c.get("mlp_bias", False)) or model_type == "gpt_oss",
        sparse=sparse,
        linear=linear,
        attn_output_gate=bool(c.get("attn_output_gate", False)),
        vision_excluded=isinstance(cfg.get("vision_config"), dict),
        global_attention=_parse_global(c, f, layers, kv_heads, heads),
        block_pattern=pattern,
        **_mimo_geometry(c, f, mla is not None, head_dim, kv_heads, heads),
    )
    qc = c.get("quantization_config") or c.get("compression_config")
    quant = parse_quant(spec, qc, hf_quant, f.source)
    if quant is None:
        return spec
    return dataclasses.replace(spec, quant=quant, native_dtype=quant.precision)

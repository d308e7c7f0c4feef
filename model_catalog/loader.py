"""Load :class:`ModelSpec` records from Hugging Face ``config.json`` files and presets.

``load_model(name)`` accepts a preset key (``llama3_1_70b``), a Hugging Face id or alias
(``meta-llama/Meta-Llama-3.1-70B``, case-insensitive), a bare repository name when it is
unambiguous (``Llama-3.1-70B``), or the path of a ``config.json`` (or of a folder holding
one). Presets live in ``data/presets.yaml`` and point at the configs in ``configs/``.

Parsing handles multimodal wrappers (``text_config``), GQA/MHA defaults, the MoE fields of
Mixtral, Qwen3-MoE, DeepSeek/Kimi, gpt-oss, Llama-4 and MiniMax-M2, DeepSeek-style MLA,
sliding-window / chunked-attention layers and the shipped weight format. Configs whose
attention ``ModelSpec`` cannot describe (hybrid linear attention, DSA sparse attention,
per-layer-type head dims) are refused with a :class:`CatalogError` rather than mis-modelled.
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
from llmplan.model_catalog.spec import BYTES_PER_ELEMENT, MLASpec, ModelSpec, MoESpec

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"
PRESETS_FILE = PACKAGE_DIR / "data" / "presets.yaml"

#: fields every config must give (under text_config for multimodal wrappers).
REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
#: model types whose MLP is a plain 2-matrix MLP rather than a gated (SwiGLU-style) one.
_NON_GATED_TYPES = {"gpt2", "gpt_bigcode", "gptj", "gpt_neox", "opt", "bloom", "falcon", "phi", "starcoder2", "mpt"}
_SLIDING_KINDS = {"sliding_attention", "chunked_attention"}
_LIST_FIX = "`llmplan catalog models` lists the presets; a path to a config.json also works"


@dataclass(frozen=True)
class Preset:
    """One entry of ``data/presets.yaml``."""

    key: str
    config: str                        # file name in configs/
    hf_id: str
    aliases: tuple[str, ...] = ()
    native_dtype: str | None = None    # overrides the dtype read from the config when set
    published: dict[str, Any] = field(default_factory=dict)  # total_b, active_b, source, ...

    @property
    def config_path(self) -> Path:
        return CONFIG_DIR / self.config


# --------------------------------------------------------------------------- presets


@functools.lru_cache(maxsize=None)
def load_presets() -> dict[str, Preset]:
    """All presets by key, in file order."""
    where = str(PRESETS_FILE)
    try:
        data = yaml.safe_load(PRESETS_FILE.read_text())
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
                                   native_dtype=dtype, published=dict(entry.get("published") or {}))
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
    spec = parse_config(cfg, key=key, hf_id=p.hf_id, source=f"model_catalog/configs/{p.config}")
    if p.native_dtype is not None and p.native_dtype != spec.native_dtype:
        spec = dataclasses.replace(spec, native_dtype=p.native_dtype)
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
    hf_id = stem.replace("--", "/", 1) if "--" in stem else str(cfg.get("_name_or_path") or stem)
    if key is None:
        key = re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_") or "custom"
    return parse_config(cfg, key=key, hf_id=hf_id, source=str(path))


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


def _unsupported(c: dict[str, Any]) -> str | None:
    """Why ModelSpec cannot describe this config faithfully, or None."""
    kinds = set(c.get("layer_types") or ())
    if "linear_attention" in kinds or "linear_num_key_heads" in c:
        return "hybrid linear-attention layers (recurrent state, not a per-token KV cache)"
    if "index_n_heads" in c or "index_topk" in c:
        return "DSA sparse attention with an indexer key cache"
    if "global_head_dim" in c or c.get("attention_k_eq_v"):
        return "per-layer-type head dims / shared key-value projections"
    unknown = kinds - _SLIDING_KINDS - {"full_attention"}
    if unknown:
        return f"layer types {sorted(unknown)}"
    return None


def _native_dtype(c: dict[str, Any], f: _Fields) -> str:
    """fp8 / fp4 (mxfp4, nvfp4) / int4 / int8 from quantization_config, else bf16."""
    qc = c.get("quantization_config") or c.get("compression_config")
    if not isinstance(qc, dict):
        return "bf16"
    method = str(qc.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "fp4"
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        if algo in ("FP8", "NVFP4"):
            return "fp8" if algo == "FP8" else "fp4"
    if method in ("awq", "gptq") and qc.get("bits") in (4, 8):
        return f"int{qc['bits']}"
    if method == "compressed-tensors":
        groups = [g for g in (qc.get("config_groups") or {}).values() if isinstance(g, dict)]
        weights = groups[0].get("weights") if groups else None
        if isinstance(weights, dict) and weights.get("num_bits") in (4, 8):
            kind = "int" if weights.get("type", "int") == "int" else "fp"
            return f"{kind}{weights['num_bits']}"
    raise f.error(f"unsupported quantization_config (quant_method '{method}')",
                  fix="remove the quantization_config block to plan the model as bf16")


def _quant_scope(c: dict[str, Any], is_moe: bool) -> str:
    """"experts" when the shipped quantization skips attention (only experts quantized)."""
    qc = c.get("quantization_config") or c.get("compression_config")
    if not is_moe or not isinstance(qc, dict):
        return "all"
    skipped = qc.get("modules_to_not_convert") or qc.get("ignore") or []
    return "experts" if any("self_attn" in str(s) for s in skipped) else "all"


def _moe_layer_count(c: dict[str, Any], f: _Fields, layers: int, llama4: bool) -> int:
    if "n_routed_experts" in c:  # DeepSeek / Kimi
        first = f.get_int("first_k_dense_replace", default=0, minimum=0)
        freq = f.get_int("moe_layer_freq", default=1)
        return sum(1 for i in range(layers) if i >= first and i % freq == 0)
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
    shared, shared_width = 0, 0
    if f.get_int("n_shared_experts", default=0, minimum=0):
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
                   num_dense_layers=layers - moe_layers)


def _parse_mla(c: dict[str, Any], f: _Fields) -> MLASpec | None:
    if c.get("kv_lora_rank") is None:
        return None
    return MLASpec(q_lora_rank=f.get_int("q_lora_rank", default=0, minimum=0),
                   kv_lora_rank=f.get_int("kv_lora_rank"), qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
                   qk_rope_head_dim=f.get_int("qk_rope_head_dim"), v_head_dim=f.get_int("v_head_dim"))


def _sliding(c: dict[str, Any], f: _Fields, layers: int) -> tuple[int, int]:
    """(window tokens, number of windowed layers); chunked attention counts as a window."""
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


def parse_config(cfg: dict[str, Any], key: str, hf_id: str, source: str) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config dict; ``source`` names it in errors."""
    c = _text_config(cfg)
    f = _Fields(c, source or hf_id or key)
    for name in REQUIRED_FIELDS:
        f.get_int(name)
    reason = _unsupported(c)
    if reason:
        raise f.error(f"unsupported architecture: {reason}",
                      fix="this model is not in the catalog; see model_catalog/configs/PROVENANCE.md")
    hidden, layers, heads = f.get_int("hidden_size"), f.get_int("num_hidden_layers"), f.get_int("num_attention_heads")
    model_type = str(c.get("model_type", "")).lower()
    llama4 = model_type.startswith("llama4") or "intermediate_size_mlp" in c
    mla = _parse_mla(c, f)
    moe = _parse_moe(c, f, layers, llama4)
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    else:
        head_dim = f.get_int("head_dim", default=0, minimum=1) or 0
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
    return ModelSpec(
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
        native_dtype=_native_dtype(c, f),
        gated_mlp=model_type not in _NON_GATED_TYPES,
        sliding_window=window,
        num_sliding_layers=sliding_layers,
        moe=moe,
        mla=mla,
        source=source,
        attention_bias=bool(c.get("attention_bias", False)),
        mlp_bias=bool(c.get("mlp_bias", False)) or model_type == "gpt_oss",
        quant_scope=_quant_scope(c, moe is not None),
    )

"""Model catalog: presets load, published parameter counts, KV/FLOP formulas, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmplan.errors import CatalogError, ConfigError
from llmplan.model_catalog import derived
from llmplan.model_catalog import (
    BYTES_PER_ELEMENT,
    ModelSpec,
    get_preset,
    list_models,
    load_model,
    load_model_file,
    load_presets,
    parse_config,
)
from llmplan.model_catalog.derived import (
    attention_flops_per_token,
    flops_per_token,
    kv_bytes_per_token,
    kv_bytes_per_token_windowed,
    kv_bytes_sequence,
    param_breakdown,
    param_count_active,
    param_count_total,
    weight_bytes,
)
from llmplan.model_catalog.loader import CONFIG_DIR

REQUIRED_KEYS = ["llama3_1_8b", "llama3_1_70b", "llama3_1_405b", "qwen3_8b", "qwen3_32b", "mixtral_8x7b",
                 "qwen3_235b_a22b", "gpt_oss_120b", "minimax_m2_5", "deepseek_v3", "deepseek_r1"]
EXTRA_KEYS = ["qwen3_0_6b", "qwen3_30b_a3b", "gpt_oss_20b", "mixtral_8x22b", "qwen3_32b_fp8",
              "qwen3_235b_a22b_fp8", "llama3_1_70b_fp8", "qwen3_coder_480b", "llama4_scout",
              "llama4_maverick", "kimi_k2_5"]
ALL_KEYS = sorted(load_presets())


# ------------------------------------------------------------------ presets


def test_required_and_extra_presets_exist():
    assert set(REQUIRED_KEYS + EXTRA_KEYS) <= set(ALL_KEYS)


@pytest.mark.parametrize("key", ALL_KEYS)
def test_every_preset_loads(key):
    spec = load_model(key)
    assert isinstance(spec, ModelSpec) and spec.key == key
    assert spec.hf_id == get_preset(key).hf_id
    assert spec.native_dtype in BYTES_PER_ELEMENT
    assert spec.num_attention_heads % spec.num_kv_heads == 0
    assert spec.source.endswith(get_preset(key).config)
    assert (CONFIG_DIR / get_preset(key).config).is_file()
    if spec.moe is not None:
        assert 0 < spec.num_moe_layers <= spec.num_layers
        assert 0 < spec.moe.top_k <= spec.moe.num_experts
    assert 0 <= spec.num_sliding_layers <= spec.num_layers
    assert param_count_active(spec) <= param_count_total(spec)


def test_list_models_matches_presets_in_order():
    assert [m.key for m in list_models()] == list(load_presets())


@pytest.mark.parametrize("key", ALL_KEYS)
def test_native_dtype_read_from_config_matches_preset(key):
    preset = get_preset(key)
    parsed = load_model_file(preset.config_path)
    if preset.quant_config:  # checkpoint files not shared: the recipe comes from a named file
        assert parsed.native_dtype == "bf16" and load_model(key).native_dtype == preset.native_dtype
    else:  # config.json quantization_config or the hf_quant_config.json beside it
        assert parsed.native_dtype == preset.native_dtype


@pytest.mark.parametrize("key", ALL_KEYS)
def test_published_parameter_counts(key):
    spec, pub = load_model(key), get_preset(key).published
    assert "source" in pub and pub["source"]
    tol = pub.get("tolerance", 0.03)
    assert param_count_total(spec) == pytest.approx(pub["total_b"] * 1e9, rel=tol)
    if "active_b" in pub:
        active = param_count_active(spec, embeddings=pub["active_embeddings"])
        assert active == pytest.approx(pub["active_b"] * 1e9, rel=tol)


@pytest.mark.parametrize("key,total_b,active_b", [
    ("llama3_1_8b", 8.03, None), ("llama3_1_70b", 70.6, None), ("llama3_1_405b", 405.8, None),
    ("qwen3_8b", 8.2, None), ("qwen3_32b", 32.8, None), ("mixtral_8x7b", 46.7, 12.9),
    ("qwen3_235b_a22b", 235, 22), ("deepseek_v3", 671, 37), ("gpt_oss_120b", 116.8, 5.1),
    ("minimax_m2_5", 229, 10),
])
def test_brief_parameter_counts_within_3_percent(key, total_b, active_b):
    spec = load_model(key)
    assert derived.param_count_total(spec) == pytest.approx(total_b * 1e9, rel=0.03)
    if active_b is not None:
        conv = get_preset(key).published["active_embeddings"]
        assert derived.param_count_active(spec, embeddings=conv) == pytest.approx(active_b * 1e9, rel=0.03)


def test_gpt_oss_breakdown_matches_model_card():
    p = param_breakdown(load_model("gpt_oss_120b"))  # Table 1 of the gpt-oss model card
    assert p.routed_experts + p.router == pytest.approx(114.71e9, rel=0.002)
    assert p.attention == pytest.approx(0.96e9, rel=0.01)
    assert p.embedding + p.lm_head == pytest.approx(1.16e9, rel=0.01)
    # checkpoint: mxfp4 experts, bf16 attention/embeddings = 60.8 GiB (12.8 GiB for 20b)
    assert weight_bytes(load_model("gpt_oss_120b"), "fp4") / 2**30 == pytest.approx(60.8, rel=0.02)
    assert weight_bytes(load_model("gpt_oss_20b"), "fp4") / 2**30 == pytest.approx(12.8, rel=0.02)


def test_deepseek_excludes_mtp_and_parses_mla():
    spec = load_model("deepseek_v3")
    assert spec.num_layers == 61  # num_nextn_predict_layers is not added
    assert spec.mla.q_lora_rank == 1536 and spec.mla.kv_lora_rank == 512
    assert spec.moe.num_dense_layers == 3 and spec.moe.num_shared_experts == 1
    assert spec.native_dtype == "fp8"


def test_family_specific_parsing():
    maverick, scout = load_model("llama4_maverick"), load_model("llama4_scout")
    assert maverick.num_moe_layers == 24 and scout.num_moe_layers == 48  # interleave_moe_layer_step
    assert maverick.intermediate_size == 16384 and maverick.moe.shared_intermediate_size == 8192
    assert scout.sliding_window == 8192 and scout.num_sliding_layers == 36  # chunked attention
    oss = load_model("gpt_oss_120b")
    assert (oss.sliding_window, oss.num_sliding_layers) == (128, 18)
    assert oss.native_dtype == "fp4" and oss.quant_scope == "experts"
    assert oss.attention_bias and oss.mlp_bias and oss.moe.top_k == 4
    kimi = load_model("kimi_k2_5")
    assert kimi.mla is not None and kimi.moe.num_experts == 384 and kimi.native_dtype == "int4"
    assert load_model("qwen3_0_6b").tie_word_embeddings
    mm = load_model("minimax_m2_5")
    assert mm.moe.num_experts == 256 and mm.moe.top_k == 8 and mm.moe.num_shared_experts == 0


# ------------------------------------------------------------------ derived quantities


def test_kv_bytes_per_token():
    assert kv_bytes_per_token(load_model("llama3_1_70b"), "bf16") == 2 * 8 * 128 * 80 * 2 == 327680
    assert derived.kv_bytes_per_token(load_model("deepseek_v3"), "bf16") == (512 + 64) * 61 * 2
    assert kv_bytes_per_token(load_model("llama3_1_70b"), "fp8") == 163840


def test_kv_windowed_caps_sliding_layers():
    oss = load_model("gpt_oss_120b")
    full = kv_bytes_per_token(oss, "bf16")
    assert kv_bytes_per_token_windowed(oss, "bf16", 100) == full  # shorter than the window
    per_layer = full / oss.num_layers
    assert kv_bytes_sequence(oss, "bf16", 4096) == per_layer * (18 * 4096 + 18 * 128)
    assert kv_bytes_per_token_windowed(oss, "bf16", 4096) == pytest.approx(per_layer * (18 + 18 * 128 / 4096))
    dense = load_model("llama3_1_8b")
    assert kv_bytes_per_token_windowed(dense, "bf16", 10_000) == kv_bytes_per_token(dense, "bf16")


def test_weight_bytes_precisions():
    spec = load_model("llama3_1_70b")
    p = param_breakdown(spec)
    assert weight_bytes(spec, "bf16") == 2 * p.total
    emb = p.embedding + p.lm_head + p.norms
    assert weight_bytes(spec, "fp8") == pytest.approx((p.total - emb) * 1.0 + emb * 2.0)
    assert weight_bytes(spec, "fp4") < weight_bytes(spec, "fp8") < weight_bytes(spec, "bf16")
    with pytest.raises(ConfigError):
        weight_bytes(spec, "fp7")


def test_flops_per_token_dense_formula():
    spec = load_model("llama3_1_8b")
    p = param_breakdown(spec)
    linear = 2 * (p.non_embedding_active - p.norms) + 2 * spec.vocab_size * spec.hidden_size
    attn_decode = 4 * spec.num_layers * spec.num_attention_heads * spec.head_dim * 2048
    assert flops_per_token(spec, 2048, "decode") == pytest.approx(linear + attn_decode)
    assert flops_per_token(spec, 2048, "prefill") == pytest.approx(linear + attn_decode / 2)
    assert derived.flops_per_token(spec, 0, "decode") == pytest.approx(linear)
    assert linear == pytest.approx(2 * (p.total - p.embedding), rel=1e-3)  # input embedding is a lookup
    with pytest.raises(ConfigError):
        flops_per_token(spec, 2048, "train")


def test_mla_attention_flops_use_latent_dims_in_decode():
    spec = load_model("deepseek_v3")
    n, layers = spec.num_attention_heads, spec.num_layers
    assert attention_flops_per_token(spec, 1000, "decode") == 2 * n * (512 + 64 + 512) * 1000 * layers
    assert attention_flops_per_token(spec, 1000, "prefill") == 2 * n * (192 + 128) * 500 * layers


def test_sliding_layers_cap_attention_flops():
    oss = load_model("gpt_oss_120b")
    per_key = 4 * oss.num_attention_heads * oss.head_dim
    assert attention_flops_per_token(oss, 4096, "decode") == per_key * (18 * 4096 + 18 * 128)


def test_moe_active_counts_top_k_and_shared():
    spec = load_model("deepseek_v3")
    p = param_breakdown(spec)
    one = 3 * spec.hidden_size * spec.moe.expert_intermediate_size
    assert p.routed_experts_active == spec.num_moe_layers * 8 * one
    assert p.shared_experts == spec.num_moe_layers * one
    assert p.active("both") - p.active("once") == p.embedding
    assert p.active("once") - p.active("none") == p.lm_head


def test_tied_embeddings_counted_once():
    spec = load_model("qwen3_0_6b")
    p = param_breakdown(spec)
    assert p.lm_head == 0 and p.total == p.embedding + p.non_embedding_total
    assert p.active("once") == p.active("both") == p.non_embedding_active + p.embedding


# ------------------------------------------------------------------ names and paths


@pytest.mark.parametrize("name,key", [
    ("meta-llama/Llama-3.1-70B", "llama3_1_70b"),
    ("meta-llama/Meta-Llama-3.1-70B", "llama3_1_70b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama3_1_70b"),
    ("META-LLAMA/llama-3.1-70b", "llama3_1_70b"),
    ("Qwen/Qwen3-32B", "qwen3_32b"),
    ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
    ("openai/gpt-oss-120b", "gpt_oss_120b"),
    ("MiniMaxAI/MiniMax-M2.5", "minimax_m2_5"),
    ("Qwen/Qwen3-235B-A22B", "qwen3_235b_a22b"),
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "llama3_1_70b_fp8"),
    ("LLAMA3_1_70B", "llama3_1_70b"),
    ("  qwen3_8b ", "qwen3_8b"),
    ("gpt-oss-120b", "gpt_oss_120b"),
])
def test_name_resolution(name, key):
    assert load_model(name).key == key


def test_path_loading(tmp_path):
    src = CONFIG_DIR / "meta-llama--Meta-Llama-3.1-70B.json"
    by_path = load_model(str(src))
    assert by_path.hf_id == "meta-llama/Meta-Llama-3.1-70B"
    assert derived.kv_bytes_per_token(by_path, "bf16") == 327680
    assert derived.param_count_total(by_path) == derived.param_count_total(load_model("llama3_1_70b"))
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(src.read_text())
    spec = load_model(str(folder))
    assert spec.key == "my_model" and spec.hidden_size == 8192
    assert load_model_file(folder / "config.json", key="custom").key == "custom"


def test_multimodal_text_config_and_defaults():
    cfg = {"architectures": ["X"], "text_config": {"hidden_size": 1024, "num_hidden_layers": 4,
                                                   "num_attention_heads": 16, "vocab_size": 1000,
                                                   "intermediate_size": 4096, "max_position_embeddings": 2048}}
    spec = parse_config(cfg, key="x", hf_id="org/x", source="x.json")
    assert spec.num_kv_heads == 16 and spec.head_dim == 64  # kv heads = heads, head_dim = hidden/heads
    assert spec.architecture == "X" and spec.native_dtype == "bf16" and spec.moe is None


# ------------------------------------------------------------------ errors


def test_unknown_name_suggests_nearest():
    with pytest.raises(CatalogError) as err:
        load_model("llama3_1_7b")
    assert err.value.key == "model" and "llama3_1_70b" in err.value.fix
    with pytest.raises(CatalogError) as err:
        load_model("Qwen/Qwen3-33B")
    assert "Qwen/Qwen3-32B" in err.value.fix or "qwen3_32b" in err.value.fix


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"])
def test_missing_field_names_field_and_file(tmp_path, missing):
    cfg = json.loads((CONFIG_DIR / "Qwen--Qwen3-8B.json").read_text())
    del cfg[missing]
    path = tmp_path / "broken--model.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError) as err:
        load_model(str(path))
    assert missing in str(err.value) and str(path) in str(err.value)


def test_bad_json_names_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(CatalogError) as err:
        load_model_file(path)
    assert str(path) in str(err.value) and "JSON" in str(err.value)


def test_missing_file_and_bad_field_type(tmp_path):
    with pytest.raises(CatalogError, match="not found"):
        load_model(str(tmp_path / "nope.json"))
    cfg = json.loads((CONFIG_DIR / "Qwen--Qwen3-8B.json").read_text())
    cfg["hidden_size"] = "4096"
    path = tmp_path / "typed.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match="hidden_size"):
        load_model_file(path)


@pytest.mark.parametrize("extra,feature", [({"hybrid_override_pattern": "M-X*"}, "Mamba2 hybrid with block types"),
                                           ({"linear_attn_config": {"kda_layers": [1]}}, "Kimi delta attention"),
                                           ({"compress_ratios": [0, 4]}, "compressed sparse attention"),
                                           ({"block_configs": [{}]}, "NAS blocks")])
def test_unsupported_architectures_refused(tmp_path, extra, feature):
    cfg = json.loads((CONFIG_DIR / "Qwen--Qwen3-8B.json").read_text()) | extra
    path = tmp_path / "x--y.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(CatalogError, match=f"unsupported architecture: .*{feature}"):
        load_model_file(path)


def test_config_copies_match_file_names():
    files = {p.name for p in CONFIG_DIR.glob("*.json")}
    assert {get_preset(k).config for k in ALL_KEYS} <= files
    assert (CONFIG_DIR / "PROVENANCE.md").is_file()
    assert all("--" in name for name in files)
    quant_files = {p.name for p in CONFIG_DIR.glob("*.hf_quant_config.json")}
    assert {get_preset(k).quant_config for k in ALL_KEYS if get_preset(k).quant_config} <= quant_files
    assert Path(CONFIG_DIR, "deepseek-ai--DeepSeek-V3.json").read_text().count("num_nextn_predict_layers") == 1

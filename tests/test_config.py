"""Config composition: every option of every group composes against the schema."""

import pytest

from llmplan.errors import ConfigError
from llmplan.cli.hydra_app import compose, group_options, groups
from llmplan.cli.resolve import resolve_gpus, resolve_model, resolve_slos, to_app

ALL = [(g, o) for g in groups() for o in group_options(g)]


def test_groups_present():
    assert {"model", "gpu", "workload", "slo", "search", "engine", "deployment"} <= set(groups())


@pytest.mark.parametrize("group,option", ALL, ids=[f"{g}={o}" for g, o in ALL])
def test_every_option_composes_and_resolves(group, option):
    app = to_app(compose("plan", [f"{group}={option}"]))
    assert app is not None
    if group == "model":
        assert resolve_model(app).key == option
    if group == "gpu":
        assert resolve_gpus(app)
    if group == "slo":
        assert resolve_slos(app)


@pytest.mark.parametrize("name", ["plan", "simulate", "whatif"])
def test_primary_configs_compose(name):
    app = to_app(compose(name, []))
    assert app.model.name == "llama3_1_70b"
    assert app.engine.name == "vllm"


def test_default_is_the_documented_scenario():
    app = to_app(compose("plan", []))
    assert app.gpu.candidates == ["h100_sxm", "h200_sxm", "a100_sxm", "l40s"]
    assert app.slo.ttft_p90_ms == 1000 and app.slo.tpot_p90_ms == 50
    assert app.workload.preset == "chat" and app.workload.rate_rps > 0


@pytest.mark.parametrize("override,key", [
    ("slo.typo_ms=5", "slo.typo_ms"),
    ("search.tp=abc", "search.tp"),
    ("slo.ttft_p90_ms=fast", "slo.ttft_p90_ms"),
    ("gpu.usd_per_hour={h100_sxm: cheap}", "gpu.usd_per_hour.h100_sxm"),
    ("model=no_such_model_preset_xyz,other", None),
    ("workload=nope", "workload"),
])
def test_bad_overrides_fail_at_compose_naming_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        compose("plan", [override])
    if key:
        assert e.value.key == key, e.value.render()


def test_shortcuts_for_hf_ids_and_gpus():
    app = to_app(compose("plan", ["model=meta-llama/Llama-3.1-8B", "gpu=b200"]))
    assert resolve_model(app).key == "llama3_1_8b"
    assert [g.key for g in resolve_gpus(app)] == ["b200"]


def test_mapping_overrides_without_plus_prefix():
    app = to_app(compose("plan", ["gpu.usd_per_hour={h100_sxm: 2.5}", "gpu.max_gpus={h100_sxm: 8}",
                                  "gpu.spec_overrides={h100_sxm: {hbm_bw_gbps: 6700}}"]))
    g = {x.key: x for x in resolve_gpus(app)}
    assert g["h100_sxm"].usd_per_hour == 2.5 and g["h100_sxm"].hbm_bw_gbps == 6700
    assert app.gpu.max_gpus == {"h100_sxm": 8}


def test_yaml_that_does_not_parse(tmp_path):
    (tmp_path / "workload").mkdir()
    (tmp_path / "workload" / "bad.yaml").write_text("preset: chat\narrival: [poisson\n")
    with pytest.raises(ConfigError) as e:
        compose("plan", [f"hydra.searchpath=[file://{tmp_path}]", "workload=bad"])
    assert "bad.yaml" in e.value.render() and "line" in str(e.value)


def test_search_defaults_have_one_source():
    """conf/search/default.yaml sets nothing: the composed defaults are the optimizer's SearchSpace."""
    from dataclasses import asdict

    from llmplan.optimizer.planner import SearchSpace

    assert asdict(to_app(compose("plan", [])).search) == asdict(SearchSpace())
    assert asdict(to_app(compose("plan", ["search.finalists=5"])).search)["finalists"] == 5


def test_cfg_job_prints_the_composed_node(capsys):
    from llmplan.cli import main

    assert main(["plan", "--cfg", "job", "-p", "search", "search.finalists=7"]) == 0
    out = capsys.readouterr().out
    assert "finalists: 7" in out and "model:" not in out


def test_plus_on_a_schema_key_sets_it():
    assert to_app(compose("plan", ["+slo.ttft_p90_ms=321"])).slo.ttft_p90_ms == 321

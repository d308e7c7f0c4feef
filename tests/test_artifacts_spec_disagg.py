"""Speculative decoding and disaggregated pools in the deployable artifacts
(optimizer/launch/speculation.py, optimizer/launch/disagg.py).

Flags are checked against the engines' documented names:
  * vLLM v0.12.0 https://docs.vllm.ai/en/v0.12.0/features/spec_decode/ (``--speculative-config``
    JSON: method / model / num_speculative_tokens; methods from
    https://docs.vllm.ai/en/v0.11.0/api/vllm/config/speculative.html) and
    https://docs.vllm.ai/en/v0.12.0/features/nixl_connector_usage/ (``--kv-transfer-config``);
  * SGLang v0.5.x https://docs.sglang.io/advanced_features/speculative_decoding.html and
    https://docs.sglang.io/advanced_features/pd_disaggregation.html;
  * TensorRT-LLM 1.0.0 https://nvidia.github.io/TensorRT-LLM/1.0.0/examples/llm_speculative_decoding.html
    and examples/disaggregated/README.md at v1.0.0.
"""

from __future__ import annotations

import json
from dataclasses import replace
import pytest
import yaml
from test_artifacts import _flags

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.optimizer.launch import disagg, sglang, trtllm, vllm
from llmplan.optimizer.launch.spec import LaunchSpec, spec_from_allocation
from llmplan.optimizer.launch.speculation import SpecLaunch, from_candidate
from llmplan.optimizer.spec_candidates import SpecCandidate
from llmplan.optimizer.types import Allocation, Candidate, Evaluation, SLOTarget, WorkloadStats
from llmplan.sim.speculative import SpecConfig, default_acceptance
from llmplan.sim.types import EngineProfile, Parallelism, Precision

MODULES = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}
#: documented speculation / disaggregation names (sources in the module docstring)
VLLM_SPEC_KEYS = {"method", "model", "num_speculative_tokens"}
VLLM_METHODS = {"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "mtp"}
SGLANG_SPEC_FLAGS = {"--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
                     "--speculative-eagle-topk", "--speculative-num-draft-tokens"}
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}
TRT_SPEC_KEYS = {"decoding_type", "max_draft_len", "num_nextn_predict_layers", "speculative_model_dir",
                 "eagle3_one_model"}
TRT_ROUTER_KEYS = {"hostname", "port", "backend", "context_servers", "generation_servers"}


def _spec(engine: str, sp: SpecLaunch | None, **kw) -> LaunchSpec:
    base = dict(engine=engine, model_hf_id="meta-llama/Llama-3.1-8B-Instruct", model_native_dtype="bf16",
                gpu_key="h100_sxm", gpu_vendor="nvidia", tp=1, pp=1, ep=1, replicas=2, max_num_seqs=64,
                max_num_batched_tokens=8192, chunked_prefill=True, weights_dtype="bf16", kv_cache_dtype="bf16",
                gpu_memory_utilization=0.9, block_size=16, enable_prefix_caching=True, max_model_len=32768,
                name="demo", speculation=sp)
    return LaunchSpec(**(base | kw))


def _trt_options(cmd) -> dict:
    return yaml.safe_load(dict(cmd.files)[trtllm.OPTIONS_FILE])


EAGLE_CHAIN = SpecLaunch("eagle3", 3, 1, 4, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
EAGLE_TREE = SpecLaunch("eagle3", 4, 4, 16, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
MTP = SpecLaunch("mtp", 2, 1, 3, None)
DRAFT = SpecLaunch("draft_model", 5, 1, 6, "meta-llama/Llama-3.2-1B")


@pytest.mark.parametrize("sp", [EAGLE_CHAIN, MTP, DRAFT])
def test_vllm_speculative_config_is_the_documented_json(sp):
    cmd = vllm.command(_spec("vllm", sp))
    cfg = json.loads(_flags(cmd.argv)["--speculative-config"])
    assert set(cfg) <= VLLM_SPEC_KEYS and cfg["method"] in VLLM_METHODS
    assert cfg["method"] == sp.method and cfg["num_speculative_tokens"] == sp.k
    assert cfg.get("model") == sp.draft_hf_id           # MTP reads its modules from the target: no model
    assert not any("WARNING" in n for n in cmd.notes)


def test_vllm_cannot_express_an_eagle_tree_and_says_so():
    cmd = vllm.command(_spec("vllm", EAGLE_TREE))
    assert json.loads(_flags(cmd.argv)["--speculative-config"])["num_speculative_tokens"] == 4
    assert any("WARNING" in n and "topk 4" in n and "16 verify tokens" in n for n in cmd.notes)


@pytest.mark.parametrize("sp, algorithm", [(EAGLE_TREE, "EAGLE3"), (MTP, "NEXTN"), (DRAFT, "STANDALONE")])
def test_sglang_speculative_flags(sp, algorithm):
    f = _flags(sglang.command(_spec("sglang", sp)).argv)
    spec_flags = {k for k in f if k.startswith("--speculative")}
    assert spec_flags <= SGLANG_SPEC_FLAGS and f["--speculative-algorithm"] in SGLANG_ALGORITHMS
    assert f["--speculative-algorithm"] == algorithm
    assert (int(f["--speculative-num-steps"]), int(f["--speculative-eagle-topk"]),
            int(f["--speculative-num-draft-tokens"])) == (sp.k, sp.topk, sp.verify_tokens)
    assert f.get("--speculative-draft-model-path") == sp.draft_hf_id


def test_trtllm_speculative_config_in_the_options_file():
    mtp = _trt_options(trtllm.command(_spec("trtllm", MTP)))["speculative_config"]
    assert set(mtp) <= TRT_SPEC_KEYS and mtp == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}
    eagle = _trt_options(trtllm.command(_spec("trtllm", EAGLE_CHAIN)))["speculative_config"]
    assert set(eagle) <= TRT_SPEC_KEYS and eagle["decoding_type"] == "Eagle" and eagle["max_draft_len"] == 3
    assert eagle["speculative_model_dir"] == EAGLE_CHAIN.draft_hf_id


def test_trtllm_draft_model_is_refused_in_a_note_not_a_guessed_option():
    cmd = trtllm.command(_spec("trtllm", DRAFT))
    assert "speculative_config" not in _trt_options(cmd)
    assert any("WARNING" in n and "draft model" in n and "Llama-3.2-1B" in n for n in cmd.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_unknown_eagle3_head_is_a_loud_placeholder(engine):
    sp = SpecLaunch("eagle3", 3, 1, 4, None)
    cmd = MODULES[engine].command(_spec(engine, sp, model_hf_id="meta-llama/Llama-3.1-8B"))
    text = " ".join(cmd.argv) + " ".join(t for _, t in cmd.files)
    assert "<EAGLE-3 head of meta-llama/Llama-3.1-8B>" in text
    assert any("WARNING" in n and "Llama-3.1-8B-Instruct" in n for n in cmd.notes)


def test_spec_from_allocation_carries_the_planned_speculation():
    gpu, model = get_gpu("h100_sxm"), load_model("llama3_1_8b")
    cfg = SpecConfig("eagle3", 3, default_acceptance("eagle3"))
    cand = SpecCandidate(gpu, Parallelism(1, 1, 1), Precision("bf16", "bf16"), 64, gpu.usd_per_hour, spec=cfg)
    wl = WorkloadStats(rate_rps=2.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=6000)
    s = spec_from_allocation(Allocation(Evaluation(cand, "ok", capacity_rps=3.0, kv_capacity_tokens=100000), 1,
                                        share_rps=2.0), model, EngineProfile(), wl)
    assert s.speculation == from_candidate(cand, model.hf_id)
    assert (s.speculation.method, s.speculation.k, s.speculation.verify_tokens) == ("eagle3", 3, 4)
    plain = Candidate(gpu, Parallelism(1, 1, 1), Precision("bf16", "bf16"), 64, gpu.usd_per_hour)
    assert from_candidate(plain, model.hf_id) is None


# --------------------------------------------------------------------------- disaggregated pools
def _disagg_block(recommended: bool, decode_tp: int = 2, decode_ep: int = 1) -> dict:
    """A plan.json ``disaggregated`` block as optimizer/disagg_candidates.py writes it."""
    pool = dict(gpu="h200_sxm", pp=1, precision="fp8", kv_cache_dtype="fp8")
    return {"mode": "disaggregated", "xpyd": "3P2D", "total_usd_per_hour": 40.5, "total_gpus": 3 + 2 * decode_tp,
            "recommended": recommended,
            "pools": [pool | dict(role="prefill", workers=3, gpus_per_worker=1, tp=1, ep=1, max_num_seqs=64),
                      pool | dict(role="decode", workers=2, gpus_per_worker=decode_tp, tp=decode_tp, ep=decode_ep,
                                  max_num_seqs=256, decode_batch=192, tpot_ms=30.0)]}


def _build(engine: str, block: dict):
    wl = WorkloadStats(rate_rps=12.0, mean_input_tokens=2000, mean_output_tokens=300, max_request_tokens=8000)
    return disagg.build(block, load_model("llama3_1_70b"), EngineProfile(name=engine), wl,
                        [SLOTarget("ttft", 90.0, 1000.0), SLOTarget("tpot", 90.0, 50.0)], {"h200_sxm": "nvidia"})


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_disagg_pools_keep_their_shapes_and_role_flags(engine):
    a = _build(engine, _disagg_block(False))
    pools = {p.role: p for p in a.pools}
    assert (pools["prefill"].spec.tp, pools["prefill"].spec.replicas) == (1, 3)
    assert (pools["decode"].spec.tp, pools["decode"].spec.replicas, pools["decode"].spec.max_num_seqs) == (2, 2, 192)
    for role, p in pools.items():
        f = _flags(p.launch.argv)
        if engine == "vllm":
            assert int(f["--tensor-parallel-size"]) == p.spec.tp
            assert json.loads(f["--kv-transfer-config"]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        elif engine == "sglang":
            assert int(f["--tp-size"]) == p.spec.tp and f["--disaggregation-mode"] == role
        else:
            assert int(f["--tp_size"]) == p.spec.tp
            opts = _trt_options(p.launch)
            assert opts["cache_transceiver_config"] == {"backend": "DEFAULT"}
            assert opts.get("disable_overlap_scheduler", False) is (role == "prefill")
        assert any("not searched with disaggregation" in n for n in p.launch.notes)


def test_disagg_routers_list_every_worker():
    sg = _flags(_build("sglang", _disagg_block(False)).router.argv)
    assert "--pd-disaggregation" in sg
    argv = list(_build("sglang", _disagg_block(False)).router.argv)
    assert argv.count("--prefill") == 3 and argv.count("--decode") == 2
    trt = _build("trtllm", _disagg_block(False)).router
    assert trt.argv[:2] == ("trtllm-serve", "disaggregated")
    cfg = yaml.safe_load(dict(trt.files)[disagg.TRT_ROUTER_FILE])
    assert set(cfg) <= TRT_ROUTER_KEYS
    assert cfg["context_servers"]["num_instances"] == len(cfg["context_servers"]["urls"]) == 3
    assert cfg["generation_servers"]["num_instances"] == len(cfg["generation_servers"]["urls"]) == 2
    v = list(_build("vllm", _disagg_block(False)).router.argv)
    assert len(v[v.index("--prefiller-hosts") + 1:v.index("--prefiller-ports")]) == 3


def test_disagg_manifest_requests_each_pools_gpus():
    a = _build("vllm", _disagg_block(True, decode_tp=16, decode_ep=16))
    assert _flags(a.bench_argv)["--base-url"] == "http://llama3-1-70b-disagg-router:8000"
    doc = yaml.safe_load(a.manifest_yaml)
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in doc["items"]}
    pre = by_name[("StatefulSet", "llama3-1-70b-prefill")]
    assert pre["spec"]["replicas"] == 3
    res = pre["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert res == 1
    dec = by_name[("LeaderWorkerSet", "llama3-1-70b-decode")]    # 16 GPUs: two 8-GPU nodes per worker
    assert dec["spec"]["replicas"] == 2 and dec["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert ("Deployment", "llama3-1-70b-disagg-router") in by_name
    assert by_name[("Service", "llama3-1-70b-prefill")]["spec"]["clusterIP"] == "None"
    assert ("Service", "llama3-1-70b-decode") not in by_name    # the LeaderWorkerSet's own headless Service


@pytest.mark.parametrize("recommended", [True, False])
def test_disagg_files_say_they_are_the_alternative(tmp_path, recommended):
    block = _disagg_block(recommended)
    entry = disagg.write(_build("sglang", block), tmp_path, block)
    assert entry["dir"] == "deploy/disagg" and (tmp_path / "deploy" / "disagg" / "router.sh").is_file()
    assert entry["xpyd"] == "3P2D" and entry["recommended"] is recommended
    for rel in entry["files"]:
        text = (tmp_path / rel).read_text()
        assert str(tmp_path) not in text
        if rel.endswith(".sh"):  # plan.json's recommended = chosen by optimizer/mode_select.py
            assert ("DISAGGREGATED deployment" in text) is recommended
            assert ("DISAGGREGATED alternative" in text) is not recommended
            assert ("CHOSEN deployment" in text) is recommended
    bench = _flags(entry["benchmark_argv"])
    assert bench["--base-url"] == "http://llama3-1-70b-disagg-router:8000" and float(bench["--request-rate"]) == 12.0


def test_no_disagg_artifacts_without_pools():
    assert _build("vllm", {}) is None
    assert _build("vllm", {"mode": "disaggregated", "pools": []}) is None


def test_plan_writes_the_disaggregated_alternative_it_reports(tmp_path):
    """`llmplan plan` (small search): deploy/disagg/ matches plan.json's ``disaggregated`` pools."""
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan

    run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast"]), tmp_path)
    d = json.loads((tmp_path / "plan.json").read_text())
    if not d.get("disaggregated"):
        assert "disaggregated" not in (d["deploy"] or {}) and not (tmp_path / "deploy" / "disagg").exists()
        pytest.skip("this search found no disaggregated option")
    entry = d["deploy"]["disaggregated"]
    planned = {p["role"]: p for p in d["disaggregated"]["pools"]}
    for p in entry["pools"]:
        assert (p["workers"], p["tp"], p["pp"], p["ep"]) == tuple(planned[p["role"]][k] for k in
                                                                  ("workers", "tp", "pp", "ep"))
    assert all((tmp_path / f).is_file() for f in entry["files"])
    assert entry["recommended"] is d["disaggregated"]["recommended"]


def test_disagg_option_notes_reach_the_workers_and_speculation_is_never_dropped_silently():
    block = _disagg_block(False) | {"notes": ["no TTFT target: the prefill pool is sized at 95% load"]}
    for p in _build("sglang", block).pools:
        assert "no TTFT target: the prefill pool is sized at 95% load" in p.launch.notes
    spec = _build("sglang", block | {"speculation": {"method": "mtp", "k": 2}})
    for p in spec.pools:
        assert not any(a.startswith("--speculative") for a in p.launch.argv)
        assert any(n.startswith("WARNING") and "'mtp'" in n for n in p.launch.notes)
        assert not any("not searched" in n for n in p.launch.notes)


def test_mtp_beyond_the_checkpoints_modules_is_stated():
    gpu, model = get_gpu("h200_sxm"), load_model("deepseek_v3")
    cand = SpecCandidate(gpu, Parallelism(8, 1, 8), Precision("fp8", "fp8"), 64, gpu.usd_per_hour,
                         spec=SpecConfig("mtp", 3, default_acceptance("mtp")))
    wl = WorkloadStats(rate_rps=2.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=6000)
    s = spec_from_allocation(Allocation(Evaluation(cand, "ok", capacity_rps=3.0, kv_capacity_tokens=100000), 1,
                                        share_rps=2.0), model, EngineProfile(), wl)
    assert s.speculation.mtp_modules == 1          # DeepSeek-V3 config.json: num_nextn_predict_layers 1
    notes = " ".join(vllm.command(s).notes)
    assert "exceeds the checkpoint's 1 MTP module" in notes
    one = replace(s, speculation=replace(s.speculation, k=1))
    assert "exceeds" not in " ".join(vllm.command(one).notes)

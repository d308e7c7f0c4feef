"""Launch commands, Kubernetes manifests and benchmark commands (optimizer/launch, optimizer/artifacts).

Each engine's flags are checked against a table of its documented flags (doc URL + version
below); values are checked against the deployment they launch."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
import yaml

from llmplan.errors import ConfigError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.optimizer import artifacts
from llmplan.optimizer.launch import benchmark, kubernetes, sglang, trtllm, vllm
from llmplan.optimizer.launch.spec import LaunchSpec, spec_from_allocation
from llmplan.optimizer.types import Allocation, Candidate, Evaluation, Selection, SLOTarget, WorkloadStats
from llmplan.sim.types import EngineProfile, Parallelism, Precision

#: documented flags, per engine (source: URL, version)
DOCUMENTED = {
    # vLLM v0.12.0, https://docs.vllm.ai/en/v0.12.0/cli/serve/ (engine arguments) and
    # https://docs.vllm.ai/en/v0.12.0/serving/expert_parallel_deployment/
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
             "--max-num-seqs", "--max-num-batched-tokens", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
             "--kv-cache-dtype", "--quantization", "--gpu-memory-utilization", "--block-size",
             "--enable-prefix-caching", "--no-enable-prefix-caching", "--max-model-len", "--host", "--port",
             "--distributed-executor-backend", "--async-scheduling", "--no-async-scheduling"},
    # SGLang server arguments, https://docs.sglang.io/advanced_features/server_arguments.html (v0.5.x)
    "sglang": {"--model-path", "--tp-size", "--pp-size", "--ep-size", "--dp-size", "--enable-dp-attention",
               "--max-running-requests", "--chunked-prefill-size", "--max-prefill-tokens", "--enable-mixed-chunk",
               "--kv-cache-dtype", "--quantization", "--mem-fraction-static", "--disable-radix-cache",
               "--context-length", "--host", "--port", "--nnodes", "--node-rank", "--dist-init-addr"},
    # TensorRT-LLM 1.0.0, https://nvidia.github.io/TensorRT-LLM/1.0.0/commands/trtllm-serve/trtllm-serve.html
    "trtllm": {"--backend", "--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
               "--max_seq_len", "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options", "--host", "--port"},
    # vLLM v0.11.2, https://docs.vllm.ai/en/v0.11.2/cli/bench/serve/
    "bench": {"--backend", "--base-url", "--endpoint", "--model", "--dataset-name", "--random-input-len",
              "--random-output-len", "--ignore-eos", "--request-rate", "--num-prompts", "--percentile-metrics",
              "--metric-percentiles", "--seed", "--save-result", "--burstiness", "--max-concurrency"},
}
#: documented value choices
KV_CHOICES = {"vllm": {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}, "sglang": {"auto", "fp8_e4m3", "fp8_e5m2"}}
#: TensorRT-LLM LLM-API options (TorchLlmArgs / KvCacheConfig fields, TensorRT-LLM 1.0.0 API reference)
TRT_OPTION_KEYS = {"enable_chunked_prefill", "enable_attention_dp", "kv_cache_config"}
TRT_KV_KEYS = {"dtype", "enable_block_reuse"}
MODULES = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}


def _spec(**kw) -> LaunchSpec:
    base = dict(engine="vllm", model_hf_id="meta-llama/Llama-3.1-70B", model_native_dtype="bf16", gpu_key="h100_sxm",
                gpu_vendor="nvidia", tp=4, pp=1, ep=1, replicas=3, max_num_seqs=128, max_num_batched_tokens=4096,
                chunked_prefill=True, weights_dtype="bf16", kv_cache_dtype="bf16", gpu_memory_utilization=0.9,
                block_size=16, enable_prefix_caching=True, max_model_len=32768, name="demo")
    return LaunchSpec(**(base | kw))


def _flags(argv) -> dict[str, str | None]:
    out, argv = {}, list(argv)
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("shape", [dict(tp=4), dict(tp=8, ep=8, chunked_prefill=False, kv_cache_dtype="fp8",
                                                     weights_dtype="fp8", enable_prefix_caching=False),
                                   dict(tp=8, pp=2, ep=2, attention_dp=True)])
def test_flags_are_documented(engine, shape):
    cmd = MODULES[engine].command(_spec(engine=engine, **shape))
    assert set(_flags(cmd.argv)) <= DOCUMENTED[engine], set(_flags(cmd.argv)) - DOCUMENTED[engine]
    assert cmd.doc.startswith(("vLLM v0.12.0", "SGLang", "TensorRT-LLM 1.0.0"))


def test_vllm_values():
    s = _spec(tp=8, pp=2, max_num_seqs=96, max_num_batched_tokens=2048, kv_cache_dtype="fp8", weights_dtype="fp8")
    f = _flags(vllm.command(s).argv)
    assert vllm.command(s).argv[:3] == ("vllm", "serve", s.model_hf_id)
    assert (f["--tensor-parallel-size"], f["--pipeline-parallel-size"]) == ("8", "2")
    assert (f["--max-num-seqs"], f["--max-num-batched-tokens"]) == ("96", "2048")
    assert f["--kv-cache-dtype"] == "fp8" and f["--kv-cache-dtype"] in KV_CHOICES["vllm"]
    assert f["--quantization"] == "fp8"     # bf16 checkpoint quantized at load time
    assert "--enable-chunked-prefill" in f and "--no-enable-chunked-prefill" not in f
    assert "--distributed-executor-backend" in f   # 16 GPUs span two 8-GPU nodes
    f = _flags(vllm.command(replace(s, chunked_prefill=False, enable_prefix_caching=False)).argv)
    assert "--no-enable-chunked-prefill" in f and "--no-enable-prefix-caching" in f


def test_vllm_expert_parallel_and_what_it_cannot_express():
    cmd = vllm.command(_spec(tp=8, ep=8))
    assert "--enable-expert-parallel" in cmd.argv and not any("WARNING" in n for n in cmd.notes)
    cmd = vllm.command(_spec(tp=8, ep=2))
    assert any("WARNING" in n and "ep=2" in n for n in cmd.notes)


def test_vllm_attention_dp_uses_the_same_gpus():
    f = _flags(vllm.command(_spec(tp=8, ep=8, attention_dp=True)).argv)
    assert (f["--tensor-parallel-size"], f["--data-parallel-size"]) == ("1", "8")


def test_sglang_values():
    s = _spec(engine="sglang", tp=8, ep=4, max_num_seqs=64, max_num_batched_tokens=16384, kv_cache_dtype="fp8",
              chunked_prefill=False, enable_prefix_caching=False)
    f = _flags(sglang.command(s).argv)
    assert sglang.command(s).argv[:3] == ("python3", "-m", "sglang.launch_server")
    assert (f["--tp-size"], f["--ep-size"], f["--max-running-requests"]) == ("8", "4", "64")
    assert f["--chunked-prefill-size"] == f["--max-prefill-tokens"] == "16384"
    assert f["--kv-cache-dtype"] == "fp8_e4m3" and f["--kv-cache-dtype"] in KV_CHOICES["sglang"]
    assert "--enable-mixed-chunk" not in f and "--disable-radix-cache" in f
    assert "--enable-mixed-chunk" in _flags(sglang.command(replace(s, chunked_prefill=True)).argv)
    assert "--quantization" not in f   # weights as shipped


def test_trtllm_values_and_options_file():
    s = _spec(engine="trtllm", tp=8, ep=8, max_num_seqs=512, max_num_batched_tokens=8192, kv_cache_dtype="fp8",
              weights_dtype="fp8", enable_prefix_caching=False)
    cmd = trtllm.command(s)
    f = _flags(cmd.argv)
    assert (f["--tp_size"], f["--ep_size"], f["--max_batch_size"], f["--max_num_tokens"]) == ("8", "8", "512", "8192")
    assert f["--backend"] == "pytorch"
    [(name, text)] = cmd.files
    assert f["--extra_llm_api_options"] == name
    opts = yaml.safe_load(text)
    assert set(opts) <= TRT_OPTION_KEYS and set(opts["kv_cache_config"]) <= TRT_KV_KEYS
    assert opts["kv_cache_config"] == {"dtype": "fp8", "enable_block_reuse": False}
    assert opts["enable_chunked_prefill"] is True
    assert any("ModelOpt" in n for n in cmd.notes)   # no load-time quantization in TensorRT-LLM


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_no_speculation_flags_when_the_plan_has_none(engine):
    cmd = MODULES[engine].command(_spec(engine=engine))
    text = " ".join(cmd.argv) + " ".join(t for _, t in cmd.files) + " ".join(cmd.notes)
    assert "speculative" not in text and "not modelled" not in text


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_widening_an_fp8_checkpoint_is_flagged(engine):
    cmd = MODULES[engine].command(_spec(engine=engine, model_native_dtype="fp8", weights_dtype="bf16"))
    assert "--quantization" not in cmd.argv and any("ships fp8 weights" in n for n in cmd.notes)
    same = MODULES[engine].command(_spec(engine=engine, model_native_dtype="fp8", weights_dtype="fp8"))
    assert "--quantization" not in same.argv and not any("WARNING" in n for n in same.notes)


def test_fp4_on_a_bf16_checkpoint_is_flagged_not_silently_dropped():
    for engine in ("vllm", "sglang"):
        cmd = MODULES[engine].command(_spec(engine=engine, weights_dtype="fp4"))
        assert "--quantization" not in cmd.argv and any("WARNING" in n and "fp4" in n for n in cmd.notes)


# ---------------------------------------------------------------- Kubernetes

def _k8s(spec):
    cmd = artifacts.launch_command(spec)
    doc = yaml.safe_load(kubernetes.manifest(spec, cmd))
    assert doc["kind"] == "List"
    return {i["kind"]: i for i in doc["items"]}, cmd


def test_deployment_requests_gpus_per_replica():
    items, cmd = _k8s(_spec(tp=4, pp=2, replicas=3))
    dep = items["Deployment"]
    assert dep["spec"]["replicas"] == 3
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8 == c["resources"]["requests"]["nvidia.com/gpu"]
    assert c["command"] == list(cmd.argv)
    assert items["Service"]["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_multinode_replica_is_a_leaderworkerset():
    for engine in ("vllm", "sglang", "trtllm"):
        items, _ = _k8s(_spec(engine=engine, tp=8, pp=2, replicas=2))
        lws = items["LeaderWorkerSet"]
        t = lws["spec"]["leaderWorkerTemplate"]
        assert lws["spec"]["replicas"] == 2 and t["size"] == 2
        for role in ("leaderTemplate", "workerTemplate"):
            [c] = t[role]["spec"]["containers"]
            assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert "Deployment" not in items
        # the LWS's own headless Service takes its name: the client Service must not collide with it
        assert items["Service"]["metadata"]["name"] != lws["metadata"]["name"]
        bench, _ = benchmark.command(_spec(engine=engine, tp=8, pp=2), 1.0, 100, 10, [90.0])
        assert _flags(bench)["--base-url"] == f"http://{items['Service']['metadata']['name']}:8000"


def test_uneven_replica_split_keeps_pods_alike():
    s = _spec(tp=1, pp=9)   # 9 GPUs, 8 per node: 3 pods of 3, never 2 pods of 4 (8 GPUs)
    assert (s.nodes_per_replica, s.gpus_per_pod) == (3, 3)
    assert (_spec(tp=4, pp=3).nodes_per_replica, _spec(tp=4, pp=3).gpus_per_pod) == (2, 6)


def test_gb200_nodes_hold_four_gpus_and_amd_uses_its_resource():
    items, _ = _k8s(_spec(gpu_key="gb200", gpus_per_node=4, tp=8))
    t = items["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    assert t["size"] == 2 and t["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    items, cmd = _k8s(_spec(gpu_key="mi300x", gpu_vendor="amd", tp=2))
    assert items["Deployment"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 2}
    assert any("ROCm" in n for n in cmd.notes)


def test_trtllm_manifest_mounts_its_options():
    items, _ = _k8s(_spec(engine="trtllm"))
    cm = items["ConfigMap"]
    assert yaml.safe_load(cm["data"][trtllm.OPTIONS_FILE])["enable_chunked_prefill"] is True
    [c] = items["Deployment"]["spec"]["template"]["spec"]["containers"]
    path = _flags(c["command"])["--extra_llm_api_options"]
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config")
    assert path == f"{mount}/{trtllm.OPTIONS_FILE}"


# ---------------------------------------------------------------- benchmark

def test_benchmark_matches_the_workload():
    argv, _ = benchmark.command(_spec(), 5.0, 1000.4, 199.6, [90.0, 99.0], arrival_cv=2.0, seed=7)
    f = _flags(argv)
    assert set(f) <= DOCUMENTED["bench"]
    assert (f["--random-input-len"], f["--random-output-len"]) == ("1000", "200")
    assert f["--request-rate"] == "5" and f["--num-prompts"] == "600"   # 2 minutes of traffic
    assert f["--burstiness"] == "0.25"                                   # gamma shape 1/cv^2
    assert f["--metric-percentiles"] == "50,90,99" and f["--seed"] == "7"
    assert f["--dataset-name"] == "random" and f["--base-url"] == "http://demo:8000"
    argv, _ = benchmark.command(_spec(), 1.0, 100, 100, [90.0])
    assert _flags(argv)["--num-prompts"] == "200" and "--burstiness" not in argv
    argv, notes = benchmark.command(_spec(), 2.0, 100, 100, [90.0], concurrency=64, arrival="trace")
    f = _flags(argv)
    assert set(f) <= DOCUMENTED["bench"]
    assert (f["--max-concurrency"], f["--request-rate"]) == ("64", "inf") and "--burstiness" not in f
    assert any("trace" in n for n in notes)


# ---------------------------------------------------------------- from a plan's allocation

def _allocation(engine_chunked: bool, kv_tokens: int):
    gpu = get_gpu("h100_sxm")
    cand = Candidate(gpu, Parallelism(2, 1, 1), Precision("fp8", "fp8"), 128, gpu.usd_per_hour)
    ev = Evaluation(cand, "ok", capacity_rps=3.0, kv_capacity_tokens=kv_tokens)
    wl = WorkloadStats(rate_rps=5.0, mean_input_tokens=1000, mean_output_tokens=200, max_request_tokens=6000)
    return Allocation(ev, 2, share_rps=2.5), wl, EngineProfile(chunked_prefill=engine_chunked, max_num_batched_tokens=8192)


def test_spec_from_allocation_prefill_first_budget_and_context():
    model = load_model("llama3_1_70b")
    a, wl, eng = _allocation(False, 500_000)
    s = spec_from_allocation(a, model, replace(eng, name="sglang"), wl)
    # prefill-first: budget raised to 2 x the longest request (sim.deployment.replica_limits)
    assert s.max_num_batched_tokens == 12000 and s.max_model_len == 12000
    assert any("context length 12000" in n for n in s.notes)
    assert (s.tp, s.replicas, s.max_num_seqs, s.weights_dtype, s.kv_cache_dtype) == (2, 2, 128, "fp8", "fp8")


def test_spec_from_allocation_caps_context_at_kv_capacity():
    model = load_model("llama3_1_70b")
    a, wl, eng = _allocation(True, 50_000)
    s = spec_from_allocation(a, model, eng, wl)
    assert s.max_model_len == 50_000 and any("KV capacity" in n for n in s.notes)
    with pytest.raises(ConfigError):
        spec_from_allocation(a, model, replace(eng, name="tgi"), wl)


def test_write_artifacts(tmp_path):
    model = load_model("llama3_1_70b")
    a, wl, eng = _allocation(True, 500_000)
    sel = Selection(True, [a], total_usd_per_hour=2 * a.evaluation.candidate.usd_per_replica_hour, total_gpus=4, status="ok")
    arts = artifacts.build(sel, model, eng, wl, [SLOTarget("ttft", 90, 1000), SLOTarget("tpot", 90, 50)])
    index = artifacts.write(arts, tmp_path)
    [pool] = index["pools"]
    assert pool["load_rps"] == pytest.approx(5.0)
    for rel in pool["files"]:
        assert not rel.startswith("/") and (tmp_path / rel).is_file()
        assert str(tmp_path) not in (tmp_path / rel).read_text()
    launch = (tmp_path / pool["files"][0]).read_text()
    body = "\n".join(ln for ln in launch.splitlines() if not ln.startswith("#")).replace("\\\n", " ")
    assert tuple(shlex.split(body)) == tuple(pool["launch_argv"])
    assert not (tmp_path / "deploy" / "deploy.json").exists()   # written once, by write_index
    artifacts.write_index(tmp_path, index)
    assert json.loads((tmp_path / "deploy" / "deploy.json").read_text()) == index
    assert artifacts.build(Selection(False, [], 0.0, 0, "infeasible"), model, eng, wl, []) == []

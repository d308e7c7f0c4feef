"""Artifacts of the plan's disaggregated alternative (plan.json ``disaggregated``: xPyD pools).

Written under ``deploy/disagg/``: per role (prefill, decode) a launch script with that pool's
GPU and parallel shape plus the engine's disaggregation flags, the router that pairs them
(``router.sh``, with the TensorRT-LLM router config where that engine needs one), one
Kubernetes manifest (both pools as StatefulSets / LeaderWorkerSets with GPU requests, a
router Deployment and its Service) and a benchmark at the plan's whole rate against the router.

Disaggregation flags follow:
  * vLLM v0.12.0 NixlConnector guide, https://docs.vllm.ai/en/v0.12.0/features/nixl_connector_usage/ :
    ``--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'`` on both
    roles; the guide's proxy (``toy_proxy_server.py`` with ``--prefiller-hosts/--prefiller-ports/
    --decoder-hosts/--decoder-ports``, from vLLM's tests/v1/kv_connector/nixl_integration/) routes;
  * SGLang PD disaggregation (v0.5.x), https://docs.sglang.io/advanced_features/pd_disaggregation.html :
    ``--disaggregation-mode prefill|decode`` and
    ``python3 -m sglang_router.launch_router --pd-disaggregation --prefill URL --decode URL``;
  * TensorRT-LLM 1.0.0 disaggregated serving,
    https://github.com/NVIDIA/TensorRT-LLM/blob/v1.0.0/examples/disaggregated/README.md :
    workers are ``trtllm-serve`` with ``cache_transceiver_config: {backend: DEFAULT}`` in their
    options file (``disable_overlap_scheduler: true`` on the context servers), and
    ``trtllm-serve disaggregated -c <config>`` with ``context_servers`` / ``generation_servers``
    (``num_instances``, ``urls``).
Worker i of a pool is addressed as ``<pool>-<i>.<pool>:<port>``: a StatefulSet with a headless
Service (one node per worker) or a LeaderWorkerSet (its leaders are named the same way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional

import yaml

from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer import artifacts
from llmplan.optimizer.launch import benchmark, kubernetes
from llmplan.optimizer.launch.spec import (DEFAULT_GPUS_PER_NODE, GPUS_PER_NODE, ENGINES, LaunchCommand,
                                           LaunchSpec, k8s_name)
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.deployment import replica_limits
from llmplan.sim.types import EngineProfile

ROLES = ("prefill", "decode")
VLLM_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
TRT_ROUTER_FILE = "disagg_config.yaml"
DOCS = {
    "vllm": "vLLM v0.12.0, https://docs.vllm.ai/en/v0.12.0/features/nixl_connector_usage/",
    "sglang": "SGLang PD disaggregation (v0.5.x), https://docs.sglang.io/advanced_features/pd_disaggregation.html",
    "trtllm": "TensorRT-LLM 1.0.0, https://github.com/NVIDIA/TensorRT-LLM/blob/v1.0.0/examples/disaggregated/README.md",
}
NOT_SEARCHED = ("speculative decoding is not searched with disaggregation (optimizer/disagg_candidates.py leaves "
                "speculating shapes out): these workers decode without it")


@dataclass(frozen=True)
class DisaggPool:
    role: str
    spec: LaunchSpec
    launch: LaunchCommand


@dataclass(frozen=True)
class DisaggArtifacts:
    xpyd: str
    recommended: bool
    pools: tuple[DisaggPool, ...]
    router: LaunchCommand
    router_name: str
    manifest_yaml: str
    bench_argv: tuple[str, ...]
    bench_notes: tuple[str, ...]
    rate_rps: float


def _pool_spec(p: Mapping, model: ModelSpec, engine: EngineProfile, wl: WorkloadStats, vendors: Mapping[str, str],
               router: str) -> LaunchSpec:
    role = p["role"]
    seqs = int(p.get("decode_batch") or p["max_num_seqs"]) if role == "decode" else int(p["max_num_seqs"])
    eng, max_len = replica_limits(replace(engine, max_num_seqs=seqs), model, wl.max_request_tokens)
    notes = [f"{role} pool of the disaggregated alternative: {p['workers']} worker(s), each this command "
             f"(TP={p['tp']} PP={p['pp']} EP={p['ep']}, {p['gpus_per_worker']} GPU(s)); clients talk to the router "
             f"'{router}', not to this pool"]
    if role == "decode":
        notes.append(f"max batch {seqs}: the decode batch whose TPOT ({p.get('tpot_ms')} ms) sized this pool")
    return LaunchSpec(
        engine=engine.name, model_hf_id=model.hf_id, model_native_dtype=model.native_dtype, gpu_key=p["gpu"],
        gpu_vendor=vendors.get(p["gpu"], "nvidia"), tp=int(p["tp"]), pp=int(p["pp"]), ep=int(p["ep"]),
        replicas=int(p["workers"]), max_num_seqs=seqs, max_num_batched_tokens=eng.max_num_batched_tokens,
        chunked_prefill=eng.chunked_prefill, weights_dtype=str(p["precision"]).split()[0],
        kv_cache_dtype=p["kv_cache_dtype"], gpu_memory_utilization=eng.gpu_memory_utilization,
        block_size=eng.block_size, enable_prefix_caching=eng.enable_prefix_caching, max_model_len=int(max_len),
        gpus_per_node=GPUS_PER_NODE.get(p["gpu"], DEFAULT_GPUS_PER_NODE), name=k8s_name(f"{model.key}-{role}"),
        notes=tuple(notes), batch_wait_timeout_iters=eng.batch_wait_timeout_iters,
        batch_wait_max_tokens_ratio=eng.batch_wait_max_tokens_ratio)


def worker_urls(s: LaunchSpec) -> list[str]:
    """Stable per-worker addresses (StatefulSet / LeaderWorkerSet pod DNS under the headless Service)."""
    return [f"{s.name}-{i}.{s.name}:{s.port}" for i in range(s.replicas)]


def plan_notes(d: Mapping) -> tuple[str, ...]:
    """The option's own notes (plan.json), and what the workers do not configure."""
    spec = d.get("speculation")
    extra = (f"WARNING: plan.json gives this option speculation {spec}, which these artifacts do not configure",) \
        if spec else (NOT_SEARCHED,)
    return tuple(str(n) for n in d.get("notes") or ()) + extra


def role_command(role: str, s: LaunchSpec, notes: tuple[str, ...] = (NOT_SEARCHED,)) -> LaunchCommand:
    """The aggregated command of this shape plus the engine's disaggregation settings."""
    base = artifacts.launch_command(s)
    argv, files = list(base.argv), list(base.files)
    if s.engine == "vllm":
        argv += ["--kv-transfer-config", json.dumps(VLLM_KV_TRANSFER, sort_keys=True)]
    elif s.engine == "sglang":
        argv += ["--disaggregation-mode", role]
    else:
        name, text = files[0]
        opts = yaml.safe_load(text) | {"cache_transceiver_config": {"backend": "DEFAULT"}}
        if role == "prefill":
            opts["disable_overlap_scheduler"] = True
        files[0] = (name, yaml.safe_dump(opts, sort_keys=True))
    return LaunchCommand(tuple(argv), tuple(files), base.notes + notes, base.doc + "; " + DOCS[s.engine])


def router_command(engine: str, prefill: LaunchSpec, decode: LaunchSpec, port: int = 8000) -> LaunchCommand:
    p_urls, d_urls = worker_urls(prefill), worker_urls(decode)
    if engine == "sglang":
        argv = ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for u in p_urls:
            argv += ["--prefill", f"http://{u}"]
        for u in d_urls:
            argv += ["--decode", f"http://{u}"]
        return LaunchCommand(tuple(argv + ["--host", "0.0.0.0", "--port", str(port)]), (), (), DOCS[engine])
    if engine == "vllm":
        argv = ["python3", "toy_proxy_server.py", "--host", "0.0.0.0", "--port", str(port),
                "--prefiller-hosts", *[u.rsplit(":", 1)[0] for u in p_urls],
                "--prefiller-ports", *[str(prefill.port)] * len(p_urls),
                "--decoder-hosts", *[u.rsplit(":", 1)[0] for u in d_urls],
                "--decoder-ports", *[str(decode.port)] * len(d_urls)]
        note = ("vLLM v0.12.0 ships no production prefill/decode router: this is the proxy of its NixlConnector "
                "guide (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, copy it next to this script); "
                "use a production router (e.g. llm-d, NVIDIA Dynamo) for real traffic")
        return LaunchCommand(tuple(argv), (), (note,), DOCS[engine])
    cfg = {"hostname": "0.0.0.0", "port": port, "backend": "pytorch",
           "context_servers": {"num_instances": len(p_urls), "urls": p_urls},
           "generation_servers": {"num_instances": len(d_urls), "urls": d_urls}}
    return LaunchCommand(("trtllm-serve", "disaggregated", "-c", TRT_ROUTER_FILE),
                         ((TRT_ROUTER_FILE, yaml.safe_dump(cfg, sort_keys=False)),), (), DOCS[engine])


def _stateful(objs: list[dict], s: LaunchSpec) -> list[dict]:
    """One-node workers as a StatefulSet with a headless Service, so each has a stable address;
    a LeaderWorkerSet creates its own headless Service of its name (LWS docs), so none is added."""
    if any(o["kind"] == "LeaderWorkerSet" for o in objs):
        return [o for o in objs if o["kind"] != "Service"]
    for o in objs:
        if o["kind"] == "Deployment":
            o["kind"] = "StatefulSet"
            o["spec"]["serviceName"] = s.name
        elif o["kind"] == "Service":
            o["spec"]["clusterIP"] = "None"
    return objs


def manifest(pools: list[DisaggPool], router: LaunchCommand, router_name: str, engine: str,
             header: str) -> str:
    objs: list[dict] = []
    for p in pools:
        objs += _stateful(kubernetes.items(p.spec, p.launch), p.spec)
    labels = {"app": router_name, "llmplan/engine": engine, "llmplan/role": "router"}
    files = dict(router.files)
    argv = [f"{kubernetes.CONFIG_DIR}/{a}" if a in files else a for a in router.argv]
    container = {"name": "router", "image": kubernetes.IMAGES[engine], "command": argv,
                 "ports": [{"containerPort": 8000, "name": "http"}]}
    pod: dict = {"containers": [container]}
    if files:
        objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{router_name}-config"},
                     "data": files})
        container["volumeMounts"] = [{"name": "config", "mountPath": kubernetes.CONFIG_DIR}]
        pod["volumes"] = [{"name": "config", "configMap": {"name": f"{router_name}-config"}}]
    objs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": router_name, "labels": labels},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": router_name}},
                          "template": {"metadata": {"labels": labels}, "spec": pod}}})
    objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": router_name, "labels": labels},
                 "spec": {"selector": {"app": router_name}, "ports": [{"name": "http", "port": 8000,
                                                                      "targetPort": 8000}]}})
    notes = [n for p in pools for n in p.launch.notes] + list(router.notes)
    body = "".join(f"# note: {n}\n" for n in dict.fromkeys(notes))
    return header + body + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}, sort_keys=False)


def header_lines(d: Mapping) -> list[str]:
    """What this directory is: the plan's chosen deployment or the disaggregated alternative."""
    pools = ", ".join(f"{p['workers']} x {p['role']} on {p['gpu']} (TP={p['tp']} PP={p['pp']} EP={p['ep']}, "
                      f"{p['gpus_per_worker']} GPU(s) each)" for p in d["pools"])
    chosen = bool(d.get("chosen", d.get("recommended")))
    verdict = ("this is the plan's CHOSEN deployment (plan.json 'chosen_deployment': the cheapest mode meeting the "
               "SLOs); deploy/<i>-<pool>/, where present, hold the aggregated alternative" if chosen else
               "NOT chosen (plan.json 'mode_selection' says why): this split is the cheapest disaggregated "
               "one found")
    what = "deployment" if chosen else "alternative"
    return [f"llmplan: the DISAGGREGATED {what} of this plan ({d['xpyd']}: {pools}; "
            f"${d['total_usd_per_hour']}/h, {d['total_gpus']} GPUs)", verdict]


def build(d: Mapping, model: ModelSpec, engine: EngineProfile, wl: WorkloadStats, slos: list[SLOTarget],
          vendors: Mapping[str, str], seed: int = 0, arrival: str = "poisson",
          concurrency: Optional[int] = None) -> Optional[DisaggArtifacts]:
    """Artifacts of plan.json's ``disaggregated`` block (None when it has no pools)."""
    if not d or not d.get("pools") or engine.name not in ENGINES:
        return None
    router_name = k8s_name(f"{model.key}-disagg-router")
    specs = {p["role"]: _pool_spec(p, model, engine, wl, vendors, router_name) for p in d["pools"]}
    pools = tuple(DisaggPool(r, specs[r], role_command(r, specs[r], plan_notes(d))) for r in ROLES)
    router = router_command(engine.name, specs["prefill"], specs["decode"])
    head = "".join(f"# {line}\n" for line in header_lines(d))
    text = manifest(list(pools), router, router_name, engine.name, head)
    argv, notes = benchmark.command(specs["decode"], wl.rate_rps, wl.mean_input_tokens, wl.mean_output_tokens,
                                    sorted({s.percentile for s in slos}), wl.arrival_cv, seed, arrival=arrival,
                                    concurrency=concurrency, base_url=f"http://{router_name}:8000")
    return DisaggArtifacts(d["xpyd"], bool(d.get("recommended")), pools, router, router_name, text, argv, notes,
                           wl.rate_rps)


def write(a: DisaggArtifacts, out_dir: Path, d: Mapping) -> dict:
    """Write ``deploy/disagg/`` and return its ``deploy.json`` entry (relative paths)."""
    root = out_dir / "deploy" / "disagg"
    root.mkdir(parents=True, exist_ok=True)
    lines = header_lines(d)
    head = "\n# ".join(lines)
    files = []
    for p in a.pools:
        sub = root / p.role
        sub.mkdir(exist_ok=True)
        title = f"{head}\n# {p.role} worker: {p.spec.replicas} worker(s) of this command, " \
                f"{p.spec.gpus_per_replica} GPU(s) each ({p.spec.gpu_key})"
        (sub / "launch.sh").write_text(artifacts._script(title, p.launch.argv, p.launch.notes, p.launch.doc))
        for name, text in p.launch.files:
            (sub / name).write_text(text)
        files += [f"{p.role}/launch.sh", *[f"{p.role}/{n}" for n, _ in p.launch.files]]
    (root / "router.sh").write_text(artifacts._script(f"{head}\n# router: clients send requests here",
                                                     a.router.argv, a.router.notes, a.router.doc))
    for name, text in a.router.files:
        (root / name).write_text(text)
    (root / "k8s.yaml").write_text(a.manifest_yaml)
    (root / "bench.sh").write_text(artifacts._script(f"{head}\n# checks the plan's whole load through the "
                                                    f"router: {a.rate_rps:.4g} req/s", a.bench_argv, a.bench_notes,
                                                    benchmark.DOC))
    files += ["router.sh", *[n for n, _ in a.router.files], "k8s.yaml", "bench.sh"]
    rel = root.relative_to(out_dir).as_posix()
    return _index_entry(a, rel, files)


def _index_entry(a: DisaggArtifacts, rel: str, files: list[str]) -> dict:
    return {"dir": rel, "xpyd": a.xpyd, "recommended": a.recommended, "router": a.router_name,
            "pools": [{"role": p.role, "name": p.spec.name, "gpu": p.spec.gpu_key, "workers": p.spec.replicas,
                       "tp": p.spec.tp, "pp": p.spec.pp, "ep": p.spec.ep, "gpus_per_worker": p.spec.gpus_per_replica,
                       "launch_argv": list(p.launch.argv), "notes": list(p.launch.notes)} for p in a.pools],
            "router_argv": list(a.router.argv), "benchmark_argv": list(a.bench_argv),
            "files": [f"{rel}/{f}" for f in files]}

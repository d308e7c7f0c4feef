"""Kubernetes manifest for a planned pool, as one YAML document (`kind: List`).

* one node per replica: a Deployment (`replicas` = the plan's replicas, each pod requests
  `nvidia.com/gpu` = TP x PP GPUs; `amd.com/gpu` for AMD) and a Service;
* a replica spanning several nodes: a LeaderWorkerSet (LWS API `leaderworkerset.x-k8s.io/v1`,
  https://lws.sigs.k8s.io/docs/, v0.6), `size` = nodes per replica, each pod requesting the
  node's GPUs; the Service targets the leaders.
Shared memory (`/dev/shm`) is an in-memory emptyDir, as the engines' Kubernetes guides ask.
The TensorRT-LLM options file travels in a ConfigMap mounted at /config.
"""

from __future__ import annotations

import shlex

import yaml

from llmplan.optimizer.launch import sglang
from llmplan.optimizer.launch.spec import LaunchCommand, LaunchSpec

#: container images at the documented versions (SGLang: pin the tag you validated)
IMAGES = {"vllm": "vllm/vllm-openai:v0.12.0", "sglang": "lmsysorg/sglang:latest",
          "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"}
CONFIG_DIR = "/config"


def gpu_resource(s: LaunchSpec) -> str:
    return "amd.com/gpu" if s.gpu_vendor == "amd" else "nvidia.com/gpu"


def _argv(s: LaunchSpec, cmd: LaunchCommand) -> list[str]:
    names = {n for n, _ in cmd.files}
    return [f"{CONFIG_DIR}/{a}" if a in names else a for a in cmd.argv]


def _container(s: LaunchSpec, command: list[str], gpus: int, probe: bool) -> dict:
    c = {
        "name": "server", "image": IMAGES[s.engine], "command": command,
        "ports": [{"containerPort": s.port, "name": "http"}],
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}}],
        "resources": {"limits": {gpu_resource(s): gpus}, "requests": {gpu_resource(s): gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if probe:
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": s.port}, "periodSeconds": 10,
                               "failureThreshold": 360}
    return c


def _pod_spec(s: LaunchSpec, cmd: LaunchCommand, container: dict) -> dict:
    vols = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    if cmd.files:
        vols.append({"name": "config", "configMap": {"name": f"{s.name}-config"}})
        container["volumeMounts"].append({"name": "config", "mountPath": CONFIG_DIR})
    return {"containers": [container], "volumes": vols}


def _labels(s: LaunchSpec) -> dict:
    return {"app": s.name, "llmplan/gpu": s.gpu_key, "llmplan/engine": s.engine}


def _multinode_commands(s: LaunchSpec, argv: list[str]) -> tuple[list[str], list[str]]:
    """(leader command, worker command) for one multi-node replica."""
    line = shlex.join(argv)
    if s.engine == "vllm":  # Ray cluster per replica; the leader serves
        return (["/bin/sh", "-c", f"ray start --head --port=6379 && exec {line}"],
                ["/bin/sh", "-c", "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"])
    if s.engine == "sglang":
        extra = sglang.multinode_args(s, "$(LWS_WORKER_INDEX)", "$(LWS_LEADER_ADDRESS)")
        return argv + extra, argv + extra
    launch = f"mpirun -np {s.gpus_per_replica} trtllm-llmapi-launch {line}"
    return ["/bin/sh", "-c", launch], ["/bin/sh", "-c", "sleep infinity"]


def manifest(s: LaunchSpec, cmd: LaunchCommand) -> str:
    return header(s, cmd) + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items(s, cmd)},
                                           sort_keys=False)


def header(s: LaunchSpec, cmd: LaunchCommand) -> str:
    head = (f"# llmplan: {s.replicas} x {s.engine} replica(s) of {s.model_hf_id} on {s.gpu_key}, "
            f"TP={s.tp} PP={s.pp} EP={s.ep}, {s.gpus_per_replica} GPUs per replica over {s.nodes_per_replica} node(s)\n")
    return head + "".join(f"# note: {n}\n" for n in cmd.notes)


def items(s: LaunchSpec, cmd: LaunchCommand) -> list[dict]:
    """The objects of one pool: [ConfigMap,] Deployment or LeaderWorkerSet, Service."""
    argv = _argv(s, cmd)
    out: list[dict] = []
    if cmd.files:
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{s.name}-config"},
                      "data": dict(cmd.files)})
    if s.nodes_per_replica == 1:
        pod = _pod_spec(s, cmd, _container(s, argv, s.gpus_per_replica, True))
        out.append({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": s.name, "labels": _labels(s)},
                      "spec": {"replicas": s.replicas, "selector": {"matchLabels": {"app": s.name}},
                               "template": {"metadata": {"labels": _labels(s)}, "spec": pod}}})
        selector = {"app": s.name}
    else:
        lead, work = _multinode_commands(s, argv)
        out.append({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                      "metadata": {"name": s.name, "labels": _labels(s)},
                      "spec": {"replicas": s.replicas, "leaderWorkerTemplate": {
                          "size": s.nodes_per_replica, "restartPolicy": "RecreateGroupOnPodRestart",
                          "leaderTemplate": {"metadata": {"labels": _labels(s) | {"role": "leader"}},
                                             "spec": _pod_spec(s, cmd, _container(s, lead, s.gpus_per_pod, True))},
                          "workerTemplate": {"metadata": {"labels": _labels(s)},
                                             "spec": _pod_spec(s, cmd, _container(s, work, s.gpus_per_pod, False))}}}})
        selector = {"app": s.name, "role": "leader"}
    out.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": s.service_name, "labels": _labels(s)},
                  "spec": {"selector": selector, "ports": [{"name": "http", "port": s.port, "targetPort": s.port}]}})
    return out

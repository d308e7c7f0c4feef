"""Deployable artifacts of a plan: per pool a launch script for the planned engine, a
Kubernetes manifest and a benchmark script, plus ``deploy.json`` indexing them.

Layout under the run directory (relative paths only)::

    deploy/deploy.json
    deploy/<pool>/launch.sh            engine command (+ extra_llm_api_options.yaml for TensorRT-LLM)
    deploy/<pool>/k8s.yaml             Deployment or LeaderWorkerSet + Service (one YAML document)
    deploy/<pool>/bench.sh             `vllm bench serve` at the pool's planned load
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.launch import benchmark, kubernetes, sglang, trtllm, vllm
from llmplan.optimizer.launch.spec import LaunchCommand, LaunchSpec, spec_from_allocation
from llmplan.optimizer.types import Selection, SLOTarget, WorkloadStats
from llmplan.sim.types import EngineProfile

ENGINE_MODULES = {"vllm": vllm, "sglang": sglang, "trtllm": trtllm}


@dataclass(frozen=True)
class PoolArtifacts:
    spec: LaunchSpec
    launch: LaunchCommand
    manifest_yaml: str
    bench_argv: tuple[str, ...]
    bench_notes: tuple[str, ...]
    load_rps: float


def launch_command(spec: LaunchSpec) -> LaunchCommand:
    cmd = ENGINE_MODULES[spec.engine].command(spec)
    extra = []
    if spec.gpu_vendor == "amd":
        extra.append("AMD GPU: use the engine's ROCm build/image" if spec.engine != "trtllm"
                     else "WARNING: TensorRT-LLM runs on NVIDIA GPUs only; this pool cannot be served with it")
    return LaunchCommand(cmd.argv, cmd.files, tuple(extra) + cmd.notes, cmd.doc) if extra else cmd


def build(sel: Selection, model: ModelSpec, engine: EngineProfile, wl: WorkloadStats,
          slos: list[SLOTarget], seed: int = 0, arrival: str = "poisson",
          concurrency: int | None = None) -> list[PoolArtifacts]:
    """Artifacts for every pool of a feasible selection (empty for an infeasible one).

    ``concurrency`` (a closed-loop target of that many clients for the whole fleet) is split
    over the pools in proportion to their load, at least one client each."""
    out = []
    pcts = sorted({s.percentile for s in slos})
    for a in sel.allocations if sel.feasible else []:
        spec = spec_from_allocation(a, model, engine, wl)
        cmd = launch_command(spec)
        load = a.share_rps * a.replicas
        clients = max(1, round(concurrency * load / wl.rate_rps)) if concurrency and wl.rate_rps > 0 else None
        argv, notes = benchmark.command(spec, load, wl.mean_input_tokens, wl.mean_output_tokens, pcts,
                                        wl.arrival_cv, seed, arrival=arrival, concurrency=clients)
        out.append(PoolArtifacts(spec, cmd, kubernetes.manifest(spec, cmd), argv, notes, load))
    return out


def _script(title: str, argv: tuple[str, ...], notes: tuple[str, ...], doc: str) -> str:
    lines = ["#!/bin/sh", f"# {title}", f"# flags: {doc}"] + [f"# note: {n}" for n in notes]
    args = [shlex.quote(a) for a in argv]
    body, cur = [], args[0]
    for a in args[1:]:  # one flag (with its value) per line
        if a.startswith("--"):
            body.append(cur)
            cur = a
        else:
            cur += " " + a
    body.append(cur)
    return "\n".join(lines) + "\n" + " \\\n  ".join(body) + "\n"


def write(arts: list[PoolArtifacts], out_dir: Path) -> dict:
    """Write each pool's files under ``out_dir/deploy`` and return their ``deploy.json`` entries
    (``{"pools": [...]}``; :func:`write_index` writes the index once everything is in it)."""
    root = out_dir / "deploy"
    index = {"pools": []}
    for i, p in enumerate(arts):
        d = root / f"{i}-{p.spec.name}"
        d.mkdir(parents=True, exist_ok=True)
        title = f"{p.spec.replicas} replica(s) of this command, {p.spec.gpus_per_replica} GPU(s) each ({p.spec.gpu_key})"
        (d / "launch.sh").write_text(_script(title, p.launch.argv, p.launch.notes, p.launch.doc))
        for name, text in p.launch.files:
            (d / name).write_text(text)
        (d / "k8s.yaml").write_text(p.manifest_yaml)
        (d / "bench.sh").write_text(_script(f"checks the planned load of this pool: {p.load_rps:.4g} req/s",
                                            p.bench_argv, p.bench_notes, benchmark.DOC))
        rel = d.relative_to(out_dir).as_posix()
        index["pools"].append({
            "name": p.spec.name, "engine": p.spec.engine, "gpu": p.spec.gpu_key, "replicas": p.spec.replicas,
            "gpus_per_replica": p.spec.gpus_per_replica, "nodes_per_replica": p.spec.nodes_per_replica,
            "load_rps": round(p.load_rps, 4), "launch_argv": list(p.launch.argv), "docs": p.launch.doc,
            "notes": list(p.launch.notes), "files": [f"{rel}/{n}" for n in
                                                      ["launch.sh", *[f for f, _ in p.launch.files], "k8s.yaml", "bench.sh"]],
            "benchmark_argv": list(p.bench_argv),
        })
    return index


def write_index(out_dir: Path, index: dict) -> Path:
    """Write ``out_dir/deploy/deploy.json`` (the aggregated pools, the disaggregated option and
    the plan's chosen mode) in one go; return its path."""
    path = out_dir / "deploy" / "deploy.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(index, indent=2) + "\n")
    return path

"""From the composed config to typed, validated inputs (model, GPUs, SLOs, workload).

Every check here names the offending key and says what would fix it.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from llmplan.hardware_catalog.loader import get_gpu, with_topology
from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.cli.config_checks import check_values
from llmplan.cli.config_schema import AppConfig
from llmplan.errors import ConfigError, UserError
from llmplan.model_catalog.loader import load_model
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.planner import SearchSpace, check_space
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.types import EngineProfile


def to_app(cfg: DictConfig) -> AppConfig:
    """Typed config; the engine node becomes the frozen sim.types.EngineProfile."""
    from dataclasses import asdict

    app = OmegaConf.to_object(cfg)
    assert isinstance(app, AppConfig)
    app.engine = EngineProfile(**asdict(app.engine))
    check_values(app)
    return app


def resolve_model(app: AppConfig) -> ModelSpec:
    path = app.model.config_path
    if not path:
        return load_model(app.model.name)
    if not Path(path).exists():
        raise ConfigError(f"file not found: {path}", key="model.config_path",
                          fix="give the path of a Hugging Face config.json (or of its folder), or null")
    try:
        return load_model(path)
    except UserError as exc:  # the catalog names its key `model`; the user typed model.config_path
        raise ConfigError(str(exc), key="model.config_path", fix=exc.fix) from None


_SPEC_FIELDS = {f.name for f in fields(GPUSpec)}
_NUMERIC = {"hbm_gb", "hbm_bw_gbps", "l2_mb", "sm_count", "scaleup_bw_gbps", "scaleup_domain_size",
            "pcie_bw_gbps", "scaleout_bw_gbps", "tdp_w", "usd_per_hour"}


def resolve_gpu(key: str, app: AppConfig) -> GPUSpec:
    gpu = get_gpu(key)
    topology = app.gpu.topology.get(key) or app.gpu.topology.get(gpu.key)
    if topology:  # PCIe host layout of this GPU type; unknown -> exit 2 (docs/MEMORY.md)
        gpu = with_topology(gpu, str(topology), key=f"gpu.topology.{key}")
    changes: dict = {}
    for k, v in (app.gpu.spec_overrides.get(key) or app.gpu.spec_overrides.get(gpu.key) or {}).items():
        if k.endswith("_tflops") and k[: -len("_tflops")] in gpu.dense_tflops:
            if not isinstance(v, (int, float)) or not float(v) > 0:
                raise ConfigError(f"must be a positive number, got {v!r}", key=f"gpu.spec_overrides.{key}.{k}")
            tf = dict(gpu.dense_tflops)
            tf[k[: -len("_tflops")]] = float(v)
            changes["dense_tflops"] = tf
        elif k in _NUMERIC:
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not float(v) > 0:
                raise ConfigError(f"must be > 0, got {v}", key=f"gpu.spec_overrides.{key}.{k}", fix="give a positive figure")
            changes[k] = int(v) if k in ("sm_count", "scaleup_domain_size") else float(v)
            if k == "hbm_gb":  # memory math uses the physical bytes (sim/kv_budget.py): scale them alike
                changes["memory_bytes"] = round(gpu.memory_bytes * float(v) / gpu.hbm_gb)
        else:
            raise ConfigError("unknown GPU figure", key=f"gpu.spec_overrides.{key}.{k}",
                              fix="use one of " + ", ".join(sorted(_NUMERIC)) + " or <dtype>_tflops")
    price = app.gpu.usd_per_hour.get(key, app.gpu.usd_per_hour.get(gpu.key))
    if price is not None:  # positive and finite: config_checks
        changes["usd_per_hour"] = float(price)
    given = {k for k in changes if k in gpu.unknown and k != "usd_per_hour"}
    if given:  # a figure the catalog marks unknown, given here, is known from now on (the fix the
        # KV-transfer error offers: gpu.spec_overrides='{l40s: {scaleout_bw_gbps: 50}}')
        changes["unknown"] = tuple(u for u in gpu.unknown if u not in given)
    check_engine_vendor(app.engine.name, gpu)
    return replace(gpu, **changes) if changes else gpu


def check_engine_vendor(engine: str, gpu: GPUSpec) -> None:
    """TensorRT-LLM runs on NVIDIA GPUs only ("TensorRT LLM supports the full spectrum of NVIDIA GPU
    architectures", https://nvidia.github.io/TensorRT-LLM/supported-hardware.html): a plan or a
    simulation of it on an AMD or Intel GPU (and its trtllm-serve launch script) is refused."""
    if engine == "trtllm" and gpu.vendor != "nvidia":
        vendor = {"amd": "an AMD", "intel": "an Intel"}.get(gpu.vendor, f"a {gpu.vendor}")
        raise ConfigError(f"engine=trtllm runs on NVIDIA GPUs only; {gpu.key} is {vendor} GPU",
                          key="engine", fix=f"use engine=vllm or engine=sglang on {gpu.key}, or NVIDIA GPUs only "
                                            "(e.g. gpu=nvidia_all)")


def resolve_gpus(app: AppConfig) -> list[GPUSpec]:
    if not app.gpu.candidates:
        raise ConfigError("no candidate GPUs", key="gpu.candidates", fix="list at least one catalog GPU key")
    gpus = [resolve_gpu(k, app) for k in app.gpu.candidates]
    avail = {g.key: app.gpu.max_gpus.get(g.key, app.gpu.max_gpus.get(k)) for k, g in zip(app.gpu.candidates, gpus)}
    if all(v == 0 for v in avail.values()):
        raise ConfigError("every candidate GPU type has availability 0", key="gpu.max_gpus",
                          fix="raise a limit above 0 or remove it (absent = unlimited)")
    for k in app.gpu.topology:
        if get_gpu(k).key not in {g.key for g in gpus}:
            raise ConfigError("topology for a GPU that is not a candidate", key=f"gpu.topology.{k}",
                              fix="add it to gpu.candidates or drop the entry")
    for k in app.gpu.usd_per_hour:
        if k not in app.gpu.candidates and get_gpu(k).key not in {g.key for g in gpus}:
            raise ConfigError("price override for a GPU that is not a candidate", key=f"gpu.usd_per_hour.{k}",
                              fix="add it to gpu.candidates or drop the override")
    return gpus


def max_gpus(app: AppConfig, gpus: list[GPUSpec]) -> dict[str, int]:
    out = {}
    for k, v in app.gpu.max_gpus.items():
        out[get_gpu(k).key] = int(v)
    return {k: v for k, v in out.items() if k in {g.key for g in gpus}}


def resolve_slos(app: AppConfig) -> list[SLOTarget]:
    out = []
    for f in fields(app.slo):
        v = getattr(app.slo, f.name)
        if v is None:
            continue
        metric, pct, _ = f.name.split("_")  # v > 0 and finite: config_checks
        if pct == "mean":
            out.append(SLOTarget(metric, 50.0, float(v), stat="mean"))
        else:
            out.append(SLOTarget(metric, float(pct[1:]), float(v)))
    if not out:
        raise ConfigError("no SLO target set", key="slo", fix="set e.g. slo.ttft_p90_ms=1000 slo.tpot_p90_ms=50")
    return out


def resolve_space(app: AppConfig, **over) -> SearchSpace:
    """The checked search space of ``app.search`` (``over``: fields replaced, e.g. precision)."""
    space = SearchSpace(**{f.name: getattr(app.search, f.name) for f in fields(SearchSpace)} | over)
    check_space(space)
    return space


#: each engine's memory knob (sim/kv_budget.py FRACTION_FIELDS) and the value that means "not set"
#: (EngineProfile's default): a knob of another engine, changed, would be ignored
_MEMORY_KNOBS = {"gpu_memory_utilization": ("vllm", 0.9), "mem_fraction_static": ("sglang", None),
                 "kv_cache_free_gpu_mem_fraction": ("trtllm", 0.9)}


def check_memory_knob(engine: EngineProfile) -> None:
    """engine.mem_fraction_static=0.5 under vLLM would leave vLLM's budget at 0.9 without a word:
    a memory fraction that the chosen engine does not read is refused, naming the one it reads."""
    from llmplan.sim.kv_budget import FRACTION_FIELDS

    own = FRACTION_FIELDS.get(engine.name, FRACTION_FIELDS["vllm"])
    for knob, (owner, unset) in _MEMORY_KNOBS.items():
        value = getattr(engine, knob)
        if knob != own and value != unset:
            raise ConfigError(f"{knob} is {owner}'s memory fraction; engine '{engine.name}' sizes its KV cache with "
                              f"engine.{own} and would ignore {knob}={value:g}", key=f"engine.{knob}",
                              fix=f"set engine.{own}={value:g} instead, or engine={owner}")


def check_engine(engine: EngineProfile) -> None:
    check_memory_knob(engine)
    from llmplan.sim.frontend_ceiling import frontend_problem   # the front end's per-token time

    if (bad := frontend_problem(engine)) is not None:
        raise ConfigError(bad[1], key=f"engine.{bad[0]}", fix=bad[2])
    if engine.max_num_batched_tokens < engine.block_size:
        raise ConfigError(f"token budget {engine.max_num_batched_tokens} is smaller than one KV block ({engine.block_size})",
                          key="engine.max_num_batched_tokens", fix="raise it (vLLM default 8192)")
    if engine.batch_wait_timeout_iters < 0 or engine.batch_wait_max_tokens_ratio < 0:
        raise ConfigError("batch waiting needs batch_wait_timeout_iters >= 0 and batch_wait_max_tokens_ratio >= 0",
                          key="engine.batch_wait_timeout_iters", fix="use 0 (off, TensorRT-LLM's default) or a positive value")
    waits = bool(engine.batch_wait_timeout_iters or engine.batch_wait_max_tokens_ratio)
    if engine.name != "trtllm" and waits:
        raise ConfigError(f"batch waiting is a TensorRT-LLM option; engine '{engine.name}' would ignore it",
                          key="engine.batch_wait_timeout_iters", fix="set both batch_wait options to 0 or use engine=trtllm")
    if not engine.chunked_prefill and waits:
        # sim.scheduler applies batch waiting in TensorRT-LLM's in-flight batching only, not in prefill-first steps
        raise ConfigError("batch waiting is modelled on in-flight batching (engine.chunked_prefill=true); "
                          "chunked_prefill=false would ignore it", key="engine.chunked_prefill",
                          fix="set engine.chunked_prefill=true (engine.whole_prompts=true for unchunked prompts) "
                              "or both batch_wait options to 0")


def workload_stats(requests, rate_rps: float, arrival_cv: float) -> WorkloadStats:
    """Moments of a generated request sample (deterministic for a seed)."""
    ins = [r.input_tokens for r in requests]
    outs = [r.output_tokens for r in requests]
    longest = max(i + o for i, o in zip(ins, outs))
    import numpy as np

    p50, p90, p99 = np.percentile(ins, [50, 90, 99])
    return WorkloadStats(rate_rps, sum(ins) / len(ins), sum(outs) / len(outs), int(longest), arrival_cv,
                         float(p50), float(p90), float(p99))


def workload_sample(app: AppConfig, model: ModelSpec, need_rate: bool = True):
    """(WorkloadStats, Workload) for planning: the target rate and the length moments."""
    import numpy as np

    from llmplan.sim.workload import generate_workload

    spec = app.workload
    if spec.arrival == "closed_loop" and need_rate:
        raise ConfigError("plan needs an open-loop target rate", key="workload.arrival",
                          fix="use workload=chat (Poisson) or set workload.arrival=poisson workload.rate_rps=<req/s>")
    if need_rate and spec.rate_rps is None and spec.arrival != "trace":
        raise ConfigError("plan needs a target request rate", key="workload.rate_rps", fix="e.g. workload.rate_rps=20")
    wl = generate_workload(spec, np.random.default_rng(app.seed))
    reqs = wl.requests
    if not reqs:
        raise ConfigError("the workload has no requests", key="workload.num_requests", fix="set num_requests >= 1")
    rate = spec.rate_rps
    if rate is None:  # trace replay: its own mean rate
        span_s = (reqs[-1].arrival_ms - reqs[0].arrival_ms) / 1e3
        rate = (len(reqs) - 1) / span_s if span_s > 0 else 1.0
    too_long = [r for r in reqs if r.input_tokens + r.output_tokens > model.max_position_embeddings]
    if too_long:
        r = too_long[0]
        raise ConfigError(f"a request needs {r.input_tokens + r.output_tokens} tokens, more than {model.key}'s "
                          f"context of {model.max_position_embeddings}", key="workload",
                          fix="cap workload.input_tokens.max_tokens / output_tokens.max_tokens or pick a longer-context model")
    cv = spec.cv if spec.arrival == "gamma" else 1.0
    return workload_stats(reqs, float(rate), cv), wl


def check_search(model: ModelSpec, tps: list[int], eps: list[int], precisions: list[str], key: str = "search") -> None:
    """Parallelism the model cannot use at all is a config error, not an empty plan."""
    heads = model.num_attention_heads
    # tps non-empty and >= 1: config_checks (NON_EMPTY, RANGES)
    if not any(heads % t == 0 for t in tps):
        divisors = [d for d in (1, 2, 4, 8, 16) if heads % d == 0]
        raise ConfigError(f"tp={tps[0] if len(tps) == 1 else tps} does not divide the {heads} attention heads of {model.key}",
                          key=f"{key}.tp", fix=f"use divisors of {heads}, e.g. {divisors}")
    if not model.is_moe and eps and all(e > 1 for e in eps):
        raise ConfigError(f"expert parallelism on dense model {model.key}", key=f"{key}.ep",
                          fix="use ep=1 (EP applies to MoE models only)")
    if model.is_moe and eps and model.moe is not None and not any(model.moe.num_experts % e == 0 for e in eps):
        n = model.moe.num_experts  # sim.deployment.parallelism_problem: every EP rank holds n / ep experts
        raise ConfigError(f"ep={eps[0] if len(eps) == 1 else eps} does not divide the {n} experts of {model.key}",
                          key=f"{key}.ep", fix=f"use divisors of {n}, e.g. {[d for d in (1, 2, 4, 8, 16) if n % d == 0]}")
    from llmplan.model_catalog.spec import BYTES_PER_ELEMENT

    for p in precisions:
        if p not in BYTES_PER_ELEMENT:
            raise ConfigError(f"unknown precision '{p}'", key=f"{key}.precision", fix="use bf16, fp8 or fp4")

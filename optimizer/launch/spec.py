"""What a launch artifact needs to know about one planned pool, as a frozen record."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from llmplan.errors import ConfigError
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.launch.speculation import SpecLaunch, from_candidate
from llmplan.optimizer.types import Allocation, WorkloadStats
from llmplan.sim.deployment import replica_limits
from llmplan.sim.speculative import mtp_layers
from llmplan.sim.types import EngineProfile

ENGINES = ("vllm", "sglang", "trtllm")
#: GPUs per node of the reference platform: GB200 NVL72 compute trays carry 4 GPUs
#: (NVIDIA DGX GB200 user guide, cited in hardware_catalog/data/gpus.yaml); the HGX/DGX
#: boards and the largest cloud instances of the PCIe cards carry 8.
GPUS_PER_NODE = {"gb200": 4}
DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class LaunchSpec:
    engine: str                   # vllm | sglang | trtllm
    model_hf_id: str
    model_native_dtype: str       # bf16 | fp8 | fp4 | int4: the checkpoint's own format
    gpu_key: str
    gpu_vendor: str               # nvidia | amd (Kubernetes resource name)
    tp: int
    pp: int
    ep: int
    replicas: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    weights_dtype: str            # bf16 | fp8 | fp4
    kv_cache_dtype: str           # bf16 | fp8
    gpu_memory_utilization: float
    block_size: int
    enable_prefix_caching: bool
    max_model_len: int
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    attention_dp: bool = False    # attention DP over all tp GPUs (planner candidates with dp > 1)
    port: int = 8000
    name: str = "llmplan"         # Kubernetes object name (DNS-1123)
    notes: tuple[str, ...] = field(default=())
    speculation: Optional[SpecLaunch] = None   # the plan's speculative decoding (None: off)
    # TensorRT-LLM batch waiting as simulated (sim/trtllm_batch_wait.py; 0 = off, the default)
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # vLLM async scheduling as simulated (sim/vllm_async_scheduling.py; False = a synchronous engine)
    async_scheduling: bool = False

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def nodes_per_replica(self) -> int:
        """Fewest nodes that hold the replica with the same GPU count on each (LWS pods are alike)."""
        n = max(1, math.ceil(self.gpus_per_replica / self.gpus_per_node))
        while self.gpus_per_replica % n:
            n += 1
        return n

    @property
    def service_name(self) -> str:
        """The client Service. A LeaderWorkerSet creates a headless Service of its own name for its
        pods' DNS (LWS docs, https://lws.sigs.k8s.io/docs/), so a multi-node pool's Service is suffixed."""
        return self.name if self.nodes_per_replica == 1 else f"{self.name}-http"

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_replica // self.nodes_per_replica

    @property
    def online_quantization(self) -> str | None:
        """The weight format the engine must produce at load time (None: served as shipped)."""
        return None if self.weights_dtype == self.model_native_dtype else self.weights_dtype


def k8s_name(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    while "--" in out:
        out = out.replace("--", "-")
    return out[:52].rstrip("-") or "llmplan"


def _is_mtp(c) -> bool:
    return getattr(getattr(c, "spec", None), "method", None) == "mtp"


def spec_from_allocation(a: Allocation, model: ModelSpec, engine: EngineProfile, wl: WorkloadStats) -> LaunchSpec:
    """The launch record of one pool of a selection.

    The token budget is the one the simulator verified (prefill-first engines get it raised
    to whole prompts, ``sim.deployment.replica_limits``). The context length is capped at
    the replica's KV capacity so the engine can start; a cap is stated in ``notes``."""
    c, ev = a.evaluation.candidate, a.evaluation
    if engine.name not in ENGINES:
        raise ConfigError(f"no launch artifacts for engine '{engine.name}'", key="engine.name",
                          fix="one of " + ", ".join(ENGINES))
    eng, max_len = replica_limits(replace(engine, max_num_seqs=c.max_num_seqs), model, wl.max_request_tokens)
    notes: list[str] = []
    max_len = int(max_len)
    if ev.kv_capacity_tokens and max_len > ev.kv_capacity_tokens:
        notes.append(f"context length capped at the replica's KV capacity, {ev.kv_capacity_tokens} tokens "
                     f"(the model supports {model.max_position_embeddings}); longer requests are rejected by the engine")
        max_len = ev.kv_capacity_tokens
    elif max_len < model.max_position_embeddings:
        notes.append(f"context length {max_len} tokens (the model supports {model.max_position_embeddings}): without "
                     "chunked prefill the token budget must hold a whole prompt, and the plan verified this budget")
    per_node = GPUS_PER_NODE.get(c.gpu.key, DEFAULT_GPUS_PER_NODE)
    dp = c.par.dp
    seqs, tokens = c.max_num_seqs, eng.max_num_batched_tokens
    if dp > 1:  # attention DP (tp = 1 per rank, optimizer/enumerate.py): the engines' limits are per rank
        seqs = -(-seqs // dp)
        tokens = -(-tokens // dp) if eng.chunked_prefill else tokens  # a whole prompt must fit one rank
        notes.append(f"attention DP over {dp} GPUs (EP {c.par.ep}): max_num_seqs {seqs} and token budget {tokens} "
                     f"per rank are the planned replica's {c.max_num_seqs} sequences / {eng.max_num_batched_tokens} "
                     f"tokens split over the ranks")
    return LaunchSpec(
        engine=engine.name, model_hf_id=model.hf_id, model_native_dtype=model.native_dtype,
        gpu_key=c.gpu.key, gpu_vendor=c.gpu.vendor, tp=c.par.tp * dp, pp=c.par.pp, ep=c.par.ep,
        replicas=a.replicas, max_num_seqs=seqs, max_num_batched_tokens=tokens, attention_dp=dp > 1,
        chunked_prefill=eng.chunked_prefill, weights_dtype=c.prec.weights, kv_cache_dtype=c.prec.kv_cache,
        gpu_memory_utilization=eng.gpu_memory_utilization, block_size=eng.block_size,
        enable_prefix_caching=eng.enable_prefix_caching, max_model_len=int(max_len), gpus_per_node=per_node,
        name=k8s_name(f"{model.key}-{c.name}"),
        notes=tuple(notes), speculation=from_candidate(c, model.hf_id, mtp_layers(model) if _is_mtp(c) else 0),
        batch_wait_timeout_iters=eng.batch_wait_timeout_iters, batch_wait_max_tokens_ratio=eng.batch_wait_max_tokens_ratio,
        async_scheduling=eng.async_scheduling)


@dataclass(frozen=True)
class LaunchCommand:
    """One engine invocation: argv (without node-specific multi-node arguments), extra
    files it reads (name -> text), and notes a reader must see (unsupported settings)."""

    argv: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    doc: str = ""                 # the documentation (URL + version) the flags follow


#: bits per weight, to tell a planned narrowing (quantize) from a widening (not possible)
_WEIGHT_BITS = {"fp4": 4, "int4": 4, "fp8": 8, "int8": 8, "bf16": 16, "fp16": 16, "fp32": 32}


def load_time_quantization(s: LaunchSpec, engine_label: str, fp8_flag: bool = True,
                           how: str = "its format is read from its config") -> tuple[list[str], list[str]]:
    """(args, notes) for the weight format. vLLM/SGLang `--quantization fp8` quantizes a
    checkpoint at load time; other narrowings need a pre-quantized checkpoint, and a planned
    format wider than the checkpoint's cannot be served: both are stated, never dropped."""
    q = s.online_quantization
    if q is None:
        return [], []
    if _WEIGHT_BITS.get(q, 16) > _WEIGHT_BITS.get(s.model_native_dtype, 16):
        return [], [f"WARNING: {s.model_hf_id} ships {s.model_native_dtype} weights and {engine_label} serves them "
                    f"as shipped; the plan assumed {q} weights: re-plan with search.precision=[{s.model_native_dtype}]"]
    if q == "fp8" and fp8_flag:
        return ["--quantization", "fp8"], []
    return [], [f"WARNING: {engine_label} has no load-time {q} quantization of a {s.model_native_dtype} checkpoint: "
                f"serve a pre-quantized {q} checkpoint of {s.model_hf_id} ({how})"]

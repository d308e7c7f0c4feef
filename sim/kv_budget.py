"""The KV-cache budget of one GPU, computed the way each serving engine computes it.

All quantities are bytes per GPU of the busiest pipeline stage; the device total is the
physical capacity the device reports (``GPUSpec.memory_bytes``), never the marketed "GB".

Engine rules (each default cited where it is used below):

* **vLLM** -- ``gpu_memory_utilization`` x device memory is the engine's share; the KV cache
  gets what is left of it after the weights, the peak activations of the profiling forward
  pass (``max_num_batched_tokens`` tokens), the CUDA graphs and non-torch memory (CUDA
  context, NCCL buffers).
* **SGLang** -- ``mem_fraction_static`` is (weights + KV pool) / memory measured at start-up
  (after the CUDA context and NCCL are up), so KV = fraction x that memory - weights.
  Activations and CUDA graphs live in the remaining ``1 - fraction``. Unset, SGLang derives
  the fraction from the GPU memory, its chunked-prefill size and CUDA-graph batch size and TP.
* **TensorRT-LLM** -- ``kv_cache_free_gpu_mem_fraction`` (``KvCacheConfig.free_gpu_memory_fraction``)
  of the memory still free after the weights and the runtime (activations, CUDA graphs, CUDA
  context, NCCL) are allocated.

The activation, CUDA-graph and runtime terms are first-order physical estimates (formulas
below), not fitted; the assumptions travel with every result (:attr:`KVBudget.assumptions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmplan.errors import ConfigError
from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.types import EngineProfile, Parallelism

MIB = 2**20
GIB = 2**30

#: docs and defaults of each engine's memory knob (URL + version)
VLLM_DOC = ("vLLM engine arguments, --gpu-memory-utilization, default 0.9 "
            "(https://docs.vllm.ai/en/v0.11.0/configuration/engine_args.html; vLLM 0.11-0.19 served rows). "
            "Newer vLLM raises the default to 0.92 (vllm/config/cache.py, docs.vllm.ai/en/stable)")
SGLANG_DOC = ("SGLang server arguments, --mem-fraction-static: fraction of memory for model weights and "
              "KV cache pool (docs.sglang.ai/advanced_features/server_arguments.html); default derived in "
              "python/sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings (SGLang v0.5.x)")
TRTLLM_DOC = ("TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction / trtllm-serve "
              "--kv_cache_free_gpu_memory_fraction, default 0.9 of free GPU memory "
              "(https://nvidia.github.io/TensorRT-LLM/1.3.0rc27/llm-api/reference/KvCacheConfig.html, "
              "https://nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html)")

#: non-torch runtime memory: CUDA context and the engine's constant metadata. SGLang reserves
#: 512 MiB for "constant meta data" in _handle_gpu_memory_settings; used for every engine.
RUNTIME_BYTES = 512 * MIB
#: NCCL communicator buffers by group size (ai-dynamo/aiconfigurator @095f58a51
#: systems/*.yaml misc.nccl_mem, "nonofficial correction based on observations")
NCCL_BYTES = {1: 0, 2: 358_612_992, 4: 411_041_792, 8: 411_041_792}
#: CUDA-graph memory per unit of the largest captured batch: SGLang's estimate (cuda_graph_max_bs * 2 MB)
CUDA_GRAPH_BYTES_PER_BS = 2 * MIB
#: vLLM's and TensorRT-LLM's largest captured decode batch when max_num_seqs is larger
CUDA_GRAPH_MAX_BS = 512
ACT_BYTES = 2  # bf16/fp16 activations
LOGIT_BYTES = 4  # fp32 logits in the sampler

#: the memory knob of each engine: (EngineProfile field, config key)
FRACTION_FIELDS = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static",
                   "trtllm": "kv_cache_free_gpu_mem_fraction"}


@dataclass(frozen=True)
class KVBudget:
    """How one engine splits one GPU's memory, and the KV tokens a replica holds."""

    engine: str                    # vllm | sglang | trtllm (the rule applied)
    fraction_key: str              # config key of the memory knob, e.g. engine.gpu_memory_utilization
    fraction: float                # its value (after the engine's own default rule)
    fraction_default: bool         # True when the engine's documented default was used
    fraction_source: str           # docs URL + version
    device_bytes: int              # physical memory per GPU (GPUSpec.memory_bytes)
    budget_bytes: float            # the memory the knob hands the engine's static pool (weights + KV)
    weights_bytes: float           # per GPU, busiest stage
    activation_bytes: float        # peak activations of one step + logits
    cuda_graph_bytes: float        # captured CUDA graphs
    runtime_bytes: float           # CUDA context, metadata, NCCL buffers
    extra_bytes: float             # engine.activation_reserve_gb (user-set extra reserve)
    state_bytes: float             # linear-attention state of max_num_seqs sequences (hybrid models)
    kv_bytes: float                # left for the KV cache per GPU (negative: does not fit)
    kv_bytes_per_token: float      # per GPU
    block_size: int
    kv_tokens: int                 # KV tokens per replica (whole blocks)
    assumptions: tuple[str, ...]

    def to_dict(self) -> dict:
        gib = {k: round(getattr(self, k) / GIB, 3) for k in (
            "budget_bytes", "weights_bytes", "activation_bytes", "cuda_graph_bytes", "runtime_bytes",
            "extra_bytes", "kv_bytes")}
        return {"engine": self.engine, "fraction_key": self.fraction_key, "fraction": self.fraction,
                "fraction_is_engine_default": self.fraction_default, "fraction_source": self.fraction_source,
                "device_memory_bytes": self.device_bytes, "device_memory_gib": round(self.device_bytes / GIB, 3),
                **{k.replace("_bytes", "_gib"): v for k, v in gib.items()},
                "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token, "block_size": self.block_size,
                "kv_capacity_tokens_per_replica": self.kv_tokens, "assumptions": list(self.assumptions)}

    def lines(self) -> list[str]:
        """Human-readable summary for ``plan`` / ``simulate`` (two lines + assumptions)."""
        g = lambda b: f"{b / GIB:.1f} GiB"  # noqa: E731
        if self.engine == "vllm":
            terms = f"{self.fraction:g} x {g(self.device_bytes)}"
            minus = [("weights", self.weights_bytes), ("activations", self.activation_bytes),
                     ("CUDA graphs", self.cuda_graph_bytes), ("runtime", self.runtime_bytes)]
        elif self.engine == "sglang":
            terms = f"{self.fraction:g} x {g(self.device_bytes - self.runtime_bytes)} at start-up"
            minus = [("weights", self.weights_bytes)]
        else:
            terms = f"{self.fraction:g} x free {g(self.budget_bytes / self.fraction)}"
            minus = []
        if self.extra_bytes:
            minus.append(("extra reserve", self.extra_bytes))
        if self.state_bytes:
            minus.append(("linear-attention state", self.state_bytes))
        out = [f"KV cache per replica: {self.kv_tokens:,} tokens ({self.kv_bytes_per_token:,.0f} B/token/GPU, "
               f"{self.block_size}-token blocks)",
               f"  {self.engine} {self.fraction_key}={self.fraction:g}"
               f"{' (engine default)' if self.fraction_default else ''}: {terms} = {g(self.budget_bytes)}"
               + "".join(f", - {n} {g(b)}" for n, b in minus) + f" -> KV {g(self.kv_bytes)} per GPU"]
        return out + [f"  assumption: {a}" for a in self.assumptions]


def check_fractions(engine: EngineProfile) -> None:
    """Every memory fraction in (0, 1]; else a ConfigError naming the key (exit 2)."""
    for field in FRACTION_FIELDS.values():
        v = getattr(engine, field, None)
        if v is None and field == "mem_fraction_static":
            continue  # SGLang's own default rule
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ConfigError(f"must be in (0, 1], got {v!r}", key=f"engine.{field}",
                              fix="give a fraction of GPU memory such as 0.9")


def sglang_default_fraction(device_bytes: int, tp: int, pp: int) -> tuple[float, int, int]:
    """SGLang's default mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs.

    Re-derived from ServerArgs._handle_gpu_memory_settings (SGLang v0.5.x, CUDA GPUs, no DP
    attention, no speculative decoding): GPU memory in MiB picks the chunk and graph sizes,
    reserved MiB = 512 + 1.5 x max(chunk, 2048) + 2 x graph bs + tp*pp/8 x 1024, at least
    10 GiB above 60 GiB of memory; fraction = round((mem - reserved) / mem, 3)."""
    mem = device_bytes / MIB
    if mem < 20 * 1024:
        chunk, bs = 2048, 8
    elif mem < 35 * 1024:
        chunk, bs = 2048, (24 if tp < 4 else 80)
    elif mem < 60 * 1024:
        chunk, bs = 4096, (32 if tp < 4 else 160)
    elif mem < 160 * 1024:
        chunk, bs = 8192, (256 if tp < 4 else 512)
    else:
        chunk, bs = 16384, 512
    reserved = 512 + max(chunk, 2048) * 1.5 + bs * 2 + tp * pp / 8 * 1024
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3), chunk, bs


def activation_bytes(model: ModelSpec, par: Parallelism, tokens: int, max_seqs: int) -> float:
    """Peak activations of one forward over ``tokens`` tokens on one GPU, plus sampler logits.

    Per token: residual and normed hidden (2 x hidden), the QKV projection output, the gated
    MLP's gate/up output and its activation (3 x intermediate; for MoE the top-k routed
    experts' intermediate), each split over TP, in 2-byte activations; plus fp32 logits for
    ``max_seqs`` sequences over the vocabulary (the profiling run samples that many)."""
    tp = max(1, par.tp)
    qkv = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim / tp
    if model.moe is not None:
        inter = model.moe.top_k * model.moe.expert_intermediate_size / max(1, par.moe_tp)
        inter = max(inter, model.intermediate_size / tp if model.moe.num_dense_layers else 0.0)
    else:
        inter = model.intermediate_size / tp
    per_token = (2 * model.hidden_size + qkv + 3 * inter) * ACT_BYTES
    return tokens * per_token + max_seqs * model.vocab_size * LOGIT_BYTES


def _nccl_bytes(gpus: int) -> int:
    if gpus <= 1:
        return 0
    return NCCL_BYTES[2] if gpus == 2 else NCCL_BYTES[4]


def kv_budget(model: ModelSpec, gpu: GPUSpec, par: Parallelism, engine: EngineProfile,
              weights_bytes: float, kv_bytes_per_token: float, state_bytes_per_seq: float = 0.0) -> KVBudget:
    """The KV budget of one GPU of a replica under the engine's own rule.

    ``state_bytes_per_seq``: fixed linear-attention state one sequence holds on this GPU
    (hybrid models); the engines keep one slot per running sequence in the same memory pool,
    so ``max_num_seqs`` slots are taken from the KV budget."""
    check_fractions(engine)
    name = engine.name if engine.name in FRACTION_FIELDS else "vllm"
    total = int(gpu.memory_bytes)
    runtime = RUNTIME_BYTES + _nccl_bytes(par.gpus)
    extra = engine.activation_reserve_gb * 1e9
    notes = [f"device memory {total / GIB:.2f} GiB as the device reports it ({gpu.key}.memory_bytes), "
             f"not the marketed {gpu.hbm_gb:g} GB; the engines read the CUDA-visible total, about 0.5 GiB "
             f"less on an H100 (torch 81,090 vs nvidia-smi 81,559 MiB)",
             f"runtime = CUDA context/metadata {RUNTIME_BYTES // MIB} MiB + NCCL buffers "
             f"{_nccl_bytes(par.gpus) // MIB} MiB for {par.gpus} GPU(s) (aiconfigurator nccl_mem)"]
    if engine.name not in FRACTION_FIELDS:
        notes.append(f"engine '{engine.name}' has no memory rule of its own: vLLM's rule is applied")
    field = FRACTION_FIELDS[name]
    if name == "sglang":
        default_f, chunk, bs = sglang_default_fraction(total, par.tp, par.pp)
        frac = engine.mem_fraction_static
        is_default = frac is None
        frac = default_f if frac is None else float(frac)
        act = activation_bytes(model, par, chunk, min(engine.max_num_seqs, bs))
        graphs = bs * CUDA_GRAPH_BYTES_PER_BS
        budget = frac * (total - runtime)
        kv = budget - weights_bytes - extra
        notes.append(f"SGLang default rule: chunked_prefill_size {chunk}, cuda_graph_max_bs {bs} -> "
                     f"mem_fraction_static {default_f:g}; activations and CUDA graphs live outside the fraction")
        if engine.gpu_memory_utilization != 0.9:
            notes.append("engine.gpu_memory_utilization is a vLLM setting and does not apply to SGLang")
        src = SGLANG_DOC
    else:
        bs = min(engine.max_num_seqs, CUDA_GRAPH_MAX_BS)
        graphs = bs * CUDA_GRAPH_BYTES_PER_BS
        act = activation_bytes(model, par, engine.max_num_batched_tokens, engine.max_num_seqs)
        frac = float(getattr(engine, field))
        is_default = frac == 0.9
        notes.append(f"activations: one step of {engine.max_num_batched_tokens} tokens + fp32 logits of "
                     f"{engine.max_num_seqs} sequences; CUDA graphs: 2 MiB x largest captured batch {bs} "
                     "(SGLang's estimate)")
        if name == "vllm":
            budget = frac * total
            kv = budget - weights_bytes - act - graphs - runtime - extra
            src = VLLM_DOC
        else:
            free = total - weights_bytes - act - graphs - runtime
            budget = frac * free
            kv = budget - extra
            notes.append("free memory = device - weights - activations - CUDA graphs - runtime, measured by "
                         "TensorRT-LLM after its profiling forward")
            src = TRTLLM_DOC
    state = engine.max_num_seqs * state_bytes_per_seq
    if state:
        kv -= state
        notes.append(f"linear-attention state: {engine.max_num_seqs} sequences x {state_bytes_per_seq / MIB:.1f} MiB "
                     f"per GPU reserved from the KV pool")
    per_tok = kv_bytes_per_token
    blocks = int(max(0.0, kv) // (per_tok * engine.block_size)) if per_tok > 0 else 0
    return KVBudget(name, f"engine.{field}", frac, is_default, src, total, budget, weights_bytes, act, graphs,
                    runtime, extra, state, kv, per_tok, engine.block_size, blocks * engine.block_size, tuple(notes))

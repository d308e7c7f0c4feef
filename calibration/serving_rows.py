"""Measured serving runs (``e2e_serving.csv`` layout) -> simulator deployments.

Each row of the file is one closed-loop benchmark run: a model served by one engine
(vLLM, SGLang or TensorRT-LLM) on one kind of GPU with fixed prompt and output lengths at
a fixed client concurrency. :func:`map_rows` turns every row into a :class:`RowMapping`:
a :class:`ServingCase` ready to simulate, or a ``status`` that says why it cannot be
simulated (never silently dropped). Status strings are ``"<reason>: <detail>"`` with
``reason`` one of :data:`REASONS`.

Mapping (documented in docs/ACCURACY.md, section Serving):

* model: ``model_path`` through :func:`model_catalog.loader.load_model` (HF ids and aliases);
  an unknown model is a status (``unknown_model``), not an error, so one odd row does not
  stop a whole file.
* GPU: ``system`` through :func:`hardware_catalog.loader.get_gpu` (any catalog GPU).
* engine: ``backend`` -> ``conf/engine/<backend>.yaml`` (vllm, sglang, trtllm), with fitted
  host-overhead terms laid over it (see :mod:`calibration.engine_fit`). ``max_num_seqs`` is
  raised to ``max(batch_size x attention_dp_size, concurrency)`` (the run's batch limit; the
  client never queues behind a cap the file may under-report) and
  ``max_num_batched_tokens`` to at least ``max_num_seqs``.
* precision: ``gemm_quant_mode`` (else ``precision``) ``fp8``/``fp8_block``/... -> fp8 weights;
  ``nvfp4``/``mxfp4``/``fp4`` -> fp4 weights; ``bf16``/``fp16``/empty -> the model's shipped
  format when that is fp8 or fp4, else bf16. KV cache: bf16 for vLLM and SGLang (their
  ``--kv-cache-dtype auto`` default is the model's activation dtype, :data:`KV_AUTO_MODEL_DTYPE`);
  TensorRT-LLM: fp8 when the row's precision (or, when empty, the weights) is fp8 or fp4 and
  the GPU has fp8, else bf16. GEMM kernels (:func:`block_fp8_model`): ``fp8_block`` runs
  time block-scaled fp8 GEMMs (a bf16 checkpoint quantized to 128x128 blocks at load time);
  ``fp8`` runs the checkpoint's own fp8 scaling (block for DeepSeek/Qwen3-*-FP8/MiniMax,
  per-tensor when a bf16 checkpoint is quantized at load time).
* parallelism (:func:`parallelism_of`, docs/SIMULATOR.md "Attention DP and wide EP"): the
  columns follow the aiconfigurator layout of a worker: ``tp_size`` attention TP inside each of
  ``attention_dp_size`` attention-DP ranks, so ``tp_size x attention_dp_size`` GPUs per stage,
  over which the MoE layers run as ``moe_tp_size x moe_ep_size`` (their product equals it) ->
  ``Parallelism(tp=tp_size, pp=pp_size, ep=moe_ep_size, dp=attention_dp_size)``. An empty
  ``attention_dp_size`` is implied by the MoE columns (``moe_tp x moe_ep / tp``: vLLM's DP ranks,
  whose expert layers "form a tensor parallel group of size DP x TP" without
  ``--enable-expert-parallel``, https://docs.vllm.ai/en/v0.12.0/serving/data_parallel_deployment/).
  Engine flags behind the columns: TensorRT-LLM ``tensor_parallel_size`` is the worker's GPU
  count and ``enable_attention_dp`` runs attention DP over all of them
  (https://nvidia.github.io/TensorRT-LLM/features/parallel-strategy.html); SGLang ``--tp`` with
  ``--enable-dp-attention --dp N``; vLLM ``--tensor-parallel-size`` x ``--data-parallel-size``
  with ``--enable-expert-parallel`` (EP = DP x TP). Rows whose ``id`` names the engine layout
  (``..._tp{T}_ep{E}_<n>``) while their columns hold the product ``T x E`` (one export of the
  source wrote ``tp_size = T x E``, ``moe_tp_size = T``, ``moe_ep_size = E``; their measured
  values equal, to the last digit, rows of the same run stored with ``tp_size = T``) are read
  as the run they name: ``T`` GPUs, EP ``E`` (attention DP over the ``T`` GPUs when
  ``attention_dp_size > 1``). Rows with the same column signature but no layout ``id`` are read
  the same way when ``T x E`` exceeds the GPU's scale-up domain (:func:`product_layout`).
  Dense models: ``ep = 1`` (their ``moe_*`` columns are ignored).
* workload: closed loop with concurrency from ``silicon_concurrency=N`` in
  ``silicon_data_source`` (else ``batch_size``), fixed ``isl``/``osl``.

Not simulated: ``mode`` other than ``agg`` (disaggregated rows are replayed by
calibration/serving_disagg_rows.py), parallelism or precision the model/GPU rejects
(:func:`sim.deployment.parallelism_problem`), weights that leave no room for one request's KV
cache.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from llmplan.calibration.benchmark_clients import (AIPERF_MEASURED_WAVES, AIPERF_WARMUP_WAVES, length_bounds,
                                                    length_range_ratio, prompt_pool_size)
from llmplan.calibration.sglang_launch import dynamo_frontend_row
from llmplan.calibration.inferencex_docker_client import docker_capped_row, launch_note as docker_capped_note
from llmplan.calibration.sglang_launch import (generator_cuda_graph_every_batch, generator_max_prefill_tokens,
                                                generator_mixed_chunk)
from llmplan.calibration.vllm_launch import allreduce_rms_fusion as vllm_allreduce_rms_fusion
from llmplan.calibration.vllm_async_launch import async_scheduling as vllm_async_scheduling
from llmplan.calibration.sglang_launch import allreduce_rms_fusion as sglang_allreduce_rms_fusion
from llmplan.calibration.sglang_sweep_launch import (inferencex_mem_fraction, inferencex_prefill_tokens,
                                                      inferencex_radix_cache_off)
from llmplan.calibration.vllm_launch import max_capture_tokens as vllm_max_capture_tokens
from llmplan.calibration.vllm_launch import runs_data_parallel as vllm_runs_data_parallel
from llmplan.calibration.vllm_launch import mxfp4_marlin as vllm_mxfp4_marlin
from llmplan.calibration.trtllm_launch import generator_launch as trtllm_generator_launch
from llmplan.calibration.trtllm_launch import generator_max_num_tokens as trtllm_generator_max_num_tokens
from llmplan.calibration.trtllm_sweep_launch import script_sets_budget as trtllm_script_sets_budget
from llmplan.calibration.trtllm_sweep_launch import sweep_engine as trtllm_sweep_engine
from llmplan.calibration.trtllm_inferencex_layout import script_ep_size as trtllm_script_ep_size
from llmplan.calibration.trtllm_speculative import mtp_layers, mtp_replay
from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.errors import CatalogError, UserError
from llmplan.model_catalog.quant import block_fp8_requant, is_block_fp8
from llmplan.model_catalog.spec import ModelSpec
from llmplan.sim.deployment import Deployment, parallelism_problem
from llmplan.sim.links import domain_gpus
from llmplan.sim.memory import plan_memory
from llmplan.sim.types import EngineProfile, Parallelism, Precision

#: columns a measurements file must have (the e2e_serving.csv layout)
REQUIRED_COLUMNS = ("silicon_data_source", "backend", "model_path", "system", "precision", "mode", "isl", "osl",
                    "gemm_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
                    "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms")
#: engines with a profile in conf/engine/
BACKENDS = ("vllm", "sglang", "trtllm")
#: why a row is not simulated (first word of its status)
REASONS = ("disagg", "attention_dp", "unknown_model", "unknown_gpu", "unknown_backend", "precision",
           "parallelism", "memory", "invalid", "missing_input")
SIMULATED = "simulated"

FP8_MODES = frozenset({"fp8", "fp8_block", "fp8_static", "fp8_dynamic", "w8a8_fp8", "fp8_e4m3"})
FP4_MODES = frozenset({"fp4", "nvfp4", "mxfp4", "w4a4_nvfp4", "w4a16_mxfp4"})
#: 4-bit integer weight-only (W4A16, group-quantized): Kimi-K2.x's shipped compressed-tensors
#: int4 checkpoint; the calibrated fused-MoE model has a measured ``int4_wo`` group for it
INT4_MODES = frozenset({"int4", "int4_wo", "w4a16", "w4a16_int4"})
#: HF organisations renamed since the rows were written (the catalog keeps the current id):
#: Zhipu AI publishes GLM-5 as zai-org (https://huggingface.co/zai-org/GLM-5)
ORG_ALIASES = {"zhipuai/": "zai-org/"}
#: ``id`` suffix naming the engine layout of a run (``..._tp8_ep8_941``)
_ID_LAYOUT = re.compile(r"_tp(\d+)_ep(\d+)_\d+$")
BF16_MODES = frozenset({"", "bf16", "bfloat16", "fp16", "float16", "half", "none", "auto"})
#: engines whose ``--kv-cache-dtype`` default ``auto`` stores the KV cache in the model's
#: activation dtype (bf16) whatever the weights' format; an fp8 cache needs an explicit
#: ``--kv-cache-dtype fp8`` that the rows do not record. SGLang: "To enable fp8 kv cache
#: quantization, add --kv-cache-dtype fp8_e5m2" and "instead of the default model precision in
#: BF16" (https://docs.sglang.io/advanced_features/server_arguments.html,
#: https://docs.sglang.io/docs/advanced_features/quantized_kv_cache.md; 0.5.x); vLLM: "If 'auto',
#: will use model data type" (``--kv-cache-dtype``,
#: https://docs.vllm.ai/en/v0.5.3/models/engine_args.html; an fp8 cache is asked for with
#: ``kv_cache_dtype="fp8"``, https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache.html).
#: Evidence in the kernel tables: SGLang's MLA decode kernel with an fp8 cache takes 0.54 ms at
#: 64 sequences x 4,095 tokens on H200 (bf16: 0.092 ms), so an fp8 cache would make the served
#: SGLang DeepSeek-R1 decode (N = 64, TPOT 30.6 ms) spend 39 ms per step in attention alone.
#: TensorRT-LLM keeps the row's precision (its ``KvCacheConfig.dtype='auto'`` follows the
#: checkpoint's quant metadata, and the served TRT-LLM rows fit the fp8 cache better: held-out
#: TPOT median 14.3% with it, 15.3% with bf16).
KV_AUTO_MODEL_DTYPE = frozenset({"vllm", "sglang"})
_CONC = re.compile(r"silicon_concurrency\s*=\s*(\d+)")


@dataclass(frozen=True)
class ServingCase:
    """One simulable measured run."""

    index: int                 # row position in the file (0-based)
    row_id: str                # the file's ``id`` column, else the index
    backend: str               # vllm | sglang | trtllm
    model_path: str            # as written in the file
    mode: str                  # agg
    dep: Deployment            # model x GPU x parallelism x precision x engine (1 replica)
    concurrency: int           # closed-loop clients
    isl: int                   # prompt tokens per request
    osl: int                   # output tokens per request
    measured_ttft_ms: float
    measured_tpot_ms: float
    version: str = ""          # backend_version as written in the file
    deployment: str = ""       # deployment key: the row without its concurrency (deployment_key)
    length_ratio: float = 1.0  # the row's client: lengths uniform in [ratio x L, L] (calibration.benchmark_clients)
    mixed_chunk: bool = False  # SGLang launched with --enable-mixed-chunk (calibration.sglang_launch)
    # SGLang launched with --cuda-graph-bs 1..max_batch_size (calibration.sglang_launch)
    graph_every_batch: bool = False
    # vLLM launched with max_cudagraph_capture_size (calibration.vllm_launch); 0 = vLLM's default
    graph_capture_tokens: int = 0
    # distinct prompts the client drew from (calibration.benchmark_clients.prompt_pool_size); 0 = unique
    prompt_pool: int = 0
    # SGLang prefill batch set by the run's launch script (calibration.sglang_sweep_launch); 0 = SGLang's default
    prefill_chunk_tokens: int = 0
    # MTP draft layers the run was measured with (calibration.trtllm_speculative); 0 = no speculation
    speculative_mtp_k: int = 0

    @property
    def dense(self) -> bool:
        return not self.dep.model.is_moe


@dataclass(frozen=True)
class RowMapping:
    """A row's outcome: a case to simulate (status ``simulated``) or why not."""

    index: int
    case: ServingCase | None
    status: str

    @property
    def reason(self) -> str:
        """``simulated`` or the reason category (first word of the status)."""
        return self.status.split(":", 1)[0]


# ----------------------------------------------------------------------------- reading


def check_columns(df: pd.DataFrame, source: str) -> None:
    """UserError naming the first missing column and the file."""
    for col in REQUIRED_COLUMNS:
        if col not in df.columns:
            raise UserError(f"column '{col}' is missing from {source}", key="measurements",
                            fix="give a file in the e2e_serving.csv layout (see shared/measurements/README.md)")


def read_serving_csv(path: str | Path) -> pd.DataFrame:
    """Read a measurements file and check its columns (UserError on any problem)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"measurements file not found: {p}", key="measurements")
    try:
        df = pd.read_csv(p)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file
        raise UserError(f"cannot read {p}: {e}", key="measurements") from e
    check_columns(df, str(p))
    return df.reset_index(drop=True)


def serving_files(paths: list[str | Path]) -> list[Path]:
    """Measurement files named by ``paths``: files as given, a folder -> every
    ``*/e2e_serving.csv`` and ``e2e_serving.csv`` under it (sorted)."""
    out: list[Path] = []
    for x in paths:
        p = Path(x).expanduser()
        if p.is_dir():
            found = sorted(p.glob("e2e_serving.csv")) + sorted(p.glob("*/e2e_serving.csv"))
            if not found:
                raise UserError(f"no e2e_serving.csv in {p} or its sub-folders", key="measurements")
            out += found
        else:
            out.append(p)
    return out


def read_serving_files(paths: list[str | Path]) -> pd.DataFrame:
    """Rows of several measurement files, in order, with a ``source_file`` column
    (``<folder>/<name>``, e.g. ``h200_sxm/e2e_serving.csv``)."""
    frames = []
    for p in serving_files(paths):
        df = read_serving_csv(p)
        df.insert(0, "source_file", f"{p.parent.name}/{p.name}")
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


#: columns that together name a deployment (everything but the concurrency and the results)
DEPLOYMENT_COLUMNS = ("backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode",
                      "moe_quant_mode", "mode", "isl", "osl", "tp_size", "pp_size", "attention_dp_size",
                      "moe_tp_size", "moe_ep_size")


def deployment_key(row: Mapping[str, Any]) -> str:
    """The deployment a row measures: its rows at other concurrencies share the key."""
    return "|".join(_text(row.get(c)) if not isinstance(row.get(c), (int, float)) or _text(row.get(c)) == ""
                    else _n(row.get(c)) for c in DEPLOYMENT_COLUMNS)


def _n(v: Any) -> str:
    x = _num(v)
    return "" if not math.isfinite(x) else (str(int(x)) if x == int(x) else str(x))


# ----------------------------------------------------------------------------- engines


@lru_cache(maxsize=None)
def base_engine(backend: str) -> EngineProfile:
    """The engine profile of ``conf/engine/<backend>.yaml`` (host terms: the shipped fit)."""
    from omegaconf import OmegaConf

    from llmplan.paths import conf_dir

    path = conf_dir() / "engine" / f"{backend}.yaml"
    if backend not in BACKENDS or not path.is_file():
        raise UserError(f"no engine profile for backend '{backend}'", key="backend", fix=f"known: {', '.join(BACKENDS)}")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(raw, dict)
    fields = EngineProfile.__dataclass_fields__
    return EngineProfile(**{k: v for k, v in raw.items() if k in fields})


def engine_profiles(overrides: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, EngineProfile]:
    """Profiles of every backend, with ``overrides[backend]`` fields (e.g. fitted host
    overheads) laid over the conf values; keys that are not EngineProfile fields are ignored."""
    out = {}
    fields = EngineProfile.__dataclass_fields__
    for b in BACKENDS:
        e = base_engine(b)
        over = {k: v for k, v in (overrides or {}).get(b, {}).items() if k in fields}
        out[b] = replace(e, **over) if over else e
    return out


# ----------------------------------------------------------------------------- fields


def _num(v: Any) -> float:
    """A float, NaN for empty/unparsable."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def _int(v: Any, default: int) -> int:
    x = _num(v)
    return default if not math.isfinite(x) else int(round(x))


def _text(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip().lower()


def concurrency_of(row: Mapping[str, Any]) -> int:
    """Clients of the closed-loop run: ``silicon_concurrency=N`` in the source, else batch_size."""
    m = _CONC.search(str(row.get("silicon_data_source") or ""))
    if m:
        return int(m.group(1))
    return _int(row.get("batch_size"), 0)


def precision_of(row: Mapping[str, Any], model: ModelSpec, gpu: GPUSpec) -> Precision | str:
    """Weights/KV precision of a row (see the module docstring), or a status string."""
    mode = _text(row.get("gemm_quant_mode")) or _text(row.get("precision"))
    if mode in FP8_MODES:
        w = "fp8"
    elif mode in FP4_MODES:
        w = "fp4"
    elif mode in INT4_MODES:
        w = "int4"
    elif mode in BF16_MODES:
        w = model.native_dtype if model.native_dtype in ("fp8", "fp4") else "bf16"
    else:
        return f"precision: unknown gemm_quant_mode/precision '{mode}'"
    declared = _text(row.get("precision")) or w
    low = declared in FP8_MODES or declared in FP4_MODES
    kv = "fp8" if low and gpu.supports("fp8") and _text(row.get("backend")) not in KV_AUTO_MODEL_DTYPE else "bf16"
    return Precision(w, kv)


def block_fp8_model(row: Mapping[str, Any], model: ModelSpec) -> ModelSpec:
    """``model`` as the row serves it: a ``gemm_quant_mode=fp8_block`` run of a checkpoint
    that is not block-scaled fp8 quantizes it at load time to 128x128 block fp8, so its
    GEMMs use the block-fp8 kernels (model_catalog.gemm_dtypes); other rows keep the
    checkpoint's own format (an ``fp8`` run of a block-fp8 checkpoint runs its blocks)."""
    if _text(row.get("gemm_quant_mode")) != "fp8_block" or (model.quant is not None and is_block_fp8(model.quant.main)):
        return model
    quant = block_fp8_requant(model, str(row.get("model_path")))
    return model if quant is None else replace(model, quant=quant)


def id_layout(row: Mapping[str, Any]) -> tuple[int, int] | None:
    """(T GPUs, EP E) when the row's ``id`` names its engine layout and its columns hold the
    product ``T x E`` instead (see the module docstring); None otherwise."""
    m = _ID_LAYOUT.search(str(row.get("id") or ""))
    if m is None:
        return None
    t, e = int(m.group(1)), int(m.group(2))
    tp, adp = _int(row.get("tp_size"), 1), max(1, _int(row.get("attention_dp_size"), 1))
    if e > 1 and t * e == tp * adp and t != tp * adp:
        return t, e
    return None


def product_layout(row: Mapping[str, Any], domain: int) -> tuple[int, int] | None:
    """(T GPUs, EP E) for a row without a layout ``id`` whose columns carry the same ``T x E``
    export (``moe_tp_size = T > 1``, ``moe_ep_size = E > 1``, ``tp_size x attention_dp_size =
    T x E``) over more GPUs than one scale-up domain of ``domain`` GPUs; None otherwise.

    Evidence (H100/H200 files): every aggregated row over more than 8 GPUs has this signature,
    and all but 15 name ``_tp{T}_ep{E}_`` in their ``id``. Those 15 (TensorRT-LLM DeepSeek-V3 on
    H200, ``config_id=181``: ``tp_size`` 64, ``moe_tp_size`` 8, ``moe_ep_size`` 8) measured the
    same TPOT as the 8-GPU ``config_id=83`` runs within 0.1-0.9 ms at all 14 (isl, osl,
    concurrency) points both have, so they ran on 8 GPUs, not 64."""
    tp, adp = _int(row.get("tp_size"), 1), max(1, _int(row.get("attention_dp_size"), 1))
    t, e = _int(row.get("moe_tp_size"), 0), _int(row.get("moe_ep_size"), 0)
    if t > 1 and e > 1 and t * e == tp * adp and tp * adp > domain:
        return t, e
    return None


def parallelism_of(row: Mapping[str, Any], model: ModelSpec, domain: int = 0) -> Parallelism | str:
    """Parallelism of a row (see the module docstring), or a status string. ``domain``:
    GPUs of the row's scale-up domain (:func:`product_layout`; 0 skips that reading)."""
    tp, pp = _int(row.get("tp_size"), 1), _int(row.get("pp_size"), 1)
    if not model.is_moe:
        adp = _int(row.get("attention_dp_size"), 1)
        if adp > 1:  # TensorRT-LLM runs the dense MLP TP over all ranks then: no such run to check it on
            return (f"attention_dp: attention_dp_size={adp} on dense model {model.key} (attention DP of a dense "
                    "model, whose MLP runs TP over all ranks, is modelled only for MoE models)")
        return Parallelism(tp, pp, 1)
    named = id_layout(row) or (product_layout(row, domain) if domain > 0 else None)
    if named is not None:
        t, e = named
        # attention DP only where the launch could run it (calibration.vllm_launch.runs_data_parallel)
        dp_run = _int(row.get("attention_dp_size"), 1) > 1 and vllm_runs_data_parallel(row)
        return Parallelism(1, pp, e, dp=t) if dp_run else Parallelism(t, pp, e)
    script_ep = trtllm_script_ep_size(row)   # the benchmark script's --ep_size (calibration/trtllm_inferencex_layout.py)
    if script_ep is not None:
        return Parallelism(tp, pp, script_ep)
    ep = max(1, _int(row.get("moe_ep_size"), 1))  # empty or 0: not written, no EP
    moe_tp = _int(row.get("moe_tp_size"), 0)
    adp = _int(row.get("attention_dp_size"), 0)
    if moe_tp < 1:  # not written: the experts run TP over the rest of the worker's GPUs (vLLM default)
        moe_tp = max(1, tp * max(1, adp) // ep)
    if adp < 1:  # not written: implied by the MoE group (vLLM DP ranks)
        adp = moe_tp * ep // tp if moe_tp * ep % tp == 0 and moe_tp * ep >= tp else 1
    if moe_tp * ep != tp * adp:
        return (f"parallelism: moe_tp_size {moe_tp} x moe_ep_size {ep} != tp_size {tp} x attention_dp_size {adp} "
                "(the MoE layers run over the worker's tp x dp GPUs)")
    return Parallelism(tp, pp, ep, dp=adp)


# ----------------------------------------------------------------------------- mapping


def _load_model(name: str) -> ModelSpec | str:
    from llmplan.model_catalog.loader import load_model

    for old, new in ORG_ALIASES.items():
        if name.lower().startswith(old):
            name = new + name[len(old):]
    try:
        return load_model(name)
    except CatalogError as e:
        return f"unknown_model: {name}: {e}"


def _load_gpu(name: str) -> GPUSpec | str:
    from llmplan.hardware_catalog.loader import get_gpu

    try:
        return get_gpu(name)
    except CatalogError as e:
        return f"unknown_gpu: {name}: {e}"


def map_row(row: Mapping[str, Any], index: int, engines: Mapping[str, EngineProfile]) -> RowMapping:
    """One row -> a case to simulate, or a status saying why not."""
    def skip(status: str) -> RowMapping:
        return RowMapping(index, None, status)

    mode = _text(row.get("mode"))
    if mode != "agg":
        return skip(f"disagg: mode '{mode}' (disaggregated prefill/decode is not replayed yet: the disaggregation "
                    "work adds it)" if mode == "disagg"
                    else f"invalid: unknown mode '{mode}'")
    backend = _text(row.get("backend"))
    if backend not in engines:
        return skip(f"unknown_backend: '{backend}' (known: {', '.join(engines)})")
    isl, osl = _int(row.get("isl"), 0), _int(row.get("osl"), 0)
    conc = concurrency_of(row)
    ttft, tpot = _num(row.get("silicon_ttft_ms")), _num(row.get("silicon_tpot_ms"))
    if isl < 1 or osl < 2 or conc < 1:
        return skip(f"invalid: isl={isl}, osl={osl}, concurrency={conc} (need isl >= 1, osl >= 2, concurrency >= 1)")
    if not (ttft > 0 and tpot > 0):
        return skip(f"invalid: measured ttft={ttft}, tpot={tpot} (need both > 0)")
    if docker_capped_row(row):
        # N = 512 is the client's hard-coded cap, not the run's concurrency (calibration.inferencex_docker_client)
        return skip(docker_capped_note(row))
    model = _load_model(str(row.get("model_path") or ""))
    if isinstance(model, str):
        return skip(model)
    gpu = _load_gpu(str(row.get("system") or ""))
    if isinstance(gpu, str):
        return skip(gpu)
    prec = precision_of(row, model, gpu)
    if isinstance(prec, str):
        return skip(prec)
    model = block_fp8_model(row, model)
    par = parallelism_of(row, model, domain_gpus(gpu))
    if isinstance(par, str):
        return skip(par)
    problem = parallelism_problem(model, gpu, par, prec)
    if problem:
        return skip(("precision: " if "not supported" in problem else "parallelism: ") + problem)
    batch = max(_int(row.get("batch_size"), conc), 1) * max(1, _int(row.get("attention_dp_size"), 1))
    base = engines[backend]
    seqs = max(batch, conc)
    # the engine's token budget is per attention-DP rank: the replica's is dp times it
    tokens = max(base.max_num_batched_tokens * par.dp, seqs)
    if backend == "trtllm" and trtllm_generator_launch(row):
        # aiconfigurator's harness: max_num_tokens = max_batch_size + isl + 1500 (calibration.trtllm_launch)
        tokens = max(trtllm_generator_max_num_tokens(isl, max(_int(row.get("batch_size"), conc), 1)) * par.dp, seqs)
    engine = replace(base, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    if backend == "vllm":   # the launch's async scheduling (calibration.vllm_async_launch), whatever the yaml default
        engine = replace(engine, async_scheduling=vllm_async_scheduling(_text(row.get("backend_version")),
                                                                         length_range_ratio(row, isl, osl)))
    if backend == "trtllm":   # InferenceX's Llama-3.1-70B / DeepSeek-R1 launch scripts (calibration.trtllm_sweep_launch)
        engine = trtllm_sweep_engine(row, isl, osl, par.tp, engine, par.dp, conc)
    if backend == "sglang" and inferencex_mem_fraction(row, isl, osl) is not None:
        # InferenceX's SGLang launch scripts pass --mem-fraction-static (calibration.sglang_sweep_launch)
        engine = replace(engine, mem_fraction_static=inferencex_mem_fraction(row, isl, osl))
    if backend == "sglang" and dynamo_frontend_row(row):
        # served behind Dynamo's front end: its per-token time bounds the steps (sim/frontend_ceiling.py)
        engine = replace(engine, frontend="dynamo")
    if backend == "sglang" and inferencex_radix_cache_off(row, isl, osl):
        # --disable-radix-cache: no prefix cache, and SGLang's ignore_eos admission (sim.sglang_admission)
        engine = replace(engine, enable_prefix_caching=False)
    mem = plan_memory(model, gpu, par, prec, engine, isl + osl)
    if not mem.fits:
        return skip(f"memory: {mem.reason}")
    rid = row.get("id")
    case = ServingCase(index, str(rid) if rid is not None and _text(rid) else str(index), backend,
                       str(row.get("model_path")), mode, Deployment(model, gpu, par, prec, engine), conc, isl, osl,
                       ttft, tpot, _text(row.get("backend_version")), deployment_key(row),
                       length_range_ratio(row, isl, osl), backend == "sglang" and generator_mixed_chunk(row),
                       backend == "sglang" and generator_cuda_graph_every_batch(row),
                       vllm_max_capture_tokens(row, isl, osl), prompt_pool_size(row),
                       inferencex_prefill_tokens(row, isl, osl))
    if backend == "trtllm" and mtp_layers(row):   # measured with MTP speculation (calibration.trtllm_speculative)
        case = replace(case, speculative_mtp_k=mtp_layers(row))
    return RowMapping(index, case, SIMULATED)


#: labels that, with the lengths and the measured means, identify one aggregated measurement
# The model label is not part of the key: the 2026-04-27 db dump labels DeepSeek-R1 runs
# (ids ``dsr1_...``) ``deepseek-ai/DeepSeek-V3`` while the dated exports carry the same
# measurements as DeepSeek-R1 (same architecture; 30 H200 rows, equal TTFT and TPOT to 1e-4 ms).
REPEAT_LABELS = ("backend", "backend_version", "system", "precision", "gemm_quant_mode", "mode",
                 "isl", "osl")


def _label(v: Any) -> str | float:
    """A label as a key part: numbers rounded, text stripped, empty (None/NaN) as ''."""
    if isinstance(v, float):
        return "" if math.isnan(v) else round(v, 6)
    return _text(v)


#: two exports of one run agree to the precision of the coarser one: most dumps write the means to
#: 1e-6 ms, the gap-analysis files round them to 0.01 ms (e.g. 233.475447 and 233.48 ms), so means
#: within half of 0.01 ms (plus float slack) are one measurement
REPEAT_MEANS_TOL_MS = 0.0051


def measured_means(row: Mapping[str, Any]) -> tuple[float, float] | None:
    """(mean TTFT, mean TPOT) in ms rounded to 1e-4 ms; None when either is not a finite number."""
    ttft, tpot = _num(row.get("silicon_ttft_ms")), _num(row.get("silicon_tpot_ms"))
    return (round(ttft, 4), round(tpot, 4)) if math.isfinite(ttft) and math.isfinite(tpot) else None


def measurement_repeats(rows: list[Mapping[str, Any]]) -> dict[int, int]:
    """Aggregated rows that repeat an earlier row's measurement -> the index of that first row.

    The measurement dumps re-export some runs under other ids (and some with the layout written
    as a product, ``serving_rows.product_layout``, or under another model label): same engine, version, GPU, precision,
    lengths, client concurrency, and mean TTFT and TPOT equal to the precision of the coarser export
    (:data:`REPEAT_MEANS_TOL_MS`), which two distinct runs never are (an empty label matches an empty label). Each
    measurement is counted once, so a run is neither weighted twice in the fit nor present in
    both deployment halves of the held-out split. Disaggregated rows are matched by
    ``serving_disagg_rows.measurement_key``."""
    seen: dict[tuple, list[tuple[int, tuple[float, float]]]] = {}
    out: dict[int, int] = {}
    for i, r in enumerate(rows):
        if _text(r.get("mode")).lower() == "disagg":
            continue
        means = measured_means(r)
        if means is None:
            continue
        firsts = seen.setdefault((*(_label(r.get(c)) for c in REPEAT_LABELS), concurrency_of(r)), [])
        j = next((j for j, m in firsts if all(abs(a - b) <= REPEAT_MEANS_TOL_MS for a, b in zip(means, m))), None)
        if j is None:
            firsts.append((i, means))
        else:
            out[i] = j
    return out


def map_rows(df: pd.DataFrame, engines: Mapping[str, EngineProfile]) -> list[RowMapping]:
    """Every row of a measurements frame, in order; a repeated measurement (:func:`measurement_repeats`)
    is listed with status ``repeat`` and not simulated."""
    rows = df.to_dict("records")
    repeats = measurement_repeats(rows)
    return [RowMapping(i, None, f"repeat: the measurement of row {_text(rows[repeats[i]].get('id')) or repeats[i]} "
                                "(same labels, lengths and measured TTFT/TPOT), counted once")
            if i in repeats else map_row(r, i, engines) for i, r in enumerate(rows)]


# ----------------------------------------------------------------------------- simulation

@dataclass(frozen=True)
class SimOptions:
    """How a measured run is replayed in the discrete-event simulator.

    ``requests = max(waves x concurrency, min_requests)``. ``window``: ``all`` counts every
    request, as a benchmark client reports over all its requests (default, with 10 waves:
    the common ``--request-count 10 x concurrency`` of genai-perf/AIPerf runs); ``steady``
    leaves the first ``concurrency`` requests (the start-up burst) and the last
    ``concurrency`` (the drain) out of the means. ``osl_jitter`` > 0 draws output lengths uniformly
    in ``osl x [1 - j, 1 + j]`` (mean ``osl``): identical requests otherwise stay in lock-step
    forever in a deterministic simulator, while real clients drift apart (network, tokenizer
    and scheduling jitter); 0 keeps every length fixed. Every client sends its first request
    at time 0, as benchmark clients do.
    """

    calibration: str | None = None   # kernel calibration: None (default fit), a file, or "spec"
    waves: int = 10
    min_requests: int = 60
    window: str = "all"              # all | steady
    osl_jitter: float = 0.0
    seed: int = 0
    client_lengths: bool = True      # replay the lengths each row's client drew (calibration.benchmark_clients)

    def osl_range(self, osl: int) -> tuple[int, int]:
        """Smallest and largest output length drawn for a run of ``osl`` tokens."""
        if self.osl_jitter <= 0:
            return osl, osl
        d = int(round(osl * self.osl_jitter))
        return max(2, osl - d), osl + d


@dataclass(frozen=True)
class Prediction:
    """Simulated means over the measured requests of one run (NaN when not simulated)."""

    ttft_ms: float
    tpot_ms: float
    tier: str
    status: str = SIMULATED
    requests: int = 0


def num_requests(concurrency: int, opts: SimOptions) -> int:
    return max(opts.waves * concurrency, opts.min_requests)


@lru_cache(maxsize=32)
def _kernels(gpu_key: str, backend: str, calibration: str | None) -> Any:
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.deployment import make_kernel_model

    return make_kernel_model(get_gpu(gpu_key), backend, calibration)


def resolve_calibration(calibration: str | None) -> tuple[str | None, str]:
    """The calibration to use and a note. The default (None) runs on the specification
    roofline, with a note, when no default calibration file is installed; an explicit file
    that cannot be loaded is a UserError."""
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.deployment import make_kernel_model

    try:
        km = make_kernel_model(get_gpu("h100_sxm"), "vllm", calibration)
    except UserError as e:
        if calibration is not None:
            raise
        return "spec", f"default kernel calibration unavailable ({e}); using the specification roofline"
    if calibration is None and getattr(km, "tier", None) == "spec":
        return "spec", "no default kernel calibration installed; using the specification roofline (tier spec)"
    return calibration, ""


def kernel_tier(step: Any) -> str:
    """Calibration tier of a step model's kernels: the kernel model's own ``tier``
    (measured | cross-gen | spec) when it has one, else the tier carrying most of the time
    of a representative mixed step (host overhead and pipeline sends excluded)."""
    from llmplan.sim.types import StepShape

    tier = getattr(step.kernels, "tier", None)
    if isinstance(tier, str):
        return tier
    weight: dict[str, float] = {}
    for o in step.breakdown(StepShape.build([(512, 0)], [1024] * 8)).ops:
        if o.family != "host" and o.name != "pp_send_recv":
            weight[o.tier] = weight.get(o.tier, 0.0) + o.latency_ms
    return max(weight, key=lambda t: (weight[t], t)) if weight else "spec"


def step_model(case: ServingCase, calibration: str | None) -> Any:
    """The analytical step model of a case (kernel models cached per GPU/engine/calibration)."""
    from llmplan.sim.deployment import build

    km = _kernels(case.dep.gpu.key, case.dep.engine.kernel_backend, calibration)
    step, _ = build(case.dep, calibration, case.isl + case.osl, kernels=km)
    if case.graph_every_batch:  # --cuda-graph-bs 1..max_batch_size (= max_num_seqs)
        step.capture_every_batch(case.dep.engine.max_num_seqs)
    elif case.graph_capture_tokens:  # vLLM --max-cudagraph-capture-size (calibration.vllm_launch)
        step.capture_up_to(case.graph_capture_tokens)
    if case.backend == "vllm" and vllm_allreduce_rms_fusion(case.version):  # -O2 fusion (calibration.vllm_launch)
        step.fuse_allreduce_rms()
    if case.backend == "vllm" and vllm_mxfp4_marlin(case.model_path, case.dep.gpu.key, case.version,
                                                    case.length_ratio):  # VLLM_MXFP4_USE_MARLIN (calibration.vllm_launch)
        step.run_marlin_mxfp4_moe()
    if case.backend == "sglang" and sglang_allreduce_rms_fusion(case.version):  # >= 0.5.7 default (calibration.sglang_launch)
        step.fuse_sglang_allreduce_rms()
    return step


def benchmark_workload(isl: int, osl: int, concurrency: int, opts: SimOptions,
                       length_ratio: float = 1.0, prompt_pool: int = 0, block_tokens: int = 16) -> tuple[Any, Any]:
    """(workload, measured window) of a served run's benchmark client: a closed loop of
    ``concurrency`` clients, fixed prompts, output lengths per :meth:`SimOptions.osl_range`;
    a client with ``length_ratio`` < 1 draws prompt and output lengths uniformly in
    ``[ratio x L, L]`` instead (:mod:`calibration.benchmark_clients`; no jitter on top).
    ``prompt_pool`` > 0: each request's whole prompt is one of that many distinct prompts, drawn
    uniformly (aiperf's reused dataset entries), hashed in ``block_tokens`` blocks (the engine's
    KV block) so the prefix cache can serve repeats."""
    from llmplan.sim.metrics import MeasureWindow
    from llmplan.sim.workload import LengthSpec, WorkloadSpec

    lo, hi = opts.osl_range(osl) if length_ratio >= 1 else length_bounds(osl, length_ratio)
    ilo, ihi = length_bounds(isl, length_ratio)
    n = num_requests(concurrency, opts)
    if prompt_pool > 0:   # aiperf's client: 2N warm-up requests, then 20N reported
        n = (AIPERF_WARMUP_WAVES + AIPERF_MEASURED_WAVES) * concurrency
    out = (LengthSpec(kind="fixed", mean_tokens=osl) if lo == hi
           else LengthSpec(kind="uniform", min_tokens=lo, max_tokens=hi))
    inp = (LengthSpec(kind="fixed", mean_tokens=isl) if ilo == ihi
           else LengthSpec(kind="uniform", min_tokens=ilo, max_tokens=ihi))
    spec = WorkloadSpec(preset=None, arrival="closed_loop", concurrency=concurrency, num_requests=n,
                        input_tokens=inp, output_tokens=out, seed=opts.seed)
    if prompt_pool > 0:
        spec = replace(spec, shared_prefix_tokens=ihi, num_shared_prefixes=prompt_pool,
                       prefix_block_tokens=block_tokens)
        window = MeasureWindow(0.0, 0.0, warmup_requests=AIPERF_WARMUP_WAVES * concurrency)
    elif opts.window == "steady":
        window = MeasureWindow(0.0, concurrency / n, warmup_requests=concurrency)
    else:
        window = MeasureWindow(0.0, 0.0, warmup_requests=0)
    return spec, window


def simulate_case(case: ServingCase, opts: SimOptions, wrap: Callable[[Any], Any] | None = None) -> Prediction:
    """Replay one run in the DES: one replica, closed loop, fixed prompt length (see
    :class:`SimOptions`). ``wrap`` maps the case's step model to the cost model the replica
    uses (engine corrections; the engine fit's probe models); None uses it as is."""
    from llmplan.sim.memory import plan_memory
    from llmplan.sim.replica import ReplicaSpec
    from llmplan.sim.serving import simulate_serving
    from llmplan.sim.sglang_scheduling import chunks_prompts
    from llmplan.sim.sglang_scheduling import mixed_chunk_engine as sglang_mixed_chunk_engine
    from llmplan.sim.sglang_scheduling import replay_engine as sglang_replay_engine

    lo, hi = opts.osl_range(case.osl)
    e = case.dep.engine
    par = case.dep.par
    if case.mixed_chunk:
        # SGLang --enable-mixed-chunk (the generator's launch): chunks next to the decodes
        e = sglang_mixed_chunk_engine(e, case.dep.gpu.memory_bytes, par.tp, par.pp, par.dp,
                                      generator_max_prefill_tokens(case.isl))
    elif chunks_prompts(e):
        # SGLang: prefill batches of its default chunk size, a longer prompt cut over several
        e = sglang_replay_engine(e, case.dep.gpu.memory_bytes, par.tp, par.pp, par.dp, case.prefill_chunk_tokens)
    elif not e.chunked_prefill and e.max_num_batched_tokens < case.isl + hi:
        # a prefill-first engine must take a whole prompt (plus recomputed output) in one step
        e = replace(e, max_num_batched_tokens=case.isl + hi)
    elif (e.chunked_prefill and e.whole_prompts and e.max_num_batched_tokens < case.isl + hi + case.concurrency
          and not trtllm_script_sets_budget(case.backend, case.model_path, case.dep.gpu.key, case.length_ratio)):
        # whole prompts mixed with decodes: a benchmark configures max_num_tokens so that a prompt
        # fits next to the running decodes (TensorRT-LLM refuses prompts longer than the budget)
        e = replace(e, max_num_batched_tokens=case.isl + hi + case.concurrency)
    if e is not case.dep.engine:
        case = replace(case, dep=replace(case.dep, engine=e))
    dep = case.dep
    step = step_model(case, opts.calibration)
    tier = kernel_tier(step)
    mem = plan_memory(dep.model, dep.gpu, dep.par, dep.prec, dep.engine, case.isl + case.osl)
    spec, window = benchmark_workload(case.isl, case.osl, case.concurrency, opts,
                                      case.length_ratio if opts.client_lengths else 1.0,
                                      case.prompt_pool, dep.engine.block_size)
    cost, kv_tokens = (wrap(step) if wrap is not None else step), mem.kv_capacity_tokens
    if case.speculative_mtp_k and wrap is None:
        # measured with MTP: replayed with the simulator's speculative decoding (calibration.trtllm_speculative);
        # a wrapped cost (the engine fit's probes) is left as is: these rows are not fitted (--exclude-regimes)
        cost, kv_tokens = mtp_replay(step, case, kv_tokens, opts.seed)
    replica = ReplicaSpec(cost, dep.engine, kv_tokens, case.isl + hi)
    try:
        res = simulate_serving(spec, [replica], seed=opts.seed, window=window)
    except UserError as e:  # e.g. one request's KV does not fit beyond the watermark
        return Prediction(math.nan, math.nan, tier, f"memory: {e}")
    s = res.summary
    if res.overloaded or s.get("ttft_ms_mean") is None or s.get("tpot_ms_mean") is None:
        return Prediction(math.nan, math.nan, tier, f"invalid: simulation did not finish ({res.unfinished} unfinished)")
    return Prediction(float(s["ttft_ms_mean"]), float(s["tpot_ms_mean"]), tier, SIMULATED, int(s["measured_finished"]))


# ----------------------------------------------------------------------------- parallel runs


def parallel_map(fn: Callable[[Any], Any], items: list[Any], workers: int = 2,
                 progress: Callable[[int, int], None] | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` in order, on a pool of ``workers`` processes (fork) when
    that is available and worth it. ``fn`` and the items must be picklable (top-level
    function, plain data: catalog records are rebuilt in the workers from the rows).
    ``progress(done, total)`` is called as results arrive."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    total = len(items)
    if workers <= 1 or total < 4 or "fork" not in mp.get_all_start_methods():
        out = []
        for i, x in enumerate(items):
            out.append(fn(x))
            if progress:
                progress(i + 1, total)
        return out
    results: list[Any] = [None] * total
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as ex:
        futures = {ex.submit(fn, x): i for i, x in enumerate(items)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, total)
    return results

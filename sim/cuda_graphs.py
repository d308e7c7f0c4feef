"""CUDA-graph batch padding: the token rows a step really computes.

Engines capture CUDA graphs for a list of batch sizes at start-up and replay them; a batch
whose size is not captured is either padded up to the next captured size (the padded rows
cost GEMM rows like real ones) or run eagerly. Each engine's documented default:

* **vLLM v1** (>= 0.11, ``CompilationConfig.cudagraph_capture_sizes``,
  https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/config/compilation.py): capture sizes
  ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with
  ``max = min(2 x max_num_seqs, 512)``; every step of at most ``max`` tokens is padded up to
  the next capture size (full graphs for decode-only batches, piecewise graphs for mixed
  prefill/decode batches in the default ``FULL_AND_PIECEWISE`` mode); larger steps run
  unpadded.
* **SGLang** (0.5.x, ``cuda_graph_runner.get_batch_sizes_to_capture``; "larger batches fall back
  to normal execution", https://docs.sglang.ai/advanced_features/cuda_graphs.html): decode batches only, sizes
  ``1, 2, 4, 8`` then multiples of 8 up to ``cuda_graph_max_bs`` (its default depends on GPU
  memory and TP: :func:`sglang_graph_max_bs`, 256 / 512 on H100-H200 below / from TP4, 512 on
  B200; the step model passes its GPU's); a decode
  batch is padded to the next captured size, larger batches and prefill/mixed batches run
  without graphs.
* **TensorRT-LLM** (PyTorch backend, ``CudaGraphConfig`` / ``DecodeCudaGraphConfig``,
  https://nvidia.github.io/TensorRT-LLM/llm-api/reference/DecodeCudaGraphConfig.html):
  ``enable_padding`` is False by default, so a decode batch that is not a captured size runs
  eagerly: **no padding**.

Only the padded row count is modelled here (the linear operators: GEMMs, MoE, norms; the
lm_head and attention keep the real sequences, as the engines compute logits and attention
for real sequences only).

**Eager steps** (:func:`eager_step`): a step that replays no graph launches every kernel of the
forward from the host, layer by layer. Which steps do, per engine default:

* **TensorRT-LLM**: CUDA graphs "are enabled for batches that consist of decoding requests
  *only*" (``TorchLlmArgs.cuda_graph_config`` description in ``tensorrt_llm/llmapi/llm_args.py``,
  1.x; "it's hard to capture a single graph with prefill requests"), captured up to
  ``max_batch_size`` 128 by default
  (``DecodeCudaGraphConfig``: "If neither is provided, a default max_batch_size of 128 is
  used", https://nvidia.github.io/TensorRT-LLM/llm-api/reference/DecodeCudaGraphConfig.html).
  Every step carrying a prompt is eager, and so is a decode batch above
  :data:`TRTLLM_MAX_CAPTURE`. (Without ``enable_padding`` the default list is 1-31, 32, 64, 128;
  decode batches of 33-63 or 65-127 sequences would run eagerly too, but the served rows show no
  step there: the decode-step intercept at N = 64 is predicted within 0.93-1.14 of the measured
  one on TRT-LLM Qwen3-32B, docs/ACCURACY.md "Flat across batch sizes", so their benchmark
  configurations captured those batches; only the default maximum is kept.)
* **vLLM v1**: full graphs for decode batches and piecewise graphs (attention outside) for mixed
  steps up to the largest capture size; a step of more tokens runs without graphs.
* **SGLang**: decode batches up to ``cuda_graph_max_bs``; prefill and mixed batches run without
  graphs.

The time an eager step adds (host launch of the forward's kernels, a constant per step that
grows with the layers, not with the batch) is the fitted engine term
``eager_step_ms_per_layer`` (``sim/engine_terms.py``, ``sim/step_model.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from functools import lru_cache

#: SGLang's cuda_graph_max_bs where the caller does not give the GPU's own (its default is picked
#: from GPU memory and TP size: :func:`sglang_graph_max_bs`)
SGLANG_MAX_BS = 256
#: vLLM's cap on the largest captured size
VLLM_MAX_CAPTURE = 512
#: TensorRT-LLM's default largest captured decode batch (DecodeCudaGraphConfig.max_batch_size)
TRTLLM_MAX_CAPTURE = 128


def sglang_graph_max_bs(device_bytes: int, tp: int, pp: int = 1) -> int:
    """SGLang's default ``cuda_graph_max_bs`` on a GPU of ``device_bytes`` at TP ``tp``
    (``ServerArgs._handle_gpu_memory_settings``, v0.5.x: 256 below TP4 and 512 from TP4 on 60-160 GiB
    GPUs such as H100/H200, 512 on B200-class GPUs above 160 GiB; :func:`sim.kv_budget.sglang_default_fraction`)."""
    from llmplan.sim.kv_budget import sglang_default_fraction

    return sglang_default_fraction(int(device_bytes), max(1, tp), max(1, pp))[2]


@lru_cache(maxsize=64)
def capture_sizes(engine: str, max_num_seqs: int, graph_max_bs: int | None = None) -> tuple[int, ...]:
    """Batch sizes (tokens) the engine captures by default; () = no padding. ``graph_max_bs``:
    SGLang's largest captured batch on the GPU (:func:`sglang_graph_max_bs`; default
    :data:`SGLANG_MAX_BS`); for vLLM a launch's ``max_cudagraph_capture_size`` (None: the default
    ``min(2 x max_num_seqs, 512)``)."""
    if engine == "vllm":
        top = int(graph_max_bs) if graph_max_bs else min(2 * max(1, max_num_seqs), VLLM_MAX_CAPTURE)
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        return tuple(s for s in sizes if s <= top)
    if engine == "sglang":
        return tuple([1, 2, 4, 8] + list(range(16, (graph_max_bs or SGLANG_MAX_BS) + 1, 8)))
    return ()


def pads_mixed_steps(engine: str) -> bool:
    """Whether steps with prefill tokens are padded too (vLLM piecewise graphs)."""
    return engine == "vllm"


def padded_tokens(engine: str, max_num_seqs: int, tokens: int, decode_only: bool,
                  graph_max_bs: int | None = None) -> int:
    """Token rows a step of ``tokens`` real tokens computes under the engine's CUDA graphs."""
    if tokens <= 0 or not (decode_only or pads_mixed_steps(engine)):
        return tokens
    sizes = capture_sizes(engine, max_num_seqs, graph_max_bs)
    if not sizes or tokens > sizes[-1]:
        return tokens
    return sizes[bisect_left(sizes, tokens)]


def eager_step(engine: str, max_num_seqs: int, tokens: int, decode_only: bool,
               graph_max_bs: int | None = None) -> bool:
    """Whether a step of ``tokens`` tokens (``decode_only``: every token a decoding sequence's)
    runs without CUDA graphs under the engine's defaults (module docstring); False for an
    empty step and for engines without a documented graph policy."""
    if tokens <= 0:
        return False
    if engine == "trtllm":
        return not decode_only or tokens > TRTLLM_MAX_CAPTURE
    if engine == "sglang":
        return not decode_only or tokens > (graph_max_bs or SGLANG_MAX_BS)
    if engine == "vllm":
        return tokens > capture_sizes(engine, max_num_seqs, graph_max_bs)[-1]
    return False

"""`trtllm-serve` command for a planned pool (PyTorch backend).

Flags follow the TensorRT-LLM 1.0.0 documentation:
  * `trtllm-serve`: https://nvidia.github.io/TensorRT-LLM/1.0.0/commands/trtllm-serve/trtllm-serve.html
    (`--backend pytorch`, `--tp_size`, `--pp_size`, `--ep_size`, `--max_batch_size`,
    `--max_num_tokens`, `--max_seq_len`, `--kv_cache_free_gpu_memory_fraction`,
    `--extra_llm_api_options <yaml>`);
  * the LLM-API options file (`enable_chunked_prefill`, `enable_attention_dp`,
    `kv_cache_config: {dtype, enable_block_reuse}`), as in
    https://nvidia.github.io/TensorRT-LLM/1.0.0/commands/trtllm-serve/run-benchmark-with-trtllm-serve.html
TensorRT-LLM reads weight quantization from the checkpoint (ModelOpt); it has no load-time
quantization flag.
"""

from __future__ import annotations

import yaml

from llmplan.optimizer.launch.speculation import trtllm_options
from llmplan.optimizer.launch.spec import LaunchCommand, LaunchSpec, load_time_quantization

DOC = "TensorRT-LLM 1.0.0, https://nvidia.github.io/TensorRT-LLM/1.0.0/commands/trtllm-serve/trtllm-serve.html"
OPTIONS_FILE = "extra_llm_api_options.yaml"


#: the batch-waiting options' release (TorchLlmArgs; sim/trtllm_batch_wait.py)
BATCH_WAIT_DOC = "TensorRT-LLM >= 1.1, https://nvidia.github.io/TensorRT-LLM/llm-api/reference.html (TorchLlmArgs)"


def options(s: LaunchSpec) -> dict:
    out = {**trtllm_options(s.speculation, s.model_hf_id)[0],
           "enable_chunked_prefill": bool(s.chunked_prefill),
           "enable_attention_dp": bool(s.attention_dp),
           "kv_cache_config": {"dtype": "fp8" if s.kv_cache_dtype == "fp8" else "auto",
                               "enable_block_reuse": bool(s.enable_prefix_caching)}}
    if s.batch_wait_timeout_iters or s.batch_wait_max_tokens_ratio:  # the plan simulated batch waiting
        out |= {"batch_wait_timeout_iters": int(s.batch_wait_timeout_iters),
                "batch_wait_max_tokens_ratio": float(s.batch_wait_max_tokens_ratio)}
    return out


def command(s: LaunchSpec) -> LaunchCommand:
    argv = ["trtllm-serve", s.model_hf_id, "--backend", "pytorch",
            "--tp_size", str(s.tp), "--pp_size", str(s.pp), "--ep_size", str(s.ep),
            "--max_batch_size", str(s.max_num_seqs), "--max_num_tokens", str(s.max_num_batched_tokens),
            "--max_seq_len", str(s.max_model_len),
            "--kv_cache_free_gpu_memory_fraction", f"{s.gpu_memory_utilization:g}",
            "--extra_llm_api_options", OPTIONS_FILE, "--host", "0.0.0.0", "--port", str(s.port)]
    notes = list(s.notes)
    _, q_notes = load_time_quantization(s, "TensorRT-LLM", fp8_flag=False,
                                        how="quantized with NVIDIA ModelOpt; the command names the original")
    notes += q_notes
    if s.nodes_per_replica > 1:
        notes.append(f"multi-node replica ({s.nodes_per_replica} nodes): run under MPI with "
                     f"`mpirun -np {s.gpus_per_replica} trtllm-llmapi-launch trtllm-serve ...` (TensorRT-LLM 1.0.0 "
                     "multi-node serving); the hostfile must list the pods of the LeaderWorkerSet group")
    notes += trtllm_options(s.speculation, s.model_hf_id)[1]
    if s.batch_wait_timeout_iters or s.batch_wait_max_tokens_ratio:
        notes.append(f"batch waiting ({OPTIONS_FILE}: batch_wait_timeout_iters {s.batch_wait_timeout_iters}, "
                     f"batch_wait_max_tokens_ratio {s.batch_wait_max_tokens_ratio:g}) needs {BATCH_WAIT_DOC}")
    text = yaml.safe_dump(options(s), sort_keys=True)
    return LaunchCommand(tuple(argv), ((OPTIONS_FILE, text),), tuple(notes), DOC)

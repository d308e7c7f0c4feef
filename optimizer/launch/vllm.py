"""`vllm serve` command for a planned pool.

Flags follow the vLLM v0.12.0 documentation:
  * engine arguments / `vllm serve`: https://docs.vllm.ai/en/v0.12.0/cli/serve/
  * expert parallelism: https://docs.vllm.ai/en/v0.12.0/serving/expert_parallel_deployment/
    (`--enable-expert-parallel`: the EP size is TP x DP, it cannot be set on its own)
  * quantization: `--quantization fp8` quantizes a bf16 checkpoint at load time;
    `--kv-cache-dtype {auto,fp8,...}`.
"""

from __future__ import annotations

from llmplan.optimizer.launch.speculation import vllm_args
from llmplan.optimizer.launch.spec import LaunchCommand, LaunchSpec, load_time_quantization
from llmplan.sim.vllm_async_scheduling import async_refusal

DOC = "vLLM v0.12.0, https://docs.vllm.ai/en/v0.12.0/cli/serve/"


def command(s: LaunchSpec) -> LaunchCommand:
    # attention DP in vLLM: DP ranks of TP 1 over the same GPUs, experts sharded over all of them
    argv = ["vllm", "serve", s.model_hf_id,
            "--tensor-parallel-size", str(1 if s.attention_dp else s.tp), "--pipeline-parallel-size", str(s.pp),
            "--max-num-seqs", str(s.max_num_seqs), "--max-num-batched-tokens", str(s.max_num_batched_tokens),
            "--enable-chunked-prefill" if s.chunked_prefill else "--no-enable-chunked-prefill",
            "--kv-cache-dtype", "fp8" if s.kv_cache_dtype == "fp8" else "auto",
            "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}", "--block-size", str(s.block_size),
            "--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching",
            "--max-model-len", str(s.max_model_len), "--host", "0.0.0.0", "--port", str(s.port)]
    # the plan simulated vLLM's async scheduling (sim/vllm_async_scheduling.py): the server must run it; vLLM
    # >= 0.14 runs it by default, earlier releases only with the flag (docs.vllm.ai, `--async-scheduling`).
    # vLLM refuses an explicit --async-scheduling (ValueError at start) with PP > 1, non-EAGLE/MTP speculation
    # or the ray executor (vllm/config/vllm.py VllmConfig.__post_init__): the flag is then off, and said
    notes = list(s.notes)
    refusal = async_refusal(s.pp, s.speculation.method if s.speculation is not None else None,
                            ray_executor=s.nodes_per_replica > 1)
    argv.append("--async-scheduling" if s.async_scheduling and refusal is None else "--no-async-scheduling")
    if s.async_scheduling and refusal is not None:
        notes.append(f"async scheduling off: vLLM does not run it with {refusal}"
                     + ("" if s.pp > 1 or s.speculation is not None else
                        "; the plan simulated it (a request arriving while the engine is busy joins one step "
                        "later), so its TTFT may read up to one decode step high: re-plan with "
                        "engine.async_scheduling=false to simulate the synchronous engine"))
    if s.ep > 1:
        argv.append("--enable-expert-parallel")
        if s.ep != s.tp and not s.attention_dp:
            notes.append(f"WARNING: vLLM sets the expert-parallel size to TP x DP = {s.tp}; the plan assumed "
                         f"ep={s.ep} with expert-TP {s.tp // s.ep}, which vLLM cannot express: re-plan with "
                         f"search.ep=[1,{s.tp}] or use SGLang/TensorRT-LLM")
    if s.attention_dp:
        argv += ["--data-parallel-size", str(s.tp)]
        if s.ep not in (1, s.tp):
            notes.append(f"WARNING: with --enable-expert-parallel vLLM's EP size is TP x DP = {s.tp}, not the "
                         f"planned ep={s.ep}: re-plan with search.ep=[1,{s.tp}] or use SGLang/TensorRT-LLM")
    q_args, q_notes = load_time_quantization(s, "vLLM")
    argv += q_args
    notes += q_notes
    if s.nodes_per_replica > 1:
        argv += ["--distributed-executor-backend", "ray"]
    s_args, s_notes = vllm_args(s.speculation, s.model_hf_id)
    argv += s_args
    notes += s_notes
    return LaunchCommand(tuple(argv), (), tuple(notes), DOC)

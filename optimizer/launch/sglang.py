"""`python3 -m sglang.launch_server` command for a planned pool (`python3`: the SGLang
container images ship no `python` alias).

Flags follow the SGLang server-arguments documentation (docs.sglang.io, "Server
Arguments", https://docs.sglang.io/advanced_features/server_arguments.html, read for
SGLang v0.5.x): `--tp-size`, `--pp-size`, `--ep-size`, `--dp-size`, `--enable-dp-attention`,
`--max-running-requests`, `--chunked-prefill-size`, `--max-prefill-tokens`,
`--enable-mixed-chunk`, `--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3}`, `--quantization fp8`,
`--mem-fraction-static`, `--disable-radix-cache`, `--context-length`; multi-node:
`--nnodes`, `--node-rank`, `--dist-init-addr`.

Scheduling: SGLang chunks long prompts but runs prefill batches on their own unless
`--enable-mixed-chunk` is given. The planner's `chunked_prefill: false` profile models that
default (prefill-first, budget raised to whole prompts); `chunked_prefill: true` maps to
mixed chunks.
"""

from __future__ import annotations

from llmplan.optimizer.launch.speculation import sglang_args
from llmplan.optimizer.launch.spec import LaunchCommand, LaunchSpec, load_time_quantization

DOC = "SGLang server arguments (v0.5.x), https://docs.sglang.io/advanced_features/server_arguments.html"


def command(s: LaunchSpec) -> LaunchCommand:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", s.model_hf_id,
            "--tp-size", str(s.tp), "--pp-size", str(s.pp),
            "--max-running-requests", str(s.max_num_seqs),
            "--chunked-prefill-size", str(s.max_num_batched_tokens),
            "--max-prefill-tokens", str(s.max_num_batched_tokens),
            "--kv-cache-dtype", "fp8_e4m3" if s.kv_cache_dtype == "fp8" else "auto",
            "--mem-fraction-static", f"{s.gpu_memory_utilization:g}",
            "--context-length", str(s.max_model_len), "--host", "0.0.0.0", "--port", str(s.port)]
    notes = list(s.notes)
    if s.chunked_prefill:
        argv.append("--enable-mixed-chunk")
    if not s.enable_prefix_caching:
        argv.append("--disable-radix-cache")
    if s.ep > 1:
        argv += ["--ep-size", str(s.ep)]
    if s.attention_dp:
        argv += ["--enable-dp-attention", "--dp-size", str(s.tp)]
        notes.append(f"--max-running-requests {s.max_num_seqs} is per DP rank here (the plan's replica total / "
                     f"{s.tp}); check how your SGLang version applies it under --enable-dp-attention")
    q_args, q_notes = load_time_quantization(s, "SGLang")
    argv += q_args
    notes += q_notes
    s_args, s_notes = sglang_args(s.speculation, s.model_hf_id)
    argv += s_args
    notes += s_notes
    return LaunchCommand(tuple(argv), (), tuple(notes), DOC)


def multinode_args(s: LaunchSpec, node_rank: str, leader_addr: str) -> list[str]:
    """Arguments each node of a multi-node replica adds (documented multi-node launch)."""
    return ["--nnodes", str(s.nodes_per_replica), "--node-rank", node_rank, "--dist-init-addr", f"{leader_addr}:20000"]

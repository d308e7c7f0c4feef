"""A benchmark command that checks a pool's prediction on real hardware.

`vllm bench serve` (vLLM v0.11.2/v0.12.0 docs, https://docs.vllm.ai/en/v0.11.2/cli/bench/serve/)
replays the planned workload against any OpenAI-compatible server: random prompts of the
workload's mean input length, exactly the mean output length (`--ignore-eos`), Poisson
arrivals at the pool's planned rate (`--burstiness` = 1/cv^2 for gamma arrivals), and
reports TTFT/TPOT percentiles to compare with the plan. ``--num-prompts`` covers about
two minutes of traffic (at least 200 requests).
"""

from __future__ import annotations

import math

from llmplan.optimizer.launch.spec import LaunchSpec

DOC = "vLLM v0.11.2, https://docs.vllm.ai/en/v0.11.2/cli/bench/serve/"
BENCH_SECONDS = 120.0
MIN_PROMPTS = 200


def num_prompts(rate_rps: float) -> int:
    return max(MIN_PROMPTS, int(math.ceil(rate_rps * BENCH_SECONDS)))


def command(s: LaunchSpec, rate_rps: float, mean_input_tokens: float, mean_output_tokens: float,
            percentiles: list[float], arrival_cv: float = 1.0, seed: int = 0,
            base_url: str | None = None, arrival: str = "poisson",
            concurrency: int | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(argv, notes). ``rate_rps`` is the load of the whole pool (all its replicas).

    A closed-loop target (``concurrency`` clients) becomes `--max-concurrency N` with an
    unlimited request rate; a trace is replayed as Poisson arrivals at its mean rate (noted)."""
    url = base_url or f"http://{s.service_name}:{s.port}"
    pct = ",".join(f"{p:g}" for p in sorted({50.0, *percentiles}))
    argv = ["vllm", "bench", "serve", "--backend", "vllm" if s.engine == "vllm" else "openai",
            "--base-url", url, "--endpoint", "/v1/completions", "--model", s.model_hf_id,
            "--dataset-name", "random", "--random-input-len", str(int(round(mean_input_tokens))),
            "--random-output-len", str(int(round(mean_output_tokens))), "--ignore-eos",
            "--request-rate", "inf" if concurrency else f"{rate_rps:.4g}", "--num-prompts", str(num_prompts(rate_rps)),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", pct,
            "--seed", str(seed), "--save-result"]
    notes = ["prompt and output lengths are fixed at the workload's means; the plan used the workload's "
             "length distribution, so compare percentiles with care"]
    if concurrency:
        argv += ["--max-concurrency", str(int(concurrency))]
    elif abs(arrival_cv - 1.0) > 1e-9:
        argv += ["--burstiness", f"{1.0 / arrival_cv ** 2:.4g}"]
    if arrival == "trace":
        notes.append("the plan replayed a trace; the benchmark sends Poisson arrivals at the trace's mean rate")
    return tuple(argv), tuple(notes)

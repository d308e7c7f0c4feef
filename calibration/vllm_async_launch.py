"""Which served vLLM rows ran with async scheduling (``sim/vllm_async_scheduling.py``).

* **Every InferenceX vLLM sweep launch of these rows.** The launches that predate vLLM's default
  write ``async-scheduling: true`` into the server's ``config.yaml``: Llama-3.1-70B
  (``benchmarks/70b_fp8_h100_docker.sh``, ``70b_fp8_h200_slurm.sh`` at SemiAnalysisAI/InferenceX
  9596d23d, image v0.10.2), gpt-oss of 2025-11/12 (``gptoss_fp4_h200_slurm.sh`` at 69844b2e, v0.10.2;
  ``gptoss_fp4_h100_docker.sh`` at 4e135fd3, v0.11.2). The later launches (gpt-oss, MiniMax-M2.5,
  Kimi-K2.5 at 626932a11, images v0.16.0 and v0.18.0) pass no flag and run vLLM's default, which is
  on from vllm-project/vllm PR #27614.
* **vLLM releases from 0.14 on**, whatever the launch (the default). PR #27614 was opened on
  2025-10-27; the release that first shipped it was not read here. The rows hold releases 0.11.2,
  0.12.0, 0.16.0 and 0.18.0 only, and every 0.12.0 row is an aiconfigurator collection row, so the
  split at 0.14 and one at 0.13 name the same rows.
* **Not the vLLM 0.12.0 collection rows** (``aic-auto-gap-analysis``): aiconfigurator's 0.12.0 launch
  template writes no ``--async-scheduling`` (``generator/config/backend_templates/vllm/cli_args.0.12.0.j2``,
  ai-dynamo/aiconfigurator 11324a64), and 0.12's default is off.
"""

from __future__ import annotations

from llmplan.calibration.engine_versions import at_least

#: first vLLM release counted as running async scheduling by default (vllm-project/vllm PR #27614)
ASYNC_DEFAULT_FROM = (0, 14)


def async_scheduling(version: str, length_ratio: float) -> bool:
    """Whether the launch behind a vLLM row ran async scheduling: a release >= 0.14 (the default) or
    an InferenceX sweep row (``length_ratio`` < 1: its launch sets it or runs that default)."""
    return at_least(str(version or "").strip(), ASYNC_DEFAULT_FROM) or length_ratio < 1.0

"""Served TensorRT-LLM rows measured with speculative decoding (MTP), from the benchmark's provenance.

The serving files record no speculative-decoding setting. For the InferenceX sweep rows the
benchmark's own history says which configuration ran: a push to InferenceX ``main`` that changes
``perf-changelog.yaml`` runs a sweep over the config keys of the new changelog entry only
(``.github/workflows/run-sweep.yml``: ``on: push: paths: perf-changelog.yaml``, search space from
``utils/process_changelog.py --base-ref before --head-ref after``), and a sweep row's
``silicon_data_source`` carries ``measured=<time>``, the time of the commit whose sweep produced it.

:data:`MTP_SWEEPS` lists the sweeps whose changelog entry holds speculative-decoding configurations
only, with the launch rule of their benchmark script:

* SemiAnalysisAI/InferenceX bf3456727 (PR #392, "Add MTP Benchmark Support for DeepSeek-R1 TRT"),
  committed 2026-01-14T22:26:18Z. Its ``perf-changelog.yaml`` entry lists ``dsr1-fp4-b200-trt-mtp``,
  ``dsr1-fp8-b200-trt-mtp`` and ``dsr1-fp8-h200-trt-mtp`` and nothing else. The H200 rows measured at
  2026-01-14T22:26:21Z (image ``tensorrt-llm/release:1.1.0rc2.post2``, DeepSeek-R1) are that sweep.
  The 2026-04-06 export repeats that sweep with a date only (``measured=2026-01-14T00:00:00.000Z``).
  No other sweep of that day ran a DeepSeek-R1 TensorRT-LLM configuration: the other changelog
  entries of 2026-01-14 are AMD ATOM configs (cc35702b3, 2be3de60f) and a ``[skip-sweep]`` revert.
  The grid says the same: ``dsr1-fp8-h200-trt-mtp`` runs 1k/8k at TP8/EP8 up to 128 clients, and the
  plain ``dsr1-fp8-h200-trt`` of the same commit stops at 64. ``benchmarks/dsr1_fp8_h200_trt_mtp_slurm.sh``
  writes ``speculative_config: {decoding_type: MTP, num_nextn_predict_layers: MTP}`` with ``MTP=3``,
  or ``MTP=1`` when ``DP_ATTENTION`` is true. The same script sets ``moe_config.backend: CUTLASS``,
  ``cuda_graph_config.max_batch_size: 128`` and ``stream_interval: 10``.

An MTP step verifies 1 + k tokens per sequence and emits 1 + (accepted drafts) of them, and the
acceptance on the benchmark's random prompts is not recorded. :mod:`calibration.serving_regimes`
flags these rows (:data:`SPECULATIVE`), ``engine_fit --exclude-regimes`` leaves them out of the fit
(the engine terms never see them), and ``validate serving`` still scores them and prints the flag.
The rule reads the row's provenance only, never its error.

Replay (:func:`mtp_replay`, the hook of ``calibration.serving_rows.simulate_case``): the row is
simulated with the simulator's own speculative decoding (``sim/spec_decode.py``, method ``mtp``)
at the script's k (:func:`mtp_layers`). DeepSeek-R1 has one MTP module
(``num_nextn_predict_layers: 1`` in its config.json); TensorRT-LLM's "MTP Eagle" path reuses it for
every draft position (NVIDIA/TensorRT-LLM ``docs/source/blogs/tech_blog/
blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md``, section "MTP Eagle"), as the simulator
does. The acceptance is the simulator's documented default for ``mtp``
(``sim.speculative.DEFAULT_ACCEPTANCE``: 0.85 per position, the lower end of the DeepSeek-V3
report's 85-90% second-token acceptance, arXiv:2412.19437 sec. 5.4.3), NOT a value fitted to these
rows: E[L] = 3.19 tokens per verify step at k = 3, 1.85 at k = 1. TensorRT-LLM's published
DeepSeek-R1 MTP figures (the blog above, Figure 7) give the acceptance only as a chart.
"""

from __future__ import annotations

from typing import Any, Mapping

#: the regime flag (calibration.serving_regimes.FLAGS)
SPECULATIVE = ("speculative decoding (MTP): replayed with the launch script's MTP k (3, or 1 with attention DP) "
               "and the simulator's default MTP acceptance 0.85 (DeepSeek-V3 report), not fitted")

_DSR1_H200_MTP = ("SemiAnalysisAI/InferenceX bf3456727 (PR #392), config dsr1-fp8-h200-trt-mtp, "
                  "benchmarks/dsr1_fp8_h200_trt_mtp_slurm.sh", (3, 1))
#: (backend, model_path, backend_version, measured=<time> of the sweep) -> the sweep's source and its
#: benchmark script's draft-layer rule ``(MTP without attention DP, MTP with attention DP)``
MTP_SWEEPS: dict[tuple[str, str, str, str], tuple[str, tuple[int, int]]] = {
    ("trtllm", "deepseek-ai/DeepSeek-R1", "1.1.0rc2.post2", "2026-01-14T22:26:21Z"): _DSR1_H200_MTP,
    # the 2026-04-06 export's date-only copy of the same sweep
    ("trtllm", "deepseek-ai/DeepSeek-R1", "1.1.0rc2.post2", "2026-01-14T00:00:00.000Z"): _DSR1_H200_MTP,
}


def measured_time(row: Mapping[str, Any]) -> str:
    """The ``measured=<time>`` field of a row's ``silicon_data_source`` ("" when absent)."""
    for part in str(row.get("silicon_data_source") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "measured":
            return value.strip()
    return ""


def _int(v: Any, default: int) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def mtp_layers(row: Mapping[str, Any]) -> int:
    """Draft (MTP) layers a row was measured with: 0 unless the row is from a sweep of :data:`MTP_SWEEPS`.
    Then the script's rule: ``MTP=1`` with attention DP (``attention_dp_size`` > 1), else ``MTP=3``."""
    key = (str(row.get("backend") or "").strip().lower(), str(row.get("model_path") or "").strip(),
           str(row.get("backend_version") or "").strip(), measured_time(row))
    sweep = MTP_SWEEPS.get(key)
    if sweep is None:
        return 0
    plain, with_dp = sweep[1]
    return with_dp if _int(row.get("attention_dp_size"), 1) > 1 else plain


def speculative_row(row: Mapping[str, Any] | None) -> bool:
    """True when the row was measured with speculative decoding (:func:`mtp_layers` > 0)."""
    return row is not None and mtp_layers(row) > 0


# ----------------------------------------------------------------------------- replay with MTP
def replay_config(k: int) -> dict[str, Any]:
    """The ``speculative`` config node a row measured with ``k`` MTP draft layers is replayed with:
    method ``mtp`` and the simulator's documented default acceptance (no acceptance given)."""
    return {"method": "mtp", "k": int(k)}


def acceptance_note(k: int) -> str:
    """How the rows are replayed, for the regime flag's explanation."""
    from llmplan.sim.speculative import default_acceptance

    acc = default_acceptance("mtp")
    return (f"replayed with MTP k={k} (TensorRT-LLM MTP Eagle, the one MTP module reused), acceptance "
            f"{acc.rates[0]:.2f} per position (E[L] {acc.expected_tokens(k):.2f} tokens per verify step) from "
            f"{acc.source}; not fitted to these rows")


def mtp_replay(cost: Any, case: Any, kv_capacity_tokens: int, seed: int) -> tuple[Any, int]:
    """(cost model, KV capacity in the simulator's step space) of a case measured with MTP
    (``case.speculative_mtp_k`` > 0): the speculative replica of ``sim.spec_decode`` on top of
    ``cost`` (the case's analytical step model with its engine terms). Mean lengths are the
    client's: uniform in ``[ratio x L, L]`` when ``case.length_ratio`` < 1."""
    from llmplan.sim.spec_decode import speculative_replica

    r = float(getattr(case, "length_ratio", 1.0) or 1.0)
    mean = (lambda n: n * (1.0 + r) / 2.0) if r < 1.0 else (lambda n: float(n))
    spec_cost, kv_tokens, _ = speculative_replica(replay_config(case.speculative_mtp_k), cost, kv_capacity_tokens,
                                                  (mean(case.isl), mean(case.osl)), seed)
    return spec_cost, kv_tokens

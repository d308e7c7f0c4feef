"""Expert-parallel size of TensorRT-LLM InferenceX sweep rows whose export wrote it as 1.

The 2026-04-06 export of the InferenceX sweeps gives the gpt-oss-120b TensorRT-LLM H200 runs measured
on 2025-11-02 (un-versioned, ids ``..._tp{T}_ep1_...``) as ``moe_tp_size = T, moe_ep_size = 1``. The
replay's reading of those columns (``calibration/serving_rows.parallelism_of``) runs the experts with
expert TP over T GPUs. The benchmark script of that date did otherwise.
SemiAnalysisAI/InferenceX ``benchmarks/gptoss_fp4_h200_trt_slurm.sh`` at 9596d23d7 (2025-10-29, the
file's last change before 17d5e204f of 2025-11-03T18:05Z, which introduced ``EP_SIZE``) launches
``trtllm-serve $MODEL ... --ep_size=$TP ... --tp_size=$TP``, with ``moe_config: backend: TRITON``. In
TensorRT-LLM's ``Mapping`` the MoE TP size is then ``tp_size / moe_ep_size = 1``, so the experts ran
EP = T. The measurements agree. The same deployments measured on 2025-12-15 under the gpt-oss-dev
image, labelled ``tp{T}_ep{T}`` (EP T), have the same TPOT as the 2025-11-02 rows to 0-3% at every
shared point (TP 2: 5.90 / 5.85, 6.84 / 6.83, 8.70 / 8.90, 11.08 / 11.37, 14.12 / 14.07 ms at
1k/1k, N = 4-64; TP 8, N = 4 / 8: 4.31 / 4.38, 5.51 / 5.63 ms). Replayed with expert TP, the TP 8
rows came out 0.84x their measured TPOT (median of 15 training rows). Replayed with EP 8, the
training-half gpt-oss TPOT median APE goes from 9.5% to 6.3% (docs/ACCURACY.md, "TensorRT-LLM
aggregated TPOT (session 12)").

:data:`SCRIPT_EP_EQUALS_TP` lists the (backend, model, GPU, export, measured date) groups this
applies to. Only the script that was read is listed. The DeepSeek-R1/V3 rows of the same date
(``dsr1_fp8_h200_trt_slurm.sh``, ``--ep_size=$TP`` as well, docs/ACCURACY.md "TensorRT-LLM launch
budgets") are repeats of the scored ``cfg83`` database rows (status ``repeat``) and are left as
they are.
"""

from __future__ import annotations

from typing import Any, Mapping

from llmplan.calibration.trtllm_speculative import measured_time

#: (backend, model_path, system, source file of the export, measured=<time>) whose benchmark
#: script launched ``--ep_size=$TP`` (EP over all of the worker's GPUs, expert TP 1)
SCRIPT_EP_EQUALS_TP: frozenset[tuple[str, str, str, str, str]] = frozenset({
    # InferenceX benchmarks/gptoss_fp4_h200_trt_slurm.sh at 9596d23d7 (2025-10-29)
    ("trtllm", "openai/gpt-oss-120b", "h200_sxm", "source_file=2026-04-06.csv", "2025-11-02T00:00:00.000Z"),
})


def _int(v: Any, default: int) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def script_ep_size(row: Mapping[str, Any]) -> int | None:
    """The expert-parallel size the row's benchmark script launched, where it differs from the
    row's ``moe_ep_size`` column (None: take the columns). Only rows of :data:`SCRIPT_EP_EQUALS_TP`
    whose columns say ``moe_ep_size`` 1, ``moe_tp_size = tp_size`` > 1 and no attention DP."""
    source = str(row.get("silicon_data_source") or "").split(";")[0].strip()
    key = (str(row.get("backend") or "").strip().lower(), str(row.get("model_path") or "").strip(),
           str(row.get("system") or "").strip(), source, measured_time(row))
    if key not in SCRIPT_EP_EQUALS_TP:
        return None
    tp = _int(row.get("tp_size"), 1)
    if (tp > 1 and _int(row.get("moe_ep_size"), 1) <= 1 and _int(row.get("moe_tp_size"), tp) == tp
            and _int(row.get("attention_dp_size"), 1) <= 1):
        return tp
    return None

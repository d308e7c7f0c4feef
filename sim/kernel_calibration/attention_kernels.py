"""Which attention kernel a measured decode / prefill row ran: its engine's ``kernel_source`` label.

One engine's attention table can hold rows of different kernels, timed by aiconfigurator's
collectors on the kernel the engine's serving path picks for the shape (ai-dynamo/aiconfigurator,
``collector/sglang/collect_attn.py``, ``collector/vllm/collect_attn.py``: ``kernel_source`` is the
backend the engine chose, e.g. ``vllm_{backend}`` from ``current_platform.get_attn_backend_cls``).
On the B200, SGLang's decode table mixes Triton (head dim 192, and 256 at some GQA groups),
FlashInfer (head dim 128) and TensorRT-LLM MHA (``trtllm_mha``) rows, and eleven head
configurations were timed on two of them: at 8 query / 1 KV head of dim 256, bf16 KV, batch 1,
131,071 tokens, Triton takes 2.18 ms and ``trtllm_mha`` 0.047 ms. One model per engine cannot
tell those rows apart (no feature names the kernel), so it answers both with a compromise.

:func:`attention_kernels` names a row's kernel; ``calibration.fit`` fits an engine's rows of each
kernel apart where its table mixes kernels (:attr:`family_model.FamilyModel.kernel_groups`, key
``all/<kernel>``) and records the kernel the engine ran per head configuration
(:func:`head_kernel_lookup`, :attr:`family_model.FamilyModel.head_kernels`). The engine's rule,
:func:`engine_attention_kernel`, gives every query its kernel from that record (sim/calibrated.py);
table rows are answered by the same rule, not by their own label (:func:`rule_kernels`,
``family_model.predict_family_frame``), so ``validate kernels`` and the bands score what queries get.
A table with one kernel per engine records nothing and is answered by its whole table, as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: operator families whose rows carry the attention kernel label
FAMILIES = ("attention_prefill", "attention_decode")


def attention_kernels(kernel_source: Any) -> np.ndarray:
    """The kernel of each row: its lower-cased ``kernel_source`` label (None where it is missing)."""
    src = np.asarray(kernel_source, dtype=object)
    return np.array([None if (s is None or (isinstance(s, float) and s != s) or str(s) == "") else str(s).lower()
                     for s in src.tolist()], dtype=object)


# ---------------------------------------------------------------------------------------------
# the engine's rule: which kernel a query of a head configuration gets
# ---------------------------------------------------------------------------------------------
#: the levels of the head-configuration lookup, most specific first. The engines select the
#: attention backend per model and GPU from the head configuration: vLLM's
#: ``Platform.get_attn_backend_cls`` walks a priority list and takes the first backend whose
#: ``validate_configuration`` accepts the head size, KV-cache dtype and sliding window
#: (vllm/platforms/cuda.py ``_get_backend_priorities``; vllm/attention/backends/abstract.py
#: ``supports_head_size`` / ``supports_kv_cache_dtype`` / ``supports_sliding_window``); SGLang picks
#: the default backend per compute capability and model in ``ServerArgs._handle_attention_backend
#: _compatibility`` (python/sglang/srt/server_args.py) and falls back to Triton where the default
#: does not support the head dim. aiconfigurator's collectors time each shape on that selection and
#: label it (``kernel_source``), so the training rows of a head configuration record the engine's
#: choice. Level 0 is the exact configuration; an unseen one takes the majority of its head dim,
#: KV dtype and window (the inputs of the engines' selection), then of its head dim and KV dtype,
#: then of its head dim; none of them: no kernel (the whole table's model, as before the rule).
LEVELS = ("head", "dim_kv_window", "dim_kv", "dim")


def kv_class(kv_dtype: Any) -> str:
    """The KV-cache format class the engines' selection distinguishes: ``fp8`` or ``16bit``."""
    s = str(kv_dtype).lower()
    return "fp8" if s.startswith("fp8") or "e4m3" in s or "e5m2" in s else "16bit"


#: suffix of the keys of a single-token prefill call (``q_len`` 1). vLLM's attention metadata builders
#: split a batch into decodes and prefills by query length (``split_decodes_and_prefills`` with
#: ``decode_threshold=reorder_batch_threshold``, 1 for FlashInfer: vllm/v1/attention/backends/
#: flashinfer.py, vllm/v1/attention/backends/utils.py), so a one-token "prefill" runs the decode
#: kernel: the tables agree (B200 vLLM prefill: every q_len-1 row of a FlashInfer configuration is
#: ``vllm_flashinfer_trtllmdecode``, every longer one ``..._trtllmprefill``; L40S fp8 KV:
#: ``fidecode`` / ``fiprefill``).
SINGLE_TOKEN = "/s1"


def config_keys(head_dim: int, num_heads: int, num_kv_heads: int, kv_dtype: Any, window: float,
                q_len: float | None = None) -> tuple[str, ...]:
    """The lookup keys of one head configuration, one per :data:`LEVELS` entry; a single-token
    prefill (``q_len`` 1) first tries the same keys with :data:`SINGLE_TOKEN` appended."""
    d, kv, w = int(head_dim), kv_class(kv_dtype), int(float(window) > 0)
    keys = (f"d{d}/q{int(num_heads)}/k{int(num_kv_heads)}/{kv}/w{w}", f"d{d}/{kv}/w{w}", f"d{d}/{kv}", f"d{d}")
    if q_len is not None and float(q_len) <= 1.0:
        return tuple(k + SINGLE_TOKEN for k in keys) + keys
    return keys


def _frame_keys(df: Any) -> list[tuple[str, ...]]:
    win = df["window"].to_numpy(dtype=np.float64) if "window" in df else np.zeros(len(df))
    ql = df["q_len"].tolist() if "q_len" in df else [None] * len(df)
    return [config_keys(d, q, k, kv, w, s) for d, q, k, kv, w, s in
            zip(df["head_dim"].tolist(), df["num_heads"].tolist(), df["num_kv_heads"].tolist(),
                df["kv_dtype"].tolist(), win.tolist(), ql)]


def head_kernel_lookup(df: Any, kernels: np.ndarray) -> dict[str, str]:
    """The kernel of each head configuration (every :data:`LEVELS` key) in one engine's rows: the
    label most of its rows carry. Ties go to the label most of the whole table carries (the
    engine's default on that GPU: SGLang picks its backend per GPU and, for some models, per
    architecture, e.g. ``_handle_model_specific_adjustments`` in python/sglang/srt/server_args.py
    sets ``trtllm_mha`` on SM100 / ``fa3`` on SM90 / ``triton`` elsewhere for GptOssForCausalLM,
    and the collector times such a head configuration on both the default and the override, so
    the table holds it twice in equal numbers), then to the alphabetically first label. Rows
    without a label are not counted."""
    counts: dict[str, dict[str, int]] = {}
    total: dict[str, int] = {}
    for keys, kern in zip(_frame_keys(df), kernels.tolist()):
        if kern is None:
            continue
        total[kern] = total.get(kern, 0) + 1
        for key in (keys[:len(LEVELS)] if len(keys) > len(LEVELS) else keys):
            c = counts.setdefault(key, {})
            c[kern] = c.get(kern, 0) + 1
    return {key: min(c.items(), key=lambda kv: (-kv[1], -total[kv[0]], kv[0]))[0]
            for key, c in sorted(counts.items())}


def engine_attention_kernel(lookup: dict[str, str] | None, head_dim: int, num_heads: int, num_kv_heads: int,
                            kv_dtype: Any, window: float, q_len: float | None = None) -> str | None:
    """The kernel the engine runs a query of this head configuration on (None: the table records
    no choice, the whole table's model answers). ``q_len``: a prefill query's length (None: decode)."""
    if not lookup:
        return None
    for key in config_keys(head_dim, num_heads, num_kv_heads, kv_dtype, window, q_len):
        if key in lookup:
            return lookup[key]
    return None


def rule_kernels(lookup: dict[str, str] | None, df: Any) -> np.ndarray:
    """:func:`engine_attention_kernel` for every row of a canonical frame (its label is not read)."""
    if not lookup:
        return np.full(len(df), None, dtype=object)
    memo: dict[tuple[str, ...], str | None] = {}
    out = []
    for keys in _frame_keys(df):
        if keys not in memo:
            memo[keys] = next((lookup[k] for k in keys if k in lookup), None)
        out.append(memo[keys])
    return np.array(out, dtype=object)

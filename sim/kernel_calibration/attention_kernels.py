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

:func:`attention_kernel` names a row's kernel; ``calibration.fit`` fits an engine's rows of each
kernel apart where its table mixes kernels (:attr:`family_model.FamilyModel.kernel_groups`, key
``all/<kernel>``), and a query that names its kernel is answered by that kernel's model. Queries
that name none (the simulator's, today) are answered as before, by the engine's whole table.
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

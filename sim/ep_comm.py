"""Token exchange of the MoE layers under attention data parallelism (wide expert parallelism).

With ``dp > 1`` attention ranks, each rank holds only its own tokens, while a MoE layer's
experts are spread over all ``tp x dp`` GPUs of the stage (``ep`` ranks x ``moe_tp``). Before
the experts every GPU needs the tokens routed to it, and after them the results go back.
Two ways, chosen by ``EngineProfile.moe_all2all``:

* ``allgather_reducescatter`` (default): all-gather the group's tokens before the MoE layer and
  reduce-scatter the expert outputs after it. It is the default of vLLM's
  ``--all2all-backend`` ("Standard all2all using allgather/reducescatter primitives ... works
  with any EP+DP configuration", https://docs.vllm.ai/en/v0.12.0/serving/expert_parallel_deployment/),
  and the path TensorRT-LLM and SGLang take for attention DP when no all-to-all kernel
  (DeepEP, MNNVL) is enabled. Each GPU then runs its experts over all the group's tokens.
* ``deepep``: DeepEP dispatch/combine all-to-all: each token goes only to the ranks holding its
  top-k experts. Low-latency kernels for decode-only iterations, normal (high-throughput)
  kernels otherwise: SGLang's ``--deepep-mode auto`` rule
  (https://docs.sglang.io/advanced_features/server_arguments.html, "deepep-mode").
  Timed from the measured ``moe_a2a`` curves of the calibration (one node, EP 8) through the
  calibrated kernel model's collective source (``CalibratedKernelModel.choice.collectives``)
  when the layout is the measured one (scale-up link, same EP size); otherwise from the link
  model (``KernelModel.collective("alltoall")`` over the EP group's link, which is the
  scale-out network when the group spans more GPUs than one scale-up domain).

Message sizes: activations in bf16 (``ACT_BYTES``). A token routed to ``k`` experts spread
uniformly over ``ep`` ranks reaches ``ep * (1 - (1 - 1/ep)^k)`` distinct ranks (DeepEP sends
one copy per destination rank); the tokens of a DP rank are split over its ``tp`` GPUs for
the exchange (an assumption: engines differ in how TP ranks inside a DP rank share them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmplan.sim.kernels import KernelModel, KernelTime, Link

#: (op, message bytes, GPUs, link) -> time: the step model's collective (hierarchical beyond a
#: scale-up domain, sim/links.py span_collective)
Collective = Callable[[str, float, int, Link], KernelTime]

ACT_BYTES = 2.0
MOE_ALL2ALL = ("allgather_reducescatter", "deepep")
#: DeepEP modes of the measured ``moe_a2a`` table per engine (comm_backend column)
_DEEPEP_BACKENDS = {"trtllm": ("trtllm_deepep_ll", "trtllm_deepep_ht")}
_DEFAULT_DEEPEP = ("deepep_ll", "deepep_ht")


def distinct_ranks(top_k: int, ep: int) -> float:
    """Expected number of distinct EP ranks a token's ``top_k`` experts live on (uniform routing)."""
    if ep <= 1:
        return 1.0
    return min(float(top_k), ep * (1.0 - (1.0 - 1.0 / ep) ** top_k))


def measured_a2a(kernels: KernelModel, backend: str, phase: str, decode_only: bool, tokens_per_gpu: int,
                 hidden: int, top_k: int, num_experts: int, ep: int) -> float | None:
    """Milliseconds of one DeepEP ``phase`` (dispatch | combine) from the calibration's measured
    ``moe_a2a`` curves, or None when the kernel model has none for this configuration."""
    choice = getattr(kernels, "choice", None)
    src = getattr(choice, "collectives", None)
    own = getattr(src, "own", None)
    if src is None or own is None or tokens_per_gpu <= 0:
        return None
    ll, ht = _DEEPEP_BACKENDS.get(backend, _DEFAULT_DEEPEP)
    comm = ll if decode_only else ht
    prefix = f"{comm}|{phase}|"
    sms = sorted({k.rsplit("|", 1)[1] for k in own.moe_a2a.curves if k.startswith(prefix)})
    if not sms:
        return None
    row: dict[str, Any] = {"comm_backend": comm, "phase": phase, "hidden": hidden, "topk": top_k,
                           "num_experts": num_experts, "sms": int(sms[0]), "ep": ep, "num_tokens": tokens_per_gpu}
    res = src.moe_a2a(row)
    return None if res is None else float(res[0])


def moe_exchange(kernels: KernelModel, collective: Collective, backend: str, mode: str, *, tokens_rank: int,
                 tokens_group: int, tp: int, dp: int, ep: int, hidden: int, top_k: int, num_experts: int,
                 decode_only: bool, stage_link: Link, ep_link: Link) -> list[tuple[str, KernelTime]]:
    """The collectives one MoE layer adds under attention DP: (name, time) pairs.

    ``tokens_rank``: tokens of the busiest DP rank; ``tokens_group``: tokens of all ranks.
    Measured DeepEP curves apply only inside one scale-up domain (they were measured on one
    node): ``ep_link`` must be the scale-up link."""
    if dp <= 1 or tokens_group <= 0:
        return []
    group = tp * dp
    if mode == "deepep" and ep > 1:
        per_gpu = max(1, -(-tokens_rank // tp))
        out = []
        for phase in ("dispatch", "combine"):
            ms = None
            if ep_link.name in ("nvlink", "xgmi"):
                ms = measured_a2a(kernels, backend, phase, decode_only, per_gpu, hidden, top_k, num_experts, ep)
            if ms is not None:
                out.append((f"ep_{phase}", KernelTime(ms, 0.0, 0.0, "comm", getattr(kernels, "tier", "measured"))))
                continue
            nbytes = per_gpu * distinct_ranks(top_k, ep) * hidden * ACT_BYTES
            out.append((f"ep_{phase}", collective("alltoall", nbytes, ep, ep_link)))
        return out
    nbytes = tokens_group * hidden * ACT_BYTES
    return [("dp_allgather", collective("all_gather", nbytes, group, stage_link)),
            ("dp_reducescatter", collective("reduce_scatter", nbytes, group, stage_link))]

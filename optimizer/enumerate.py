"""Stage 1: enumerate candidate replica shapes (GPU x TP x PP x EP x precision x max batch)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.model_catalog.spec import ModelSpec
from llmplan.optimizer.types import Candidate
from llmplan.sim.deployment import parallelism_problem
from llmplan.sim.types import Parallelism, Precision


def kv_dtype_for(weights: str, kv_cache_dtype: str, gpu: GPUSpec) -> str:
    """Resolve "auto": fp8 KV with fp8/fp4 weights on GPUs with fp8, else bf16."""
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    return "fp8" if weights in ("fp8", "fp4") and gpu.supports("fp8") else "bf16"


def enumerate_candidates(model: ModelSpec, gpus: Iterable[tuple[GPUSpec, float]], tps: list[int],
                         pps: list[int], eps: list[int], precisions: list[str], max_batches: list[int],
                         kv_cache_dtype: str = "auto", dps: Iterable[int] = (1,),
                         ) -> tuple[list[Candidate], list[tuple[Candidate, str, str]]]:
    """All combinations; returns (valid candidates, rejected (candidate, verdict, reason)).
    ``dps``: attention data-parallel ranks (MoE models only; a rank has one GPU of attention,
    ``tp = 1``, the layout all three engines launch: optimizer/launch/spec.py)."""
    ok: list[Candidate] = []
    rejected: list[tuple[Candidate, str, str]] = []
    ep_values = sorted(set(eps)) if model.is_moe else [1]
    dp_values = sorted(set(dps)) if model.is_moe else [1]
    for (gpu, price), tp, pp, ep, dp, prec, mb in itertools.product(
            gpus, sorted(set(tps)), sorted(set(pps)), ep_values, dp_values, precisions, sorted(set(max_batches))):
        if ep > tp * dp or (dp > 1 and tp > 1):
            continue  # EP reuses the stage's GPUs; attention DP ranks of one GPU each
        cand = Candidate(gpu, Parallelism(tp, pp, ep, dp=dp), Precision(prec, kv_dtype_for(prec, kv_cache_dtype, gpu)),
                         mb, price)
        problem = parallelism_problem(model, gpu, cand.par, cand.prec)
        if problem:
            verdict = "precision" if "not supported" in problem else "parallelism"
            rejected.append((cand, verdict, problem))
        else:
            ok.append(cand)
    return ok, rejected

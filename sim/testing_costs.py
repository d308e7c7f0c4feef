"""A small linear step-cost model for tests and benchmarks (not a performance model).

``step_time_ms = base_ms + per_seq_ms * seqs + per_decode_kv_token_ms * decode_kv_tokens
+ per_prefill_token_ms * prefill_tokens + per_attn_pair_ms * prefill_attn_pairs``, with
``seqs = decode_seqs + prefill_seqs``. With ``pp > 1`` each stage takes ``1/pp`` of the
compute plus ``stage_base_ms`` and the step is ``pp`` stages long.

:meth:`LinearStepCost.h100_llama3_8b` is calibrated by hand to roughly what vLLM does
for Llama-3.1-8B (bf16) on one H100 SXM (see docs/SIMULATOR.md): a decode step of
~7 ms plus ~0.02 ms per sequence plus the KV read (128 KiB per token at ~2.7 TB/s
effective), prefill at ~0.03 ms per token (16 GFLOP/token at ~550 TFLOP/s effective)
plus causal attention pairs. Host overhead is part of ``base_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmplan.sim.types import OpTime, StepShape, StepTiming


@dataclass(frozen=True)
class LinearStepCost:
    """Implements the ``sim.types.StepCostModel`` protocol with a linear formula."""

    base_ms: float = 7.0                    # fixed per-step time (host overhead, weight read)
    per_seq_ms: float = 0.02                # per sequence in the batch
    per_decode_kv_token_ms: float = 4.9e-5  # per KV token read by decode attention
    per_prefill_token_ms: float = 0.03      # per prompt token computed
    per_attn_pair_ms: float = 1e-6          # per causal (query, key) pair of prefill attention
    pp: int = 1                             # pipeline stages
    stage_base_ms: float = 0.0              # extra per-stage fixed time (pp > 1: send/recv)

    def _compute(self, s: StepShape) -> float:
        return (self.per_seq_ms * (s.decode_seqs + s.prefill_seqs)
                + self.per_decode_kv_token_ms * s.decode_kv_tokens
                + self.per_prefill_token_ms * s.prefill_tokens
                + self.per_attn_pair_ms * s.prefill_attn_pairs)

    def stage_time_ms(self, shape: StepShape) -> float:
        if self.pp == 1:
            return self.base_ms + self._compute(shape)
        return self.base_ms / self.pp + self.stage_base_ms + self._compute(shape) / self.pp

    def step_time_ms(self, shape: StepShape) -> float:
        return self.stage_time_ms(shape) * self.pp

    def breakdown(self, shape: StepShape) -> StepTiming:
        t = self.step_time_ms(shape)
        return StepTiming(t, self.stage_time_ms(shape), (OpTime("linear", "host", t, "latency"),))

    @classmethod
    def h100_llama3_8b(cls, pp: int = 1) -> "LinearStepCost":
        """Rough Llama-3.1-8B bf16 on one H100 SXM (see module docstring)."""
        return cls(pp=pp)

    @classmethod
    def constant(cls, ms: float) -> "LinearStepCost":
        """Every step takes ``ms`` regardless of its batch (a single fixed-rate server)."""
        return cls(base_ms=ms, per_seq_ms=0.0, per_decode_kv_token_ms=0.0, per_prefill_token_ms=0.0,
                   per_attn_pair_ms=0.0)


def make_replica(cost: "LinearStepCost | None" = None, kv_capacity_tokens: int = 200_000, max_model_len: int = 16384,
                 **engine: object):
    """A ``ReplicaSpec`` with the linear cost model and ``EngineProfile(**engine)`` (tests, examples)."""
    from llmplan.sim.replica import ReplicaSpec
    from llmplan.sim.types import EngineProfile

    return ReplicaSpec(cost or LinearStepCost.h100_llama3_8b(), EngineProfile(**engine), kv_capacity_tokens,
                       max_model_len)

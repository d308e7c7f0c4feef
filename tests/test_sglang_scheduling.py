"""SGLang prefill batches (sim/sglang_scheduling.py, sim/scheduler.py): filled to the chunk size,
the last prompt cut and finished by the next prefill batches before any decode."""

from __future__ import annotations

import pytest

from llmplan.sim import sglang_scheduling as sg
from llmplan.sim.requests import Request
from llmplan.sim.scheduler import DECODE, PREFILL, EngineState, Seq
from llmplan.sim.types import EngineProfile

GIB = 1024 ** 3


def _engine(name: str = "sglang", budget: int = 8192) -> EngineProfile:
    return EngineProfile(name=name, kernel_backend=name, chunked_prefill=False, max_num_batched_tokens=budget,
                         max_num_seqs=64, enable_prefix_caching=False, watermark=0.0)


def _state(engine: EngineProfile, blocks: int = 100_000) -> EngineState:
    return EngineState(0, engine, blocks, engine.block_size, engine.max_num_seqs)


def _submit(st: EngineState, prompts: list[int], out: int = 4) -> list[Seq]:
    seqs = [Seq(i, Request(0.0, p, out), True) for i, p in enumerate(prompts)]
    st.waiting.extend(seqs)
    return seqs


def _step(st: EngineState, t: float) -> tuple[list[tuple[int, int]], int]:
    """Plan and complete one step: ([(request, new tokens)], decoding sequences)."""
    assert st.plan(t)
    work = [(s.idx, n) for s, n, _ in st.plan_chunks]
    dec = st.plan_dec
    st.complete(t + 1.0, [])
    return work, dec


def test_a_long_prompt_is_cut_into_chunk_sized_prefill_batches_before_any_decode():
    st = _state(_engine())
    _submit(st, [20_000])
    steps = [_step(st, float(t)) for t in range(3)]
    assert steps == [([(0, 8192)], 0), ([(0, 8192)], 0), ([(0, 3616)], 0)]
    seq = st.running[0]
    assert seq.state == DECODE and seq.first_token == pytest.approx(3.0)
    # then decode steps
    assert _step(st, 3.0) == ([], 1)


def test_the_batch_is_filled_to_the_chunk_and_the_cut_prompt_goes_first_next_time():
    st = _state(_engine())
    seqs = _submit(st, [3000, 3000, 3000, 3000])
    assert _step(st, 0.0) == ([(0, 3000), (1, 3000), (2, 2192)], 0)
    assert seqs[2].state == PREFILL and seqs[2].computed == 2192
    # SGLang's chunked_req first, then the waiting prompt; no decode while prompts wait
    assert _step(st, 1.0) == ([(2, 808), (3, 3000)], 0)
    assert all(s.state == DECODE for s in seqs)
    assert _step(st, 2.0) == ([], 4)
    # every request got its first token from a prefill batch, none from a decode step
    assert [s.first_token for s in seqs] == [1.0, 1.0, 2.0, 2.0]


def test_other_prefill_first_engines_still_take_whole_prompts_only():
    st = _state(_engine(name="vllm", budget=8192))
    _submit(st, [3000, 3000, 3000])
    assert _step(st, 0.0) == ([(0, 3000), (1, 3000)], 0)
    assert not sg.chunks_prompts(_engine(name="vllm"))
    assert sg.chunks_prompts(_engine())
    # mixed chunks (--enable-mixed-chunk) is the chunked-prefill policy, not this one
    assert not sg.chunks_prompts(EngineProfile(name="sglang", chunked_prefill=True))


@pytest.mark.parametrize("mem_gib, chunk", [(79.2, 8192), (139.8, 8192), (178.4, 16384), (44.0, 4096)])
def test_the_replayed_budget_is_sglangs_default_chunk_for_the_gpu_memory(mem_gib, chunk):
    e = sg.replay_engine(_engine(budget=100_000), int(mem_gib * GIB), tp=8, pp=1)
    assert e.max_num_batched_tokens == chunk
    assert sg.sglang_chunk_tokens(int(mem_gib * GIB), 8, 1) == chunk
    # per attention-DP rank: a replica of dp ranks prefills dp chunks
    assert sg.replay_engine(_engine(), int(mem_gib * GIB), 8, 1, dp=8).max_num_batched_tokens == 8 * chunk
    # other engines are left as they are
    v = _engine(name="vllm", budget=100_000)
    assert sg.replay_engine(v, int(mem_gib * GIB), 8, 1) is v


def test_a_cut_prompt_holds_the_kv_blocks_of_its_whole_prompt():
    st = _state(_engine(), blocks=2000)
    _submit(st, [20_000], out=4)
    _step(st, 0.0)
    seq = st.running[0]
    assert seq.blocks == -(-20_000 // 16)
    assert st.pool.free == 2000 - seq.blocks
    st.check_invariants()


def test_mixed_chunks_run_prompt_chunks_next_to_the_decodes():
    """--enable-mixed-chunk: the chunked-prefill policy, decodes counted in the step's budget of
    min(chunk, max_prefill_tokens) tokens."""
    e = sg.mixed_chunk_engine(_engine(), int(139.8 * GIB), 1, 1, max_prefill_tokens=2500)
    assert e.chunked_prefill and e.max_num_batched_tokens == 2500
    assert sg.mixed_chunk_engine(_engine(), int(139.8 * GIB), 1, 1, max_prefill_tokens=20_000).max_num_batched_tokens == 8192
    st = _state(e)
    seqs = _submit(st, [1000, 1000, 1000], out=8)
    assert _step(st, 0.0) == ([(0, 1000), (1, 1000), (2, 500)], 0)
    # the decodes of the first two go on while the third prompt finishes
    assert _step(st, 1.0) == ([(2, 500)], 2)
    assert [s.first_token for s in seqs] == [1.0, 1.0, 2.0]
    v = _engine(name="vllm")
    assert sg.mixed_chunk_engine(v, int(139.8 * GIB), 1, 1) is v

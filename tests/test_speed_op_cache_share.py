"""Step models of one shape at several batch caps share their operator caches
(``AnalyticalStepModel.share_op_caches``, used by ``optimizer.planner.evaluate_candidates``):
every answer equals the one of a model with caches of its own."""

from dataclasses import replace

from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog.loader import load_model
from llmplan.sim.calibrated import kernel_model_for
from llmplan.sim.deployment import Deployment, build
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape

SHAPES = [StepShape.build([], [900] * n) for n in (1, 7, 33, 64, 200)] + \
         [StepShape.build([(512, 0), (37, 100)], [1500] * 12), StepShape.build([(2048, 0)], []),
          StepShape.build([(300, 700)], [4000] * 3)]


def _models(engine: EngineProfile, caps=(8, 64, 256), par=Parallelism(tp=2), model="llama3_1_70b",
            gpu="h100_sxm"):
    m, g = load_model(model), get_gpu(gpu)
    km = kernel_model_for(g, backend=engine.kernel_backend)
    return [build(Deployment(m, g, par, Precision("fp8"), replace(engine, max_num_seqs=c)), kernels=km)[0]
            for c in caps]


def _times(step) -> list[tuple[float, float]]:
    return [(step.step_time_ms(s), step.stage_time_ms(s)) for s in SHAPES]


def test_shared_caches_give_the_same_step_times():
    for engine in (EngineProfile(), EngineProfile(name="sglang", kernel_backend="sglang", chunked_prefill=False)):
        own = [_times(s) for s in _models(engine)]
        shared_models = _models(engine)
        first = shared_models[0]
        # ask the first model in reverse order, so the later ones read what it cached
        for s in reversed(SHAPES):
            first.step_time_ms(s)
        assert all(s.share_op_caches(first) for s in shared_models[1:])
        assert all(s._body_lat is first._body_lat and s._dc_lat is first._dc_lat for s in shared_models[1:])
        shared = [_times(s) for s in shared_models]
        assert shared == own  # exact: the same floats
        if engine.name == "vllm":  # the batch cap still moves vLLM's answer (CUDA-graph padding, per model)
            assert own[0] != own[2]


def test_no_sharing_across_different_operators():
    a, = _models(EngineProfile(), caps=(64,))
    b, = _models(EngineProfile(), caps=(64,), par=Parallelism(tp=4))
    c, = _models(EngineProfile(kernel_backend="sglang", name="sglang"), caps=(64,))
    d, = _models(replace(EngineProfile(), host_overhead_ms=1.0), caps=(64,))
    assert not b.share_op_caches(a) and b._body_lat is not a._body_lat
    assert not c.share_op_caches(a)
    assert not d.share_op_caches(a)  # any engine field but max_num_seqs differs: not shared
    e, f = _models(EngineProfile(), caps=(8, 64))
    e.fuse_allreduce_rms()  # its norms fold into the all-reduce: other operator times
    assert not f.share_op_caches(e)


def test_fusion_after_sharing_detaches():
    a, b = _models(EngineProfile(), caps=(8, 64))
    assert b.share_op_caches(a)
    b.fuse_allreduce_rms()
    assert b._body_lat is not a._body_lat
    fresh, = _models(EngineProfile(), caps=(64,))
    fresh.fuse_allreduce_rms()
    assert _times(b) == _times(fresh)


def test_decode_stage_time_remembered_per_decode_key():
    """stage_time_ms of a decode-only step is remembered by its decode key, as step_time_ms is:
    the remembered value is the one the formula gives, first asked or not, with and without
    pipeline stages (their send time per stage included)."""
    for par in (Parallelism(tp=2), Parallelism(tp=2, pp=2)):
        step, = _models(EngineProfile(), caps=(64,), par=par)
        for n, kv in ((1, 900), (7, 7 * 1500), (64, 64 * 3000), (7, 7 * 1500 + 3)):
            shape = StepShape(0, 0, 0.0, 0, n, kv)
            first = step.stage_time_ms(shape)
            stage, comm = step._stage_and_comm(shape)
            want = step._with_host(stage + (comm / (par.pp - 1) if par.pp > 1 else 0.0), shape, step.layers_per_stage)
            assert first == want and step.stage_time_ms(shape) == want
        assert len(step._decode_stage_ms) == 3  # the last shape shares the bucket of the second


def test_screen_with_shared_caches_equals_screen_without(monkeypatch):
    """evaluate_candidates shares operator caches across the batch caps of a shape; every
    screened figure equals the one of a screen whose step models keep their own caches."""
    from llmplan.optimizer.enumerate import enumerate_candidates
    from llmplan.optimizer.planner import evaluate_candidates
    from llmplan.optimizer.types import SLOTarget, WorkloadStats
    from llmplan.sim import step_model

    m, g = load_model("llama3_1_8b"), get_gpu("h100_sxm")
    cands, _ = enumerate_candidates(m, [(g, g.usd_per_hour)], [1, 2], [1], [1], ["bf16", "fp8"], [16, 64, 256])
    wl = WorkloadStats(4.0, 1500, 300, 1800, 1.0, 1200, 3000, 4000)
    slos = [SLOTarget("ttft", 90, 800.0), SLOTarget("tpot", 90, 30.0)]

    def figures(evals):
        return [(e.candidate.name, e.capacity_rps, e.binding, e.ttft_ms, e.tpot_ms, e.light_ttft_ms, e.light_tpot_ms,
                 sorted(e.at_capacity.items())) for e in evals]

    calls = []
    real = step_model.AnalyticalStepModel.share_op_caches
    monkeypatch.setattr(step_model.AnalyticalStepModel, "share_op_caches",
                        lambda self, other: calls.append(1) or real(self, other))
    shared = figures(evaluate_candidates(m, cands, EngineProfile(), wl, slos, None))
    assert len(calls) == len(cands) - 4  # 2 TP x 2 precisions, three batch caps each
    monkeypatch.setattr(step_model.AnalyticalStepModel, "share_op_caches", lambda self, other: False)
    from llmplan.sim import calibrated
    calibrated._MODELS.clear()  # fresh kernel models too: nothing answered from the first screen
    own = figures(evaluate_candidates(m, cands, EngineProfile(), wl, slos, None))
    assert shared == own and any(c > 0 for _, c, *_ in own)

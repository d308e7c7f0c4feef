"""vLLM's async scheduling (sim/vllm_async_scheduling.py) on the served rows whose launch ran it
(calibration/vllm_async_launch.py): a request arriving while the engine is busy joins one step later."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.vllm_async_launch import async_scheduling
from llmplan.sim.scheduler import EngineState
from llmplan.sim.types import EngineProfile, StepShape
from llmplan.sim.vllm_async_scheduling import schedules_one_step_ahead
from test_vllm_launch import _row as launch_row

COLLECTION = "source_file=/x/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; silicon_concurrency=4"


def test_launch_rule():
    # vLLM's default from 0.14 on; the InferenceX sweep launches (length ratio < 1) set it or run that default
    assert async_scheduling("0.18.0", 1.0) and async_scheduling("0.16.0", 1.0)
    assert async_scheduling("", 0.8) and async_scheduling("0.11.2", 0.8)   # config.yaml async-scheduling: true
    # the aiconfigurator 0.12.0 collection rows: no flag, 0.12's default off
    assert not async_scheduling("0.12.0", 1.0) and not async_scheduling("", 1.0) and not async_scheduling(None, 1.0)


def test_engine_flag_reaches_the_scheduler_for_vllm_only():
    assert not schedules_one_step_ahead(EngineProfile())       # the dataclass default (conf/engine/vllm.yaml: on)
    assert schedules_one_step_ahead(EngineProfile(async_scheduling=True))
    assert not schedules_one_step_ahead(EngineProfile(name="sglang", async_scheduling=True))
    sync = EngineState(0, EngineProfile(), 1000, 16, 8)
    asy = EngineState(0, EngineProfile(async_scheduling=True), 1000, 16, 8)
    assert not sync.overlap and asy.overlap


def _case(**kw):
    m = sr.map_row(launch_row(**kw), 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def test_rows_carry_their_launch():
    assert _case().dep.engine.async_scheduling                                  # gpt-oss 0.18 sweep row
    assert not _case(backend_version="0.12.0", silicon_data_source=COLLECTION,
                     isl=1000, osl=1000).dep.engine.async_scheduling


def test_a_busy_engine_starts_a_new_prompt_one_step_later():
    """Closed loop of 4 clients, 1k/1k, gpt-oss-120b 0.18 on one H200: with async scheduling each prompt
    that arrives during a step waits for the step already scheduled, a decode step of the other three
    (about 6-7 ms); TPOT barely moves."""
    case = _case()
    opts = sr.SimOptions()
    on = sr.simulate_case(case, opts)
    off = sr.simulate_case(replace(case, dep=replace(case.dep, engine=replace(case.dep.engine, async_scheduling=False))),
                           opts)
    step = sr.step_model(case, None)
    decode3 = step.step_time_ms(StepShape.build([], [1536] * 3))
    assert on.status == off.status == sr.SIMULATED
    assert 0.5 * decode3 < on.ttft_ms - off.ttft_ms < 1.5 * decode3
    assert on.tpot_ms == pytest.approx(off.tpot_ms, rel=0.03)


def test_planned_vllm_server_runs_the_simulated_scheduling():
    """The launch command carries the async-scheduling setting the plan simulated, either way."""
    from llmplan.optimizer.launch import vllm
    from llmplan.optimizer.launch.spec import LaunchSpec
    base = dict(engine="vllm", model_hf_id="meta-llama/Llama-3.1-8B", model_native_dtype="bf16", gpu_key="h100_sxm",
                gpu_vendor="nvidia", tp=1, pp=1, ep=1, replicas=1, max_num_seqs=64, max_num_batched_tokens=8192,
                chunked_prefill=True, weights_dtype="bf16", kv_cache_dtype="bf16", gpu_memory_utilization=0.9,
                block_size=16, enable_prefix_caching=True, max_model_len=8192)
    on = vllm.command(LaunchSpec(**base, async_scheduling=True)).argv
    off = vllm.command(LaunchSpec(**base)).argv
    assert "--async-scheduling" in on and "--no-async-scheduling" not in on
    assert "--no-async-scheduling" in off and "--async-scheduling" not in off


def test_vllm_engine_config_defaults_to_async_scheduling():
    """conf/engine/vllm.yaml runs vLLM's current default (async scheduling on since vLLM 0.14)."""
    from pathlib import Path
    import yaml
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "engine" / "vllm.yaml").read_text())
    assert conf["async_scheduling"] is True


def test_vllm_refuses_async_scheduling_where_it_cannot_run_it():
    """vllm/config/vllm.py VllmConfig.__post_init__: PP > 1, non-EAGLE/MTP speculation, the ray executor."""
    from llmplan.sim.vllm_async_scheduling import async_refusal
    assert async_refusal(1) is None and async_refusal(1, "eagle3") is None and async_refusal(1, "mtp") is None
    assert "pipeline_parallel_size 2" in async_refusal(2)
    assert "draft_model" in async_refusal(1, "draft_model")
    assert "ray" in async_refusal(1, None, ray_executor=True)


class _PPCost:
    """A step model with ``pp`` pipeline stages and, for a speculating replica, its speculation config
    ``cfg`` (sim/spec_decode.SpecDecodeCost; the replica reads only these when it is built)."""

    def __init__(self, pp, method=None):
        self.pp = pp
        if method is not None:
            self.cfg = type("Cfg", (), {"method": method})()


@pytest.mark.parametrize("pp,method,overlap", [(1, None, True), (2, None, False), (1, "eagle3", True),
                                               (1, "mtp", True), (1, "draft_model", False)])
def test_replica_simulates_a_pipelined_vllm_synchronous(pp, method, overlap):
    """A vLLM replica with PP > 1 or draft-model speculation runs synchronous even where the engine asks
    for async scheduling (vLLM turns its default off there), so the plan simulates what the server runs."""
    from llmplan.sim.events import EventLoop
    from llmplan.sim.metrics import LogHistogram
    from llmplan.sim.replica import Replica, ReplicaSpec
    rep = Replica(0, ReplicaSpec(_PPCost(pp, method), EngineProfile(async_scheduling=True), 300_000, 16384), EventLoop(),
                  LogHistogram(), lambda s: None, 16, 1000.0)
    assert len(rep.ves) == pp and all(v.overlap is overlap for v in rep.ves)


def _launch(**kw):
    from llmplan.optimizer.launch import vllm
    from llmplan.optimizer.launch.spec import LaunchSpec
    base = dict(engine="vllm", model_hf_id="meta-llama/Llama-3.1-8B", model_native_dtype="bf16", gpu_key="h100_sxm",
                gpu_vendor="nvidia", tp=1, pp=1, ep=1, replicas=1, max_num_seqs=64, max_num_batched_tokens=8192,
                chunked_prefill=True, weights_dtype="bf16", kv_cache_dtype="bf16", gpu_memory_utilization=0.9,
                block_size=16, enable_prefix_caching=True, max_model_len=8192, async_scheduling=True)
    return vllm.command(LaunchSpec(**{**base, **kw}))


def test_launch_does_not_ask_for_async_scheduling_vllm_refuses():
    """An explicit --async-scheduling makes vLLM exit with PP > 1 or the ray executor: the command asks for
    the synchronous engine instead and says so; where the plan simulated async (multi-node), it says that too."""
    pp = _launch(tp=4, pp=2)
    assert "--no-async-scheduling" in pp.argv and "--async-scheduling" not in pp.argv
    assert any("pipeline_parallel_size 2" in n for n in pp.notes)
    multi = _launch(tp=16, gpus_per_node=8)
    assert "--distributed-executor-backend" in multi.argv and "--no-async-scheduling" in multi.argv
    assert any("ray" in n and "engine.async_scheduling=false" in n for n in multi.notes)
    one = _launch()
    assert "--async-scheduling" in one.argv and not any("async" in n for n in one.notes)


@pytest.mark.parametrize("name", ["sglang", "trtllm"])
def test_async_scheduling_on_another_engine_is_refused(name):
    """The flag selects vLLM's async scheduling only: on another engine it would be ignored silently."""
    from llmplan.errors import UserError
    from llmplan.sim.replica import ReplicaSpec, validate_replica
    validate_replica(ReplicaSpec(_PPCost(1), EngineProfile(async_scheduling=True), 300_000, 16384), 0)
    with pytest.raises(UserError, match="async_scheduling is a vLLM setting") as exc:
        validate_replica(ReplicaSpec(_PPCost(1), EngineProfile(name=name, async_scheduling=True), 300_000, 16384), 0)
    assert exc.value.key == "replicas[0].engine.async_scheduling"

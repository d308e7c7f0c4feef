"""TensorRT-LLM batch waiting (sim/trtllm_batch_wait.py) and the InferenceX Llama-3.1-70B launch that
turns it on for the 1k/1k sweep rows at TP < 8 (calibration/trtllm_sweep_launch.py)."""

import pytest

import llmplan.sim.replica as replica_mod
from llmplan.calibration.serving_rows import engine_profiles, map_row
from llmplan.calibration.trtllm_sweep_launch import sweep_engine
from llmplan.sim.metrics import MeasureWindow
from llmplan.sim.serving import simulate_serving
from llmplan.sim.testing_costs import LinearStepCost, make_replica
from llmplan.sim.trtllm_batch_wait import BatchWait, batch_wait
from llmplan.sim.types import EngineProfile
from llmplan.sim.workload import Request

#: 10 ms per step plus 0.1 ms per prompt token, nothing else
COST = LinearStepCost(base_ms=10, per_seq_ms=0, per_decode_kv_token_ms=0, per_prefill_token_ms=0.1,
                      per_attn_pair_ms=0)
ENGINE = dict(chunked_prefill=True, whole_prompts=True, max_num_batched_tokens=16384, max_num_seqs=64)
WAIT = dict(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setattr(replica_mod, "DEBUG_CHECKS", True)


def _ttfts(reqs, name="trtllm", **extra):
    res = simulate_serving(reqs, [make_replica(COST, name=name, **ENGINE, **extra)], window=MeasureWindow(0, 0))
    assert res.unfinished == 0
    return res.requests["ttft_ms"].tolist()


def test_counter_follows_the_executor():
    w = BatchWait(timeout_iters=3, max_tokens_ratio=0.5, max_num_tokens=1000)
    # 100 + 10 tokens < 500: wait three steps, run on the fourth, counter back to 0
    assert [w.release(100, 10) for _ in range(5)] == [False, False, False, True, False]
    assert w.iters == 1
    assert w.release(490, 10)            # 500 >= 0.5 x 1000: runs at once, counter reset
    assert w.iters == 0
    # a zero ratio means "tokens >= 0": never waits, whatever the timeout (as in the source)
    assert BatchWait(20, 0.0, 1000).release(1, 1)
    with pytest.raises(ValueError):
        BatchWait(-1, 0.5, 1000)


def test_off_by_default_and_only_for_trtllm():
    assert batch_wait(EngineProfile(name="trtllm")) is None
    assert batch_wait(EngineProfile(name="vllm", **WAIT)) is None
    w = batch_wait(EngineProfile(name="trtllm", max_num_batched_tokens=16384, **WAIT))
    assert (w.timeout_iters, w.max_tokens_ratio, w.max_num_tokens) == (20, 0.9, 16384)


class _AttentionDP(LinearStepCost):
    dp = 2   # attention DP ranks, as AnalyticalStepModel.dp


def test_attention_dp_replicas_do_not_wait(checked):
    """PyExecutor._schedule waits only ``if not self.enable_attention_dp``: an attention-DP replica
    schedules as if batch waiting were off."""
    assert batch_wait(EngineProfile(name="trtllm", **WAIT), attention_dp=2) is None
    reqs = [Request(0.0, 10, 60), Request(105.0, 1000, 2)]
    dp = _AttentionDP(**{f: getattr(COST, f) for f in COST.__dataclass_fields__})

    def ttfts(**extra):
        res = simulate_serving(reqs, [make_replica(dp, **ENGINE, **extra)], window=MeasureWindow(0, 0))
        return res.requests["ttft_ms"].tolist()

    assert ttfts(name="trtllm", **WAIT) == ttfts(name="trtllm")
    assert _ttfts(reqs, **WAIT) != _ttfts(reqs)   # the same requests wait without attention DP


def test_prompt_waits_twenty_decode_steps_while_another_decodes(checked):
    # request 0: prefill 0-11 ms, then 10 ms decode steps; request 1 arrives at 105 ms. Without
    # waiting (overlap scheduler only) it joins the step at 121 ms: 10 + 100 ms -> first token at 231.
    reqs = [Request(0.0, 10, 60), Request(105.0, 1000, 2)]
    plain = _ttfts(reqs)
    waited = _ttfts(reqs, **WAIT)
    assert plain[1] == pytest.approx(231 - 105)
    # batch waiting: 1,000 + 1 tokens < 0.9 x 16,384, so it sits out 20 decode steps (200 ms)
    assert waited[1] == pytest.approx(231 - 105 + 20 * 10)
    assert waited[0] == plain[0] == pytest.approx(11)


def test_token_threshold_and_idle_engine_do_not_wait(checked):
    # 15,000 prompt tokens + 1 decode >= 14,745.6: runs in the first step it may join
    big = [Request(0.0, 10, 60), Request(105.0, 15000, 2)]
    assert _ttfts(big, **WAIT) == pytest.approx(_ttfts(big))
    # nothing decoding when request 1 arrives: no generation requests, no wait
    idle = [Request(0.0, 10, 3), Request(500.0, 1000, 3)]
    assert _ttfts(idle, **WAIT) == pytest.approx(_ttfts(idle))


def test_other_engines_ignore_the_options(checked):
    reqs = [Request(0.0, 10, 60), Request(105.0, 1000, 2)]
    assert _ttfts(reqs, name="vllm", **WAIT) == pytest.approx(_ttfts(reqs, name="vllm"))


def _row(isl, osl, tp, model="meta-llama/Llama-3.1-70B", system="h200_sxm", conc=8):
    return {"id": f"r_{isl}_{osl}_{tp}", "silicon_data_source": f"source_file=2026-04-06.csv; silicon_concurrency={conc}",
            "backend": "trtllm", "backend_version": None, "model_path": model, "system": system,
            "precision": "fp8", "mode": "agg", "isl": isl, "osl": osl, "gemm_quant_mode": "fp8",
            "moe_quant_mode": "fp8", "batch_size": conc, "tp_size": tp, "pp_size": 1, "attention_dp_size": 1,
            "moe_tp_size": tp, "moe_ep_size": 1, "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}


@pytest.mark.parametrize("isl, osl, tp, tokens, iters, ratio", [
    (1024, 1024, 1, 16384, 20, 0.9),      # the script's 1k/1k block, TP < 8
    (1024, 1024, 4, 16384, 20, 0.9),
    (1024, 1024, 8, 16384, 0, 0.0),       # TP 8: no batch waiting
    (1024, 8192, 2, 16384, 0, 0.0),       # other shapes: only --max_num_tokens 16384
    (8192, 1024, 4, 16384, 0, 0.0),
])
def test_inferencex_llama70b_launch(isl, osl, tp, tokens, iters, ratio):
    m = map_row(_row(isl, osl, tp), 0, engine_profiles())
    assert m.case is not None, m.status
    e = m.case.dep.engine
    assert (e.max_num_batched_tokens, e.batch_wait_timeout_iters, e.batch_wait_max_tokens_ratio) == (tokens, iters, ratio)


def test_other_rows_keep_the_engine():
    base = EngineProfile(name="trtllm", max_num_batched_tokens=8192, max_num_seqs=8)
    # another model, another GPU, a collection row (fixed lengths) and a non-sweep shape are untouched
    assert sweep_engine(_row(1024, 1024, 2, model="openai/gpt-oss-120b"), 1024, 1024, 2, base) is base
    assert sweep_engine(_row(1024, 1024, 2, system="h100_sxm"), 1024, 1024, 2, base) is base
    assert sweep_engine(_row(1024, 2048, 2), 1024, 2048, 2, base) is base
    coll = _row(1024, 1024, 2) | {"silicon_data_source": "source_file=x/data/h200_sxm/trtllm/1.0.0rc3/llama.csv"}
    assert sweep_engine(coll, 1024, 1024, 2, base) is base


def test_negative_options_are_refused():
    from llmplan.cli.resolve import check_engine
    from llmplan.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        check_engine(EngineProfile(name="trtllm", batch_wait_max_tokens_ratio=-0.5))
    assert e.value.key == "engine.batch_wait_timeout_iters"
    check_engine(EngineProfile(name="trtllm", **WAIT))   # valid values pass


def test_other_engines_refuse_the_options():
    from llmplan.cli.resolve import check_engine
    from llmplan.errors import ConfigError

    with pytest.raises(ConfigError, match="TensorRT-LLM option"):
        check_engine(EngineProfile(name="vllm", batch_wait_timeout_iters=20))


def test_prefill_first_steps_refuse_the_options():
    """The scheduler waits only in in-flight batching (EngineState._plan_chunked): a prefill-first
    engine would run the same schedule with or without the options, so the config is refused."""
    from llmplan.cli.resolve import check_engine
    from llmplan.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        check_engine(EngineProfile(name="trtllm", chunked_prefill=False, **WAIT))
    assert e.value.key == "engine.chunked_prefill"
    check_engine(EngineProfile(name="trtllm", chunked_prefill=False))   # off: nothing to ignore



def _closed_loop(monkeypatch, fast_forward, **extra):
    from llmplan.sim.workload import LengthSpec, WorkloadSpec

    monkeypatch.setattr(replica_mod, "FAST_FORWARD", fast_forward)
    spec = WorkloadSpec(preset=None, arrival="closed_loop", concurrency=8, num_requests=80,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=512),
                        output_tokens=LengthSpec(kind="uniform", min_tokens=60, max_tokens=70), seed=3)
    res = simulate_serving(spec, [make_replica(COST, name="trtllm", **ENGINE, **extra)], window=MeasureWindow(0, 0))
    assert res.unfinished == 0
    return res


def test_fast_forward_keeps_the_wait(checked, monkeypatch):
    fast = _closed_loop(monkeypatch, True, **WAIT)
    slow = _closed_loop(monkeypatch, False, **WAIT)
    assert fast.requests["ttft_ms"].tolist() == pytest.approx(slow.requests["ttft_ms"].tolist())
    plain = _closed_loop(monkeypatch, True)
    # prompts re-sent while others decode sit out up to 20 decode steps (10 ms each), then run
    # together: their step is longer by up to the other 7 prompts' 51.2 ms each
    d = fast.summary["ttft_ms_mean"] - plain.summary["ttft_ms_mean"]
    assert 100 < d <= 20 * 10 + 7 * 51.2, d


def test_cli_names_the_negative_option(capsys, tmp_path):
    """config_checks' range table refuses a negative option under its own key (exit 2)."""
    from simulate_cli_helpers import run_cli

    for key, value in (("batch_wait_max_tokens_ratio", "-0.5"), ("batch_wait_timeout_iters", "-1")):
        code, out, err = run_cli(["simulate", "engine=trtllm", f"engine.{key}={value}"], capsys, tmp_path)
        assert code == 2 and f"engine.{key}: must be >= 0" in out + err, (key, out, err)

"""Speculative decoding in the discrete-event simulator (sim/spec_decode.py): TPOT falls at
batch 1, the gain shrinks with the batch, draws are deterministic, the draft's memory comes
out of the KV cache, and bad settings are refused. Roofline kernels (no calibration file)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from llmplan.errors import UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.sim.kernels import RooflineKernelModel
from llmplan.sim.replica import ReplicaSpec
from llmplan.sim.serving import simulate_serving
from llmplan.sim.spec_decode import SpecDecodeCost, spec_config, speculative_kv
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision
from llmplan.sim.workload import LengthSpec, WorkloadSpec

ENGINE = EngineProfile(name="vllm", max_num_seqs=256, max_num_batched_tokens=8192)


def _base(model="llama2_70b", tp=4):
    g = get_gpu("h100_sxm")
    return AnalyticalStepModel(load_model(model), g, Parallelism(tp=tp), Precision("bf16"), ENGINE,
                               RooflineKernelModel(g))


@pytest.fixture(scope="module")
def base():
    return _base()


def _run(cost, clients: int, n: int = 48, out_tokens: int = 200):
    wl = WorkloadSpec(preset=None, arrival="closed_loop", concurrency=clients, num_requests=n,
                      input_tokens=LengthSpec(kind="fixed", mean_tokens=256),
                      output_tokens=LengthSpec(kind="fixed", mean_tokens=out_tokens), steady_state=False)
    rep = ReplicaSpec(cost, ENGINE, 400_000, 4096)
    return simulate_serving(wl, [rep], seed=3)


def _spec(base, **kw):
    cfg = spec_config({"method": "draft_model", "draft_model": "llama2_7b", "k": 4, "acceptance": 0.8, **kw})
    return SpecDecodeCost(base, cfg, seed=3, mean_prompt_tokens=256)


def test_tpot_falls_at_batch_1_and_the_gain_shrinks_with_the_batch(base):
    spec = _spec(base)
    gain = {}
    for clients in (1, 128):
        n = 8 if clients == 1 else 256
        plain = _run(base, clients, n).summary["tpot_ms_mean"]
        fast = _run(spec, clients, n).summary["tpot_ms_mean"]
        gain[clients] = plain / fast
    assert gain[1] > 1.5                      # weights read once for k + 1 tokens, E[L] = 3.36
    assert gain[128] < gain[1] - 0.5          # verify of 5 x 128 tokens is compute-bound
    # the DES agrees with the cost model's own batch-1 speed-up within the sampling noise
    analytic = spec.spec.step(1, 356).speedup
    assert gain[1] == pytest.approx(analytic, rel=0.12)


def test_output_tokens_are_real_tokens_and_runs_are_deterministic(base):
    spec = _spec(base)
    a, b = _run(spec, 4), _run(spec, 4)
    assert (a.requests["output_tokens"] == 200).all()
    assert a.summary["tpot_ms_mean"] == b.summary["tpot_ms_mean"]
    # ITL is the gap between bursts (one verify step), longer than TPOT per token
    assert a.summary["itl_ms_mean"] > 1.5 * a.summary["tpot_ms_mean"]


def test_sampled_steps_match_the_expected_accepted_length(base):
    spec = _spec(base)
    out = 2001
    steps = [spec.spec_decode_steps(SimpleNamespace(idx=i, req=SimpleNamespace(output_tokens=out)))
             for i in range(300)]
    tokens_per_step = (out - 1) / (np.mean(steps) - 1)
    assert tokens_per_step == pytest.approx(spec.cfg.tokens_per_step, rel=0.03)
    one = SimpleNamespace(idx=0, req=SimpleNamespace(output_tokens=1))
    assert spec.spec_decode_steps(one) == 1
    # acceptance 1: every step emits k + 1 tokens; acceptance 0: one token per step
    full = SpecDecodeCost(base, spec_config({"method": "eagle3", "k": 4, "acceptance": 1.0}), 0, 256)
    none = SpecDecodeCost(base, spec_config({"method": "eagle3", "k": 4, "acceptance": 0.0}), 0, 256)
    req = SimpleNamespace(idx=5, req=SimpleNamespace(output_tokens=101))
    assert full.spec_decode_steps(req) == 1 + 20 and none.spec_decode_steps(req) == 101


def test_draft_memory_comes_out_of_the_kv_cache(base):
    spec = _spec(base)
    kv = speculative_kv(spec.spec, 300_000, 256, 200)
    # Llama-2-7B has 32 MHA layers (more KV per token than the 70B's 8-head GQA) and 13.5 GB of weights
    assert kv.kv_capacity_tokens < 300_000 * 0.5
    assert 3.0 < kv.draft_weights_gb_per_gpu < 3.6   # 7B bf16 over TP4
    el = spec.cfg.tokens_per_step
    assert kv.step_space_factor == pytest.approx((256 + 1 + 199 / el) / 456)
    mtp_less = speculative_kv(SpecDecodeCost(base, spec_config({"method": "eagle3", "k": 4}), 0, 256).spec,
                              300_000, 256, 200)
    assert mtp_less.kv_capacity_tokens > kv.kv_capacity_tokens


@pytest.mark.parametrize("cfg,key", [
    ({"method": "eagle3", "k": 0}, "speculative.k"),
    ({"method": "eagle3", "k": 3, "acceptance": 1.2}, "speculative.acceptance"),
    ({"method": "eagle3", "k": 3, "acceptance": -0.1}, "speculative.acceptance"),
    ({"method": "draft_model", "k": 3, "draft_model": "llama2_70b"}, "speculative.draft_model"),
    ({"method": "magic", "k": 3}, "speculative.method"),
])
def test_bad_settings_are_refused(cfg, key):
    with pytest.raises(UserError) as e:
        SpecDecodeCost(_base("llama2_13b", 1), spec_config(cfg), 0, 100)
    assert e.value.key == key


def test_off_means_none():
    assert spec_config({"method": "none", "k": 4}) is None and spec_config(None) is None


def test_simulate_cli_runs_speculation_and_names_bad_keys(tmp_path):
    import json

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.simulate_cmd import run_simulate

    base = ["model=llama2_13b", "deployment.gpu=h100_sxm", "deployment.tp=1", "workload=closed_loop",
            "workload.concurrency=2", "workload.num_requests=6", "output.progress=false",
            "speculative.method=draft_model", "speculative.draft_model=llama2_7b", "speculative.k=3"]
    assert run_simulate(compose("simulate", base + ["speculative.acceptance=0.8"]), tmp_path) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["speculative"]["k"] == 3 and s["speculative"]["kv"]["draft_weights_gb_per_gpu"] > 13
    assert any("speculative decoding" in n for n in s["notes"])
    for bad, key in ((["speculative.acceptance=1.5"], "speculative.acceptance"),
                     (["speculative.k=0"], "speculative.k"),
                     (["speculative.acceptance=0.8", "deployment.pp=2"], "deployment.pp")):
        with pytest.raises(UserError) as e:
            run_simulate(compose("simulate", base + bad), tmp_path / "bad")
        assert e.value.key == key

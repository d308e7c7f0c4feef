"""Co-location (sim/colocation.py): the memory split (fit / not fit), the interference
factors, and the simulated slowdown of a model sharing its GPU. Roofline kernels."""

from __future__ import annotations

import pytest

from llmplan.errors import InfeasibleDeployment, UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.sim.colocation import (
    ColocatedModel,
    build_pool,
    check_shares,
    demand_shares,
    interference_factors,
    simulate_colocated,
)
from llmplan.sim.serving import simulate_serving
from llmplan.sim.types import EngineProfile, Parallelism, Precision
from llmplan.sim.workload import LengthSpec, WorkloadSpec

ENGINE = EngineProfile(name="vllm")
A100 = get_gpu("a100_sxm")


def _pool(keys, gpu=A100, tp=1, shares=(), longest=(2048, 2048)):
    models = [load_model(k) for k in keys]
    return build_pool(models, gpu, Parallelism(tp), Precision("bf16"), ENGINE, "spec", list(longest),
                      [1.0] * len(keys), [600.0] * len(keys), list(shares))


def test_two_small_models_fit_and_split_what_is_left():
    pool = _pool(["llama2_7b", "llama2_13b"])
    a, b = pool.memory
    assert a.weights_gb == pytest.approx(13.5, abs=0.3) and b.weights_gb == pytest.approx(26.0, abs=0.3)
    total = sum(m.weights_gb + m.reserve_gb + m.kv_gb for m in pool.memory)
    assert total <= 80.0 and total > 0.8 * 80.0          # the whole budget is handed out
    # equal rates and lengths: KV memory in proportion to KV bytes per token (13B: 40 layers x 5120 vs 32 x 4096)
    assert b.kv_share / a.kv_share == pytest.approx((40 * 5120) / (32 * 4096), rel=1e-6)
    assert a.kv_capacity_tokens > 0 and b.kv_capacity_tokens > 0


def test_models_that_do_not_fit_together_are_refused():
    with pytest.raises(InfeasibleDeployment) as e:          # 13B + 70B weights on one 80 GB GPU
        _pool(["llama2_13b", "llama2_70b"], tp=1)
    assert e.value.key == "colocate.models" and "do not fit together" in str(e.value)
    # each fits alone on TP4, together too
    assert len(_pool(["llama2_13b", "llama2_70b"], gpu=get_gpu("h100_sxm"), tp=4).memory) == 2
    # a KV share too small for the longest request
    with pytest.raises(InfeasibleDeployment) as e:
        _pool(["llama2_7b", "llama2_13b"], shares=[0.999, 0.001], longest=(2048, 4096))
    assert "llama2_13b gets" in str(e.value)


def test_shares_are_validated():
    assert check_shares([0.25, 0.75], 2) == [0.25, 0.75]
    for bad, n in (([0.5], 2), ([0.5, 0.6], 2), ([0.0, 1.0], 2), ([True, 0.5], 2)):
        with pytest.raises(UserError):
            check_shares(bad, n)
    s = demand_shares([1.0, 2.0], [1.0, 1.0], [100.0, 100.0])
    assert s == pytest.approx([1 / 3, 2 / 3])


def test_interference_factors():
    f, starved = interference_factors([0.2, 0.3])
    assert f == pytest.approx([1 / 0.7, 1 / 0.8]) and starved == [False, False]
    f, starved = interference_factors([0.0, 0.0])
    assert f == [1.0, 1.0]
    f, starved = interference_factors([0.99, 0.1])
    assert starved == [False, True] and f[1] == pytest.approx(20.0)   # capped at 1 / (1 - 0.95)


def _wl(rate):
    return WorkloadSpec(preset=None, rate_rps=rate, num_requests=150, steady_state=False,
                        input_tokens=LengthSpec(kind="fixed", mean_tokens=512),
                        output_tokens=LengthSpec(kind="fixed", mean_tokens=200))


def test_sharing_slows_each_model_by_the_others_load():
    pool = _pool(["llama2_7b", "llama2_13b"])
    runs = [ColocatedModel("llama2_7b", pool.replica_specs(0, 1), _wl(2.0)),
            ColocatedModel("llama2_13b", pool.replica_specs(1, 1), _wl(1.0))]
    res = simulate_colocated(runs, seed=1)
    alone = [simulate_serving(r.workload, r.replicas, seed=1).summary["tpot_ms_mean"] for r in runs]
    shared = [r.summary["tpot_ms_mean"] for r in res.results]
    assert all(0.0 < u < 1.0 for u in res.utilizations)
    assert res.iterations < 6                                # the damped fixed point settled
    for i in range(2):
        assert res.factors[i] == pytest.approx(1.0 / (1.0 - res.utilizations[1 - i]), rel=0.05)
        assert shared[i] > alone[i] * 1.05
    # both engines step whenever they hold requests: time-sliced, they split the GPU about evenly
    assert sum(res.utilizations) == pytest.approx(1.0, abs=0.05)
    # a lighter neighbour hurts less: lower the 13B's load, the 7B speeds up
    lighter = [runs[0], ColocatedModel("llama2_13b", pool.replica_specs(1, 1), _wl(0.2))]
    res2 = simulate_colocated(lighter, seed=1)
    assert res2.results[0].summary["tpot_ms_mean"] < shared[0] * 0.8


def test_one_model_is_not_colocation():
    pool = _pool(["llama2_7b", "llama2_13b"])
    with pytest.raises(UserError):
        simulate_colocated([ColocatedModel("a", pool.replica_specs(0, 1), _wl(1.0))])


def test_cli_refuses_what_does_not_fit_and_unknown_entry_keys(tmp_path):
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.simulate_cmd import run_simulate
    from llmplan.errors import ConfigError

    base = ["colocate=llama2_7b_13b", "deployment.gpu=a100_sxm", "deployment.tp=1", "output.progress=false",
            "workload.num_requests=20", "workload.steady_state=false"]
    with pytest.raises(InfeasibleDeployment) as e:
        run_simulate(compose("simulate", base + ["colocate.kv_share=[0.999,0.001]"]), tmp_path)
    assert e.value.key == "colocate.models"
    with pytest.raises(ConfigError) as e:
        run_simulate(compose("simulate", base + ["+colocate.models.0.bogus=1"]), tmp_path)
    assert e.value.key == "colocate.models[0].bogus"
    with pytest.raises(ConfigError) as e:
        run_simulate(compose("simulate", base + ["speculative.method=eagle3", "speculative.k=2"]), tmp_path)
    assert e.value.key == "speculative.method"


@pytest.mark.parametrize("override,key", [
    ("colocate.models.1.slo.ttft_p90_ms=-5", "colocate.models[1].slo.ttft_p90_ms"),
    ("colocate.models.0.slo.tpot_p90_ms=0", "colocate.models[0].slo.tpot_p90_ms"),
    ("colocate.models.0.workload.rate_rps=0", "colocate.models[0].workload.rate_rps"),
])
def test_entry_overrides_get_the_top_level_range_checks(override, key):
    """An entry's workload/slo overrides are merged after to_app's checks; they are checked
    alike and named by the entry's key (resolve_slos itself no longer checks the sign)."""
    from llmplan.cli.colocate_inputs import colocate_inputs
    from llmplan.cli.hydra_app import compose
    from llmplan.cli.resolve import to_app
    from llmplan.errors import ConfigError

    app = to_app(compose("simulate", ["colocate=llama2_7b_13b", override]))
    with pytest.raises(ConfigError) as e:
        colocate_inputs(app)
    assert e.value.key == key

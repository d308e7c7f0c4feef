"""`plan workload=offline target.tokens_per_s=N`: the cheapest GPUs for N tokens/s offline
(optimizer/offline_plan.py, llmplan/cli/offline_plan_cmd.py)."""

import json
import math

import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.simulate_cmd import run_simulate
from llmplan.errors import EXIT_INFEASIBLE, EXIT_OK, UserError
from llmplan.optimizer.offline_plan import OfflineCandidate, OfflineInfeasible, check_target, solve


def _cand(name, gpu, gpus, usd, tps):
    return OfflineCandidate(name, gpu, gpus, 1, 1, "bf16", gpus, usd, 10_000, {}, tps, tokens_per_s=tps)


A = _cand("a", "g1", 1, 2.0, 1000.0)
B = _cand("b", "g2", 2, 5.0, 3000.0)


def test_ilp_finds_the_cheapest_mix():
    # 5000 tok/s: 5 A = $10, 2 B = $10, 1 B + 2 A = $9 (the optimum)
    chosen = {c.name: n for c, n in solve([A, B], 5000.0, {}, 256)}
    assert chosen == {"a": 2, "b": 1}
    # availability: one g1 GPU -> 1 A + 1 B reaches only 4000: 2 B ($10)
    chosen = {c.name: n for c, n in solve([A, B], 5000.0, {"g1": 1}, 256)}
    assert chosen == {"b": 2}
    # one shape only: 2 B ($10, 4 GPUs) against 5 A ($10, 5 GPUs): the tie goes to fewer GPUs
    chosen = {c.name: n for c, n in solve([A, B], 5000.0, {}, 256, uniform=True)}
    assert chosen == {"b": 2}


def test_ilp_names_what_the_available_gpus_reach():
    with pytest.raises(OfflineInfeasible) as e:
        solve([A, B], 10_000.0, {"g1": 2, "g2": 4}, 256)
    assert "at most about 8000 tokens/s" in str(e.value)


@pytest.mark.parametrize("value", [None, 0, -5, math.nan, math.inf, "fast"])
def test_a_target_must_be_a_positive_rate(value):
    with pytest.raises(UserError) as e:
        check_target(value, "output")
    assert e.value.key == "target.tokens_per_s"


def test_an_unknown_token_count_names_its_key():
    with pytest.raises(UserError) as e:
        check_target(100.0, "prompt")
    assert e.value.key == "target.count"


BASE = ["model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", "workload.num_requests=400",
        "search.precision=[fp8]", "search.tp=[1,2]", "search.pp=[1]"]


def test_plan_offline_reaches_the_target_with_simulated_replicas(tmp_path):
    assert run_plan(compose("plan", BASE + ["target.tokens_per_s=20000"]), tmp_path) == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["mode"] == "offline_throughput" and d["feasible"] and d["count"] == "output"
    assert d["tokens_per_s"] >= 20000
    (dep,) = d["deployments"]
    per = dep["tokens_per_s_per_replica"]
    assert dep["source"] == "simulated" and dep["replicas"] == math.ceil(20000 / per)  # the fewest that reach it
    assert d["total_usd_per_hour"] == pytest.approx(dep["usd_per_hour"])
    assert dep["offline_limits"]["source"].startswith("vLLM offline")
    rows = (tmp_path / "candidates.csv").read_text().splitlines()
    assert len(rows) == 3  # h100 tp1 and tp2, fp8
    # the replica's throughput is what `simulate workload=offline` reports for that deployment
    sim_dir = tmp_path / "sim"
    assert run_simulate(compose("simulate", ["model=llama3_1_8b", "workload=offline", "workload.num_requests=400",
                                             f"deployment.gpu={dep['gpu']}", f"deployment.tp={dep['tp']}",
                                             "deployment.precision=fp8"]), sim_dir) == EXIT_OK
    s = json.loads((sim_dir / "summary.json").read_text())
    assert per == pytest.approx(s["offline"]["output_tokens_per_s"], rel=1e-3)


def test_total_tokens_count_the_prompt_too(tmp_path):
    assert run_plan(compose("plan", BASE + ["target.tokens_per_s=20000", "target.count=total",
                                            "search.finalists=0"]), tmp_path / "t") == EXIT_OK
    assert run_plan(compose("plan", BASE + ["target.tokens_per_s=20000", "search.finalists=0"]), tmp_path / "o") == EXIT_OK
    tot, out = (json.loads((tmp_path / d / "plan.json").read_text()) for d in ("t", "o"))
    a, b = tot["deployments"][0], out["deployments"][0]
    assert a["candidate"] == b["candidate"]
    assert a["tokens_per_s_per_replica"] > 1.5 * b["tokens_per_s_per_replica"]  # chat prompts are longer than outputs
    assert a["replicas"] <= b["replicas"]


def test_availability_too_small_is_exit_3(tmp_path):
    code = run_plan(compose("plan", BASE + ["target.tokens_per_s=1e9", "gpu.max_gpus={h100_sxm: 2}",
                                            "search.finalists=0"]), tmp_path)
    assert code == EXIT_INFEASIBLE
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["feasible"] is False and "h100_sxm <= 2 GPUs" in d["binding_constraint"]


@pytest.mark.parametrize("extra,key", [
    (["target.tokens_per_s=0"], "target.tokens_per_s"),
    (["target.tokens_per_s=-10"], "target.tokens_per_s"),
    ([], "target.tokens_per_s"),                                      # offline without a target
    (["target.tokens_per_s=1000", "workload.num_requests=0"], "workload.num_requests"),
    (["target.tokens_per_s=1000", "fleet.gpus={h100_sxm: 8}"], "fleet.gpus"),
])
def test_bad_offline_plans_name_their_key(tmp_path, extra, key):
    with pytest.raises(UserError) as e:
        run_plan(compose("plan", BASE + extra), tmp_path)
    assert e.value.key == key


def test_a_target_without_an_offline_workload_is_refused(tmp_path):
    with pytest.raises(UserError) as e:
        run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "target.tokens_per_s=1000"]), tmp_path)
    assert e.value.key == "target.tokens_per_s" and "workload=offline" in e.value.fix

"""`llmplan simulate` with deployment.mode=disagg: config -> pools -> disaggregated DES -> summary.json."""

import json

import pandas as pd
import pytest

from llmplan.cli.hydra_app import compose
from llmplan.cli.simulate_cmd import run_simulate
from llmplan.errors import InfeasibleDeployment, UserError

HETERO = ["model=llama3_1_8b", "deployment.mode=disagg", "deployment.prefill.gpu=h100_sxm", "deployment.prefill.tp=2",
          "deployment.prefill.workers=1", "deployment.decode.gpu=h200_sxm", "deployment.decode.tp=4",
          "deployment.decode.workers=2", "workload.num_requests=80", "workload.steady_state=false",
          "workload.rate_rps=10", "output.progress=false"]


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_heterogeneous_pools_summary_and_determinism(tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert run_simulate(compose("simulate", HETERO), out) == 0
    s = _summary(outs[0])
    d = s["deployment"]
    assert s["mode"] == d["mode"] == "disaggregated"
    assert (d["prefill"]["gpu"], d["prefill"]["tp"], d["prefill"]["workers"]) == ("h100_sxm", 2, 1)
    assert (d["decode"]["gpu"], d["decode"]["tp"], d["decode"]["workers"]) == ("h200_sxm", 4, 2)
    assert d["total_gpus"] == 1 * 2 + 2 * 4
    # two GPU types never share one NVLink domain: the KV goes over the network
    assert d["kv_transfer"]["link"] == "network" and d["kv_transfer"]["send_bw_gbps"] > 0
    assert d["usd_per_hour"] == pytest.approx(d["prefill"]["usd_per_hour"] + d["decode"]["usd_per_hour"], rel=1e-6)
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert s[k]["p50"] <= s[k]["p90"] <= s[k]["p99"]
    x = s["disaggregated"]
    assert x["kv_transfers"] > 0 and x["transfer_ms_mean"] > 0
    # TTFT is stamped at the decode worker: it includes the KV transfer
    assert s["ttft_ms"]["mean"] > x["transfer_ms_mean"]
    assert s["output_tokens_per_s"] > 0
    req = pd.read_csv(outs[0] / "requests.csv")
    assert {"prefill_worker", "kv_arrival_ms", "transfer_ms"} <= set(req.columns)
    assert set(req["prefill_worker"].dropna().astype(int)) == {0}
    for f in ("summary.json", "requests.csv"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes()


def test_example_option_and_same_type_pools_use_nvlink(tmp_path):
    ov = ["model=llama3_1_8b", "deployment=disagg_example", "deployment.decode.gpu=h100_sxm",
          "deployment.decode.tp=2", "deployment.decode.workers=1", "workload.num_requests=40",
          "workload.steady_state=false", "workload.rate_rps=5", "output.progress=false"]
    assert run_simulate(compose("simulate", ov), tmp_path) == 0
    d = _summary(tmp_path)["deployment"]
    assert d["prefill"]["gpu"] == d["decode"]["gpu"] == "h100_sxm"
    assert d["kv_transfer"]["link"] == "nvlink"  # 4 GPUs fit one 8-GPU NVLink domain


def test_aggregated_default_unchanged(tmp_path):
    ov = ["model=llama3_1_8b", "gpu=h100_sxm", "workload.num_requests=60", "workload.steady_state=false",
          "workload.rate_rps=5", "output.progress=false"]
    assert run_simulate(compose("simulate", ov), tmp_path) == 0
    s = _summary(tmp_path)
    assert s["mode"] == "aggregated" and s["deployment"]["replicas"] == 1 and "disaggregated" not in s


@pytest.mark.parametrize("extra, key, cls", [
    (["deployment.prefill.workers=0"], "deployment.prefill.workers", UserError),
    (["deployment.decode.gpu=h100_sxn"], "deployment.decode.gpu", UserError),
    (["deployment.prefill.tp=3"], "deployment.prefill.tp", UserError),
    (["deployment.decode.ep=2"], "deployment.decode.ep", UserError),
    # h100_pcie's scale-out bandwidth is marked unknown in the GPU catalog
    (["deployment.prefill.gpu=h100_pcie"], "deployment.prefill.gpu (h100_pcie).scaleout_bw_gbps", UserError),
    (["deployment.kv_transfer.placement=same_domain"], "deployment.kv_transfer.placement", UserError),
    (["model=llama3_1_70b", "deployment.decode.gpu=l4", "deployment.decode.tp=1"], "deployment.decode",
     InfeasibleDeployment),
    (["deployment.mode=disag"], "deployment.mode", UserError),
    (["deployment.replicas=2"], "deployment.replicas", UserError),
    (["deployment.mode=aggregated"], "deployment.prefill.gpu", UserError),  # pool keys need mode=disagg
])
def test_bad_input_names_the_key(tmp_path, extra, key, cls):
    with pytest.raises(cls) as exc:
        run_simulate(compose("simulate", HETERO + extra), tmp_path)
    assert exc.value.key == key
    assert not (tmp_path / "summary.json").exists()


def test_cli_exit_code_2(tmp_path, capsys, monkeypatch):
    from llmplan.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["simulate"] + HETERO + ["deployment.decode.workers=0"]) == 2
    err = capsys.readouterr().err
    assert "deployment.decode.workers" in err and "Traceback" not in err


def test_handoff_defaults_to_the_engines_fit_and_can_be_set(tmp_path):
    from llmplan.sim.disagg_handoff import handoff_ms

    fitted = handoff_ms("vllm")
    assert fitted > 0   # the shipped fit (sim/data/disagg_handoff.json)
    runs = {}
    for name, extra in (("fit", []), ("zero", ["deployment.kv_transfer.handoff_ms=0"]),
                        ("set", ["deployment.kv_transfer.handoff_ms=250"])):
        assert run_simulate(compose("simulate", HETERO + ["engine=vllm"] + extra), tmp_path / name) == 0
        runs[name] = _summary(tmp_path / name)
    assert runs["fit"]["deployment"]["handoff_ms"] == pytest.approx(fitted)
    assert runs["zero"]["deployment"]["handoff_ms"] == 0 and runs["set"]["deployment"]["handoff_ms"] == 250
    # at 10 req/s on these pools the delay adds to TTFT nearly one for one (nothing else queues more)
    d = runs["set"]["ttft_ms"]["mean"] - runs["zero"]["ttft_ms"]["mean"]
    assert d == pytest.approx(250.0, rel=0.1)


def test_negative_handoff_exits_2(tmp_path):
    with pytest.raises(UserError) as e:
        run_simulate(compose("simulate", HETERO + ["deployment.kv_transfer.handoff_ms=-5"]), tmp_path)
    assert "handoff_ms" in str(e.value.key)


def test_decode_pool_outside_the_fitted_range_is_said(tmp_path):
    """A decode worker running more sequences than the served rows the engine terms were fitted on
    gets the fitted-range note (issue 12), in summary.json; inside the range it gets none."""
    from llmplan.sim.engine_terms import fitted_range

    lo, hi = fitted_range("vllm")["concurrency"]
    keep = [a for a in HETERO if not a.startswith(("workload.rate_rps", "deployment.decode.workers",
                                                   "workload.num_requests"))]
    lengths = ["workload.input_tokens.mean_tokens=1200", "workload.output_tokens.mean_tokens=2000"]
    over = keep + lengths + ["workload.rate_rps=60", "deployment.decode.workers=1", "workload.num_requests=600",
                             "engine.max_num_seqs=512"]
    assert run_simulate(compose("simulate", over), tmp_path) == 0
    notes = [n for n in _summary(tmp_path)["notes"] if "engine terms were fitted on" in n]
    assert len(notes) == 1 and notes[0].startswith("decode pool: ") and "concurrency" in notes[0]
    assert f"not in [{lo:.0f}, {hi:.0f}]" in notes[0]
    inside = keep + lengths + ["workload.rate_rps=2", "deployment.decode.workers=1", "workload.num_requests=60"]
    assert run_simulate(compose("simulate", inside), tmp_path / "in") == 0
    assert not [n for n in _summary(tmp_path / "in")["notes"] if "engine terms were fitted on" in n]

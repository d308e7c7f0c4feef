"""`llmplan validate serving`: row mapping, end-to-end run, cross-gen GPUs, engine fit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration import serving_rows as sr
from llmplan.calibration import validate_serving as vs
from llmplan.errors import UserError

SPEC = sr.SimOptions(calibration="spec")


def row(**kw) -> dict:
    """One synthetic row in the e2e_serving.csv layout (aggregated dense Llama-3.1-8B on H100)."""
    r = {"id": "r", "silicon_data_source": "synthetic; silicon_concurrency=4", "backend": "trtllm",
         "backend_version": "x", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
         "precision": math.nan, "mode": "agg", "isl": 256, "osl": 32, "gemm_quant_mode": math.nan,
         "moe_quant_mode": math.nan, "batch_size": 4, "tp_size": 1, "pp_size": 1, "attention_dp_size": math.nan,
         "moe_tp_size": 1, "moe_ep_size": 1, "silicon_ttft_ms": 60.0, "silicon_tpot_ms": 8.0}
    r.update(kw)
    return r


def mapped(**kw) -> sr.RowMapping:
    return sr.map_row(row(**kw), 0, sr.engine_profiles())


# ----------------------------------------------------------------------------- mapping


def test_dense_agg_row_maps_to_deployment():
    m = mapped()
    assert m.status == sr.SIMULATED and m.case is not None
    c = m.case
    assert c.dep.model.key == "llama3_1_8b" and c.dep.gpu.key == "h100_sxm"
    assert (c.dep.par.tp, c.dep.par.pp, c.dep.par.ep) == (1, 1, 1)
    assert (c.dep.prec.weights, c.dep.prec.kv_cache) == ("bf16", "bf16")
    assert (c.concurrency, c.isl, c.osl) == (4, 256, 32)
    assert c.dep.engine.name == "trtllm" and c.dep.engine.max_num_seqs >= 4


def test_concurrency_falls_back_to_batch_size():
    assert mapped(silicon_data_source="no field here", batch_size=12).case.concurrency == 12


def test_moe_row_with_expert_parallelism_and_fp8():
    m = mapped(model_path="Qwen/Qwen3-30B-A3B", backend="vllm", tp_size=2, moe_tp_size=1, moe_ep_size=2,
               precision="fp8", gemm_quant_mode="fp8_block")
    assert m.status == sr.SIMULATED
    c = m.case
    assert c.dep.model.is_moe and not c.dense
    assert (c.dep.par.tp, c.dep.par.ep, c.dep.par.moe_tp) == (2, 2, 1)
    # vLLM's --kv-cache-dtype auto keeps the model's bf16 cache (serving_rows.KV_AUTO_MODEL_DTYPE)
    assert (c.dep.prec.weights, c.dep.prec.kv_cache) == ("fp8", "bf16")


def test_fp8_native_model_without_precision_keeps_fp8():
    m = mapped(model_path="Qwen/Qwen3-235B-A22B-FP8", tp_size=8, moe_tp_size=1, moe_ep_size=8)
    assert m.case is not None and m.case.dep.prec.weights == "fp8"


@pytest.mark.parametrize("kw, reason", [
    ({"mode": "disagg"}, "disagg"),
    ({"attention_dp_size": 2}, "attention_dp"),
    ({"model_path": "acme/NoSuchModel-7B"}, "unknown_model"),
    ({"system": "no_such_gpu"}, "unknown_gpu"),
    ({"backend": "tgi"}, "unknown_backend"),
    ({"tp_size": 3}, "parallelism"),
    ({"model_path": "Qwen/Qwen3-30B-A3B", "tp_size": 4, "moe_tp_size": 1, "moe_ep_size": 2}, "parallelism"),
    ({"system": "a100_sxm", "precision": "fp8", "gemm_quant_mode": "fp8"}, "precision"),  # no fp8 on Ampere
    ({"model_path": "meta-llama/Meta-Llama-3.1-405B", "tp_size": 1}, "memory"),
    ({"osl": 1}, "invalid"),
])
def test_rows_that_cannot_be_simulated_get_a_reason(kw, reason):
    m = mapped(**kw)
    assert m.case is None and m.reason == reason, m.status
    assert reason in sr.REASONS


def test_missing_column_is_a_user_error_naming_it(tmp_path):
    p = tmp_path / "bad.csv"
    pd.DataFrame([row()]).drop(columns=["tp_size"]).to_csv(p, index=False)
    with pytest.raises(UserError) as e:
        sr.read_serving_csv(p)
    assert "tp_size" in str(e.value) and "bad.csv" in str(e.value)
    assert vs.main(["--measurements", str(p), "--no-progress"]) == 2


# ----------------------------------------------------------------------------- end to end


def test_validate_serving_end_to_end_writes_added_columns(tmp_path):
    src = tmp_path / "runs.csv"
    out = tmp_path / "pred.csv"
    rows = [row(id="a"), row(id="b", isl=512, osl=16, batch_size=8, silicon_data_source="silicon_concurrency=8",
                             backend="vllm"),
            row(id="c", mode="disagg")]
    pd.DataFrame(rows).to_csv(src, index=False)
    rc = vs.main(["--measurements", str(src), "--out", str(out), "--calibration", "spec", "--engine-profiles", "none",
                  "--no-progress", "--workers", "1"])
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df.columns[-len(vs.ADDED_COLUMNS):]) == list(vs.ADDED_COLUMNS) and len(df) == 3
    assert list(df["status"][:2]) == [sr.SIMULATED, sr.SIMULATED]
    assert df["status"][2].startswith("missing_input")   # a disagg row without pool columns
    assert (df["predicted_ttft_ms"][:2] > 0).all() and (df["predicted_tpot_ms"][:2] > 0).all()
    assert np.isnan(df["predicted_ttft_ms"][2])
    assert list(df["tier"][:2]) == ["spec", "spec"]
    assert df["regime"].isna().all()   # ordinary rows: no regime flag (empty in the CSV)


def test_aggregates_and_limit():
    df = pd.DataFrame([row(id="a"), row(id="b", osl=48), row(id="c", mode="disagg")])
    res = vs.validate_serving(df, SPEC, {}, limit=1, workers=1)
    assert list(res["status"].str.split(":").str[0]) == [sr.SIMULATED, "limit", "missing_input"]
    agg = vs.aggregate(res, ["backend"])
    assert agg["rows"].tolist() == [1]
    assert set(vs.not_simulated(res)["reason"]) == {"limit", "missing_input"}


@pytest.mark.parametrize("gpu,prec", [("b300", "fp8"), ("a100_40gb_sxm", "")])
def test_gpu_without_kernel_measurements(gpu, prec):
    """Rows for any catalog GPU run; a GPU without kernel tables (B300, A100 40GB) is predicted
    from another GPU's tables (sibling or cross-gen tier), never labelled measured."""
    cal, note = sr.resolve_calibration(None)
    df = pd.DataFrame([row(system=gpu, precision=prec or math.nan, gemm_quant_mode=prec or math.nan)])
    res = vs.validate_serving(df, replace(SPEC, calibration=cal), {}, workers=1)
    assert res["status"][0] == sr.SIMULATED, res["status"][0]
    assert res["tier"][0] in (("spec",) if cal == "spec" else ("sibling", "cross-gen")), note
    assert res["predicted_tpot_ms"][0] > 0


# ----------------------------------------------------------------------------- engine fit


def _cases() -> list[sr.ServingCase]:
    shapes = [(256, 32, 4, "trtllm"), (1024, 16, 8, "trtllm"), (512, 64, 16, "trtllm"), (128, 32, 1, "trtllm"),
              (2048, 16, 4, "trtllm"), (512, 24, 32, "trtllm")]
    out = []
    for i, (isl, osl, n, b) in enumerate(shapes):
        m = sr.map_row(row(isl=isl, osl=osl, batch_size=n, silicon_data_source=f"silicon_concurrency={n}",
                           backend=b, backend_version=("1.0.0" if i % 2 else "1.2.0")), i, sr.engine_profiles())
        out.append(m.case)
    return out


#: overlap values large enough to exceed the spec-roofline decode step of Llama-3.1-8B
GRID = (0.0, 0.25, 0.5)


def test_linear_decomposition_matches_direct_simulation():
    case = _cases()[5]   # 32 sequences: 0.5 ms x 32 = 16 ms of CPU work exceeds the decode step
    b = ef.basis_for(case, SPEC, GRID, prefill=True)
    assert b.ttft_base[2] != b.ttft_base[0]          # the overlapped term shows in this run
    p = ef.EngineParams(2.0, 0.04, 0.5, 1.3, 0.0, 15.0, 0.003)
    eng = replace(case.dep.engine, host_overhead_ms=2.0, host_overhead_per_seq_ms=0.04, host_overlap_per_seq_ms=0.5,
                  ttft_per_request_ms=15.0, ttft_per_prompt_token_ms=0.003, eager_step_ms_per_layer=0.0)
    direct = sr.simulate_case(replace(case, dep=replace(case.dep, engine=eng)), SPEC, wrap=ef.corrected(1.3))
    assert b.predict(p) == pytest.approx((direct.ttft_ms, direct.tpot_ms), rel=1e-9)


def _synthetic(truth: ef.EngineParams, opts=SPEC) -> list[ef.Basis]:
    out = []
    for c in _cases():
        b = ef.basis_for(c, opts, GRID)
        t, p = b.predict(truth)
        out.append(replace(b, measured_ttft_ms=t, measured_tpot_ms=p))
    return out


def test_engine_fit_recovers_known_host_terms_in_both_forms():
    bases = _synthetic(ef.EngineParams(2.5, 0.0, 0.5))
    got = ef.fit_params(bases, ef.EngineParams(0.8))
    assert got.host_overhead_ms == pytest.approx(2.5, rel=0.05)
    assert got.host_overlap_per_seq_ms == 0.5 and got.host_overhead_per_seq_ms == 0.0
    assert ef.score(bases, got).tpot_median < 0.01
    lin = _synthetic(ef.EngineParams(2.5, 0.03))
    got = ef.fit_params(lin, ef.EngineParams(0.8, 0.005), form="linear")
    assert got.host_overhead_per_seq_ms == pytest.approx(0.03, rel=0.1) and got.host_overlap_per_seq_ms == 0.0
    fit = ef.fit_engine("trtllm", {0.0: bases}, ef.EngineParams(0.0), seed=0, prefill_scale=False)
    assert fit.scores["after/test"].tpot_median < fit.scores["before/test"].tpot_median
    assert set(fit.ranges) == {"concurrency", "isl", "osl"} and fit.ranges["concurrency"] == [1.0, 32.0]


def test_engine_fit_picks_the_desynchronisation_that_generated_the_data():
    truth = ef.EngineParams(1.0)
    by_j = {j: [ef.basis_for(c, replace(SPEC, osl_jitter=j), GRID) for c in _cases()] for j in (0.0, 0.04)}
    meas = [b.predict(truth) for b in by_j[0.04]]
    by_j = {j: [replace(b, measured_ttft_ms=m[0], measured_tpot_ms=m[1]) for b, m in zip(bs, meas)]
            for j, bs in by_j.items()}
    fit = ef.fit_engine("vllm", by_j, ef.EngineParams(1.5), seed=0, prefill_scale=False)
    assert fit.final.osl_jitter == 0.04
    assert fit.final.host_overhead_ms == pytest.approx(1.0, rel=0.05)


def test_deployment_halves_never_split_a_deployment_across_concurrencies():
    df = pd.DataFrame([row(id=str(k), isl=isl, batch_size=n, silicon_data_source=f"silicon_concurrency={n}")
                       for k, (isl, n) in enumerate((i, n) for i in (128, 256, 512, 1024, 2048, 4096)
                                                    for n in (1, 4, 16))])
    keys = [sr.deployment_key(r) for r in df.to_dict("records")]
    assert len(set(keys)) == 6                      # concurrency is not part of the key
    for seed in range(4):
        by_key: dict[str, set[int]] = {}
        for k in keys:
            by_key.setdefault(k, set()).add(ef.deployment_half(k, seed))
        assert all(len(v) == 1 for v in by_key.values())
    halves = {ef.deployment_half(k, s) for k in set(keys) for s in range(4)}
    assert halves == {0, 1}


@pytest.mark.parametrize("backend,version,family", [
    ("vllm", "0.12.0", "<0.14"), ("vllm", "0.18.0", ">=0.14"), ("sglang", "0.5.1.post1", "<0.5.7"),
    ("sglang", "0.5.9", ">=0.5.7"), ("trtllm", "1.0.0rc3", "<1.2"), ("trtllm", "1.3.0rc1", ">=1.2"),
    ("trtllm", "gpt-oss-dev", "dev"), ("sglang", "glm5-hopper", "dev")])
def test_version_families(backend, version, family):
    assert ef.version_family(backend, version) == family


def test_sglang_runs_prefill_first():
    eng = sr.engine_profiles(ef.SCHEDULER)
    assert not eng["sglang"].chunked_prefill and eng["vllm"].chunked_prefill
    m = sr.map_row(row(backend="sglang", isl=8000, osl=400), 0, eng)
    p = sr.simulate_case(m.case, SPEC)   # the token budget is raised to take the whole prompt
    assert p.status == sr.SIMULATED and p.ttft_ms > 0


def test_engine_profiles_file_round_trip(tmp_path):
    bases = [ef.basis_for(c, SPEC, GRID) for c in _cases()[:4]]
    fit = ef.fit_engine("sglang", {0.0: bases}, ef.EngineParams(0.8), seed=0, prefill_scale=False)
    fit.families["<0.5.7"] = ef.EngineParams(3.0, 0.0, 0.25)
    path = ef.write_profiles(tmp_path / "p.json", {"sglang": fit}, {"data_files": [], "seed": 3})
    over, where = ef.load_engine_overrides(str(path))
    assert where == str(path) and ef.profile_seed(path) == 3
    assert over["sglang"]["host_overhead_ms"] == pytest.approx(fit.final.host_overhead_ms, abs=1e-4)
    assert over["sglang"]["osl_jitter"] == 0.0 and over["sglang"]["chunked_prefill"] is False
    assert ef.overrides_for(over, "sglang", "0.5.1")["host_overhead_ms"] == 3.0        # its family's terms
    assert ef.overrides_for(over, "sglang", "0.5.9")["host_overhead_ms"] == pytest.approx(
        fit.final.host_overhead_ms, abs=1e-4)                                          # no family fit: engine's
    prof = sr.engine_profiles(over)["sglang"]
    assert prof.host_overhead_ms == pytest.approx(fit.final.host_overhead_ms, abs=1e-4)
    assert not prof.chunked_prefill
    half, _ = ef.load_engine_overrides(str(path), holdout=True)
    assert half["sglang"]["host_overhead_ms"] == pytest.approx(fit.holdout.host_overhead_ms, abs=1e-4)
    none, _ = ef.load_engine_overrides("none")
    assert all(v["host_overhead_ms"] == 0.0 and v["host_overlap_per_seq_ms"] == 0.0 for v in none.values())
    with pytest.raises(UserError):
        ef.load_engine_overrides(str(tmp_path / "missing.json"))


def _runs_csv(tmp_path, n_rows=4):
    src = tmp_path / "runs.csv"
    rows = [row(id=str(i), isl=isl, osl=osl, batch_size=n, silicon_data_source=f"silicon_concurrency={n}")
            for i, (isl, osl, n) in enumerate([(256, 32, 4), (512, 16, 8), (128, 24, 2), (1024, 16, 4)][:n_rows])]
    pd.DataFrame(rows).to_csv(src, index=False)
    return src


def test_validate_with_fit_engines_writes_to_the_output_folder_not_the_package(tmp_path):
    src = _runs_csv(tmp_path)
    shipped = ef.SHIPPED.read_bytes() if ef.SHIPPED.is_file() else None
    out = tmp_path / "o" / "pred.csv"
    rc = vs.main(["--measurements", str(src), "--fit-engines", "--out", str(out), "--jitter-grid", "0,0.02",
                  "--calibration", "spec", "--no-progress", "--workers", "1", "--waves", "2"])
    assert rc == 0
    prof = tmp_path / "o" / "engine_profiles.json"
    doc = __import__("json").loads(prof.read_text())
    assert set(doc["engines"]) == {"trtllm"} and doc["engines"]["trtllm"]["rows"] == 4
    assert doc["_provenance"]["rows_in_files"] == 4 and doc["_provenance"]["jitter_grid"] == [0.0, 0.02]
    assert set(doc["bands"]["trtllm"]) == {"ttft", "tpot"}
    assert (ef.SHIPPED.read_bytes() if ef.SHIPPED.is_file() else None) == shipped


def test_rows_outside_the_fitted_range_are_flagged():
    over = {"trtllm": {"fitted_range": {"concurrency": [1.0, 64.0], "isl": [128.0, 8192.0], "osl": [16.0, 8192.0]}}}
    assert vs.outside_fit(row(), over) == ""
    msg = vs.outside_fit(row(batch_size=2048, silicon_data_source="silicon_concurrency=2048"), over)
    assert "concurrency 2048 not in [1, 64]" in msg
    assert vs.outside_fit(row(), {}) == ""


def test_flatness_buckets_and_band_coverage():
    df = pd.DataFrame([row(id=str(k), batch_size=n, silicon_data_source=f"silicon_concurrency={n}")
                       for k, n in enumerate((1, 3, 8, 40))])
    res = vs.validate_serving(df, SPEC, {}, workers=1,
                              bands={"trtllm": {"ttft": {"lo": 1e-3, "hi": 1e3}, "tpot": {"lo": 1.0, "hi": 1.0}}})
    assert [vs.bucket_of(n) for n in (1, 3, 8, 40, 5000)] == ["1", "2-4", "5-16", "17-64", ">4096"]
    fl = vs.flatness(res)
    assert fl["bucket"].tolist() == ["1", "2-4", "5-16", "17-64"] and fl["rows"].tolist() == [1, 1, 1, 1]
    r = res.iloc[0]
    e2e_m = r["silicon_ttft_ms"] + (r["osl"] - 1) * r["silicon_tpot_ms"]
    e2e_p = r["predicted_ttft_ms"] + (r["osl"] - 1) * r["predicted_tpot_ms"]
    assert fl["throughput_ratio"][0] == pytest.approx(e2e_m / e2e_p)
    cov = vs.band_coverage(res)
    assert cov["ttft_coverage"][0] == 1.0 and cov["tpot_coverage"][0] == 0.0   # zero-width band covers nothing


def test_stale_profile_is_noted(tmp_path):
    p = tmp_path / "p.json"
    p.write_text('{"_provenance": {"kernel_calibration_sha256": "0000"}, "engines": {}}')
    assert ef.staleness_note(str(p), "spec") == ""          # roofline: nothing to compare
    cal, _ = sr.resolve_calibration(None)
    if cal != "spec":
        assert "refit" in ef.staleness_note(str(p), None)


def test_holdout_scores_only_the_held_out_deployments(tmp_path):
    src = tmp_path / "runs.csv"
    rows = [row(id=str(i), isl=isl, osl=16, batch_size=n, silicon_data_source=f"silicon_concurrency={n}")
            for i, (isl, n) in enumerate((isl, n) for isl in (128, 256, 512, 1024) for n in (2, 4))]
    pd.DataFrame(rows).to_csv(src, index=False)
    prof, out = tmp_path / "p.json", tmp_path / "pred.csv"
    common = ["--calibration", "spec", "--no-progress", "--workers", "1", "--waves", "2", "--jitter-grid", "0"]
    assert vs.main(["--measurements", str(src), "--fit-engines", "--fit-out", str(prof)] + common) == 0
    assert vs.main(["--measurements", str(src), "--engine-profiles", str(prof), "--holdout", "--out", str(out)]
                   + common) == 0
    df = pd.read_csv(out)
    halves = [ef.deployment_half(sr.deployment_key(r), 0) for r in df.to_dict("records")]
    for h, status in zip(halves, df["status"]):
        assert status.startswith("train") == (h == 0) and (status == sr.SIMULATED) == (h == 1)
    # a deployment's two concurrencies share a half; both halves are used
    assert all(halves[2 * k] == halves[2 * k + 1] for k in range(4)) and set(halves) == {0, 1}
    assert vs.main(["--measurements", str(src), "--engine-profiles", "none", "--holdout"] + common) == 2

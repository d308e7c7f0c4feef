"""Engine host terms at run time: one source (sim/data/engine_profiles.json), the overlapped
form of the step model, and the served-latency bands."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from llmplan.paths import conf_dir
from llmplan.sim import engine_terms
from llmplan.sim.serving_bands import ServedBand, served_band
from llmplan.sim.step_model import AnalyticalStepModel
from llmplan.sim.types import EngineProfile, Parallelism, Precision, StepShape


def _shipped() -> dict:
    return json.loads(engine_terms.PATH.read_text())


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm"])
def test_profile_defaults_come_from_the_fitted_file_only(name):
    fitted = _shipped()["engines"][name]
    e = EngineProfile(name=name)
    for f in engine_terms.FIELDS:
        # a term the file does not hold yet (fitted after it was written) is 0
        assert getattr(e, f) == pytest.approx(fitted.get(f, 0.0))
    # the engine YAML does not restate them (one source of truth)
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir() / "engine" / f"{name}.yaml"))
    assert not set(engine_terms.FIELDS) & set(raw)
    # an explicit value wins
    assert EngineProfile(name=name, host_overhead_ms=7.5).host_overhead_ms == 7.5


def test_unknown_engine_takes_the_mean_of_the_fitted_engines():
    engines = _shipped()["engines"]
    vals, source = engine_terms.fitted_terms("some_new_engine")
    mean = sum(e["host_overhead_ms"] for e in engines.values()) / len(engines)
    assert vals["host_overhead_ms"] == pytest.approx(mean) and "mean" in source


def test_shipped_terms_have_no_unbounded_per_sequence_term():
    """Issue 12: the non-overlapped per-sequence term grows without bound with the batch (0.031 ms x
    4,000 sequences = 124 ms per step); the shipped fit form (overlap) has none."""
    doc = _shipped()
    assert "form overlap," in doc["_provenance"].get("method", "")
    for name, e in doc["engines"].items():
        for terms in [e, *e.get("families", {}).values()]:
            assert terms["host_overhead_per_seq_ms"] == 0.0, name


def _step(engine: EngineProfile) -> AnalyticalStepModel:
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.model_catalog.loader import load_model
    from llmplan.sim.kernels import RooflineKernelModel

    gpu = get_gpu("h100_sxm")
    return AnalyticalStepModel(load_model("llama3_1_8b"), gpu, Parallelism(1), Precision(), engine,
                               RooflineKernelModel(gpu))


def test_overlapped_cpu_work_only_shows_beyond_the_device_step():
    # the eager-step launch (tests/test_eager_steps.py) held at 0: this test is about the overlapped CPU work
    bare = _step(EngineProfile(host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0,
                               eager_step_ms_per_layer=0.0))
    small, big = StepShape.build([], [1000] * 4), StepShape.build([], [1000] * 4096)
    dev_small, dev_big = bare.step_time_ms(small), bare.step_time_ms(big)
    e = EngineProfile(host_overhead_ms=0.5, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.05,
                      eager_step_ms_per_layer=0.0)
    s = _step(e)
    # 4 x 0.05 ms of CPU work hides behind the device step: only the non-overlapped 0.5 ms adds
    assert s.step_time_ms(small) == pytest.approx(dev_small + 0.5)
    # at 4,096 sequences the step is the longer of the two, never their sum
    assert s.step_time_ms(big) == pytest.approx(max(dev_big, 0.05 * 4096) + 0.5)
    host = [o for o in s.breakdown(big).ops if o.family == "host"][0]
    assert host.latency_ms == pytest.approx(s.step_time_ms(big) - dev_big)
    # the linear form adds per sequence whatever the device does
    lin = _step(replace(e, host_overhead_per_seq_ms=0.05, host_overlap_per_seq_ms=0.0))
    assert lin.step_time_ms(big) == pytest.approx(dev_big + 0.5 + 0.05 * 4096)


def test_served_band_reads_the_shipped_bands():
    bands = _shipped().get("bands", {})
    for name in ("vllm", "sglang", "trtllm"):
        for metric in ("ttft", "tpot"):
            b = served_band(name, metric)
            if name not in bands:
                assert b is None
                continue
            assert isinstance(b, ServedBand) and 0 < b.lo <= 1.0 <= b.hi
            assert b.apply(100.0) == pytest.approx((100.0 * b.lo, 100.0 * b.hi))
    assert served_band("no_such_engine", "ttft") is None
    with pytest.raises(ValueError):
        served_band("vllm", "e2e")


def test_band_from_one_fold_covers_about_ninety_percent_of_the_other():
    import numpy as np

    from llmplan.calibration.serving_bands import covered, engine_bands, interval

    rng = np.random.default_rng(0)
    a = {"ttft": rng.normal(0.1, 0.2, 4000), "tpot": rng.normal(0.0, 0.05, 4000)}
    b = {"ttft": rng.normal(0.1, 0.2, 4000), "tpot": rng.normal(0.0, 0.05, 4000)}
    bands = engine_bands(a, b)
    assert 0.88 <= bands["ttft"]["cross_fold_coverage"] <= 0.92 and bands["ttft"]["rows"] == 8000
    lo, hi = bands["ttft"]["lo"], bands["ttft"]["hi"]
    assert lo == pytest.approx(np.exp(0.1 - 1.645 * 0.2), rel=0.03) and hi == pytest.approx(np.exp(0.1 + 1.645 * 0.2), rel=0.03)
    assert bands["ttft"]["level"] == 0.9         # same spread in both folds: no widening
    lo, hi = interval(a["tpot"])
    assert covered(a["tpot"], lo, hi).mean() == pytest.approx(0.9, abs=0.002)


def test_band_is_widened_until_held_out_coverage_reaches_85_percent():
    import numpy as np

    from llmplan.calibration.serving_bands import TARGET_LOW, engine_bands

    rng = np.random.default_rng(1)
    # the two folds differ in spread (different deployments): a 90% interval of one covers too little
    a = {"ttft": rng.normal(0.0, 0.10, 3000), "tpot": rng.normal(0.0, 0.1, 3000)}
    b = {"ttft": rng.normal(0.0, 0.16, 3000), "tpot": rng.normal(0.0, 0.1, 3000)}
    bands = engine_bands(a, b)
    assert bands["ttft"]["level"] > 0.9 and bands["ttft"]["cross_fold_coverage"] >= TARGET_LOW
    assert bands["tpot"]["level"] == 0.9          # same spread: the 90% interval is right


def test_served_bands_apply_to_a_simulated_mean_and_never_invent_one():
    from llmplan.sim.serving_bands import served_band, served_bands

    b = served_band("vllm", "ttft")
    assert b is not None and b.lo < 1.0 < b.hi and 0.85 <= b.coverage <= 0.95
    out = served_bands("vllm", {"ttft_ms": {"mean": 100.0}, "tpot_ms": {"mean": 20.0}})
    assert out["ttft"]["mean_ms_low"] == pytest.approx(100.0 * b.lo, abs=1e-3)
    assert out["ttft"]["mean_ms_high"] == pytest.approx(100.0 * b.hi, abs=1e-3)
    assert served_bands("no_such_engine", {"ttft_ms": {"mean": 1.0}}) == {"ttft": None, "tpot": None}
    assert served_bands("vllm", None)["tpot"]["mean_ms_low"] is None


def test_band_is_narrowed_when_held_out_coverage_exceeds_95_percent():
    import numpy as np

    from llmplan.calibration.serving_bands import TARGET_HIGH, cross_fold_coverage, engine_bands

    rng = np.random.default_rng(2)
    # most residuals tie at zero (exact predictions): a 90% interval covers about 97% of the other fold
    a = {"ttft": np.concatenate([np.zeros(2900), rng.normal(0.0, 1.0, 100)]), "tpot": rng.normal(0.0, 0.1, 3000)}
    b = {"ttft": np.concatenate([np.zeros(2900), rng.normal(0.0, 1.0, 100)]), "tpot": rng.normal(0.0, 0.1, 3000)}
    assert cross_fold_coverage(a["ttft"], b["ttft"], 0.9) > TARGET_HIGH
    got = engine_bands(a, b)
    assert got["ttft"]["level"] < 0.9              # narrowed
    assert got["tpot"]["level"] == 0.9             # continuous, same spread: untouched


@pytest.mark.parametrize("name", ["vllm", "sglang", "trtllm"])
def test_shipped_step_stays_physical_from_1_to_4096_sequences(name):
    """Issue 12: with each engine's shipped terms a decode step at 1 ... 4,096 sequences is finite,
    grows with the batch, never costs more per sequence as the batch grows (batching amortises the
    weight reads; no host term adds per sequence), and its host part is at most the per-step
    constant plus the overlapped CPU work that exceeds the device step. A batch above the engine's
    largest CUDA graph runs eagerly (sim/cuda_graphs.eager_step): that adds the eager launch, a
    constant per step of at most ``eager_step_ms_per_layer`` x layers (never per sequence), checked
    apart from the rest."""
    e = EngineProfile(name=name)
    s = _step(e)
    bare = _step(replace(e, host_overhead_ms=0.0, host_overhead_per_seq_ms=0.0, host_overlap_per_seq_ms=0.0,
                         eager_step_ms_per_layer=0.0))
    prev_step, prev_per_seq = 0.0, float("inf")
    for k in range(13):
        n = 2 ** k
        shape = StepShape.build([], [2048] * n)
        eager = e.eager_step_ms_per_layer * s.eager_layers(shape)
        assert 0.0 <= eager <= e.eager_step_ms_per_layer * s.model.num_layers + 1e-9, (name, n)
        total = s.step_time_ms(shape)
        step, dev = total - eager, bare.step_time_ms(shape)
        assert 0.0 < total < 1e5, (name, n, total)
        assert step >= prev_step, (name, n)
        assert step / n <= prev_per_seq * (1 + 1e-9), (name, n)
        host = step - dev
        assert host >= e.host_overhead_ms - 1e-9
        assert host <= e.host_overhead_ms + max(0.0, e.host_overlap_per_seq_ms * n - dev) + 1e-9, (name, n)
        prev_step, prev_per_seq = step, step / n

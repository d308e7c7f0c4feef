"""Workload specs: presets, length distributions, arrival processes, validation, OmegaConf."""

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from llmplan.errors import UserError
from llmplan.sim.workload import (LengthSpec, WorkloadSpec, arrival_times_ms, generate_workload, presets, resolve_lengths,
                          sample_lengths)


def test_spec_is_an_omegaconf_structured_config():
    cfg = OmegaConf.structured(WorkloadSpec)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(["arrival=gamma", "cv=2.5", "input_tokens.mean_tokens=300"]))
    spec = OmegaConf.to_object(cfg)
    assert isinstance(spec, WorkloadSpec) and isinstance(spec.input_tokens, LengthSpec)
    assert spec.cv == 2.5 and spec.input_tokens.mean_tokens == 300
    with pytest.raises(Exception):
        OmegaConf.merge(cfg, OmegaConf.from_dotlist(["rate_rps=fast"]))


def test_presets_have_sources_and_explicit_fields_override_them():
    table = presets()
    assert set(table) == {"chat", "summarization", "code"}
    assert all(v["sources"] for v in table.values())
    ls_in, ls_out = resolve_lengths(WorkloadSpec(preset="code", input_tokens=LengthSpec(mean_tokens=999)))
    assert ls_in.kind == "lognormal" and ls_in.mean_tokens == 999 and ls_in.cv == table["code"]["input_tokens"]["cv"]
    assert ls_out.mean_tokens == table["code"]["output_tokens"]["mean_tokens"]
    with pytest.raises(UserError, match="preset"):
        resolve_lengths(WorkloadSpec(preset="chatt"))


@pytest.mark.parametrize("ls, mean, lo, hi", [
    (LengthSpec(kind="fixed", mean_tokens=100), 100, 100, 100),
    (LengthSpec(kind="uniform", min_tokens=10, max_tokens=30), 20, 10, 30),
    (LengthSpec(kind="lognormal", mean_tokens=500, cv=0.5), 500, 1, None),
])
def test_length_distributions(ls, mean, lo, hi):
    x = sample_lengths(ls, 40000, np.random.default_rng(0))
    assert x.dtype == np.int64 and x.min() >= lo and (hi is None or x.max() <= hi)
    assert abs(x.mean() - mean) / mean < 0.02
    if ls.kind == "lognormal":
        assert abs(x.std() / x.mean() - 0.5) < 0.03


def test_lognormal_is_clipped_and_empirical_reads_a_file(tmp_path):
    x = sample_lengths(LengthSpec(kind="lognormal", mean_tokens=500, cv=2.0, min_tokens=50, max_tokens=900),
                       5000, np.random.default_rng(1))
    assert x.min() == 50 and x.max() == 900
    f = tmp_path / "lengths.csv"
    f.write_text("tokens\n7\n7\n300\n")
    y = sample_lengths(LengthSpec(kind="empirical", path=str(f)), 3000, np.random.default_rng(2))
    assert set(np.unique(y)) == {7, 300} and 0.6 < (y == 7).mean() < 0.73
    g = tmp_path / "bare.txt"
    g.write_text("11\n12\n")
    assert set(np.unique(sample_lengths(LengthSpec(kind="empirical", path=str(g)), 100,
                                        np.random.default_rng(0)))) == {11, 12}
    with pytest.raises(UserError, match="column 'tokns'"):
        sample_lengths(LengthSpec(kind="empirical", path=str(f), column="tokns"), 10, np.random.default_rng(0))


def test_poisson_and_gamma_arrivals_have_the_asked_rate_and_cv():
    rng = np.random.default_rng(0)
    t = arrival_times_ms("poisson", 50001, 20.0, 1.0, rng)
    gaps = np.diff(t)
    assert t[0] == 0 and abs(gaps.mean() - 50.0) < 1.0 and abs(gaps.std() / gaps.mean() - 1) < 0.03
    g = np.diff(arrival_times_ms("gamma", 50001, 20.0, 3.0, rng))
    assert abs(g.mean() - 50.0) < 2.5 and abs(g.std() / g.mean() - 3.0) < 0.15


def test_rates_share_random_draws():
    a = generate_workload(WorkloadSpec(rate_rps=5.0, num_requests=50), np.random.default_rng(7))
    b = generate_workload(WorkloadSpec(rate_rps=10.0, num_requests=50), np.random.default_rng(7))
    assert [r.input_tokens for r in a.requests] == [r.input_tokens for r in b.requests]
    assert all(math.isclose(x.arrival_ms, 2 * y.arrival_ms) for x, y in zip(a.requests, b.requests))


def test_shared_prefix_hash_ids():
    wl = generate_workload(WorkloadSpec(rate_rps=1.0, num_requests=200, shared_prefix_tokens=640,
                                        num_shared_prefixes=3, prefix_block_tokens=64), np.random.default_rng(0))
    assert wl.prefix_block_tokens == 64
    firsts = {r.hash_ids[0] for r in wl.requests if r.hash_ids}
    assert len(firsts) == 3
    for r in wl.requests:
        assert len(r.hash_ids) == min(640, r.input_tokens - 1) // 64


def test_closed_loop_workload():
    wl = generate_workload(WorkloadSpec(arrival="closed_loop", concurrency=4, num_requests=10),
                           np.random.default_rng(0))
    assert wl.closed_loop_concurrency == 4 and len(wl.requests) == 10 and wl.horizon_ms == 0


@pytest.mark.parametrize("spec, key", [
    (WorkloadSpec(rate_rps=-1.0), "workload.rate_rps"),
    (WorkloadSpec(rate_rps=0.0), "workload.rate_rps"),
    (WorkloadSpec(arrival="closed_loop", concurrency=0), "workload.concurrency"),
    (WorkloadSpec(arrival="posson", rate_rps=1.0), "workload.arrival"),
    (WorkloadSpec(arrival="trace"), "workload.trace_path"),
    (WorkloadSpec(preset=None, rate_rps=1.0), "workload.input_tokens.kind"),
    (WorkloadSpec(rate_rps=1.0, input_tokens=LengthSpec(min_tokens=0)), "workload.input_tokens.min_tokens"),
    (WorkloadSpec(rate_rps=1.0, num_requests=0), "workload.num_requests"),
    (WorkloadSpec(rate_rps=1.0, cv=0.0), "workload.cv"),
])
def test_bad_specs_name_the_field(spec, key):
    with pytest.raises(UserError) as e:
        generate_workload(spec, np.random.default_rng(0))
    assert e.value.key == key
    assert "did you mean posson" not in e.value.render()


def test_unknown_arrival_suggests_a_name():
    with pytest.raises(UserError) as e:
        generate_workload(WorkloadSpec(arrival="posson", rate_rps=1.0), np.random.default_rng(0))
    assert "poisson" in e.value.render()

"""A disaggregated split whose simulation misses a target grows the pool that misses it
(optimizer/disagg_candidates.verify_and_grow), within GPU availability."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.test_disagg_candidates import screened_option


@pytest.fixture(scope="module")
def option():
    model, wl, slos, opt = screened_option(4.0, 4000.0, 100.0, 2500.0, 40.0)
    assert opt is not None and opt.prefill.workers >= 1
    return model, wl, slos, opt


def _fresh(opt):
    """A copy whose worker counts and notes can change (the fixture's option stays as sized)."""
    return replace(opt, prefill=replace(opt.prefill), decode=replace(opt.decode), notes=[], simulated=None)


def test_a_missed_ttft_grows_the_prefill_pool(option):
    from llmplan.optimizer.disagg_candidates import verify_and_grow
    from llmplan.sim.types import EngineProfile

    model, wl, slos, opt = option
    opt = _fresh(opt)
    p0, d0 = opt.prefill.workers, opt.decode.workers
    heavy = replace(wl, rate_rps=wl.rate_rps * 4.0)       # the same split at 4x the rate it was sized for
    verify_and_grow(opt, model, EngineProfile(name="vllm"), heavy, slos, "spec", 200)
    sim = opt.simulated
    assert opt.prefill.workers > p0                     # TTFT (the prefill queue) was missed first
    assert any("missed a target in simulation; grown to" in n for n in opt.notes)
    ttft = sim["targets"]["ttft_p90"]
    assert sim["slo_met"] == (ttft["simulated_ms"] <= ttft["limit_ms"]
                              and sim["targets"]["tpot_p90"]["simulated_ms"] <= 40.0 and not sim["overloaded"])
    assert opt.decode.workers >= d0


def test_no_growth_beyond_the_gpus_available(option):
    from llmplan.optimizer.disagg_candidates import verify_and_grow
    from llmplan.sim.types import EngineProfile

    model, wl, slos, opt = option
    opt = _fresh(opt)
    p0, d0 = opt.prefill.workers, opt.decode.workers
    cap = {"h100_sxm": opt.gpus}                          # every GPU already in use
    verify_and_grow(opt, model, EngineProfile(name="vllm"), replace(wl, rate_rps=wl.rate_rps * 4.0), slos, "spec",
                    200, cap)
    assert (opt.prefill.workers, opt.decode.workers) == (p0, d0)
    assert opt.simulated is not None and not opt.simulated["slo_met"] and not opt.notes   # missed, not grown

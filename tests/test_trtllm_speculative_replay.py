"""The MTP rows of InferenceX's bf3456727 sweep (calibration/trtllm_speculative.py) are replayed with
the simulator's speculative decoding (sim/spec_decode.py) at the launch script's k and the simulator's
documented default MTP acceptance; every other row, and the engine fit's probes, replay as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmplan.calibration import serving_rows as sr
from llmplan.calibration.trtllm_speculative import SPECULATIVE, acceptance_note, mtp_replay, replay_config
from llmplan.sim.spec_decode import SpecDecodeCost
from llmplan.sim.speculative import DEFAULT_ACCEPTANCE, SpecConfig, SpeculativeStepModel, default_acceptance
from tests.test_trtllm_speculative import DSR1_MTP

DP_ROW = {**DSR1_MTP, "tp_size": 1.0, "attention_dp_size": 8.0, "batch_size": 1.0}   # the script's MTP=1 launch


def _case(row):
    m = sr.map_row(row, 0, sr.engine_profiles())
    assert m.case is not None, m.status
    return m.case


def _opts():
    return sr.SimOptions(calibration=sr.resolve_calibration(None)[0], waves=2, min_requests=8)


def test_the_case_carries_the_scripts_mtp_k_and_other_rows_none():
    assert _case(DSR1_MTP).speculative_mtp_k == 3
    assert _case(DP_ROW).speculative_mtp_k == 1
    later = {**DSR1_MTP, "silicon_data_source": "measured=2026-01-28T06:18:44Z"}   # plain sweep of 2026-01-28
    assert _case(later).speculative_mtp_k == 0
    assert _case({**DSR1_MTP, "model_path": "deepseek-ai/DeepSeek-V3"}).speculative_mtp_k == 0


def test_replay_uses_the_documented_default_acceptance_not_a_fit():
    assert replay_config(3) == {"method": "mtp", "k": 3}       # no acceptance given: the method's default
    alpha, source = DEFAULT_ACCEPTANCE["mtp"]
    assert alpha == 0.85 and "arXiv:2412.19437" in source
    note = acceptance_note(3)
    assert "k=3" in note and "0.85" in note and "3.19" in note and "arXiv:2412.19437" in note
    assert "replayed with" in SPECULATIVE and "not fitted" in SPECULATIVE


def test_mtp_rows_replay_with_speculation_and_run_faster():
    c = replace(_case(DSR1_MTP), isl=1024, osl=64, concurrency=4)
    on = sr.simulate_case(c, _opts())
    off = sr.simulate_case(replace(c, speculative_mtp_k=0), _opts())
    assert on.status == off.status == sr.SIMULATED
    # E[L] = 1 + 0.85 + 0.85^2 + 0.85^3 = 3.19 tokens per verify step; the verify and draft cost more
    # than a decode step, so the speed-up is below E[L] (1.76 here)
    assert on.tpot_ms == pytest.approx(8.0506, rel=1e-3)
    assert off.tpot_ms == pytest.approx(14.1389, rel=1e-3)
    assert 1.0 < off.tpot_ms / on.tpot_ms < default_acceptance("mtp").expected_tokens(3)
    assert on.ttft_ms > off.ttft_ms   # the MTP layer also runs over the prompt


def test_the_engine_fits_probes_are_not_wrapped():
    c = replace(_case(DSR1_MTP), isl=256, osl=16, concurrency=2)
    seen = []

    def wrap(step):
        seen.append(step)
        return step

    wrapped = sr.simulate_case(c, _opts(), wrap=wrap)
    plain = sr.simulate_case(replace(c, speculative_mtp_k=0), _opts())
    assert not isinstance(seen[0], SpecDecodeCost)
    assert wrapped.tpot_ms == pytest.approx(plain.tpot_ms, rel=1e-12)


def test_mtp_replay_gives_a_speculative_replica_with_less_kv():
    c = _case(DSR1_MTP)
    step = sr.step_model(c, sr.resolve_calibration(None)[0])
    cost, kv = mtp_replay(step, c, 100_000, 0)
    assert isinstance(cost, SpecDecodeCost) and cost.cfg.k == 3
    assert 0 < kv < 100_000   # the MTP layer's weights and KV, and step space (fewer positions per token)
    assert cost.spec.draft_weight_bytes_per_gpu() == pytest.approx(1.452e9, rel=1e-3)   # one fp8 MoE layer / 8


def test_attention_dp_mtp_draft_runs_on_the_targets_mapping():
    # sim/speculative.py: with attention DP the MTP layer keeps the target's DP ranks and EP group
    c = _case(DP_ROW)
    assert c.dep.par.dp == 8 and c.dep.par.ep == 8 and c.dep.par.tp == 1
    step = sr.step_model(c, sr.resolve_calibration(None)[0])
    spec = SpeculativeStepModel(step, SpecConfig("mtp", 1, default_acceptance("mtp")))
    assert (spec.draft_par.tp, spec.draft_par.dp, spec.draft_par.ep) == (1, 8, 8)
    plain = SpeculativeStepModel(_step_tp8(), SpecConfig("mtp", 3, default_acceptance("mtp")))
    assert (plain.draft_par.tp, plain.draft_par.dp, plain.draft_par.ep) == (8, 1, 8)   # unchanged without DP


def _step_tp8():
    return sr.step_model(_case(DSR1_MTP), sr.resolve_calibration(None)[0])

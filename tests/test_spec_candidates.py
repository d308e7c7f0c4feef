"""Speculation in the planner's search (optimizer/spec_candidates.py): which models search it,
the twins the screen sees, the k each twin gets, the KV the draft takes, plan.json's block."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmplan.errors import UserError
from llmplan.hardware_catalog.loader import get_gpu
from llmplan.model_catalog import load_model
from llmplan.optimizer.enumerate import enumerate_candidates
from llmplan.optimizer.planner import evaluate_candidates
from llmplan.optimizer.spec_candidates import SpecCandidate, annotate, expand, search_setting
from llmplan.optimizer.types import SLOTarget, WorkloadStats
from llmplan.sim.types import EngineProfile

H100 = get_gpu("h100_sxm")
WL = WorkloadStats(rate_rps=2.0, mean_input_tokens=1000, mean_output_tokens=250, max_request_tokens=4096)


def test_who_searches_speculation():
    assert search_setting(load_model("llama3_1_8b"), {"method": "none"}) is None      # no MTP, nothing configured
    mtp = search_setting(load_model("deepseek_v3"), {"method": "none", "k_max": 3})
    assert mtp.method == "mtp" and mtp.k_max == 3 and mtp.k_fixed is None              # MTP modules in config.json
    e = search_setting(load_model("llama3_1_8b"), {"method": "eagle3", "k": 2})
    assert e.method == "eagle3" and e.k_fixed == 2
    with pytest.raises(UserError) as exc:
        search_setting(load_model("llama3_1_8b"), {"method": "eagle3", "k_max": 0})
    assert exc.value.key == "speculative.k_max"
    with pytest.raises(UserError) as exc:
        search_setting(load_model("llama2_13b"), {"method": "draft_model", "draft_model": "llama2_70b"})
    assert exc.value.key == "speculative.draft_model"


def test_twins_and_their_screen():
    model = load_model("llama3_1_8b")
    search = search_setting(model, {"method": "eagle3", "acceptance": 0.8, "k_max": 5})
    cands, _ = enumerate_candidates(model, [(H100, 3.0)], [1], [1, 2], [1], ["bf16"], [8, 256])
    twins = expand(cands, search)
    assert len(twins) == len(cands) + sum(c.par.pp == 1 for c in cands)   # no twin with pipeline stages
    slos = [SLOTarget("ttft", 90, 2000.0), SLOTarget("tpot", 90, 6.0)]
    evs = {e.candidate.name: e for e in evaluate_candidates(model, twins, EngineProfile(name="vllm"), WL, slos, "spec",
                                                            speculative=search)}
    small = [e for e in evs.values() if isinstance(e.candidate, SpecCandidate) and e.candidate.max_num_seqs == 8][0]
    big = [e for e in evs.values() if isinstance(e.candidate, SpecCandidate) and e.candidate.max_num_seqs == 256][0]
    plain_small = evs["h100_sxm-tp1-pp1-bf16-b8"]
    # k is chosen per shape: long at small batch (weights dominate), never longer at large batch
    assert small.candidate.spec.k >= big.candidate.spec.k >= 1
    # the draft's weights and KV come out of the cache
    assert small.kv_capacity_tokens < plain_small.kv_capacity_tokens
    # at a TPOT target plain decode of an 8B on one H100 cannot meet, speculation can
    assert plain_small.capacity_rps == 0 and small.capacity_rps > 0


def test_each_deployment_states_its_setting():
    model = load_model("llama3_1_8b")
    search = search_setting(model, {"method": "eagle3", "k": 3})
    cands, _ = enumerate_candidates(model, [(H100, 3.0)], [1], [1], [1], ["bf16"], [64])
    plain, twin = expand(cands, search)
    evs = [SimpleNamespace(candidate=c) for c in (plain, twin)]
    annotate(SimpleNamespace(evaluations=evs))
    assert evs[0].speculation is None
    s = evs[1].speculation
    assert s["method"] == "eagle3" and s["k"] == 3 and s["verify_tokens"] == 4 and s["draft_model"] is None
    assert twin.name.endswith("-eagle3-k3") and s["tokens_per_step"] == pytest.approx(2.734375, abs=1e-4)

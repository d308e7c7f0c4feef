"""Section files read one (engine, family) at a time give the models a whole-file parse gives."""

from __future__ import annotations

import json

import pytest

from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH, Calibration
from llmplan.sim.kernel_calibration.family_model import FamilyModel
from llmplan.sim.kernel_calibration.section_lazy import LazyObject, lazy_section, section_spans
from llmplan.sim.kernel_calibration.tiers import choose_tier
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

SECTIONS = sorted(DEFAULT_PATH.parent.glob(DEFAULT_PATH.stem + ".*.json"))


def test_shipped_sections_exist():
    assert len(SECTIONS) >= 5


@pytest.mark.parametrize("path", SECTIONS[:3], ids=lambda p: p.name)
def test_lazy_section_equals_whole_parse(path):
    text = path.read_text(encoding="utf-8")
    whole = json.loads(text)
    raw = lazy_section(text, lambda fam, d: d)
    assert raw is not None and list(raw) == list(whole)
    for backend, fams in whole.items():
        assert list(raw[backend]) == list(fams)
        for fam, d in fams.items():
            assert raw[backend][fam] == d          # floats equal: the same characters parsed
    models = lazy_section(text, FamilyModel.from_dict)
    b = next(iter(whole))
    fam = next(iter(whole[b]))
    assert models[b][fam].to_dict() == FamilyModel.from_dict(fam, whole[b][fam]).to_dict()


def test_only_asked_families_are_parsed():
    text = SECTIONS[0].read_text(encoding="utf-8")
    sec = lazy_section(text, lambda fam, d: d)
    assert isinstance(sec, LazyObject) and sec.parsed() == []
    b = list(sec)[-1]
    fams = sec[b]
    assert sec.parsed() == [b] and fams.parsed() == []
    f = list(fams)[0]
    fams[f]
    assert fams.parsed() == [f]


@pytest.mark.parametrize("text", [
    '{"vllm":{"gemm":{"a":"x{y"}}}',          # a brace inside a string
    '{"vllm":{"gemm":{"a":"x\\"y"}}}',        # an escaped quote
    '{"vllm":{"gemm":[1,2]}}',                # a family that is not an object
    '{"vllm":{"gemm":{}},"sglang":3}',        # an engine that is not an object
    '{"vllm":{"gemm":{}}',                    # unbalanced
    '[{"vllm":{}}]',
])
def test_text_that_cannot_be_split_is_refused(text):
    assert section_spans(text) is None


def test_split_spans_and_empty_objects():
    text = '{"a":{},"b":{"f":{"x":1},"g":{"y":{"z":[2.5]}}}}\n'
    spans = section_spans(text)
    assert spans["a"] == [] and [k for k, _, _ in spans["b"]] == ["f", "g"]
    assert [text[a:b] for _, a, b in spans["b"]] == ['{"x":1}', '{"y":{"z":[2.5]}}']
    sec = lazy_section(text, lambda fam, d: d)
    assert dict(sec["b"]) == json.loads(text)["b"] and dict(sec["a"]) == {}


def test_tier_candidates_read_only_the_engines_they_reach():
    # a fresh read (load_calibration's cached one may have been used by other tests)
    cal = Calibration.loads(DEFAULT_PATH.read_text(encoding="utf-8"), str(DEFAULT_PATH), DEFAULT_PATH.parent)
    gpu = cal.gpus["h100_sxm"]
    choice = choose_tier(cal, GPUFeatures.from_dict(gpu.to_dict()), vendor="nvidia")
    first = next(choice.candidates("gemm", "vllm"))
    assert first.backend == "vllm" and first.model.family == "gemm"
    sec = cal.measured["h100_sxm"]
    assert isinstance(sec, LazyObject) and sec.parsed() == ["vllm"]
    # every engine's candidate, in the order the whole list gave
    names = [c.backend for c in choice.candidates("gemm", "vllm", prefer="trtllm")]
    own = [c.backend for c in choice.own("gemm", "vllm")]
    assert own[0] == "vllm" and sorted(own) == sorted(cal.backends("h100_sxm"))
    assert names[:len(own)] == sorted(own, key=lambda b: {"vllm": 0, "trtllm": 1}.get(b, 2))

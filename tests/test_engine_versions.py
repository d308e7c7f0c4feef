"""One parser for engine release numbers (calibration.engine_versions) and the rules built on it."""

import pytest

from llmplan.calibration import engine_fit as ef
from llmplan.calibration.engine_versions import at_least, release


@pytest.mark.parametrize("text,expected", [
    ("0.5.6.post2", (0, 5, 6)), ("1.0.0rc3", (1, 0, 0)), ("1.2.0rc6.post1", (1, 2, 0)),
    ("0.18", (0, 18, 0)), ("v0.12.0", (0, 12, 0)), (" 0.5.9", (0, 5, 9)),
    ("gpt-oss-dev", None), ("glm5-hopper", None), ("", None), (None, None), ("nan", None), ("7", None),
])
def test_release(text, expected):
    assert release(text) == expected


def test_at_least_pads_and_refuses_builds_it_cannot_date():
    assert at_least("0.18.0", (0, 18)) and at_least("0.19.1", (0, 18)) and not at_least("0.17.9", (0, 18))
    assert at_least("0.5.7", (0, 5, 7)) and not at_least("0.5.6.post2", (0, 5, 7))
    assert not at_least("gpt-oss-dev", (0, 0)) and not at_least(None, (0, 0))


def test_every_measured_version_keeps_its_family():
    # the families the shipped engine terms were fitted with (sim/data/engine_profiles.json)
    cases = {("vllm", "0.11.2"): "<0.14", ("vllm", "0.12.0"): "<0.14", ("vllm", "0.16.0"): ">=0.14",
             ("vllm", "0.18.0"): ">=0.14", ("sglang", "0.5.1.post1"): "<0.5.7",
             ("sglang", "0.5.6.post2"): "<0.5.7", ("sglang", "0.5.8.post1"): ">=0.5.7",
             ("sglang", "0.5.9"): ">=0.5.7", ("trtllm", "1.0.0rc3"): "<1.2",
             ("trtllm", "1.1.0rc2.post2"): "<1.2", ("trtllm", "1.2.0rc6.post1"): ">=1.2",
             ("trtllm", "1.3.0rc1"): ">=1.2", ("vllm", "gpt-oss-dev"): "dev", ("sglang", "glm5-hopper"): "dev",
             ("trtllm", ""): "dev"}
    for (backend, version), family in cases.items():
        assert ef.version_family(backend, version) == family, (backend, version)

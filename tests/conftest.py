"""Shared fixtures: compose configs the way the CLI does."""

import pytest

from llmplan.cli.hydra_app import compose


@pytest.fixture
def cfg():
    def _compose(*overrides, name="plan"):
        return compose(name, list(overrides))
    return _compose

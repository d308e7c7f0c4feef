"""Where packaged data lives, for a wheel install and for a source/editable checkout."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """The Hydra config directory: ``llmplan/conf`` in a wheel (pyproject maps the
    repository's ``conf/`` there), ``conf/`` beside the package in a checkout."""
    for path in (_HERE / "conf", _HERE.parent / "conf"):
        if (path / "plan.yaml").is_file():
            return path
    raise RuntimeError(f"llmplan config directory not found (looked in {_HERE / 'conf'} and {_HERE.parent / 'conf'})")

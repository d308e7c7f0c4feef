"""Where packaged data lives, for a wheel install and for a source/editable checkout."""

from __future__ import annotations

from pathlib import Path


def conf_dir() -> Path:
    """The Hydra config directory (``conf/`` in a checkout, ``llmplan/conf`` in a wheel)."""
    try:
        import importlib.resources as resources

        path = Path(str(resources.files("llmplan.conf")))
        if (path / "plan.yaml").is_file():
            return path
    except ModuleNotFoundError:
        pass
    path = Path(__file__).resolve().parent.parent / "conf"
    if not (path / "plan.yaml").is_file():
        raise RuntimeError(f"llmplan config directory not found (looked in {path})")
    return path

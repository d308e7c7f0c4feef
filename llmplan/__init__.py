"""llmplan: the cheapest GPU deployment that meets LLM serving latency targets.

One installed namespace. In a wheel the sub-packages (``llmplan.sim``, ``llmplan.optimizer``,
``llmplan.calibration``, ``llmplan.hardware_catalog``, ``llmplan.model_catalog``,
``llmplan.conf``) sit inside this package; in a source checkout they live at the repository
root (the layout the project asks for), so the root is appended to this package's search
path when, and only when, it is a checkout of this project.
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

_ROOT = _Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "sim" / "__init__.py").is_file() \
        and not (_Path(__file__).resolve().parent / "sim").is_dir():
    __path__.append(str(_ROOT))  # noqa: F821 - the package's own search path

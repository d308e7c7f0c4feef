"""Which Hugging Face configs in a folder the catalog can model, and why not where it cannot.

``survey(folder)`` walks every ``*.json`` config (``*.hf_quant_config.json`` sidecars are
read with their config, not listed) and reports, per file, the architecture family and
shipped weight format, or the reason the config is refused (the feature ``ModelSpec``
cannot describe, or a bad field). ``llmplan catalog models`` lists the catalog's own
configs that have no preset this way; ``--configs DIR`` surveys any folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmplan.errors import CatalogError
from llmplan.model_catalog.loader import CONFIG_DIR, load_model_file, load_presets


@dataclass(frozen=True)
class ConfigStatus:
    file: str                     # file name
    hf_id: str                    # from the org--name file name
    family: str | None            # ModelSpec.family when the config loads
    weights: str | None           # shipped weight format (e.g. "nvfp4", "bf16")
    reason: str | None            # why it does not load


def _hf_id(path: Path) -> str:
    stem = path.name[:-5] if path.name.endswith(".json") else path.name
    return stem.replace("--", "/", 1)


def survey(folder: str | Path) -> list[ConfigStatus]:
    """Status of every config in ``folder`` (sorted by file name)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CatalogError(f"not a folder: {folder}", key="configs", fix="give a folder of config.json files")
    out = []
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(".hf_quant_config.json"):
            continue
        try:
            spec = load_model_file(path)
        except CatalogError as exc:
            reason = str(exc.args[0] if exc.args else exc)
            reason = reason.split(": ", 1)[1] if reason.startswith(str(path)) else reason
            out.append(ConfigStatus(path.name, _hf_id(path), None, None, reason))
            continue
        weights = spec.quant.main.name if spec.quant is not None else spec.native_dtype
        out.append(ConfigStatus(path.name, _hf_id(path), spec.family, weights, None))
    return out


def configs_without_preset() -> list[ConfigStatus]:
    """The catalog's own configs that no preset uses (kept because they are refused)."""
    used = {p.config for p in load_presets().values()}
    return [s for s in survey(CONFIG_DIR) if s.file not in used]

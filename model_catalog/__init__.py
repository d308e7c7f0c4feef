"""Model catalog: Hugging Face config.json presets and derived quantities."""

from model_catalog.spec import MLASpec, ModelSpec, MoESpec

__all__ = ["ModelSpec", "MoESpec", "MLASpec"]

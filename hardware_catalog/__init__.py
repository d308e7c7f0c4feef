"""GPU catalog: specifications and prices, each figure with its source."""

from hardware_catalog.spec import GPUSpec

__all__ = ["GPUSpec"]

"""GPU catalog: specifications and prices, each figure with its source."""

from llmplan.hardware_catalog.loader import (
    DEFAULT_PATH,
    FIGURE_FIELDS,
    get_gpu,
    gpu_notes,
    gpu_table_rows,
    list_gpus,
    load_catalog,
    missing_sources,
    normalize_name,
)
from llmplan.hardware_catalog.spec import DTYPES, GPUSpec

__all__ = [
    "DEFAULT_PATH",
    "DTYPES",
    "FIGURE_FIELDS",
    "GPUSpec",
    "get_gpu",
    "gpu_notes",
    "gpu_table_rows",
    "list_gpus",
    "load_catalog",
    "missing_sources",
    "normalize_name",
]

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
    parse_topology,
    topology_for,
    with_topology,
)
from llmplan.hardware_catalog.spec import DTYPES, GPUSpec, HostTopology

__all__ = [
    "DEFAULT_PATH",
    "DTYPES",
    "FIGURE_FIELDS",
    "GPUSpec",
    "HostTopology",
    "get_gpu",
    "gpu_notes",
    "gpu_table_rows",
    "list_gpus",
    "load_catalog",
    "missing_sources",
    "normalize_name",
    "parse_topology",
    "topology_for",
    "with_topology",
]

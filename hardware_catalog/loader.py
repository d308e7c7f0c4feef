"""Load, validate and look up the GPU catalog (``hardware_catalog/data/gpus.yaml``).

Each top-level key of the YAML file is a catalog key mapping to the fields of
:class:`~hardware_catalog.spec.GPUSpec` (less ``key``) plus an optional ``notes`` mapping.
Top-level keys starting with ``_`` hold shared YAML anchors and are skipped. Every problem
is a :class:`~llmplan.errors.CatalogError` whose message names the file and
``<gpu>.<field>``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from llmplan.hardware_catalog.spec import DTYPES, GPUSpec, HostTopology
from llmplan.errors import CatalogError, suggest

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "gpus.yaml"

_FIELDS = {f.name: f for f in dataclasses.fields(GPUSpec)}
#: fields holding a figure that needs a citation (``sources``) or an ``unknown`` entry
FIGURE_FIELDS = ("dense_tflops", "hbm_gb", "memory_bytes", "hbm_bw_gbps", "l2_mb", "sm_count", "scaleup_bw_gbps",
                 "scaleup_domain_size", "pcie_gen", "pcie_bw_gbps", "scaleout_bw_gbps", "tdp_w",
                 "usd_per_hour")
_REQUIRED = ("name", "vendor", "aliases", "price_source") + FIGURE_FIELDS
_OPTIONAL = ("sources", "unknown", "notes", "host_topology")
_INTS = ("sm_count", "scaleup_domain_size", "pcie_gen", "memory_bytes")
_MAY_BE_ZERO = ("scaleup_bw_gbps",)  # 0 = no scale-up fabric
_VENDORS = ("nvidia", "amd", "intel")
#: topology names: ``scaleup`` or ``pcie<gen>_<switch|host_bridge>_<p2p|no_p2p>``
_TOPOLOGY_RE = re.compile(r"^pcie(?P<gen>[3-7])_(?P<link>switch|host_bridge)_(?P<p2p>p2p|no_p2p)$")
SCALEUP_TOPOLOGY = "scaleup"
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_NOTE_KEYS = set(FIGURE_FIELDS) | {"general", "name", "aliases", "price_source", "host_topology"}


def normalize_name(name: str) -> str:
    """Case-insensitive form that ignores spaces, hyphens and underscores."""
    return re.sub(r"[\s\-_]+", "", str(name)).lower()


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader that rejects duplicate mapping keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _err(file: Path, gpu: str, field: str, what: str, fix: str | None = None) -> CatalogError:
    return CatalogError(f"{file}: {gpu}.{field}: {what}", key=field, fix=fix)


def _number(file: Path, gpu: str, field: str, value: Any, *, integer: bool = False,
            allow_zero: bool = False) -> float | int:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _err(file, gpu, field, f"must be {kind}, got {type(value).__name__} {value!r}",
                   fix=f"write {field} as a plain {kind.split()[-1]} without quotes or units")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise _err(file, gpu, field, f"must be {'>= 0' if allow_zero else 'positive'}, got {value!r}",
                   fix="check the figure against its source")
    return int(value) if integer else float(value)


def _str_map(file: Path, gpu: str, field: str, value: Any, allowed: set[str] | None) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _err(file, gpu, field, f"must be a mapping, got {type(value).__name__}")
    out: dict[str, str] = {}
    for k, v in value.items():
        base = str(k).split(".", 1)[0] if field == "sources" else str(k)
        if allowed is not None and base not in allowed:
            raise _err(file, gpu, f"{field}.{k}", f"names no catalog field; {suggest(str(k), allowed)}")
        if field == "sources" and "." in str(k) and (base != "dense_tflops" or str(k).split(".", 1)[1] not in DTYPES):
            raise _err(file, gpu, f"{field}.{k}", "only dense_tflops.<dtype> may be cited per part")
        if not isinstance(v, str) or not v.strip():
            raise _err(file, gpu, f"{field}.{k}", "must be a non-empty string")
        out[str(k)] = v
    return out


def parse_topology(name: str, gpus_per_host: int = 8) -> HostTopology:
    """A topology from its self-describing name; ValueError if the name has no meaning.

    ``pcie4_switch_p2p``: PCIe Gen4 links, GPU pairs behind PCIe switches (peer-to-peer within
    the pair), peer-to-peer also across the CPU host bridge between pairs;
    ``pcie5_host_bridge_no_p2p``: Gen5 links, every GPU on its own CPU root port, no
    peer-to-peer (transfers staged through host memory); ...
    """
    if name == SCALEUP_TOPOLOGY:
        return HostTopology(name, "scaleup", 0, True, gpus_per_host, 1,
                            "collectives over the scale-up fabric (NVLink/xGMI) within its domain")
    m = _TOPOLOGY_RE.match(name)
    if not m:
        raise ValueError(f"'{name}' is not a topology name")
    link = "pcie_" + m["link"]
    p2p = m["p2p"] == "p2p"
    where = ("GPU pairs behind PCIe switches (peer-to-peer within a pair)" if link == "pcie_switch"
             else "each GPU on its own CPU root port")
    desc = (f"PCIe Gen{m['gen']}, {where}; peer-to-peer across the host bridge "
            f"{'on' if p2p else 'off (staged through host memory)'}")
    return HostTopology(name, link, int(m["gen"]), p2p, gpus_per_host, 2, desc)


def _parse_topologies(file: Path, key: str, entry: Mapping, fabric: bool, pcie_gen: int) -> dict[str, Any]:
    """``host_topology: {default, options, measured}`` -> GPUSpec topology fields.

    GPUs with a scale-up fabric default to ``scaleup``; PCIe-only GPUs must declare theirs."""
    raw = entry.get("host_topology")
    if raw is None:
        if not fabric:
            raise _err(file, key, "host_topology", "a GPU without a scale-up fabric must declare its host topology",
                       fix="add host_topology: {default: pcie<gen>_<switch|host_bridge>_<p2p|no_p2p>, options: [...]}")
        raw = {"default": SCALEUP_TOPOLOGY, "options": [SCALEUP_TOPOLOGY]}
    if not isinstance(raw, Mapping) or set(raw) - {"default", "options", "measured", "gpus_per_host"}:
        raise _err(file, key, "host_topology", "must be a mapping with default, options, measured, gpus_per_host")
    options = raw.get("options") or [raw.get("default")]
    per_host = raw.get("gpus_per_host", 8)
    if isinstance(per_host, bool) or not isinstance(per_host, int) or per_host < 1:
        raise _err(file, key, "host_topology.gpus_per_host", f"must be a positive integer, got {per_host!r}")
    topos: dict[str, HostTopology] = {}
    for name in options:
        try:
            topo = parse_topology(str(name), per_host)
        except ValueError as exc:
            raise _err(file, key, "host_topology.options", str(exc),
                       fix="use scaleup or pcie<gen>_<switch|host_bridge>_<p2p|no_p2p>") from None
        if topo.gpu_link != "scaleup" and topo.pcie_gen != pcie_gen:
            raise _err(file, key, "host_topology.options",
                       f"{name} names PCIe Gen{topo.pcie_gen}, the card is Gen{pcie_gen}")
        topos[topo.name] = topo
    for role in ("default", "measured"):
        val = raw.get(role)
        if role == "default" and val is None:
            raise _err(file, key, "host_topology.default", "missing")
        if val is not None and val not in topos:
            raise _err(file, key, f"host_topology.{role}", f"'{val}' is not among the options {sorted(topos)}")
    return {"topologies": MappingProxyType(topos), "default_topology": raw["default"],
            "measured_topology": raw.get("measured") or ""}


def _parse_gpu(file: Path, key: str, entry: Any) -> tuple[GPUSpec, dict[str, str]]:
    """Validate one catalog entry; return the spec and its notes."""
    if not _KEY_RE.match(key):
        raise _err(file, key, "key", "catalog keys are lower-case letters, digits and underscores")
    if not isinstance(entry, Mapping):
        raise _err(file, key, "*", f"entry must be a mapping of fields, got {type(entry).__name__}")
    for field in entry:
        if field not in _REQUIRED and field not in _OPTIONAL:
            raise _err(file, key, str(field), f"unknown field; {suggest(str(field), _REQUIRED + _OPTIONAL)}",
                       fix="remove it or correct its spelling")
    for field in _REQUIRED:
        if field not in entry:
            raise _err(file, key, field, "missing required field", fix=f"add {field} with its source")
    vals: dict[str, Any] = {"key": key}
    for field in ("name", "price_source"):
        if not isinstance(entry[field], str) or not entry[field].strip():
            raise _err(file, key, field, "must be a non-empty string")
        vals[field] = entry[field]
    if entry["vendor"] not in _VENDORS:
        raise _err(file, key, "vendor", f"must be one of {', '.join(_VENDORS)}, got {entry['vendor']!r}")
    vals["vendor"] = entry["vendor"]
    aliases = entry["aliases"]
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise _err(file, key, "aliases", "must be a list of non-empty strings")
    vals["aliases"] = tuple(aliases)
    tflops = entry["dense_tflops"]
    if not isinstance(tflops, Mapping) or not tflops:
        raise _err(file, key, "dense_tflops", "must be a non-empty mapping dtype -> dense TFLOP/s")
    for dtype in tflops:
        if dtype not in DTYPES:
            raise _err(file, key, f"dense_tflops.{dtype}", f"unknown dtype; {suggest(str(dtype), DTYPES)}",
                       fix=f"use one of {', '.join(DTYPES)}")
    if "bf16" not in tflops and "fp16" not in tflops:
        raise _err(file, key, "dense_tflops", "needs a bf16 or fp16 figure")
    vals["dense_tflops"] = MappingProxyType(
        {d: _number(file, key, f"dense_tflops.{d}", v) for d, v in tflops.items()})
    for field in FIGURE_FIELDS[1:]:
        vals[field] = _number(file, key, field, entry[field], integer=field in _INTS,
                              allow_zero=field in _MAY_BE_ZERO)
    if (vals["scaleup_bw_gbps"] == 0) != (vals["scaleup_domain_size"] == 1):
        raise _err(file, key, "scaleup_domain_size",
                   "scaleup_bw_gbps is 0 exactly when there is no fabric (scaleup_domain_size 1)")
    if vals["memory_bytes"] < vals["hbm_gb"] * 1e9 * 0.9 or vals["memory_bytes"] > vals["hbm_gb"] * 1e9 * 1.15:
        raise _err(file, key, "memory_bytes", f"{vals['memory_bytes']} bytes is not within -10%/+15% of the marketed "
                   f"{vals['hbm_gb']:g} GB", fix="give the capacity the device reports in bytes (MiB x 1048576)")
    vals.update(_parse_topologies(file, key, entry, vals["scaleup_domain_size"] > 1, vals["pcie_gen"]))
    vals["sources"] = MappingProxyType(_str_map(file, key, "sources", entry.get("sources") or {}, set(FIGURE_FIELDS)))
    unknown = entry.get("unknown", []) or []
    if not isinstance(unknown, list) or any(u not in FIGURE_FIELDS for u in unknown):
        bad = unknown if not isinstance(unknown, list) else [u for u in unknown if u not in FIGURE_FIELDS]
        raise _err(file, key, "unknown", f"must list figure fields; not figure fields: {bad!r}")
    vals["unknown"] = tuple(unknown)
    notes = _str_map(file, key, "notes", entry.get("notes", {}) or {}, _NOTE_KEYS)
    return GPUSpec(**vals), notes


def _parse_file(path: Path) -> tuple[dict[str, GPUSpec], dict[str, Mapping[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read GPU catalog: {exc.strerror or exc}", key="gpu_catalog",
                           fix="pass the path of an existing gpus.yaml") from exc
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CatalogError(f"{path}: YAML does not parse{where}: {problem}", key="gpu_catalog",
                           fix="fix the YAML syntax at that line") from exc
    if not isinstance(raw, Mapping) or not raw:
        raise CatalogError(f"{path}: must be a mapping of catalog key -> GPU fields", key="gpu_catalog")
    specs: dict[str, GPUSpec] = {}
    notes: dict[str, Mapping[str, str]] = {}
    owner: dict[str, str] = {}  # normalized name -> catalog key
    for key, entry in raw.items():
        key = str(key)
        if key.startswith("_"):
            continue
        spec, gpu_notes = _parse_gpu(path, key, entry)
        for name in (key, *spec.aliases):
            other = owner.setdefault(normalize_name(name), key)
            if other != key:
                raise _err(path, key, "aliases", f"{name!r} also names {other}",
                           fix="aliases must identify one GPU; remove one of them")
        specs[key] = spec
        notes[key] = MappingProxyType(gpu_notes)
    if not specs:
        raise CatalogError(f"{path}: defines no GPUs", key="gpu_catalog")
    return specs, notes


@functools.lru_cache(maxsize=1)
def _default() -> tuple[dict[str, GPUSpec], dict[str, Mapping[str, str]]]:
    return _parse_file(DEFAULT_PATH)


def _load(path: str | Path | None) -> tuple[dict[str, GPUSpec], dict[str, Mapping[str, str]]]:
    return _default() if path is None else _parse_file(Path(path))


def load_catalog(path: str | Path | None = None) -> dict[str, GPUSpec]:
    """All GPU specs by catalog key; ``path=None`` loads the packaged file (cached)."""
    return dict(_load(path)[0])


def gpu_notes(name: str, path: str | Path | None = None) -> Mapping[str, str]:
    """Free-text notes of one GPU (field -> note: stand-ins, caveats, price rows considered)."""
    specs, notes = _load(path)
    return notes[get_gpu(name, specs).key]


def get_gpu(name: str, catalog: Mapping[str, GPUSpec] | None = None) -> GPUSpec:
    """Resolve a catalog key or alias (case, spaces, hyphens, underscores ignored).

    A leading vendor word ("NVIDIA ", "AMD ", "AMD Instinct ") is also tried without.
    """
    catalog = load_catalog() if catalog is None else catalog
    index = {normalize_name(n): spec for spec in catalog.values() for n in (spec.key, *spec.aliases)}
    norm = normalize_name(name)
    for candidate in (norm, re.sub(r"^(nvidia|amdinstinct|amd)", "", norm)):
        if candidate in index:
            return index[candidate]
    names: dict[str, str] = {}  # one lower-case spelling per normalized name, keys first
    for spec in catalog.values():
        names.setdefault(normalize_name(spec.key), spec.key)
    for spec in catalog.values():
        for alias in spec.aliases:
            names.setdefault(normalize_name(alias), alias.lower())
    hint = suggest(str(name).lower(), names.values())
    if hint.startswith("known:"):
        hint = suggest(str(name), catalog)
    raise CatalogError(f"unknown GPU '{name}'; {hint}", key="gpu",
                       fix="use a key from `llmplan catalog gpus` or add an alias in hardware_catalog/data/gpus.yaml")


def topology_for(spec: GPUSpec, name: str | None = None, key: str | None = None) -> HostTopology:
    """The host topology ``name`` of a GPU (None: the catalog default). Unknown -> CatalogError
    (exit 2) naming ``key`` (default ``gpu.topology.<gpu>``)."""
    if not name:
        return spec.topology()
    if name in spec.topologies:
        return spec.topology(name)
    raise CatalogError(f"unknown topology '{name}' for {spec.key}; {suggest(str(name), spec.topologies)}",
                       key=key or f"gpu.topology.{spec.key}",
                       fix=f"use one of {', '.join(spec.topologies)} (default {spec.default_topology})")


def with_topology(spec: GPUSpec, name: str, key: str | None = None) -> GPUSpec:
    """A copy of ``spec`` whose collectives run in host topology ``name`` (validated, see topology_for)."""
    return dataclasses.replace(spec, default_topology=topology_for(spec, name, key).name)


def list_gpus(catalog: Mapping[str, GPUSpec] | None = None) -> list[GPUSpec]:
    """All GPU specs sorted by catalog key."""
    catalog = load_catalog() if catalog is None else catalog
    return [catalog[k] for k in sorted(catalog)]


def missing_sources(spec: GPUSpec) -> list[str]:
    """Figure fields that have neither a citation in ``sources`` nor an ``unknown`` entry."""
    cited = {k.split(".", 1)[0] for k in spec.sources}
    return [f for f in FIGURE_FIELDS if f not in cited and f not in spec.unknown]


def _short_source(citation: str) -> str:
    """'stas00/ml-engineering ...' -> 'stas00/ml-engineering'; a URL -> its host; else the lead phrase."""
    if re.match(r"^[\w.-]+/[\w.-]+\s", citation):
        return citation.split()[0]
    m = re.match(r"^https?://(?:www\.)?([^/\s)]+)", citation)
    if m:
        return m.group(1)
    return re.split(r"[(,:'\"]", citation, maxsplit=1)[0].strip()[:40]


def _optional(spec: GPUSpec, dtype: str) -> float | None:
    return spec.peak_tflops(dtype) if spec.supports(dtype) else None


def gpu_table_rows(catalog: Mapping[str, GPUSpec] | None = None) -> list[dict[str, Any]]:
    """One display row per GPU (sorted by key) for ``llmplan catalog gpus``.

    Unsupported dtypes are ``None``; ``scaleup`` is e.g. ``"900 GB/s x72"`` or ``"-"``.
    """
    rows = []
    for spec in list_gpus(catalog):
        short = list(dict.fromkeys(_short_source(c) for f, c in spec.sources.items() if f != "usd_per_hour"))
        summary = ", ".join(short[:3]) + (f" +{len(short) - 3}" if len(short) > 3 else "")
        rows.append({
            "key": spec.key,
            "name": spec.name,
            "bf16_tflops": _optional(spec, "bf16"),
            "fp8_tflops": spec.dense_tflops.get("fp8"),
            "fp4_tflops": spec.dense_tflops.get("fp4"),
            "hbm_gb": spec.hbm_gb,
            "memory_gib": round(spec.memory_gib, 2),
            "topology": spec.default_topology,
            "hbm_bw_gbps": spec.hbm_bw_gbps,
            "l2_mb": spec.l2_mb,
            "sm_count": spec.sm_count,
            "scaleup_bw_gbps": spec.scaleup_bw_gbps,
            "scaleup_domain_size": spec.scaleup_domain_size,
            "scaleup": (f"{spec.scaleup_bw_gbps:g} GB/s x{spec.scaleup_domain_size}"
                        if spec.scaleup_domain_size > 1 else "-"),
            "pcie_gen": spec.pcie_gen,
            "usd_per_hour": spec.usd_per_hour,
            "price_source": spec.price_source,
            "source": summary,
            "unknown": ", ".join(spec.unknown),
        })
    return rows

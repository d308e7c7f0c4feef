"""The portable calibration file: fitted parameters, provenance and residual statistics.

Plain JSON (never pickle), written with sorted keys and rounded numbers so the same input
gives byte-identical files. An index file and one section file per measured GPU::

    FILE.json:  {"format": "llmplan-kernel-calibration", "version": 2,
                 "provenance": {tool, code_version, fit_date, data: [{path, gpu, table, rows, sha256}],
                                attribution, options},
                 "gpus": {gpu_key: GPUFeatures},                       # figures the fit used
                 "sections": {gpu_key: {"file": "FILE.<gpu_key>.json", "sha256": ...}},
                 "collectives": {gpu_key: GPUCollectives},
                 "residuals": {tier: {family: {rows, mape, p50_ape, p90_ape, method}}}}
    FILE.<gpu_key>.json: {backend: {family: {group: GroupModel}}}   # the GPU's fitted models

Section file names are relative to the index's folder. A section is read only when a query
needs it (``plan`` for one GPU reads one section; the cross-gen tier reads them all), so
start-up does not grow with the number of measured GPUs. Version-1 files (everything inline
under ``"measured"``) are still read.

The cross-gen tier needs no parameters of its own: it combines the measured GPUs' models
(see :mod:`llmplan.sim.kernel_calibration.crossgen`).
"""

from __future__ import annotations

import json
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from llmplan.errors import UserError

from llmplan.sim.kernel_calibration.collectives import GPUCollectives
from llmplan.sim.kernel_calibration.family_model import FamilyModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures
from llmplan.sim.kernel_calibration.section_lazy import lazy_section

FORMAT = "llmplan-kernel-calibration"
VERSION = 2
READABLE_VERSIONS = (1, 2)
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "default_calibration.json"


Sections = Mapping[str, Mapping[str, FamilyModel]]     # backend -> family -> model


def _parse_section(d: dict[str, Any]) -> Sections:
    return {b: {f: FamilyModel.from_dict(f, m) for f, m in fams.items()} for b, fams in d.items()}


def _section_dict(sec: Sections) -> dict[str, Any]:
    return {b: {f: m.to_dict() for f, m in sorted(fams.items())} for b, fams in sorted(sec.items())}


class LazySections(Mapping):
    """gpu -> its fitted models, each read from its section file on first access."""

    def __init__(self, folder: Path, entries: dict[str, dict[str, str]], source: str):
        self._folder, self._entries, self._source = folder, dict(entries), source
        self._loaded: dict[str, Sections] = {}

    def __getitem__(self, gpu: str) -> Sections:
        hit = self._loaded.get(gpu)
        if hit is not None:
            return hit
        entry = self._entries[gpu]          # KeyError for an unknown GPU, as a dict would
        path = self._folder / entry["file"]
        if Path(entry["file"]).is_absolute() or ".." in Path(entry["file"]).parts:
            raise UserError(f"{self._source}: section file '{entry['file']}' is not a plain file name",
                            key="calibration", fix="re-run `llmplan calibrate`")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise UserError(f"{self._source}: section '{entry['file']}' of {gpu} cannot be read ({exc.strerror})",
                            key="calibration", fix="keep a calibration's section files beside its index") from exc
        if entry.get("sha256") and hashlib.sha256(raw).hexdigest() != entry["sha256"]:
            raise UserError(f"{self._source}: section '{entry['file']}' does not match its checksum",
                            key="calibration", fix="re-run `llmplan calibrate` (files of two fits were mixed)")
        text = raw.decode("utf-8")
        # each (engine, family) parsed when first asked for (section_lazy: same floats)
        sec = lazy_section(text, FamilyModel.from_dict)
        if sec is None:
            sec = _parse_section(json.loads(text))
        self._loaded[gpu] = sec
        return sec

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, gpu: object) -> bool:
        return gpu in self._entries

    def loaded(self) -> list[str]:
        """GPUs whose sections have been read so far."""
        return sorted(self._loaded)

    def subset(self, keep: list[str]) -> "LazySections":
        out = LazySections(self._folder, {k: v for k, v in self._entries.items() if k in keep}, self._source)
        out._loaded = {k: v for k, v in self._loaded.items() if k in keep}
        return out


@dataclass
class Calibration:
    provenance: dict[str, Any] = field(default_factory=dict)
    gpus: dict[str, GPUFeatures] = field(default_factory=dict)
    measured: Mapping[str, Sections] = field(default_factory=dict)
    collectives: dict[str, GPUCollectives] = field(default_factory=dict)
    residuals: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    # -- queries -------------------------------------------------------------------------
    def backends(self, gpu: str) -> list[str]:
        return sorted(self.measured.get(gpu, {}))

    def family_model(self, gpu: str, backend: str, family: str) -> FamilyModel | None:
        return self.measured.get(gpu, {}).get(backend, {}).get(family)

    def without_gpu(self, gpu: str) -> "Calibration":
        """A copy with every fitted parameter of ``gpu`` removed (for leave-one-GPU-out)."""
        keep = [k for k in self.measured if k != gpu]
        measured = self.measured.subset(keep) if isinstance(self.measured, LazySections) else {
            k: self.measured[k] for k in keep}
        return Calibration(dict(self.provenance), {k: v for k, v in self.gpus.items() if k != gpu}, measured,
                           {k: v for k, v in self.collectives.items() if k != gpu}, self.residuals)

    # -- (de)serialisation ---------------------------------------------------------------
    def section_name(self, index_name: str, gpu: str) -> str:
        stem = index_name[:-5] if index_name.endswith(".json") else index_name
        return f"{stem}.{gpu}.json"

    def files(self, index_name: str) -> dict[str, str]:
        """{file name: text} of the index and every section, as :meth:`save` writes them."""
        out: dict[str, str] = {}
        sections: dict[str, dict[str, str]] = {}
        for gpu in sorted(self.measured):
            name = self.section_name(index_name, gpu)
            text = _dumps(_section_dict(self.measured[gpu]))
            out[name] = text
            sections[gpu] = {"file": name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
        index = self._header()
        index["sections"] = sections
        out[index_name] = _dumps(index)
        return out

    def _header(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION,
            "provenance": self.provenance,
            "gpus": {k: v.to_dict() for k, v in sorted(self.gpus.items())},
            "collectives": {g: c.to_dict() for g, c in sorted(self.collectives.items())},
            "residuals": self.residuals,
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything inline (version-1 layout; reads every section)."""
        d = self._header()
        d["version"] = 1
        d["measured"] = {g: _section_dict(self.measured[g]) for g in sorted(self.measured)}
        return d

    def dumps(self) -> str:
        return _dumps(self.to_dict())

    def save(self, path: str | Path) -> Path:
        """Write the index to ``path`` and one section file per measured GPU beside it."""
        p = Path(path)
        if p.suffix.lower() in (".pkl", ".pickle"):
            raise UserError(f"refusing to write '{p}': calibration files are JSON, never pickle", key="out",
                            fix="use a .json file name")
        p.parent.mkdir(parents=True, exist_ok=True)
        files = self.files(p.name)
        for name, text in sorted(files.items(), key=lambda kv: kv[0] == p.name):   # index last
            (p.parent / name).write_text(text, encoding="utf-8")
        return p

    @staticmethod
    def from_dict(d: dict[str, Any], source: str = "<dict>", folder: Path | None = None) -> "Calibration":
        if d.get("format") != FORMAT:
            raise UserError(f"{source} is not an llmplan kernel calibration file", key="calibration",
                            fix="pass a file written by `llmplan calibrate`")
        if int(d.get("version", 0)) not in READABLE_VERSIONS:
            raise UserError(f"{source} has calibration format version {d.get('version')}, expected {VERSION}",
                            key="calibration", fix="re-run `llmplan calibrate` with this llmplan version")
        if "sections" in d:
            measured: Mapping[str, Sections] = LazySections(folder or Path("."), d["sections"], source)
        else:
            measured = {g: _parse_section(bk) for g, bk in d.get("measured", {}).items()}
        return Calibration(
            d.get("provenance", {}),
            {k: GPUFeatures.from_dict(v) for k, v in d.get("gpus", {}).items()},
            measured,
            {g: GPUCollectives.from_dict(c) for g, c in d.get("collectives", {}).items()},
            d.get("residuals", {}),
        )

    @staticmethod
    def loads(text: str, source: str = "<string>", folder: Path | None = None) -> "Calibration":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{source} is not valid JSON: {exc}", key="calibration",
                            fix="pass a file written by `llmplan calibrate`") from exc
        return Calibration.from_dict(d, source, folder)


def _dumps(d: Any) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


@lru_cache(maxsize=8)
def _load_cached(path: str, size: int, mtime_ns: int) -> Calibration:
    return Calibration.loads(Path(path).read_text(encoding="utf-8"), path, Path(path).parent)


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Load (and cache) a calibration file; ``None`` means the shipped default."""
    p = Path(path) if path is not None else DEFAULT_PATH
    if not p.is_file():
        raise UserError(f"calibration file '{p}' not found", key="calibration",
                        fix="run `llmplan calibrate --measurements DIR --out FILE` or omit --calibration")
    st = p.stat()
    return _load_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)

"""The portable calibration file: fitted parameters, provenance and residual statistics.

Plain JSON (never pickle), written with sorted keys and rounded numbers so the same input
gives a byte-identical file. Layout::

    {"format": "llmplan-kernel-calibration", "version": 1,
     "provenance": {tool, code_version, fit_date, data: [{path, gpu, table, rows, sha256}],
                    attribution, options},
     "gpus": {gpu_key: GPUFeatures},                       # figures the fit used
     "measured": {gpu_key: {backend: {family: {group: GroupModel}}}},
     "collectives": {gpu_key: GPUCollectives},
     "residuals": {tier: {family: {rows, mape, p50_ape, p90_ape, method}}}}

The cross-gen tier needs no parameters of its own: it combines the measured GPUs' models
(see :mod:`llmplan.sim.kernel_calibration.crossgen`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from llmplan.errors import UserError

from llmplan.sim.kernel_calibration.collectives import GPUCollectives
from llmplan.sim.kernel_calibration.family_model import FamilyModel
from llmplan.sim.kernel_calibration.gpu_features import GPUFeatures

FORMAT = "llmplan-kernel-calibration"
VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "default_calibration.json"


@dataclass
class Calibration:
    provenance: dict[str, Any] = field(default_factory=dict)
    gpus: dict[str, GPUFeatures] = field(default_factory=dict)
    measured: dict[str, dict[str, dict[str, FamilyModel]]] = field(default_factory=dict)
    collectives: dict[str, GPUCollectives] = field(default_factory=dict)
    residuals: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    # -- queries -------------------------------------------------------------------------
    def backends(self, gpu: str) -> list[str]:
        return sorted(self.measured.get(gpu, {}))

    def family_model(self, gpu: str, backend: str, family: str) -> FamilyModel | None:
        return self.measured.get(gpu, {}).get(backend, {}).get(family)

    def without_gpu(self, gpu: str) -> "Calibration":
        """A copy with every fitted parameter of ``gpu`` removed (for leave-one-GPU-out)."""
        return Calibration(dict(self.provenance), {k: v for k, v in self.gpus.items() if k != gpu},
                           {k: v for k, v in self.measured.items() if k != gpu},
                           {k: v for k, v in self.collectives.items() if k != gpu}, self.residuals)

    # -- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION,
            "provenance": self.provenance,
            "gpus": {k: v.to_dict() for k, v in sorted(self.gpus.items())},
            "measured": {g: {b: {f: m.to_dict() for f, m in sorted(fams.items())}
                             for b, fams in sorted(bk.items())} for g, bk in sorted(self.measured.items())},
            "collectives": {g: c.to_dict() for g, c in sorted(self.collectives.items())},
            "residuals": self.residuals,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        if p.suffix.lower() in (".pkl", ".pickle"):
            raise UserError(f"refusing to write '{p}': calibration files are JSON, never pickle", key="out",
                            fix="use a .json file name")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.dumps(), encoding="utf-8")
        return p

    @staticmethod
    def from_dict(d: dict[str, Any], source: str = "<dict>") -> "Calibration":
        if d.get("format") != FORMAT:
            raise UserError(f"{source} is not an llmplan kernel calibration file", key="calibration",
                            fix="pass a file written by `llmplan calibrate`")
        if int(d.get("version", 0)) != VERSION:
            raise UserError(f"{source} has calibration format version {d.get('version')}, expected {VERSION}",
                            key="calibration", fix="re-run `llmplan calibrate` with this llmplan version")
        return Calibration(
            d.get("provenance", {}),
            {k: GPUFeatures.from_dict(v) for k, v in d.get("gpus", {}).items()},
            {g: {b: {f: FamilyModel.from_dict(f, m) for f, m in fams.items()} for b, fams in bk.items()}
             for g, bk in d.get("measured", {}).items()},
            {g: GPUCollectives.from_dict(c) for g, c in d.get("collectives", {}).items()},
            d.get("residuals", {}),
        )

    @staticmethod
    def loads(text: str, source: str = "<string>") -> "Calibration":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{source} is not valid JSON: {exc}", key="calibration",
                            fix="pass a file written by `llmplan calibrate`") from exc
        return Calibration.from_dict(d, source)


@lru_cache(maxsize=8)
def _load_cached(path: str, size: int, mtime_ns: int) -> Calibration:
    return Calibration.loads(Path(path).read_text(encoding="utf-8"), path)


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Load (and cache) a calibration file; ``None`` means the shipped default."""
    p = Path(path) if path is not None else DEFAULT_PATH
    if not p.is_file():
        raise UserError(f"calibration file '{p}' not found", key="calibration",
                        fix="run `llmplan calibrate --measurements DIR --out FILE` or omit --calibration")
    st = p.stat()
    return _load_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)

"""Trace readers: replay recorded arrivals and lengths.

Layouts (``trace_format``):

* ``azure``: the Azure LLM inference traces (Azure/AzurePublicDataset,
  ``AzureLLMInferenceTrace_{conv,code}.csv``, 2023 and 2024): CSV columns
  ``TIMESTAMP`` (a datetime string such as ``2023-11-16 18:15:46.6805900``),
  ``ContextTokens``, ``GeneratedTokens``. No prefix information.
* ``mooncake``: the Mooncake traces (kvcache-ai/Mooncake, FAST'25): JSON lines with
  ``timestamp`` (ms since the first request), ``input_length``, ``output_length`` and
  ``hash_ids`` (one id per 512-token block; equal ids at equal positions mean a shared prefix).
* ``csv``: columns ``arrival_ms``, ``input_tokens``, ``output_tokens`` and optionally
  ``hash_ids`` (space-separated integers).
* ``jsonl``: JSON lines with the same keys as ``csv`` (``hash_ids`` a list).
* ``auto``: by extension and header (``TIMESTAMP`` -> azure, ``input_length`` -> mooncake).

Arrival times are shifted so the first request arrives at 0 and sorted (stable). Zero
token counts are raised to 1 (an engine always computes one prompt token and emits one).
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Optional

import numpy as np

from llmplan.errors import UserError, suggest
from llmplan.sim.requests import Request, Workload, resolve_data_path

#: tokens per hash id in each format when the workload does not say
DEFAULT_BLOCK_TOKENS = {"mooncake": 512, "csv": 16, "jsonl": 16, "azure": 16}

_COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", None),
    "mooncake": ("timestamp", "input_length", "output_length", "hash_ids"),
    "csv": ("arrival_ms", "input_tokens", "output_tokens", "hash_ids"),
    "jsonl": ("arrival_ms", "input_tokens", "output_tokens", "hash_ids"),
}


def _open(p: Path, mode: str = "rt"):
    return gzip.open(p, mode) if p.suffix == ".gz" else open(p, mode)  # noqa: SIM115


#: leading bytes of common binary files a user may point at by mistake
_MAGIC = {b"\x89PNG": "a PNG image", b"\xff\xd8\xff": "a JPEG image", b"%PDF": "a PDF document",
          b"PK\x03\x04": "a zip archive", b"\x1f\x8b": "gzip data (name it .gz to read it compressed)",
          b"PAR1": "a Parquet file", b"\x93NUMPY": "a NumPy array"}
#: errors of reading a file that is not a (gzipped) UTF-8 text trace
_READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError)


def check_text_file(p: Path, key: str = "workload.trace_path") -> None:
    """Refuse, with one clear line, a trace that is empty, binary or not UTF-8 text."""
    try:
        with _open(p, "rb") as fh:
            head = fh.read(65536)
    except _READ_ERRORS as e:
        raise UserError(f"cannot read trace {p}: {e}", key=key, fix="give a CSV or JSON-lines trace (optionally .gz)") from e
    if not head.strip():
        raise UserError(f"trace {p} is empty", key=key, fix="give a trace with a header and one request per row")
    kind = next((v for k, v in _MAGIC.items() if head.startswith(k)), None)
    if kind is None and b"\x00" in head:
        kind = "binary data"
    if kind is None:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        except UnicodeDecodeError:
            kind = "not UTF-8 text"
    if kind is not None:
        raise UserError(f"trace {p} is not a text trace ({kind})", key=key,
                        fix="give a CSV or JSON-lines trace (optionally .gz), see docs/SIMULATOR.md")


def detect_format(p: Path) -> str:
    """Guess the layout of a trace file from its name and first line."""
    name = p.name.lower().removesuffix(".gz")
    with _open(p) as fh:
        first = fh.readline()
    if name.endswith((".jsonl", ".json")) or first.lstrip().startswith("{"):
        try:
            keys = json.loads(first).keys()
        except (json.JSONDecodeError, AttributeError) as e:
            raise UserError(f"first line of {p} is not a JSON object", key="workload.trace_path") from e
        return "mooncake" if "input_length" in keys else "jsonl"
    header = [h.strip() for h in first.split(",")]
    return "azure" if "TIMESTAMP" in header else "csv"


def _need(cols: Any, name: str, p: Path, fmt: str) -> None:
    if name not in cols:
        raise UserError(f"trace {p} ({fmt} format) has no column '{name}'", key="workload.trace_path",
                        fix=f"{suggest(name, map(str, cols))} expected columns: "
                            + ", ".join(c for c in _COLUMNS[fmt] if c))


#: the fix offered when a trace file does not parse (formats: docs/SIMULATOR.md, traces)
_TRACE_FIX = ("give a CSV (arrival_ms, input_tokens, output_tokens) or a JSON-lines trace, and "
              "workload.trace_format=auto|azure|mooncake|csv|jsonl to match it")


def _read_csv(p: Path, fmt: str, nrows: Optional[int]):
    import pandas as pd

    t_col, i_col, o_col, h_col = _COLUMNS[fmt]
    try:
        df = pd.read_csv(p, nrows=nrows, skipinitialspace=True)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"cannot read trace {p}: {e}", key="workload.trace_path", fix=_TRACE_FIX) from e
    df.columns = [str(c).strip() for c in df.columns]
    for c in (t_col, i_col, o_col):
        _need(df.columns, c, p, fmt)
    if fmt == "azure":
        try:
            ts = pd.to_datetime(df[t_col], format="mixed")
        except (ValueError, TypeError) as e:
            raise UserError(f"cannot parse {t_col} of {p} as datetimes: {e}", key="workload.trace_path") from e
        t = (ts - ts.min()).dt.total_seconds().to_numpy() * 1000.0
    else:
        t = pd.to_numeric(df[t_col], errors="coerce").to_numpy(dtype=float)
    ins = pd.to_numeric(df[i_col], errors="coerce").to_numpy(dtype=float)
    outs = pd.to_numeric(df[o_col], errors="coerce").to_numpy(dtype=float)
    hashes: list[tuple[int, ...]] = [()] * len(df)
    if h_col and h_col in df.columns:
        hashes = [tuple(int(x) for x in str(v).split()) if isinstance(v, str) else () for v in df[h_col]]
    return t, ins, outs, hashes


def _read_jsonl(p: Path, fmt: str, nrows: Optional[int]):
    t_col, i_col, o_col, h_col = _COLUMNS[fmt]
    t, ins, outs, hashes = [], [], [], []
    with _open(p) as fh:
        for lineno, line in enumerate(fh, 1):
            if nrows is not None and len(t) >= nrows:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{p}:{lineno}: not valid JSON ({e.msg})", key="workload.trace_path",
                                fix=_TRACE_FIX) from e
            for c in (t_col, i_col, o_col):
                if c not in row:
                    raise UserError(f"trace {p} ({fmt} format) line {lineno} has no key '{c}'",
                                    key="workload.trace_path",
                                    fix=f"{suggest(c, row.keys())} expected keys: "
                                        + ", ".join(k for k in _COLUMNS[fmt] if k))
            t.append(float(row[t_col]))
            ins.append(float(row[i_col]))
            outs.append(float(row[o_col]))
            hashes.append(tuple(int(x) for x in row.get(h_col) or ()))
    return np.asarray(t, float), np.asarray(ins, float), np.asarray(outs, float), hashes


def read_trace(path: str | None, fmt: str = "auto", num_requests: int = 0, rate_rps: Optional[float] = None,
               prefix_block_tokens: Optional[int] = None) -> Workload:
    """Load a trace as an open-loop :class:`Workload`.

    ``num_requests`` > 0 keeps the first rows of the file; ``rate_rps`` rescales the
    timestamps so the mean arrival rate is that value (None keeps recorded times).
    """
    if path is None:
        raise UserError("arrival=trace needs a trace file", key="workload.trace_path")
    p = resolve_data_path(path, "workload.trace_path")
    if p.is_dir():
        raise UserError(f"trace {p} is a directory", key="workload.trace_path", fix="give the trace file itself")
    check_text_file(p)
    try:
        if fmt == "auto":
            fmt = detect_format(p)
        if fmt not in _COLUMNS:
            raise UserError(f"unknown trace format '{fmt}'", key="workload.trace_format", fix=suggest(fmt, _COLUMNS))
        nrows = num_requests if num_requests and num_requests > 0 else None
        reader = _read_jsonl if fmt in ("mooncake", "jsonl") else _read_csv
        t, ins, outs, hashes = reader(p, fmt, nrows)
    except _READ_ERRORS as e:  # damage past the part checked above
        raise UserError(f"cannot read trace {p}: {e}", key="workload.trace_path", fix=_TRACE_FIX) from e
    if len(t) == 0:
        raise UserError(f"trace {p} has no requests", key="workload.trace_path")
    for name, arr in (("arrival time", t), ("input tokens", ins), ("output tokens", outs)):
        bad = ~np.isfinite(arr) | (arr < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise UserError(f"trace {p} row {row + 1}: {name} is missing or negative", key="workload.trace_path")
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    ins = np.maximum(np.rint(ins[order]), 1).astype(np.int64)
    outs = np.maximum(np.rint(outs[order]), 1).astype(np.int64)
    hashes = [hashes[i] for i in order.tolist()]
    if rate_rps is not None and len(t) > 1 and t[-1] > 0:
        t = t * ((len(t) - 1) / (t[-1] / 1000.0) / rate_rps)
    block = prefix_block_tokens or DEFAULT_BLOCK_TOKENS[fmt]
    reqs = [Request(a, i, o, h) for a, i, o, h in zip(t.tolist(), ins.tolist(), outs.tolist(), hashes)]
    return Workload(reqs, prefix_block_tokens=block, name=f"trace:{p.name}")

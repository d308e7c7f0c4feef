"""Read measured kernel latencies into typed, canonical DataFrames.

Layout (as in ``shared/measurements``): one folder per GPU, named so that the GPU catalog
resolves it (``h100_sxm``, ``a100_sxm``, ``l40s`` or any alias), holding
``<table>.csv[.gz]`` files. Every returned frame keeps the input columns and adds
canonical ones shared by all tables of a family:

``table, family, gpu, backend, backend_version, kernel_source, latency_ms`` and the
family's shape and dtype columns (see :data:`CANONICAL`). dtype names are normalised
(``bfloat16`` -> ``bf16``, ``half`` -> ``fp16``); ``fp8_block`` stays distinct from ``fp8``.

Parsed files are cached by (path, size, mtime), so re-reading is free.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from llmplan.hardware_catalog.spec import GPUSpec
from llmplan.errors import UserError

from llmplan.sim.kernel_calibration.gpu_features import resolve_gpu

#: table -> (family, required input columns)
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm": ("gemm", ("backend", "kernel_source", "gemm_dtype", "m", "n", "k", "latency_ms")),
    "context_attention": ("attention_prefill", (
        "backend", "kernel_source", "batch_size", "isl", "num_heads", "num_key_value_heads",
        "head_dim", "attn_dtype", "kv_cache_dtype", "step", "latency_ms")),
    "generation_attention": ("attention_decode", (
        "backend", "kernel_source", "batch_size", "num_heads", "num_key_value_heads",
        "head_dim", "kv_cache_dtype", "step", "latency_ms")),
    "moe": ("moe", ("backend", "kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size",
                    "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency_ms")),
    "mla_context": ("mla_prefill", ("backend", "kernel_source", "kv_cache_dtype", "num_heads",
                                    "batch_size", "isl", "step", "latency_ms")),
    "mla_generation": ("mla_decode", ("backend", "kernel_source", "kv_cache_dtype", "num_heads",
                                      "batch_size", "step", "latency_ms")),
    "mla_context_module": ("mla_prefill_module", ("backend", "kernel_source", "kv_cache_dtype", "num_heads",
                                                  "batch_size", "isl", "step", "latency_ms")),
    "mla_generation_module": ("mla_decode_module", ("backend", "kernel_source", "kv_cache_dtype",
                                                    "num_heads", "batch_size", "step", "latency_ms")),
    "custom_allreduce": ("custom_allreduce", ("backend", "kernel_source", "num_gpus", "message_size",
                                              "latency_ms")),
    "nccl": ("nccl", ("op_name", "nccl_dtype", "num_gpus", "message_size_elements", "latency_ms")),
    "moe_a2a": ("moe_a2a", ("backend", "kernel_source", "comm_backend", "phase", "ep_size", "hidden_size",
                            "topk", "num_experts", "num_tokens", "latency_ms")),
    # Intel's collectives library on the Arc Pro B60: the NCCL family, engine "oneccl"
    "oneccl": ("nccl", ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency_ms")),
    # MLA's absorb matmuls (q_nope x W_UK before attention: "pre"; x W_UV after: "post")
    "mla_bmm": ("mla_bmm", ("backend", "kernel_source", "op_name", "bmm_dtype", "num_tokens", "num_heads",
                            "latency_ms")),
    # Gated DeltaNet: one row per sub-kernel (short conv, then the delta-rule recurrence); the
    # reader sums them into one layer time per shape and splits prefill from decode
    "gdn": ("gdn", ("backend", "kernel_source", "phase", "batch_size", "seq_len", "num_tokens", "num_k_heads",
                    "head_k_dim", "num_v_heads", "head_v_dim", "latency_ms")),
    # GLM-5 / DeepSeek sparse attention (DSA) operators, one table each (kernel-level, one head
    # configuration per table): the indexer's fp8 MQA logits, its top-k, the sparse MLA attention
    "glm5_mqa_logits_module": ("dsa_mqa_logits", ("backend", "kernel_source", "num_heads", "batch_size", "isl",
                                                   "step", "tp_size", "kv_cache_dtype", "latency_ms")),
    "glm5_topk_module": ("dsa_topk", ("backend", "kernel_source", "num_heads", "batch_size", "isl", "step",
                                      "tp_size", "kv_cache_dtype", "latency_ms")),
    "glm5_dsa_attn_module": ("dsa_attention", ("backend", "kernel_source", "num_heads", "batch_size", "isl",
                                               "step", "tp_size", "kv_cache_dtype", "latency_ms")),
}

#: family -> canonical shape/dtype columns added by the reader
CANONICAL: dict[str, tuple[str, ...]] = {
    "gemm": ("dtype", "m", "n", "k"),
    "attention_prefill": ("batch", "q_len", "kv_len", "num_heads", "num_kv_heads", "head_dim",
                          "kv_dtype", "attn_dtype", "window"),
    "attention_decode": ("batch", "kv_len", "num_heads", "num_kv_heads", "head_dim", "kv_dtype", "window"),
    "moe": ("dtype", "num_tokens", "hidden", "inter", "topk", "num_experts", "moe_tp", "moe_ep", "skew"),
    "mla_prefill": ("batch", "q_len", "kv_len", "num_heads", "kv_dtype"),
    "mla_decode": ("batch", "kv_len", "num_heads", "kv_dtype"),
    "mla_prefill_module": ("batch", "q_len", "kv_len", "num_heads", "kv_dtype", "dtype"),
    "mla_decode_module": ("batch", "kv_len", "num_heads", "kv_dtype", "dtype"),
    "custom_allreduce": ("op", "num_gpus", "message_bytes", "mode"),
    "nccl": ("op", "num_gpus", "message_bytes", "dtype", "mode"),
    "moe_a2a": ("op", "num_tokens", "hidden", "topk", "num_experts", "ep", "phase", "comm_backend", "sms"),
    "mla_bmm": ("op", "dtype", "num_tokens", "num_heads"),
    "gdn_prefill": ("batch", "seq_len", "num_tokens", "k_heads", "head_k_dim", "v_heads", "head_v_dim", "conv_dim"),
    "gdn_decode": ("batch", "seq_len", "num_tokens", "k_heads", "head_k_dim", "v_heads", "head_v_dim", "conv_dim"),
    "dsa_mqa_logits": ("batch", "q_len", "kv_len", "num_heads", "tp", "kv_dtype"),
    "dsa_topk": ("batch", "q_len", "kv_len", "num_heads", "tp", "kv_dtype", "mode"),
    "dsa_attention": ("batch", "q_len", "kv_len", "num_heads", "tp", "kv_dtype"),
}

#: sparse-attention (DSA) operator tables: read on request (``tables=``), not fitted yet, so
#: ``llmplan calibrate`` output does not depend on them
DSA_TABLES = ("glm5_mqa_logits_module", "glm5_topk_module", "glm5_dsa_attn_module")

#: tables whose rows split into several families (by a column the canonical frame sets)
SPLIT_TABLES = {"gdn": ("gdn_prefill", "gdn_decode")}

#: tables the fit uses (the *_module tables are read for reference only)
KERNEL_TABLES = ("gemm", "context_attention", "generation_attention", "moe", "mla_context",
                 "mla_generation", "mla_bmm", "gdn", "custom_allreduce", "nccl", "oneccl", "moe_a2a")

DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
               "fp8": "fp8", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_block": "fp8_block", "int8": "int8",
               "int4_wo": "int4_wo", "w4a16_mxfp4": "w4a16_mxfp4", "bf16": "bf16", "fp16": "fp16",
               "nvfp4": "fp4", "fp4": "fp4", "default": "bf16", "w4a8_mxfp4_mxfp8": "w4a8_mxfp4",
               "fp8_e4m3fn": "fp8"}
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class SourceFile:
    """Provenance of one table file."""

    path: str        # relative to the measurement directory
    gpu: str
    table: str
    rows: int
    sha256: str


@dataclass(frozen=True)
class MeasuredKernel:
    """One measured kernel call (typed record view of a canonical row)."""

    family: str
    gpu: str
    backend: str
    kernel_source: str
    shape: dict[str, Any]
    latency_ms: float


@dataclass
class Measurements:
    """All tables read from one directory: ``frames[family]`` plus per-file provenance."""

    root: Path
    frames: dict[str, pd.DataFrame]
    sources: list[SourceFile] = field(default_factory=list)
    gpu_specs: dict[str, GPUSpec] = field(default_factory=dict)
    #: folders not read because they name no catalog GPU (only when a selection was asked for)
    skipped: list[str] = field(default_factory=list)

    def family(self, name: str) -> pd.DataFrame:
        return self.frames.get(name, pd.DataFrame())

    @property
    def gpus(self) -> list[str]:
        return sorted(self.gpu_specs)

    def rows(self) -> int:
        return int(sum(len(f) for f in self.frames.values()))

    def records(self, family: str) -> Iterator[MeasuredKernel]:
        df = self.family(family)
        cols = CANONICAL.get(family, ())
        for row in df[list(("gpu", "backend", "kernel_source", "latency_ms") + cols)].itertuples(index=False):
            d = row._asdict()
            yield MeasuredKernel(family, d.pop("gpu"), d.pop("backend"), d.pop("kernel_source"),
                                 {c: d[c] for c in cols}, float(d["latency_ms"]))


def _norm_dtype(s: pd.Series) -> pd.Series:
    return s.astype(str).str.strip().map(lambda v: DTYPE_NAMES.get(v.lower(), v.lower()))


def _skew(s: pd.Series) -> pd.Series:
    def one(v: str) -> float:
        v = str(v).lower()
        if v.startswith("balanced") or v in ("uniform", "nan", ""):
            return 0.0
        m = re.search(r"([0-9]+(?:\.[0-9]+)?)", v)
        return float(m.group(1)) if m else 0.0
    uniq = {v: one(v) for v in s.unique()}
    return s.map(uniq).astype(float)


def _canonicalise(table: str, df: pd.DataFrame) -> pd.DataFrame:
    family = TABLES[table][0]
    out = df.copy()
    out["table"] = table
    out["family"] = family
    if "backend" not in out:
        out["backend"] = "nccl" if table == "nccl" else "unknown"
    if "backend_version" not in out:
        out["backend_version"] = out["nccl_version"].astype(str) if "nccl_version" in out else ""
    if "kernel_source" not in out:
        out["kernel_source"] = table
    for c in ("backend", "backend_version", "kernel_source"):
        out[c] = out[c].astype(str)
    out["latency_ms"] = out["latency_ms"].astype(float)
    i64 = lambda c: out[c].astype(np.int64)  # noqa: E731
    if family == "gemm":
        out["dtype"] = _norm_dtype(out["gemm_dtype"])
        for c in ("m", "n", "k"):
            out[c] = i64(c)
    elif family in ("attention_prefill", "attention_decode"):
        out["batch"] = i64("batch_size")
        if family == "attention_prefill":
            out["q_len"] = i64("isl")
            out["kv_len"] = out["q_len"] + i64("step")
        else:
            out["kv_len"] = i64("step")
        out["num_heads"] = i64("num_heads")
        out["num_kv_heads"] = i64("num_key_value_heads")
        out["head_dim"] = i64("head_dim")
        out["kv_dtype"] = _norm_dtype(out["kv_cache_dtype"])
        out["attn_dtype"] = _norm_dtype(out["attn_dtype"]) if "attn_dtype" in out else "bf16"
        out["window"] = out["window_size"].fillna(0).astype(np.int64) if "window_size" in out else 0
    elif family == "moe":
        out["dtype"] = _norm_dtype(out["moe_dtype"])
        for a, b in (("num_tokens", "num_tokens"), ("hidden", "hidden_size"), ("inter", "inter_size"),
                     ("topk", "topk"), ("num_experts", "num_experts"), ("moe_tp", "moe_tp_size"),
                     ("moe_ep", "moe_ep_size")):
            out[a] = i64(b)
        out["skew"] = _skew(out["distribution"])
    elif family.startswith("mla_") and family != "mla_bmm":
        out["batch"] = i64("batch_size")
        out["num_heads"] = i64("num_heads")
        out["kv_dtype"] = _norm_dtype(out["kv_cache_dtype"])
        if "prefill" in family:
            out["q_len"] = i64("isl")
            out["kv_len"] = out["q_len"] + i64("step")
        else:
            out["kv_len"] = i64("step")
        if family.endswith("_module"):
            out["dtype"] = _norm_dtype(out["gemm_type"]) if "gemm_type" in out else "bf16"
    elif family == "custom_allreduce":
        out["op"] = "all_reduce"
        out["num_gpus"] = i64("num_gpus")
        dt = _norm_dtype(out["allreduce_dtype"]) if "allreduce_dtype" in out else pd.Series("bf16", index=out.index)
        out["message_bytes"] = out["message_size"].astype(float) * dt.map(_BYTES).fillna(2).astype(float)
        mode = out["kernel_mode"].astype(str) if "kernel_mode" in out else out["kernel_source"]
        out["mode"] = np.where(mode.str.contains("eager", case=False)
                               | out["kernel_source"].str.contains("eager", case=False), "eager", "graph")
    elif family == "nccl":
        out["op"] = out["op_name"].astype(str)
        out["num_gpus"] = i64("num_gpus")
        out["dtype"] = _norm_dtype(out["nccl_dtype"])
        elems = out["message_size_elements"] if "message_size_elements" in out else out["message_size"]
        out["message_bytes"] = elems.astype(float) * out["dtype"].map(_BYTES).fillna(2)
        out["mode"] = "graph"
        if table == "oneccl":
            out["backend"] = "oneccl"
    elif family == "mla_bmm":
        out["op"] = np.where(out["op_name"].astype(str).str.contains("post"), "post", "pre")
        out["dtype"] = _norm_dtype(out["bmm_dtype"])
        out["num_tokens"] = i64("num_tokens")
        out["num_heads"] = i64("num_heads")
    elif family == "gdn":
        out = _gdn_layers(out)
    elif family.startswith("dsa_"):
        # isl new tokens per sequence after `step` cached ones (decode rows: isl 1)
        out["batch"] = i64("batch_size")
        out["q_len"] = i64("isl")
        out["kv_len"] = out["q_len"] + i64("step")
        out["num_heads"] = i64("num_heads")
        out["tp"] = i64("tp_size")
        out["kv_dtype"] = _norm_dtype(out["kv_cache_dtype"])
        if family == "dsa_topk":
            out["mode"] = out["score_mode"].astype(str) if "score_mode" in out else "flat"
    elif family == "moe_a2a":
        # the source's `latency` of this table is in microseconds: it equals transmit_us +
        # notify_us on every row (a 1-token DeepEP dispatch does not take 50 ms)
        if "transmit_us" in out and np.allclose(out["latency_ms"], out["transmit_us"].fillna(0)
                                                + out.get("notify_us", 0.0), rtol=1e-6):
            out["latency_ms"] = out["latency_ms"] / 1e3
        out["op"] = out["phase"].astype(str)
        out["phase"] = out["phase"].astype(str)
        out["comm_backend"] = out["comm_backend"].astype(str)
        for a, b in (("num_tokens", "num_tokens"), ("hidden", "hidden_size"), ("topk", "topk"),
                     ("num_experts", "num_experts"), ("ep", "ep_size")):
            out[a] = i64(b)
        out["sms"] = out["sms"].astype(np.int64) if "sms" in out else 0
    return out


_GDN_KEYS = ("backend", "backend_version", "phase", "batch_size", "seq_len", "num_tokens", "num_k_heads",
             "head_k_dim", "num_v_heads", "head_v_dim", "d_model", "model_name")


def _gdn_layers(df: pd.DataFrame) -> pd.DataFrame:
    """One Gated DeltaNet layer time per shape: the sum of its sub-kernels (conv + delta
    rule); shapes missing one of the two are dropped (not a whole layer)."""
    keys = [c for c in _GDN_KEYS if c in df]
    df = df.assign(**{c: df[c].fillna("") for c in keys if df[c].dtype == object})
    g = df.groupby(keys, sort=True, dropna=False)
    agg = g.agg(latency_ms=("latency_ms", "sum"), parts=("kernel_source", "nunique"),
                kernel_source=("kernel_source", lambda v: "+".join(sorted(set(map(str, v))))))
    agg = agg[agg["parts"] >= 2].drop(columns="parts").reset_index()
    agg["table"] = "gdn"
    agg["family"] = np.where(agg["phase"].astype(str) == "generation", "gdn_decode", "gdn_prefill")
    for a, b in (("batch", "batch_size"), ("seq_len", "seq_len"), ("num_tokens", "num_tokens"),
                 ("k_heads", "num_k_heads"), ("head_k_dim", "head_k_dim"), ("v_heads", "num_v_heads"),
                 ("head_v_dim", "head_v_dim")):
        agg[a] = agg[b].astype(np.int64)
    agg["conv_dim"] = (2 * agg["k_heads"] * agg["head_k_dim"] + agg["v_heads"] * agg["head_v_dim"]).astype(np.int64)
    return agg


@lru_cache(maxsize=128)
def _read_cached(path: str, size: int, mtime_ns: int, table: str) -> tuple[pd.DataFrame, str]:
    p = Path(path)
    raw = p.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        df = pd.read_csv(p, low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise UserError(f"cannot parse {p}: {exc}", key="measurements",
                        fix="pass a CSV (optionally gzip-compressed) with a header row") from exc
    missing = [c for c in TABLES[table][1] if c not in df.columns]
    if missing:
        raise UserError(f"{p}: missing required column '{missing[0]}'"
                        + (f" (and {', '.join(missing[1:])})" if len(missing) > 1 else ""),
                        key="measurements",
                        fix=f"a '{table}' table needs columns: {', '.join(TABLES[table][1])}")
    df = df[df["latency_ms"].notna() & (df["latency_ms"] > 0)]
    return _canonicalise(table, df).reset_index(drop=True), digest


def read_table(path: str | Path, table: str, gpu: str) -> tuple[pd.DataFrame, str]:
    """One table file as a canonical frame (cached), with the file's sha256."""
    p = Path(path)
    if table not in TABLES:
        raise UserError(f"unknown table '{table}' ({p})", key="measurements",
                        fix="known tables: " + ", ".join(TABLES))
    st = p.stat()
    df, digest = _read_cached(str(p.resolve()), st.st_size, st.st_mtime_ns, table)
    df = df.copy(deep=False)
    df["gpu"] = gpu
    return df, digest


def _table_files(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        name = p.name
        for suffix in (".csv.gz", ".csv"):
            if name.endswith(suffix) and name[: -len(suffix)] in TABLES:
                found.setdefault(name[: -len(suffix)], p)
    return found


def gpu_folders(root: Path) -> list[Path]:
    """Sub-folders of ``root`` that hold at least one known table."""
    if not root.is_dir():
        raise UserError(f"measurement directory '{root}' does not exist", key="measurements",
                        fix="pass --measurements DIR with one folder per GPU (e.g. DIR/h100_sxm/gemm.csv.gz)")
    folders = [p for p in sorted(root.iterdir()) if p.is_dir() and _table_files(p)]
    if not folders:
        raise UserError(f"no measurement tables under '{root}'", key="measurements",
                        fix="expected DIR/<gpu>/<table>.csv.gz with tables: " + ", ".join(TABLES))
    return folders


def read_measurements(root: str | Path, gpus: list[str] | None = None, tables: tuple[str, ...] = KERNEL_TABLES,
                      resolver: Callable[[str], GPUSpec] | None = None, skip_unknown: bool = False) -> Measurements:
    """Read every known table of every GPU folder (or only ``gpus``, given as catalog keys,
    aliases or folder names) into canonical frames grouped by family.

    A folder that names no catalog GPU is an error when every folder is to be read, unless
    ``skip_unknown``; when ``gpus`` selects some, such folders are skipped. Skipped folders
    are listed in ``Measurements.skipped`` so callers can say so."""
    root = Path(root)
    folders = gpu_folders(root)
    want = None
    if gpus:
        want = {resolve_gpu(g, resolver).key for g in gpus}
    frames: dict[str, list[pd.DataFrame]] = {}
    sources: list[SourceFile] = []
    specs: dict[str, GPUSpec] = {}
    skipped: list[str] = []
    known: list[str] = []
    for folder in folders:
        try:
            spec = resolve_gpu(folder.name, resolver)
        except UserError as exc:
            if want is not None or skip_unknown:
                skipped.append(folder.name)
                continue
            raise UserError(f"measurement folder '{folder.name}' does not name a catalog GPU", key="measurements",
                            fix=f"rename {folder} to a catalog key or alias, or pass --gpus ({exc})") from exc
        known.append(spec.key)
        if want is not None and spec.key not in want:
            continue
        specs[spec.key] = spec
        for table, path in _table_files(folder).items():
            if table not in tables:
                continue
            df, digest = read_table(path, table, spec.key)
            if table in SPLIT_TABLES:
                for fam in SPLIT_TABLES[table]:
                    part = df[df["family"] == fam]
                    if len(part):
                        frames.setdefault(fam, []).append(part.reset_index(drop=True))
            else:
                frames.setdefault(TABLES[table][0], []).append(df)
            sources.append(SourceFile(path.relative_to(root).as_posix(), spec.key, table, len(df), digest))
    if want is not None and (miss := sorted(want - set(specs))):
        raise UserError(f"no measurements for GPU{'s' if len(miss) > 1 else ''} {', '.join(miss)} under '{root}'",
                        key="gpus",
                        fix="measured GPUs there: " + ", ".join(sorted(known))
                        + (f" (folders naming no catalog GPU: {', '.join(skipped)})" if skipped else ""))
    merged = {fam: pd.concat(parts, ignore_index=True, sort=False) if len(parts) > 1 else parts[0]
              for fam, parts in sorted(frames.items())}
    return Measurements(root, merged, sources, specs, skipped)

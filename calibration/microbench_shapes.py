"""Shape grids and table layouts for ``llmplan measure`` (pure Python, no torch).

The grids are model-agnostic: powers of two plus the hidden and intermediate sizes that
common open models use, per GPU after tensor parallelism, so that the calibration can
interpolate for any model instead of the sweep being tied to one. The full sweep is sized
to finish in a few minutes on an H100-class GPU (see docs/MEASURE.md for the estimate);
``quick`` grids are tiny and exist for smoke tests, including on CPU.

The column tuples are the layout of ``shared/measurements/<gpu>/*.csv.gz`` (see its
README), which ``llmplan calibrate --measurements DIR`` reads as is.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------
# Table layouts: exactly the columns (and order) of the shared measurement tables.
# ---------------------------------------------------------------------------------------
GEMM_COLUMNS: tuple[str, ...] = (
    "backend", "backend_version", "op_name", "kernel_source", "gemm_dtype", "m", "n", "k", "latency_ms",
)
ATTENTION_COLUMNS: tuple[str, ...] = (
    "backend", "backend_version", "op_name", "kernel_source", "batch_size", "isl", "num_heads",
    "num_key_value_heads", "head_dim", "beam_width", "attn_dtype", "kv_cache_dtype", "step",
    "window_size", "latency_ms",
)
NCCL_COLUMNS: tuple[str, ...] = (
    "nccl_version", "op_name", "kernel_source", "nccl_dtype", "num_gpus", "message_size_elements", "latency_ms",
)
MANIFEST_COLUMNS: tuple[str, ...] = ("system", "table", "backend", "version", "rows")

#: table name -> columns; the table name is also the file stem (``<table>.csv.gz``).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": GEMM_COLUMNS,
    "context_attention": ATTENTION_COLUMNS,
    "generation_attention": ATTENTION_COLUMNS,
    "nccl": NCCL_COLUMNS,
}
TABLES: tuple[str, ...] = tuple(TABLE_COLUMNS)

# ---------------------------------------------------------------------------------------
# GEMM grid: (m x k) @ (k x n); m is the token count.
# ---------------------------------------------------------------------------------------
#: Token counts: powers of two (decode batches, prefill chunks) plus 3 common chunk sizes.
GEMM_M: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
#: Output / reduction sizes: hidden sizes (2048 .. 16384), their TP shards (256 .. 1024),
#: fused QKV widths (6144 = 4096 + 2 x 1024) and MLP widths (14336, 28672 = 2 x 14336).
GEMM_NK: tuple[int, ...] = (
    256, 512, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 14336, 16384, 28672,
)
GEMM_M_QUICK: tuple[int, ...] = (1, 16, 64)
GEMM_NK_QUICK: tuple[int, ...] = (64, 128)

#: gemm_dtype values as the measurement tables spell them.
GEMM_DTYPES: tuple[str, ...] = ("bfloat16", "fp8")

# ---------------------------------------------------------------------------------------
# Attention grids (heads are per GPU, after tensor parallelism).
# ---------------------------------------------------------------------------------------
#: Query heads per GPU: 64 (a 64-head model at TP1) down to 8 (TP8).
ATTN_HEADS: tuple[int, ...] = (8, 16, 32, 64)
#: KV heads per GPU: MQA (1), GQA (2, 4, 8) and MHA (== query heads), where they divide.
ATTN_KV_HEADS: tuple[int, ...] = (1, 2, 4, 8)
ATTN_HEAD_DIMS: tuple[int, ...] = (64, 128)
PREFILL_BATCH: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
PREFILL_ISL: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
#: Cap on prefill tokens per call (batch x isl): larger calls are linear extrapolations.
PREFILL_MAX_TOKENS = 65536
DECODE_BATCH: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: KV length each decoding sequence attends to (the tables' ``step``).
DECODE_KV_LEN: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
#: Cap on the bf16 K+V bytes one decode call reads (2 GiB: ~1 ms on H100 HBM3).
DECODE_MAX_KV_BYTES = 2 * 1024**3

PREFILL_BATCH_QUICK: tuple[int, ...] = (1, 2)
PREFILL_ISL_QUICK: tuple[int, ...] = (16, 32)
DECODE_BATCH_QUICK: tuple[int, ...] = (1, 4)
DECODE_KV_LEN_QUICK: tuple[int, ...] = (16, 64)
ATTN_HEADS_QUICK: tuple[int, ...] = (4,)
ATTN_KV_HEADS_QUICK: tuple[int, ...] = (1, 4)
ATTN_HEAD_DIMS_QUICK: tuple[int, ...] = (32,)

ATTN_DTYPE = "bfloat16"
KV_CACHE_DTYPE = "bfloat16"
BYTES_BF16 = 2

# ---------------------------------------------------------------------------------------
# All-reduce grid: message sizes in elements of fp16 ("half"), as in the shared nccl tables
# (2^8 .. 2^28 elements = 512 B .. 512 MiB).
# ---------------------------------------------------------------------------------------
ALLREDUCE_SIZES: tuple[int, ...] = tuple(2**e for e in range(8, 29))
ALLREDUCE_SIZES_QUICK: tuple[int, ...] = (256, 4096, 65536)
NCCL_DTYPE = "half"


@dataclass(frozen=True, slots=True)
class GemmShape:
    """One GEMM call: ``dtype`` is a table ``gemm_dtype`` value (bfloat16 | fp8)."""

    dtype: str
    m: int
    n: int
    k: int


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """One attention call. Prefill: ``q_len == kv_len == isl`` with a causal mask.
    Decode: ``q_len == 1`` against ``kv_len`` cached tokens (the table's ``step``)."""

    batch: int
    q_len: int
    kv_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def kv_bytes(self) -> int:
        """bf16 bytes of K and V for the whole batch (what a decode call must read)."""
        return 2 * self.batch * self.num_kv_heads * self.kv_len * self.head_dim * BYTES_BF16


@dataclass(frozen=True, slots=True)
class AllReduceShape:
    num_gpus: int
    elements: int


def _head_pairs(heads: tuple[int, ...], kv_heads: tuple[int, ...]) -> list[tuple[int, int]]:
    """(query heads, kv heads) with kv dividing the query heads; MHA (kv == q) included."""
    pairs: list[tuple[int, int]] = []
    for h in heads:
        for kv in sorted(set(kv_heads) | {h}):
            if kv <= h and h % kv == 0:
                pairs.append((h, kv))
    return pairs


def gemm_shapes(quick: bool = False, dtypes: tuple[str, ...] = GEMM_DTYPES) -> list[GemmShape]:
    ms = GEMM_M_QUICK if quick else GEMM_M
    nks = GEMM_NK_QUICK if quick else GEMM_NK
    return [GemmShape(d, m, n, k) for d in dtypes for m in ms for n in nks for k in nks]


def context_attention_shapes(quick: bool = False) -> list[AttentionShape]:
    if quick:
        batches, isls = PREFILL_BATCH_QUICK, PREFILL_ISL_QUICK
        pairs, dims = _head_pairs(ATTN_HEADS_QUICK, ATTN_KV_HEADS_QUICK), ATTN_HEAD_DIMS_QUICK
    else:
        batches, isls = PREFILL_BATCH, PREFILL_ISL
        pairs, dims = _head_pairs(ATTN_HEADS, ATTN_KV_HEADS), ATTN_HEAD_DIMS
    return [
        AttentionShape(b, s, s, h, kv, d)
        for d in dims for h, kv in pairs for s in isls for b in batches
        if quick or b * s <= PREFILL_MAX_TOKENS
    ]


def generation_attention_shapes(quick: bool = False) -> list[AttentionShape]:
    if quick:
        batches, lens = DECODE_BATCH_QUICK, DECODE_KV_LEN_QUICK
        pairs, dims = _head_pairs(ATTN_HEADS_QUICK, ATTN_KV_HEADS_QUICK), ATTN_HEAD_DIMS_QUICK
    else:
        batches, lens = DECODE_BATCH, DECODE_KV_LEN
        pairs, dims = _head_pairs(ATTN_HEADS, ATTN_KV_HEADS), ATTN_HEAD_DIMS
    shapes = [
        AttentionShape(b, 1, t, h, kv, d)
        for d in dims for h, kv in pairs for t in lens for b in batches
    ]
    return [s for s in shapes if quick or s.kv_bytes <= DECODE_MAX_KV_BYTES]


def allreduce_gpu_counts(visible: int) -> list[int]:
    """GPU counts to sweep: powers of two from 2 up to ``visible``, and ``visible`` itself."""
    counts = [n for n in (2, 4, 8, 16, 32) if n <= visible]
    if visible >= 2 and visible not in counts:
        counts.append(visible)
    return counts


def allreduce_shapes(visible: int, quick: bool = False) -> list[AllReduceShape]:
    sizes = ALLREDUCE_SIZES_QUICK if quick else ALLREDUCE_SIZES
    counts = allreduce_gpu_counts(visible)
    if quick:
        counts = counts[:1]
    return [AllReduceShape(n, e) for n in counts for e in sizes]


# ---------------------------------------------------------------------------------------
# Rows: one dict per measurement, keyed by the table's columns.
# ---------------------------------------------------------------------------------------
def gemm_row(version: str, kernel_source: str, shape: GemmShape, latency_ms: float) -> dict:
    return {"backend": "torch", "backend_version": version, "op_name": "gemm",
            "kernel_source": kernel_source, "gemm_dtype": shape.dtype,
            "m": shape.m, "n": shape.n, "k": shape.k, "latency_ms": latency_ms}


def attention_row(op_name: str, version: str, kernel_source: str, shape: AttentionShape,
                  latency_ms: float) -> dict:
    """``op_name`` is ``context_attention`` (isl = sequence length, step 0) or
    ``generation_attention`` (isl 1, step = KV length), as in the shared tables."""
    decode = op_name == "generation_attention"
    return {"backend": "torch", "backend_version": version, "op_name": op_name,
            "kernel_source": kernel_source, "batch_size": shape.batch,
            "isl": 1 if decode else shape.q_len, "num_heads": shape.num_heads,
            "num_key_value_heads": shape.num_kv_heads, "head_dim": shape.head_dim,
            "beam_width": 1, "attn_dtype": ATTN_DTYPE, "kv_cache_dtype": KV_CACHE_DTYPE,
            "step": shape.kv_len if decode else 0, "window_size": 0, "latency_ms": latency_ms}


def nccl_row(version: str, kernel_source: str, shape: AllReduceShape, latency_ms: float) -> dict:
    return {"nccl_version": version, "op_name": "all_reduce", "kernel_source": kernel_source,
            "nccl_dtype": NCCL_DTYPE, "num_gpus": shape.num_gpus,
            "message_size_elements": shape.elements, "latency_ms": latency_ms}


def slug(name: str) -> str:
    """Folder name for a device string: "NVIDIA H100 80GB HBM3" -> "nvidia_h100_80gb_hbm3"."""
    out, last_sep = [], True
    for ch in name.strip().lower():
        if ch.isascii() and ch.isalnum():
            out.append(ch)
            last_sep = False
        elif not last_sep:
            out.append("_")
            last_sep = True
    return "".join(out).strip("_")

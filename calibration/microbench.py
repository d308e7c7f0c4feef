"""``llmplan measure``: time GEMM, attention and all-reduce kernels on this machine's GPU.

The sweep (shapes in :mod:`calibration.microbench_shapes`) writes tables in the layout of
``shared/measurements`` so that ``llmplan calibrate --measurements OUT`` reads them as is::

    OUT/MANIFEST.csv                     system,table,backend,version,rows
    OUT/provenance.json                  device, versions, date, command line (per system)
    OUT/<gpu_folder>/gemm.csv.gz         bf16 torch.matmul and fp8 torch._scaled_mm
    OUT/<gpu_folder>/context_attention.csv.gz     causal SDPA prefill
    OUT/<gpu_folder>/generation_attention.csv.gz  SDPA decode (q_len 1; not a paged kernel)
    OUT/<gpu_folder>/nccl.csv.gz         NCCL all_reduce over 2..N visible GPUs

PyTorch is an optional extra (``pip install 'llmplan[measure]'``) and is imported lazily,
so this module and its tests load without it. The sweep core (:func:`measure`) takes any
object with the :class:`Bench` interface; :class:`TorchBench` is the real one and tests
pass a fake one with a fake timer.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import platform
import shlex
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from llmplan.calibration import microbench_shapes as shapes
from llmplan.calibration.microbench_shapes import AllReduceShape, AttentionShape, GemmShape
from llmplan.errors import UserError, suggest

#: ``kernel_source`` values written to the tables.
KERNEL_BF16_GEMM = "torch.matmul"
KERNEL_FP8_GEMM = "torch._scaled_mm"
KERNEL_SDPA = "torch.nn.functional.scaled_dot_product_attention"
KERNEL_NCCL = "NCCL"

#: A timer runs ``fn`` ``warmup`` times untimed, then ``repeats`` timed, and returns the
#: median latency in milliseconds.
Timer = Callable[[Callable[[], object], int, int], float]

INSTALL_FIX = "pip install 'llmplan[measure]' (for a GPU, a CUDA build of torch: see pytorch.org)"


# ---------------------------------------------------------------------------------------
# Timers
# ---------------------------------------------------------------------------------------
def cpu_timer(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    """Wall-clock median with ``time.perf_counter_ns`` (CPU kernels run synchronously)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return float(statistics.median(samples))


#: GPU clock cycles of spin queued per timed call when calls are short (~75 us at 2 GHz):
#: while the GPU spins the CPU queues all timed calls, which then run back to back, so the
#: event intervals are device time, not Python launch overhead (engines hide that with
#: CUDA graphs). Calls that take longer than SPIN_BELOW_MS need no spin.
SPIN_CYCLES_PER_CALL = 150_000
SPIN_BELOW_MS = 0.2


def cuda_event_timer(torch: Any) -> Timer:
    """Median of per-call ``torch.cuda.Event`` intervals on the current stream, after warm-up."""

    def timer(fn: Callable[[], object], warmup: int, repeats: int) -> float:
        w0, w1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w0.record()
        for _ in range(warmup):
            fn()
        w1.record()
        torch.cuda.synchronize()
        per_call_ms = w0.elapsed_time(w1) / warmup if warmup else 0.0
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        if per_call_ms < SPIN_BELOW_MS and hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(SPIN_CYCLES_PER_CALL * repeats)
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return float(statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)))

    return timer


# ---------------------------------------------------------------------------------------
# The bench interface and its torch implementation
# ---------------------------------------------------------------------------------------
class Bench(Protocol):
    """What the sweep needs from a device. ``gemm``/``attention`` return a closure to time
    (inputs allocated outside it); ``fp8_unsupported`` and ``allreduce_unsupported`` return
    None when the op can run, else the reason it is skipped."""

    device_name: str
    backend_version: str
    nccl_version: str
    timer: Timer

    def fp8_unsupported(self) -> str | None: ...
    def gemm(self, shape: GemmShape) -> Callable[[], object]: ...
    def attention(self, shape: AttentionShape, causal: bool) -> Callable[[], object]: ...
    def visible_gpus(self) -> int: ...
    def allreduce_unsupported(self) -> str | None: ...
    def run_allreduce(self, todo: Sequence[AllReduceShape], warmup: int, repeats: int,
                      on_row: Callable[[dict], None]) -> None: ...
    def release(self) -> None: ...
    def info(self) -> dict: ...


def import_torch() -> Any:
    """``import torch``, or a UserError that says how to install the ``measure`` extra."""
    try:
        import torch
    except ImportError as exc:
        raise UserError("PyTorch is not installed; `llmplan measure` needs it", key="measure",
                        fix=INSTALL_FIX) from exc
    return torch


class _Pool:
    """One growing random buffer per dtype; each call hands out disjoint views of it, so
    a shape costs no fresh allocation and no fresh random fill."""

    def __init__(self, torch: Any, device: Any, dtype: Any):
        self.torch, self.device, self.dtype, self.buf = torch, device, dtype, None

    def tensors(self, *dims: tuple[int, ...]) -> list[Any]:
        sizes = [_prod(d) for d in dims]
        need = sum(sizes)
        if self.buf is None or self.buf.numel() < need:
            grown = max(need, 2 * (0 if self.buf is None else self.buf.numel()))
            self.buf = None
            try:  # grow geometrically, so a sweep of rising sizes refills rarely
                self.buf = self._fill(grown)
            except RuntimeError:  # no room to double: exactly what this shape needs
                if self.device.type == "cuda":
                    self.torch.cuda.empty_cache()
                self.buf = self._fill(need)
        out, off = [], 0
        for d, n in zip(dims, sizes):
            out.append(self.buf[off:off + n].view(d))
            off += n
        return out

    def _fill(self, numel: int) -> Any:
        fill = self.torch.randn(numel, dtype=self.torch.bfloat16, device=self.device)
        return fill if self.dtype == self.torch.bfloat16 else fill.to(self.dtype)


def _prod(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


class TorchBench:
    """The real bench: torch kernels on ``device`` ("cuda", "cuda:N" or "cpu")."""

    def __init__(self, torch: Any, device: str = "cuda"):
        self.torch = torch
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        if self.is_cuda:
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
            self.device_name = str(torch.cuda.get_device_name(self.device))
            self.timer: Timer = cuda_event_timer(torch)
        else:
            self.device_name = "cpu"
            self.timer = cpu_timer
        self.backend_version = str(torch.__version__)
        self.nccl_version = _nccl_version(torch) if self.is_cuda else "n/a"
        self._pools: dict[str, _Pool] = {}
        self.native_gqa = self._probe_gqa()
        #: Bytes of distinct weights (GEMM B) or KV cache (decode) cycled through per shape,
        #: so that memory-bound calls read HBM as in a real forward pass, not a warm L2.
        #: Twice the L2 size on a GPU; 0 (no rotation) on CPU.
        self.rotate_bytes = 2 * _l2_bytes(torch, self.device) if self.is_cuda else 0

    @classmethod
    def create(cls, device: str) -> TorchBench:
        torch = import_torch()
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UserError("no CUDA GPU is visible to torch", key="--device",
                                fix="run on a GPU machine with a CUDA build of torch, or use --device cpu for a smoke test")
            index = device.partition(":")[2]
            if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
                raise UserError(f"'{device}' does not name one of the {torch.cuda.device_count()} visible GPUs",
                                key="--device", fix="use cuda, cuda:0 .. cuda:N-1, or cpu")
        return cls(torch, device)

    def _pool(self, name: str) -> _Pool:
        if name not in self._pools:
            dtype = self.torch.bfloat16 if name == "bfloat16" else self.torch.float8_e4m3fn
            self._pools[name] = _Pool(self.torch, self.device, dtype)
        return self._pools[name]

    def _probe_gqa(self) -> bool:
        """Whether SDPA takes ``enable_gqa`` (torch >= 2.5); else K/V heads are repeated."""
        t = self.torch
        q = t.randn(1, 4, 2, 16, dtype=t.bfloat16, device=self.device)
        kv = t.randn(1, 2, 2, 16, dtype=t.bfloat16, device=self.device)
        try:
            t.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        except (TypeError, RuntimeError):
            return False
        return True

    def fp8_unsupported(self) -> str | None:
        t = self.torch
        if not hasattr(t, "_scaled_mm") or not hasattr(t, "float8_e4m3fn"):
            return f"torch {self.backend_version} has no torch._scaled_mm / float8_e4m3fn"
        if self.is_cuda:
            cap = t.cuda.get_device_capability(self.device)
            if tuple(cap) < (8, 9):
                return f"compute capability {cap[0]}.{cap[1]} has no fp8 tensor cores (needs 8.9+)"
        try:
            self.gemm(GemmShape("fp8", 16, 16, 16))()
        except Exception as exc:  # noqa: BLE001 - any failure means: no fp8 here
            return f"torch._scaled_mm failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        return None

    def _copies(self, nbytes: int) -> int:
        """How many distinct copies of an operand of ``nbytes`` to cycle through."""
        return max(1, -(-self.rotate_bytes // max(nbytes, 1))) if self.rotate_bytes > 0 else 1

    def gemm(self, shape: GemmShape) -> Callable[[], object]:
        t, m, n, k = self.torch, shape.m, shape.n, shape.k
        if shape.dtype == "bfloat16":
            copies = self._copies(k * n * 2)
            a, *bs = self._pool("bfloat16").tensors((m, k), *[(k, n)] * copies)
            c = t.empty((m, n), dtype=t.bfloat16, device=self.device)
            weights = itertools.cycle(bs)
            return lambda: t.matmul(a, next(weights), out=c)
        if shape.dtype == "fp8":
            copies = self._copies(k * n)
            a, *bs = self._pool("fp8").tensors((m, k), *[(n, k)] * copies)
            weights = itertools.cycle([b.t() for b in bs])  # column-major, as _scaled_mm requires
            scale = t.ones((), dtype=t.float32, device=self.device)
            return lambda: t._scaled_mm(a, next(weights), scale_a=scale, scale_b=scale, out_dtype=t.bfloat16)
        raise ValueError(f"unknown gemm dtype {shape.dtype}")

    def attention(self, shape: AttentionShape, causal: bool) -> Callable[[], object]:
        t, s = self.torch, shape
        copies = 1 if causal else self._copies(s.kv_bytes)  # decode reads a cold KV cache
        kv_dims = (s.batch, s.num_kv_heads, s.kv_len, s.head_dim)
        q, *kvs = self._pool("bfloat16").tensors((s.batch, s.num_heads, s.q_len, s.head_dim),
                                                 *[kv_dims] * (2 * copies))
        kwargs: dict[str, Any] = {"is_causal": causal}
        if s.num_kv_heads != s.num_heads:
            if self.native_gqa:
                kwargs["enable_gqa"] = True
            else:  # older torch: expand K/V heads outside the timed call
                rep = s.num_heads // s.num_kv_heads
                kvs = [x.repeat_interleave(rep, dim=1) for x in kvs]
        caches = itertools.cycle(list(zip(kvs[0::2], kvs[1::2])))
        sdpa = t.nn.functional.scaled_dot_product_attention

        def call() -> object:
            k, v = next(caches)
            return sdpa(q, k, v, **kwargs)

        return call

    def visible_gpus(self) -> int:
        return self.torch.cuda.device_count() if self.is_cuda else 0

    def allreduce_unsupported(self) -> str | None:
        if not self.is_cuda:
            return "all-reduce needs 2+ GPUs; skipped on --device cpu"
        if self.visible_gpus() < 2:
            return "only one GPU is visible; all-reduce skipped (needs 2+, see CUDA_VISIBLE_DEVICES)"
        if not self.torch.distributed.is_available() or not self.torch.distributed.is_nccl_available():
            return "torch.distributed with NCCL is not available in this torch build"
        return None

    def run_allreduce(self, todo: Sequence[AllReduceShape], warmup: int, repeats: int,
                      on_row: Callable[[dict], None]) -> None:
        self.release()  # leave GPU 0's memory to the rank-0 worker
        run_allreduce(self.visible_gpus(), "nccl", todo, warmup, repeats, on_row)

    def release(self) -> None:
        self._pools.clear()
        if self.is_cuda:
            self.torch.cuda.empty_cache()

    def info(self) -> dict:
        t = self.torch
        info = {"device": str(self.device), "device_name": self.device_name,
                "torch_version": self.backend_version, "cuda_version": t.version.cuda,
                "nccl_version": self.nccl_version, "sdpa_enable_gqa": self.native_gqa,
                "timer": "torch.cuda.Event" if self.is_cuda else "time.perf_counter_ns",
                "rotated_operand_bytes": self.rotate_bytes}
        if self.is_cuda:
            cap = t.cuda.get_device_capability(self.device)
            info.update(compute_capability=f"{cap[0]}.{cap[1]}", gpu_count=t.cuda.device_count(),
                        cudnn_version=t.backends.cudnn.version())
        return info


def _l2_bytes(torch: Any, device: Any) -> int:
    """The GPU's L2 cache size (64 MiB where torch does not report it)."""
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20)


def _nccl_version(torch: Any) -> str:
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a build without NCCL
        return "n/a"
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


# ---------------------------------------------------------------------------------------
# All-reduce: one spawned process per GPU, rows come back over a queue
# ---------------------------------------------------------------------------------------
def run_allreduce(world: int, backend: str, todo: Sequence[AllReduceShape], warmup: int,
                  repeats: int, on_row: Callable[[dict], None], timeout_s: float | None = None) -> None:
    """Time ``all_reduce`` on fp16 buffers in ``world`` spawned processes (``backend`` nccl
    on GPUs 0..world-1, or gloo on CPU for tests). The latency of a shape is the slowest
    rank's median. Raises RuntimeError with the worker's traceback if a worker fails, or
    if ``timeout_s`` passes first."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [ctx.Process(target=_allreduce_worker, daemon=True,
                         args=(rank, world, port, backend, list(todo), warmup, repeats, queue))
             for rank in range(world)]
    for p in procs:
        p.start()
    done, deadline = 0, None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while done < world:
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"all-reduce workers did not finish within {timeout_s:.0f} s")
            try:
                kind, payload = queue.get(timeout=2.0)
            except Exception:  # noqa: BLE001 - queue.Empty: check the workers are alive
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"all-reduce worker exited with code {dead[0].exitcode}") from None
                continue
            if kind == "row":
                on_row(payload)
            elif kind == "done":
                done += 1
            else:
                raise RuntimeError(f"all-reduce worker failed:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=30 if done == world else 1)
            if p.is_alive():
                p.terminate()
                p.join()


def _allreduce_worker(rank: int, world: int, port: int, backend: str, todo: list[AllReduceShape],
                      warmup: int, repeats: int, queue: Any) -> None:
    try:
        import torch
        import torch.distributed as dist

        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device, timer = torch.device("cuda", rank), cuda_event_timer(torch)
            version, source = _nccl_version(torch), KERNEL_NCCL
        else:
            if sys.platform.startswith("linux"):
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # rendezvous stays on loopback
            device, timer, version, source = torch.device("cpu"), cpu_timer, str(torch.__version__), backend
        dist.init_process_group(backend, rank=rank, world_size=world)
        for n in sorted({s.num_gpus for s in todo}):
            group = dist.new_group(list(range(n)))  # every rank must take part in creating it
            if rank < n:
                for s in (s for s in todo if s.num_gpus == n):
                    buf = torch.zeros(s.elements, dtype=torch.float16, device=device)
                    ms = timer(lambda: dist.all_reduce(buf, group=group), warmup, repeats)
                    worst = torch.tensor([ms], dtype=torch.float64, device=device)
                    dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=group)
                    if rank == 0:
                        queue.put(("row", shapes.nccl_row(version, source, s, float(worst.item()))))
                    del buf
            dist.barrier()
        dist.destroy_process_group()
        queue.put(("done", rank))
    except BaseException:  # report, then exit non-zero
        queue.put(("error", f"rank {rank}:\n{traceback.format_exc()}"))
        raise


# ---------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------
@dataclass
class TableResult:
    """Rows measured for one table, shapes that failed, and notes (skip reasons)."""

    rows: list[dict] = field(default_factory=list)
    skipped: int = 0
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class MeasureOptions:
    """Everything ``llmplan measure`` was asked for (the parsed command line)."""

    out: Path
    device: str = "cuda"
    quick: bool = False
    repeats: int = 20
    warmup: int = 5
    gpu_name: str | None = None
    overwrite: bool = False
    tables: tuple[str, ...] = shapes.TABLES
    fp8: bool = True
    command_line: str = "llmplan measure"


@dataclass
class MeasureReport:
    folder: Path
    results: dict[str, TableResult]
    elapsed_s: float
    partial: bool
    written: list[Path]


def plan_sweep(bench: Bench, opts: MeasureOptions) -> tuple[dict[str, list], dict[str, list[str]]]:
    """Shapes to run per table, and notes on what is skipped whole (fp8, all-reduce)."""
    todo: dict[str, list] = {}
    notes: dict[str, list[str]] = {t: [] for t in opts.tables}
    if "gemm" in opts.tables:
        dtypes = ["bfloat16"]
        reason = bench.fp8_unsupported() if opts.fp8 else "fp8 off (--no-fp8)"
        if reason is None:
            dtypes.append("fp8")
        else:
            notes["gemm"].append(f"fp8 skipped: {reason}")
        todo["gemm"] = shapes.gemm_shapes(opts.quick, tuple(dtypes))
    if "context_attention" in opts.tables:
        todo["context_attention"] = shapes.context_attention_shapes(opts.quick)
    if "generation_attention" in opts.tables:
        todo["generation_attention"] = shapes.generation_attention_shapes(opts.quick)
    if "nccl" in opts.tables:
        reason = bench.allreduce_unsupported()
        if reason is None:
            todo["nccl"] = shapes.allreduce_shapes(bench.visible_gpus(), opts.quick)
        else:
            notes["nccl"].append(reason)
    return todo, notes


def _measure_one(bench: Bench, table: str, shape: Any, opts: MeasureOptions) -> dict:
    if table == "gemm":
        source = KERNEL_BF16_GEMM if shape.dtype == "bfloat16" else KERNEL_FP8_GEMM
        ms = bench.timer(bench.gemm(shape), opts.warmup, opts.repeats)
        return shapes.gemm_row(bench.backend_version, source, shape, ms)
    causal = table == "context_attention"
    ms = bench.timer(bench.attention(shape, causal), opts.warmup, opts.repeats)
    return shapes.attention_row(table, bench.backend_version, KERNEL_SDPA, shape, ms)


def run_sweep(bench: Bench, todo: dict[str, list], notes: dict[str, list[str]], opts: MeasureOptions,
              tick: Callable[[str], None] = lambda table: None) -> tuple[dict[str, TableResult], bool]:
    """Measure every shape; a shape that fails (out of memory, unsupported) is counted as
    skipped and its first error noted. Returns the results and whether Ctrl-C cut it short."""
    results = {t: TableResult(notes=list(notes.get(t, []))) for t in opts.tables}
    try:
        for table, todo_shapes in todo.items():
            res, t0 = results[table], time.perf_counter()
            try:
                if table == "nccl":
                    def on_row(row: dict, res: TableResult = res) -> None:
                        res.rows.append(row)
                        tick("nccl")
                    try:
                        bench.run_allreduce(todo_shapes, opts.warmup, opts.repeats, on_row)
                    except RuntimeError as exc:
                        res.skipped = len(todo_shapes) - len(res.rows)
                        lines = [ln for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
                        res.notes.append(f"all-reduce failed: {lines[-1].strip()[:200]}")
                    continue
                for shape in todo_shapes:
                    try:
                        res.rows.append(_measure_one(bench, table, shape, opts))
                    except (RuntimeError, ValueError, NotImplementedError, MemoryError) as exc:
                        bench.release()
                        res.skipped += 1
                        if res.skipped == 1:
                            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                            res.notes.append(f"first failed shape {shape}: {first[:200]}")
                    tick(table)
            finally:
                res.elapsed_s = time.perf_counter() - t0
        return results, False
    except KeyboardInterrupt:
        return results, True
    finally:
        bench.release()


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
def check_out_dir(out: Path, overwrite: bool) -> None:
    """``--out`` must be a new or empty directory, or ``--overwrite`` must be given."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a directory", key="--out", fix="name a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"{out} exists and is not empty", key="--out",
                        fix="name a new directory, or pass --overwrite (replaces this GPU's tables; "
                            "other GPUs' folders in it are kept)")


def table_versions(bench: Bench, table: str) -> tuple[str, str]:
    """(backend, version) for MANIFEST.csv, as the shared MANIFEST spells them."""
    return ("nccl", bench.nccl_version) if table == "nccl" else ("torch", bench.backend_version)


def write_outputs(out: Path, folder: str, results: dict[str, TableResult],
                  versions: dict[str, tuple[str, str]], provenance: dict) -> list[Path]:
    """Write ``OUT/<folder>/<table>.csv.gz`` for each table with rows, and merge this
    system's lines into ``OUT/MANIFEST.csv`` and its entry into ``OUT/provenance.json``
    (other systems already in OUT are kept). Returns the files written."""
    import pandas as pd

    system_dir = out / folder
    system_dir.mkdir(parents=True, exist_ok=True)
    for stale in system_dir.glob("*.csv.gz"):  # --overwrite: no table of an older run survives
        stale.unlink()
    written, manifest_rows = [], []
    for table, res in results.items():
        if not res.rows:
            continue
        path = system_dir / f"{table}.csv.gz"
        columns = list(shapes.TABLE_COLUMNS[table])
        pd.DataFrame(res.rows, columns=columns).to_csv(path, index=False, compression="gzip")
        written.append(path)
        backend, version = versions[table]
        manifest_rows.append({"system": folder, "table": table, "backend": backend,
                              "version": version, "rows": len(res.rows)})

    manifest_path = out / "MANIFEST.csv"
    manifest = pd.DataFrame(manifest_rows, columns=list(shapes.MANIFEST_COLUMNS))
    if manifest_path.is_file():
        old = pd.read_csv(manifest_path, dtype=str)
        old = old[old["system"] != folder]
        manifest = pd.concat([old, manifest.astype(str)], ignore_index=True) if len(old) else manifest
    manifest.to_csv(manifest_path, index=False)
    written.append(manifest_path)

    prov_path = out / "provenance.json"
    prov = {"tool": "llmplan measure", "systems": {}}
    if prov_path.is_file():
        try:
            prov = json.loads(prov_path.read_text())
            prov.setdefault("systems", {})
        except (json.JSONDecodeError, AttributeError):
            prov = {"tool": "llmplan measure", "systems": {}}
    prov["systems"][folder] = provenance
    prov_path.write_text(json.dumps(prov, indent=2, sort_keys=False) + "\n")
    written.append(prov_path)
    return written


def measure(opts: MeasureOptions, bench: Bench, console: Any = None) -> MeasureReport:
    """Plan, run (with a rich progress bar) and write one system's tables."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    from llmplan import __version__

    console = console or Console(stderr=True)
    folder = shapes.slug(opts.gpu_name or bench.device_name) or "gpu"
    todo, notes = plan_sweep(bench, opts)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console) as progress:
        tasks = {t: progress.add_task(t, total=len(s)) for t, s in todo.items()}
        results, partial = run_sweep(bench, todo, notes, opts,
                                     tick=lambda table: progress.advance(tasks[table]))
    elapsed = time.perf_counter() - t0
    provenance = {
        **bench.info(),
        "gpu_folder": folder,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command_line": opts.command_line,
        "llmplan_version": __version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "settings": {"quick": opts.quick, "warmup": opts.warmup, "repeats": opts.repeats,
                     "tables": list(opts.tables), "fp8": opts.fp8},
        "timing": f"median of {opts.repeats} timed calls after {opts.warmup} warm-up calls",
        "tables": {t: {"rows": len(r.rows), "skipped": r.skipped, "elapsed_s": round(r.elapsed_s, 3),
                       "notes": r.notes} for t, r in results.items()},
        "elapsed_s": round(elapsed, 3),
        "partial": partial,
    }
    versions = {t: table_versions(bench, t) for t in results}
    written = write_outputs(opts.out, folder, results, versions, provenance)
    return MeasureReport(opts.out / folder, results, elapsed, partial, written)


def catalog_note(folder: str) -> str | None:
    """A hint when ``folder`` is not a GPU of the catalog (calibrate resolves folder names)."""
    try:
        from llmplan.hardware_catalog.loader import get_gpu
    except ImportError:
        return None
    try:
        get_gpu(folder)
    except Exception:  # noqa: BLE001 - any lookup failure: the folder needs a catalog name
        return (f"'{folder}' is not a GPU of the catalog: rerun with --gpu-name KEY (see "
                f"`llmplan catalog gpus`) or rename the folder before `llmplan calibrate`")
    return None


def print_summary(report: MeasureReport, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"llmplan measure -> {report.folder}")
    for col, justify in (("table", "left"), ("rows", "right"), ("skipped", "right"),
                         ("elapsed", "right"), ("notes", "left")):
        table.add_column(col, justify=justify)
    for name, res in report.results.items():
        table.add_row(name, str(len(res.rows)), str(res.skipped), f"{res.elapsed_s:.1f} s",
                      "; ".join(res.notes) or "")
    console.print(table)
    total = sum(len(r.rows) for r in report.results.values())
    state = "interrupted; partial tables written" if report.partial else "done"
    console.print(f"{state}: {total} rows in {report.elapsed_s:.1f} s; wrote "
                  + ", ".join(str(p) for p in report.written))
    note = catalog_note(report.folder.name)
    if note:
        console.print(f"note: {note}")


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="llmplan measure",
        description="Time GEMM, attention and all-reduce kernels on this GPU and write tables in "
                    "the shared measurement layout, for `llmplan calibrate --measurements OUT`.")
    p.add_argument("--out", required=True, type=Path, help="output directory (new or empty)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke tests only)")
    p.add_argument("--quick", action="store_true", help="a tiny sweep (seconds), to check the setup")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per shape; the median is kept (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing (default 5)")
    p.add_argument("--gpu-name", default=None,
                   help="output folder name (slugged), e.g. h100_sxm; default: the device name")
    p.add_argument("--tables", default=",".join(shapes.TABLES),
                   help=f"comma-separated subset of {','.join(shapes.TABLES)} (default: all)")
    p.add_argument("--no-fp8", action="store_true", help="skip the fp8 torch._scaled_mm GEMMs")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a non-empty --out (replaces this GPU's tables, keeps other GPUs')")
    return p


def parse_options(argv: list[str]) -> MeasureOptions:
    args = build_parser().parse_args(argv)
    if args.repeats < 1:
        raise UserError(f"must be at least 1, got {args.repeats}", key="--repeats")
    if args.warmup < 0:
        raise UserError(f"must be 0 or more, got {args.warmup}", key="--warmup")
    device = args.device.strip().lower()
    if device != "cpu" and device != "cuda" and not device.startswith("cuda:"):
        raise UserError(f"unknown device '{args.device}'", key="--device", fix="use cuda, cuda:N or cpu")
    tables = tuple(t.strip() for t in args.tables.split(",") if t.strip())
    for t in tables:
        if t not in shapes.TABLES:
            raise UserError(f"unknown table '{t}'; {suggest(t, shapes.TABLES)}", key="--tables")
    if not tables:
        raise UserError("no table selected", key="--tables", fix=f"any of {','.join(shapes.TABLES)}")
    if args.gpu_name is not None and not shapes.slug(args.gpu_name):
        raise UserError(f"'{args.gpu_name}' has no letters or digits", key="--gpu-name")
    ordered = tuple(t for t in shapes.TABLES if t in tables)
    return MeasureOptions(out=args.out, device=device, quick=args.quick, repeats=args.repeats,
                          warmup=args.warmup, gpu_name=args.gpu_name, overwrite=args.overwrite,
                          tables=ordered, fp8=not args.no_fp8,
                          command_line=shlex.join(["llmplan", "measure", *argv]))


def main(argv: list[str] | None = None,
         make_bench: Callable[[str], Bench] | None = None) -> int:
    """Entry point of ``llmplan measure``. ``make_bench`` (device -> Bench) is for tests."""
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = parse_options(argv)
    check_out_dir(opts.out, opts.overwrite)
    bench = (make_bench or TorchBench.create)(opts.device)
    report = measure(opts, bench)
    print_summary(report)
    if report.partial:
        return 130
    return 0 if any(r.rows for r in report.results.values()) else 1

"""`llmplan measure`: shape grids, table layout, error paths, and (with torch) a CPU run.

Tests that need torch call ``pytest.importorskip("torch")`` themselves; the rest run with
a fake bench and a fake timer, so CI without torch still checks the layout and errors.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from llmplan.calibration import microbench as mb
from llmplan.calibration import microbench_shapes as shp
from llmplan import cli

SHARED = Path(__file__).resolve().parents[2] / "shared" / "measurements"

# The layout of shared/measurements/<gpu>/*.csv.gz (its README), spelled out here so the
# check stands even where shared/ is absent.
EXPECTED = {
    "gemm": ["backend", "backend_version", "op_name", "kernel_source", "gemm_dtype", "m", "n", "k",
             "latency_ms"],
    "context_attention": ["backend", "backend_version", "op_name", "kernel_source", "batch_size", "isl",
                          "num_heads", "num_key_value_heads", "head_dim", "beam_width", "attn_dtype",
                          "kv_cache_dtype", "step", "window_size", "latency_ms"],
    "nccl": ["nccl_version", "op_name", "kernel_source", "nccl_dtype", "num_gpus",
             "message_size_elements", "latency_ms"],
}
EXPECTED["generation_attention"] = EXPECTED["context_attention"]


class FakeBench:
    """A Bench with no torch: every call "takes" 0.25 ms; all-reduce rows are synthesized."""

    device_name = "NVIDIA Fake GPU 80GB HBM9"
    backend_version = "9.9.9-test"
    nccl_version = "2.99.1"

    def __init__(self, fp8: bool = True, gpus: int = 4, fail_m: int | None = None):
        self._fp8, self._gpus, self.fail_m, self.calls = fp8, gpus, fail_m, 0

    def timer(self, fn, warmup, repeats):
        for _ in range(warmup + repeats):
            fn()
        return 0.25

    def _fn(self):
        self.calls += 1

    def fp8_unsupported(self):
        return None if self._fp8 else "no fp8 on the fake"

    def gemm(self, shape):
        if shape.m == self.fail_m:
            raise RuntimeError("CUDA out of memory (fake)")
        return self._fn

    def attention(self, shape, causal):
        return self._fn

    def visible_gpus(self):
        return self._gpus

    def allreduce_unsupported(self):
        return None if self._gpus >= 2 else "only one GPU is visible"

    def run_allreduce(self, todo, warmup, repeats, on_row):
        for s in todo:
            on_row(shp.nccl_row(self.nccl_version, mb.KERNEL_NCCL, s, 0.01 * s.num_gpus))

    def release(self):
        pass

    def info(self):
        return {"device": "cuda:0", "device_name": self.device_name, "torch_version": self.backend_version}


def _read(path: Path) -> pd.DataFrame:
    with gzip.open(path, "rt") as fh:  # really gzip, not just named so
        header = fh.readline().strip().split(",")
    df = pd.read_csv(path)
    assert list(df.columns) == header
    return df


# ---------------------------------------------------------------------------------------
# Without torch
# ---------------------------------------------------------------------------------------
def test_table_columns_are_the_shared_layout():
    assert {t: list(c) for t, c in shp.TABLE_COLUMNS.items()} == EXPECTED
    if not SHARED.is_dir():
        pytest.skip("shared/measurements not beside the checkout")
    for table in EXPECTED:
        with gzip.open(SHARED / "h100_sxm" / f"{table}.csv.gz", "rt") as fh:
            assert fh.readline().strip().split(",") == EXPECTED[table]
    manifest = (SHARED / "MANIFEST.csv").read_text().splitlines()[0].split(",")
    assert manifest == list(shp.MANIFEST_COLUMNS)


def test_full_grids_are_model_agnostic_and_bounded():
    gemm = shp.gemm_shapes()
    assert len(gemm) == 2 * len(shp.GEMM_M) * len(shp.GEMM_NK) ** 2
    assert {s.dtype for s in gemm} == {"bfloat16", "fp8"}
    assert {1, 1024, 16384} <= {s.m for s in gemm} and {4096, 5120, 8192, 14336} <= {s.n for s in gemm}
    assert len(shp.gemm_shapes(dtypes=("bfloat16",))) == len(gemm) // 2

    ctx = shp.context_attention_shapes()
    assert ctx and all(s.batch * s.q_len <= shp.PREFILL_MAX_TOKENS and s.q_len == s.kv_len for s in ctx)
    assert all(s.num_heads % s.num_kv_heads == 0 for s in ctx)
    assert {(64, 8), (32, 32), (8, 1)} <= {(s.num_heads, s.num_kv_heads) for s in ctx}
    dec = shp.generation_attention_shapes()
    assert dec and all(s.q_len == 1 and s.kv_bytes <= shp.DECODE_MAX_KV_BYTES for s in dec)
    assert max(s.kv_len for s in dec) == 32768 and max(s.batch for s in dec) == 256

    # the full sweep stays a few minutes' work on an H100: rough FLOP and byte budgets
    assert sum(2 * s.m * s.n * s.k for s in gemm if s.dtype == "bfloat16") < 2e15
    assert sum(s.kv_bytes for s in dec) < 1e12

    assert shp.allreduce_gpu_counts(1) == [] and shp.allreduce_gpu_counts(8) == [2, 4, 8]
    assert shp.allreduce_gpu_counts(6) == [2, 4, 6]
    sizes = [s.elements for s in shp.allreduce_shapes(2)]
    assert sizes[0] == 256 and sizes[-1] == 2**28


def test_quick_grids_are_tiny():
    assert len(shp.gemm_shapes(quick=True)) <= 32
    assert len(shp.context_attention_shapes(quick=True)) <= 16
    assert len(shp.generation_attention_shapes(quick=True)) <= 16
    assert len(shp.allreduce_shapes(8, quick=True)) <= 4


def test_rows_follow_the_table_conventions():
    dec = shp.attention_row("generation_attention", "v", "k", shp.AttentionShape(8, 1, 4096, 32, 8, 128), 1.0)
    assert (dec["isl"], dec["step"], dec["window_size"], dec["beam_width"]) == (1, 4096, 0, 1)
    ctx = shp.attention_row("context_attention", "v", "k", shp.AttentionShape(2, 512, 512, 32, 8, 128), 1.0)
    assert (ctx["isl"], ctx["step"]) == (512, 0)
    for row, table in ((dec, "generation_attention"), (ctx, "context_attention"),
                       (shp.gemm_row("v", "k", shp.GemmShape("fp8", 1, 2, 3), 1.0), "gemm"),
                       (shp.nccl_row("v", "NCCL", shp.AllReduceShape(2, 256), 1.0), "nccl")):
        assert list(row) == EXPECTED[table]


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"),
    ("NVIDIA A100-SXM4-80GB", "nvidia_a100_sxm4_80gb"),
    ("  h100_sxm ", "h100_sxm"),
    ("NVIDIA GeForce RTX 4090 (x)", "nvidia_geforce_rtx_4090_x"),
])
def test_slug(name, expected):
    assert shp.slug(name) == expected


def test_cpu_timer_warms_up_then_takes_the_median():
    calls = []
    ms = mb.cpu_timer(lambda: calls.append(1), warmup=3, repeats=5)
    assert len(calls) == 8 and ms >= 0.0


def test_fake_bench_writes_the_measurement_layout(tmp_path, capsys):
    out = tmp_path / "meas"
    bench = FakeBench(fp8=False, gpus=4)
    rc = mb.main(["--out", str(out), "--quick", "--repeats", "3", "--warmup", "2"], make_bench=lambda d: bench)
    assert rc == 0
    system = out / "nvidia_fake_gpu_80gb_hbm9"
    assert sorted(p.name for p in system.iterdir()) == sorted(f"{t}.csv.gz" for t in EXPECTED)
    for table, columns in EXPECTED.items():
        df = _read(system / f"{table}.csv.gz")
        assert list(df.columns) == columns
        assert (df["latency_ms"] > 0).all()
    gemm = _read(system / "gemm.csv.gz")
    assert set(gemm["gemm_dtype"]) == {"bfloat16"} and set(gemm["kernel_source"]) == {"torch.matmul"}
    assert len(gemm) == len(shp.gemm_shapes(quick=True, dtypes=("bfloat16",)))
    assert set(gemm["backend"]) == {"torch"} and set(gemm["backend_version"]) == {"9.9.9-test"}
    nccl = _read(system / "nccl.csv.gz")
    assert set(nccl["num_gpus"]) == {2} and set(nccl["nccl_dtype"]) == {"half"}
    assert set(nccl["op_name"]) == {"all_reduce"}
    assert bench.calls == 5 * (len(gemm) + 2 * 8)  # warm-up + repeats for every non-nccl shape

    manifest = pd.read_csv(out / "MANIFEST.csv", dtype=str)
    assert list(manifest.columns) == list(shp.MANIFEST_COLUMNS)
    assert set(manifest["table"]) == set(EXPECTED)
    assert dict(zip(manifest["table"], manifest["backend"]))["nccl"] == "nccl"
    assert dict(zip(manifest["table"], manifest["version"]))["nccl"] == "2.99.1"
    assert int(dict(zip(manifest["table"], manifest["rows"]))["gemm"]) == len(gemm)

    prov = json.loads((out / "provenance.json").read_text())["systems"]["nvidia_fake_gpu_80gb_hbm9"]
    assert prov["device_name"] == FakeBench.device_name and prov["partial"] is False
    assert prov["command_line"].startswith("llmplan measure --out")
    assert "fp8 skipped: no fp8 on the fake" in prov["tables"]["gemm"]["notes"]
    assert "date_utc" in prov and prov["settings"]["repeats"] == 3
    assert "gemm" in capsys.readouterr().out  # the summary table


def test_failed_shapes_are_skipped_not_fatal(tmp_path):
    out = tmp_path / "m"
    rc = mb.main(["--out", str(out), "--quick", "--gpu-name", "My GPU", "--tables", "gemm"],
                 make_bench=lambda d: FakeBench(fail_m=16))
    assert rc == 0
    gemm = _read(out / "my_gpu" / "gemm.csv.gz")
    assert 16 not in set(gemm["m"]) and len(gemm) == len(shp.gemm_shapes(quick=True)) * 2 // 3
    prov = json.loads((out / "provenance.json").read_text())["systems"]["my_gpu"]
    assert prov["tables"]["gemm"]["skipped"] == len(shp.gemm_shapes(quick=True)) // 3
    assert "out of memory" in prov["tables"]["gemm"]["notes"][0]
    assert list(prov["tables"]) == ["gemm"] and not (out / "my_gpu" / "nccl.csv.gz").exists()


def test_single_gpu_skips_allreduce(tmp_path):
    out = tmp_path / "m"
    assert mb.main(["--out", str(out), "--quick"], make_bench=lambda d: FakeBench(gpus=1)) == 0
    system = out / "nvidia_fake_gpu_80gb_hbm9"
    assert not (system / "nccl.csv.gz").exists()
    prov = json.loads((out / "provenance.json").read_text())["systems"][system.name]
    assert prov["tables"]["nccl"]["notes"] == ["only one GPU is visible"]


def test_missing_torch_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(mb.UserError, match="PyTorch is not installed"):
        mb.import_torch()
    rc = cli.main(["measure", "--out", str(tmp_path / "new"), "--device", "cpu", "--quick"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "llmplan[measure]" in err and "fix:" in err
    assert not (tmp_path / "new").exists()


def test_existing_output_dir_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "m"
    (out / "a100_sxm").mkdir(parents=True)
    (out / "a100_sxm" / "gemm.csv.gz").write_bytes(b"")
    (out / "MANIFEST.csv").write_text("system,table,backend,version,rows\na100_sxm,gemm,vllm,0.14.0,1\n")
    assert cli.main(["measure", "--out", str(out), "--device", "cpu", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "error: --out:" in err and "not empty" in err and "--overwrite" in err

    (tmp_path / "file").write_text("x")
    assert cli.main(["measure", "--out", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err

    # --overwrite: this GPU's tables are written, another GPU's folder and MANIFEST rows kept
    args = ["--out", str(out), "--quick", "--overwrite", "--gpu-name", "h100_sxm"]
    assert mb.main(args, make_bench=lambda d: FakeBench()) == 0
    assert mb.main(args + ["--tables", "gemm"], make_bench=lambda d: FakeBench()) == 0
    assert (out / "a100_sxm" / "gemm.csv.gz").exists()
    assert sorted(p.name for p in (out / "h100_sxm").iterdir()) == ["gemm.csv.gz"]  # no stale tables
    manifest = pd.read_csv(out / "MANIFEST.csv")
    assert sorted(zip(manifest["system"], manifest["table"])) == [("a100_sxm", "gemm"), ("h100_sxm", "gemm")]


@pytest.mark.parametrize("args,key", [
    (["--repeats", "0"], "--repeats"),
    (["--warmup", "-1"], "--warmup"),
    (["--tables", "gemm,atention"], "--tables"),
    (["--device", "tpu"], "--device"),
])
def test_bad_options_are_user_errors(tmp_path, capsys, args, key):
    assert cli.main(["measure", "--out", str(tmp_path / "o"), *args]) == 2
    assert f"error: {key}:" in capsys.readouterr().err


def test_out_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        mb.main([])
    assert exc.value.code == 2 and "--out" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# With torch (CPU)
# ---------------------------------------------------------------------------------------
def test_cpu_quick_run_writes_readable_tables(tmp_path):
    torch = pytest.importorskip("torch")
    out = tmp_path / "cpu_run"
    rc = cli.main(["measure", "--out", str(out), "--device", "cpu", "--quick", "--repeats", "3", "--warmup", "1"])
    assert rc == 0
    system = out / "cpu"
    for table in ("gemm", "context_attention", "generation_attention"):
        df = _read(system / f"{table}.csv.gz")
        assert list(df.columns) == EXPECTED[table], table
        assert (df["latency_ms"] > 0).all() and df["latency_ms"].notna().all()
        assert set(df["backend"]) == {"torch"} and set(df["backend_version"]) == {str(torch.__version__)}
    assert not (system / "nccl.csv.gz").exists()  # needs 2+ GPUs

    gemm = _read(system / "gemm.csv.gz")
    assert {"bfloat16"} <= set(gemm["gemm_dtype"])
    assert len(gemm[gemm["gemm_dtype"] == "bfloat16"]) == len(shp.gemm_shapes(quick=True, dtypes=("bfloat16",)))
    assert pd.api.types.is_integer_dtype(gemm["m"]) and pd.api.types.is_float_dtype(gemm["latency_ms"])
    ctx = _read(system / "context_attention.csv.gz")
    assert (ctx["step"] == 0).all() and (ctx["isl"] > 1).all()
    assert set(ctx["kernel_source"]) == {mb.KERNEL_SDPA}
    dec = _read(system / "generation_attention.csv.gz")
    assert (dec["isl"] == 1).all() and set(dec["step"]) == set(shp.DECODE_KV_LEN_QUICK)
    assert len(dec) == len(shp.generation_attention_shapes(quick=True))

    manifest = pd.read_csv(out / "MANIFEST.csv")
    assert set(manifest["system"]) == {"cpu"} and set(manifest["backend"]) == {"torch"}
    prov = json.loads((out / "provenance.json").read_text())["systems"]["cpu"]
    assert prov["torch_version"] == str(torch.__version__) and prov["timer"] == "time.perf_counter_ns"


def test_fp8_gemm_probe_is_clean():
    torch = pytest.importorskip("torch")
    bench = mb.TorchBench(torch, "cpu")
    reason = bench.fp8_unsupported()
    assert reason is None or isinstance(reason, str)
    if reason is None:
        out = bench.gemm(shp.GemmShape("fp8", 16, 32, 64))()
        out = out[0] if isinstance(out, tuple) else out
        assert tuple(out.shape) == (16, 32) and out.dtype == torch.bfloat16


def test_attention_gqa_matches_repeated_heads():
    torch = pytest.importorskip("torch")
    bench = mb.TorchBench(torch, "cpu")
    shape = shp.AttentionShape(2, 8, 8, 4, 2, 16)
    got = bench.attention(shape, causal=True)()
    bench.native_gqa = False  # the fallback for torch < 2.5
    want = bench.attention(shape, causal=True)()
    assert got.shape == (2, 4, 8, 16)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_allreduce_spawns_one_process_per_rank():
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    rows: list[dict] = []
    todo = shp.allreduce_shapes(2, quick=True)[:2]
    mb.run_allreduce(2, "gloo", todo, warmup=1, repeats=2, on_row=rows.append, timeout_s=180)
    assert [r["message_size_elements"] for r in rows] == [s.elements for s in todo]
    assert all(list(r) == EXPECTED["nccl"] and r["num_gpus"] == 2 and r["latency_ms"] > 0 for r in rows)


def test_cuda_quick_run(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    out = tmp_path / "gpu"
    assert cli.main(["measure", "--out", str(out), "--quick", "--repeats", "3"]) == 0
    system = out / shp.slug(torch.cuda.get_device_name())
    for table in ("gemm", "context_attention", "generation_attention"):
        assert list(_read(system / f"{table}.csv.gz").columns) == EXPECTED[table]


def test_ctrl_c_writes_partial_tables(tmp_path):
    class Interrupted(FakeBench):
        def attention(self, shape, causal):
            raise KeyboardInterrupt

    out = tmp_path / "m"
    assert mb.main(["--out", str(out), "--quick", "--gpu-name", "h100_sxm"], make_bench=lambda d: Interrupted()) == 130
    assert list(_read(out / "h100_sxm" / "gemm.csv.gz").columns) == EXPECTED["gemm"]
    assert not (out / "h100_sxm" / "context_attention.csv.gz").exists()
    assert json.loads((out / "provenance.json").read_text())["systems"]["h100_sxm"]["partial"] is True


def test_catalog_note_names_unknown_folders():
    pytest.importorskip("llmplan.hardware_catalog.loader")
    assert mb.catalog_note("nvidia_h100_80gb_hbm3") is None
    assert "--gpu-name" in mb.catalog_note("cpu")


def test_operand_rotation_cycles_distinct_buffers():
    torch = pytest.importorskip("torch")
    bench = mb.TorchBench(torch, "cpu")
    bench.rotate_bytes = 64 * 1024  # as a GPU does with 2 x L2, scaled down
    assert bench._copies(64 * 128 * 2) == 4 and bench._copies(10**9) == 1
    fn = bench.gemm(shp.GemmShape("bfloat16", 4, 64, 128))
    outs = [fn().clone() for _ in range(5)]
    assert not torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[4])  # 4 weight copies
    dec = bench.attention(shp.AttentionShape(1, 1, 64, 4, 2, 16), causal=False)
    assert bench._copies(shp.AttentionShape(1, 1, 64, 4, 2, 16).kv_bytes) == 8
    assert dec().shape == (1, 4, 1, 16)


def test_failed_allreduce_is_noted_not_fatal(tmp_path):
    class BrokenNccl(FakeBench):
        def run_allreduce(self, todo, warmup, repeats, on_row):
            on_row(shp.nccl_row(self.nccl_version, mb.KERNEL_NCCL, todo[0], 0.1))
            raise RuntimeError("all-reduce worker failed:\nTraceback ...\nncclInternalError: bad")

    out = tmp_path / "m"
    assert mb.main(["--out", str(out), "--quick", "--tables", "nccl", "--gpu-name", "x"],
                   make_bench=lambda d: BrokenNccl()) == 0
    prov = json.loads((out / "provenance.json").read_text())["systems"]["x"]["tables"]["nccl"]
    assert prov["rows"] == 1 and prov["skipped"] == 2
    assert prov["notes"] == ["all-reduce failed: ncclInternalError: bad"]


def test_calibration_reader_reads_the_output(tmp_path):
    reader = pytest.importorskip("llmplan.calibration.reader")
    if not hasattr(reader, "read_measurements"):
        pytest.skip("llmplan.calibration.reader.read_measurements not available")
    out = tmp_path / "m"
    assert mb.main(["--out", str(out), "--quick", "--tables", "gemm,context_attention,generation_attention"],
                   make_bench=lambda d: FakeBench()) == 0  # folder nvidia_fake_gpu_80gb_hbm9: not a catalog GPU
    (out / "nvidia_fake_gpu_80gb_hbm9").rename(out / "h100_sxm")
    meas = reader.read_measurements(out)
    assert {s.table for s in meas.sources} == {"gemm", "context_attention", "generation_attention"}
    assert sum(s.rows for s in meas.sources) == sum(
        len(f) for f in (shp.gemm_shapes(quick=True), shp.context_attention_shapes(quick=True),
                         shp.generation_attention_shapes(quick=True)))

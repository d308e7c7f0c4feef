"""`llmplan calibrate` gives byte-identical files for the same input (run twice, compare).

    python benchmarks/check_calibrate_determinism.py --measurements ../shared/measurements [--gpus b60]
        [--workers 1,2]

Fits the selected GPUs' tables (default: the Intel Arc Pro B60, the smallest folder: ~1 min on
2 cores, residual statistics included) once per entry of ``--workers`` (serial and forked
workers must agree) into temporary folders and compares every written file (index and
per-GPU sections) byte for byte. Prints the sha256 of each file and exits 1 on any
difference. With ``--gpus all`` it is the full check of the shipped file (two full fits).
Not a test: it reads the shared measurements and takes minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _fit(measurements: str, gpus: str, workers: int, out_dir: Path) -> dict[str, str]:
    out = out_dir / "cal.json"
    cmd = [sys.executable, "-c", "import sys; from llmplan.cli import main; sys.exit(main())", "calibrate", "--measurements", measurements, "--out", str(out),
           "--fit-date", "2000-01-01", "--workers", str(workers), "--quiet"]
    if gpus != "all":
        cmd += ["--gpus", gpus]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print(f"  workers={workers}: {time.perf_counter() - t0:.0f} s")
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out_dir.glob("cal*.json"))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measurements", required=True)
    p.add_argument("--gpus", default="b60", help="comma-separated catalog keys, or 'all'")
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts, one fit each")
    a = p.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, w in enumerate(int(v) for v in a.workers.split(",")):
            d = Path(tmp) / f"run{i}"
            d.mkdir()
            runs.append(_fit(a.measurements, a.gpus, w, d))
    first = runs[0]
    for name, digest in first.items():
        print(f"{name}: {digest}")
    same = all(r == first for r in runs[1:])
    print("byte-identical" if same else "DIFFERENT: " + ", ".join(
        sorted({n for r in runs[1:] for n in set(r) | set(first) if r.get(n) != first.get(n)})))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

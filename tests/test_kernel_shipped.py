"""The shipped kernel calibration: portable, attributed, no machine paths."""

from __future__ import annotations

import json
import re

from llmplan.sim.kernel_calibration.calib_file import DEFAULT_PATH

_ABS = re.compile(r'"(/(?:home|work|tmp|root|Users|mnt|opt|var)/[^"]*)"|[A-Za-z]:\\\\')


def _shipped_texts():
    folder = DEFAULT_PATH.parent
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()
            and p.suffix in (".json", ".md")}


def test_no_absolute_machine_path_in_shipped_calibration():
    texts = _shipped_texts()
    assert DEFAULT_PATH.name in texts
    for name, text in texts.items():
        assert not _ABS.search(text), (name, _ABS.search(text).group(0))


def test_shipped_provenance_is_relative_and_attributed():
    d = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    prov = d["provenance"]
    assert "Apache" in prov["attribution"]
    assert "/" not in prov.get("measurements", "")
    for entry in prov["data"]:
        assert not entry["path"].startswith("/") and entry["path"].count("/") == 1, entry["path"]
        assert len(entry["sha256"]) == 64 and entry["rows"] > 0


MEASURED = ("a100_sxm", "l40s", "h100_sxm", "h200_sxm", "b200", "rtx_pro_6000_server", "b60")


def _shipped():
    from llmplan.sim.kernel_calibration.calib_file import load_calibration

    return load_calibration(None)


def test_shipped_files_are_small_and_sectioned():
    index = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    files = [DEFAULT_PATH] + [DEFAULT_PATH.parent / s["file"] for s in index.get("sections", {}).values()]
    total_mb = sum(p.stat().st_size for p in files) / 1e6
    assert total_mb <= 30.0, total_mb
    if "sections" in index:     # the index alone stays small: plan reads only what it needs
        assert DEFAULT_PATH.stat().st_size / 1e6 < 2.0


def test_every_measured_gpu_is_in_the_measured_tier():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.calibrated import CalibratedKernelModel

    cal = _shipped()
    if not set(MEASURED) <= set(cal.measured):
        import pytest
        pytest.skip("shipped calibration predates the seven-GPU fit")
    for key in MEASURED:
        m = CalibratedKernelModel(get_gpu(key), "vllm", cal)
        assert m.tier == "measured", key
        assert m.gemm(256, 4096, 4096, "bf16").tier == "measured", key
        assert m.attention_decode(32, 4096, 32, 8, 128, "bf16").tier == "measured", key
    h100 = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", cal)
    small, big = (h100.gated_delta_net("decode", b, 1, 16, 128, 32, 128) for b in (8, 256))
    assert small.tier == big.tier == "measured" and big.latency_ms > small.latency_ms > 0
    pre = h100.gated_delta_net("prefill", 4, 2048, 16, 128, 32, 128)
    dec4 = h100.gated_delta_net("decode", 4, 1, 16, 128, 32, 128)
    assert pre.tier == "measured" and pre.latency_ms > dec4.latency_ms
    assert h100.mla_bmm(64, 128, "bf16", "pre").tier == "measured"
    b200 = CalibratedKernelModel(get_gpu("b200"), "trtllm", cal)
    fp4, bf16 = b200.gemm(8192, 8192, 8192, "fp4"), b200.gemm(8192, 8192, 8192, "bf16")
    assert fp4.tier == "measured" and not fp4.extrapolated and fp4.latency_ms < 0.6 * bf16.latency_ms
    moe4 = b200.moe(4096, 7168, 2048, 8, 256, 1, 8, "fp4")
    assert moe4.tier == "measured" and moe4.latency_ms > 0


def test_plan_for_one_gpu_reads_one_section():
    from llmplan.hardware_catalog.loader import get_gpu
    from llmplan.sim.calibrated import CalibratedKernelModel
    from llmplan.sim.kernel_calibration.calib_file import Calibration, LazySections

    cal = Calibration.loads(DEFAULT_PATH.read_text(encoding="utf-8"), str(DEFAULT_PATH), DEFAULT_PATH.parent)
    if not isinstance(cal.measured, LazySections):
        import pytest
        pytest.skip("shipped calibration is not sectioned")
    m = CalibratedKernelModel(get_gpu("h100_sxm"), "vllm", cal)
    m.gemm(64, 4096, 4096, "bf16")
    m.attention_decode(8, 1000, 32, 8, 128, "bf16")
    m.moe(64, 4096, 1536, 8, 128, 1, 4, "bf16")
    assert cal.measured.loaded() == ["h100_sxm"]

"""The GPU catalog: contents, provenance, name resolution and validation errors."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml

from llmplan.hardware_catalog import (
    DEFAULT_PATH,
    DTYPES,
    FIGURE_FIELDS,
    GPUSpec,
    get_gpu,
    gpu_notes,
    gpu_table_rows,
    list_gpus,
    load_catalog,
    missing_sources,
)
from llmplan.errors import CatalogError

REQUIRED_KEYS = {"a100_40gb_sxm", "a100_sxm", "h100_sxm", "h100_pcie", "h200_sxm", "b200", "gb200",
                 "l40s", "l4", "a10g", "mi300x", "mi325x",
                 "rtx_pro_6000_server", "b60", "b300", "gb300", "mi355x"}

# A valid single-GPU catalog; the malformed-file tests each break one thing in it.
GOOD_ENTRY = {
    "name": "Test GPU", "vendor": "nvidia", "aliases": ["Test GPU 80GB"],
    "dense_tflops": {"bf16": 100.0, "fp8": 200.0},
    "hbm_gb": 80, "memory_bytes": 85899345920, "hbm_bw_gbps": 2000, "l2_mb": 50, "sm_count": 100,
    "scaleup_bw_gbps": 450, "scaleup_domain_size": 8, "pcie_gen": 5, "pcie_bw_gbps": 64,
    "scaleout_bw_gbps": 50, "tdp_w": 700, "usd_per_hour": 2.0,
    "price_source": "Example Cloud, on-demand, read 2026-01-01",
    "sources": {"hbm_gb": "test datasheet"},
}


@pytest.fixture(scope="module")
def catalog() -> dict[str, GPUSpec]:
    return load_catalog()


def write_catalog(tmp_path: Path, entries: dict, name: str = "gpus.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(entries, sort_keys=False))
    return path


def entry(**changes: object) -> dict:
    e = dict(GOOD_ENTRY)
    for k, v in changes.items():
        if v is None:
            e.pop(k)
        else:
            e[k] = v
    return e


# ---------------------------------------------------------------- packaged catalog

def test_required_gpus_present(catalog):
    assert REQUIRED_KEYS <= set(catalog)
    assert all(spec.key == key for key, spec in catalog.items())


def test_numeric_fields_positive(catalog):
    for spec in catalog.values():
        for field in ("hbm_gb", "hbm_bw_gbps", "l2_mb", "sm_count", "scaleup_domain_size", "pcie_gen",
                      "pcie_bw_gbps", "scaleout_bw_gbps", "tdp_w", "usd_per_hour"):
            assert getattr(spec, field) > 0, (spec.key, field)
        assert spec.scaleup_bw_gbps >= 0
        assert (spec.scaleup_bw_gbps == 0) == (spec.scaleup_domain_size == 1), spec.key
        assert spec.dense_tflops and all(v > 0 for v in spec.dense_tflops.values())
        assert set(spec.dense_tflops) <= set(DTYPES)
        assert isinstance(spec.sm_count, int) and isinstance(spec.pcie_gen, int)


def test_every_figure_has_a_source(catalog):
    for spec in catalog.values():
        assert missing_sources(spec) == [], spec.key
        assert spec.price_source.strip()
        notes = gpu_notes(spec.key)
        for field in spec.unknown:  # every stand-in is explained in the notes
            assert field in FIGURE_FIELDS
            assert field in notes, (spec.key, field)
            assert "stand-in" in notes[field], (spec.key, field)


def test_dict_fields_are_read_only(catalog):
    spec = catalog["h100_sxm"]
    assert isinstance(spec.dense_tflops, MappingProxyType)
    assert isinstance(spec.sources, MappingProxyType)
    with pytest.raises(TypeError):
        spec.dense_tflops["bf16"] = 1.0  # type: ignore[index]


def test_dense_not_sparse_figures(catalog):
    assert catalog["h100_sxm"].peak_tflops("bf16") == 989  # not 1979 (2:4 sparse)
    assert catalog["h100_sxm"].peak_tflops("fp8") == 1979  # not 3958
    assert catalog["h200_sxm"].peak_tflops("bf16") == 989
    assert catalog["h100_pcie"].peak_tflops("bf16") == 756  # not 1513
    assert catalog["a100_sxm"].peak_tflops("bf16") == 312  # not 624
    assert catalog["l40s"].peak_tflops("bf16") == 362  # not 733
    assert catalog["l4"].peak_tflops("bf16") == 121  # not 242
    assert catalog["b200"].peak_tflops("fp4") == 9000  # not 18000
    assert catalog["gb200"].peak_tflops("fp4") == 10000  # not 20000
    assert catalog["mi300x"].peak_tflops("bf16") < 1400  # not 2615 sparse


def test_dtype_support(catalog):
    for key in ("a100_40gb_sxm", "a100_sxm", "a10g"):
        assert "fp8" not in catalog[key].dense_tflops
        with pytest.raises(KeyError):
            catalog[key].peak_tflops("fp8")
    with_fp4 = {k for k, s in catalog.items() if "fp4" in s.dense_tflops}
    # Blackwell (datacenter, Ultra and GB202) and CDNA4; CDNA3 (MI300X/MI325X) has none
    assert with_fp4 == {"b200", "gb200", "b300", "gb300", "rtx_pro_6000_server", "mi355x"}
    assert "fp8" not in catalog["b60"].dense_tflops  # Xe2 XMX: no native fp8 matrix math
    assert not catalog["mi325x"].supports("fp4")
    assert catalog["h100_sxm"].peak_tflops("fp16") == catalog["h100_sxm"].peak_tflops("bf16")


def test_interconnect_figures(catalog):
    assert catalog["a100_sxm"].scaleup_bw_gbps == 300
    for key in ("h100_sxm", "h200_sxm"):
        assert (catalog[key].scaleup_bw_gbps, catalog[key].scaleup_domain_size) == (450, 8)
    assert (catalog["b200"].scaleup_bw_gbps, catalog["b200"].scaleup_domain_size) == (900, 8)
    assert (catalog["gb200"].scaleup_bw_gbps, catalog["gb200"].scaleup_domain_size) == (900, 72)
    assert (catalog["b300"].scaleup_bw_gbps, catalog["b300"].scaleup_domain_size) == (900, 8)
    assert catalog["gb300"].scaleup_domain_size == 72  # one NVL72 rack = one scale-up domain
    assert catalog["mi355x"].scaleup_domain_size == 8
    for key in ("h100_pcie", "l40s", "l4", "a10g", "rtx_pro_6000_server", "b60"):
        assert (catalog[key].scaleup_bw_gbps, catalog[key].scaleup_domain_size) == (0, 1)
    for key in ("mi300x", "mi325x"):
        assert catalog[key].scaleup_domain_size == 8
        assert catalog[key].l2_mb == 32 and "256" in gpu_notes(key)["l2_mb"]  # Infinity Cache noted
    assert {s.pcie_gen: s.pcie_bw_gbps for s in catalog.values() if s.pcie_gen == 4} == {4: 32}
    # B60 is a PCIe 5.0 x8 card: half the x16 rate; every x16 Gen5 card has 64 GB/s
    assert {s.pcie_gen: s.pcie_bw_gbps for s in catalog.values() if s.pcie_gen == 5 and s.key != "b60"} == {5: 64}
    assert catalog["b60"].pcie_bw_gbps == 32


def test_list_and_table_rows(catalog):
    keys = [s.key for s in list_gpus()]
    assert keys == sorted(keys) and set(keys) == set(catalog)
    rows = {r["key"]: r for r in gpu_table_rows()}
    assert set(rows) == set(catalog)
    h100 = rows["h100_sxm"]
    assert h100["bf16_tflops"] == 989 and h100["fp8_tflops"] == 1979 and h100["fp4_tflops"] is None
    assert h100["scaleup"] == "450 GB/s x8" and h100["usd_per_hour"] > 0 and h100["source"]
    assert rows["a100_sxm"]["fp8_tflops"] is None  # int8 is not shown as fp8
    assert rows["l4"]["scaleup"] == "-"
    for row in rows.values():
        for col in ("name", "hbm_gb", "hbm_bw_gbps", "l2_mb", "sm_count", "pcie_gen", "price_source"):
            assert row[col] not in (None, "")


def test_default_catalog_is_cached_but_copied():
    a, b = load_catalog(), load_catalog()
    assert a == b and a is not b
    a.pop("h100_sxm")
    assert "h100_sxm" in load_catalog()
    assert load_catalog(DEFAULT_PATH) == b


# ---------------------------------------------------------------- name resolution

@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("h100", "h100_sxm"),
    ("H100-SXM", "h100_sxm"),
    ("h100 sxm5", "h100_sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm"),
    ("a100", "a100_sxm"),
    ("NVIDIA A100-SXM4-40GB", "a100_40gb_sxm"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H200", "h200_sxm"),
    ("NVIDIA B200", "b200"),
    ("GB200 NVL72", "gb200"),
    ("NVIDIA A10G", "a10g"),
    ("AMD Instinct MI300X", "mi300x"),
    ("amd instinct mi325x", "mi325x"),
    ("H200_SXM", "h200_sxm"),
    ("  h100_sxm ", "h100_sxm"),
    # aiconfigurator's system names, as measurement files write them in their `system` column
    ("b200_sxm", "b200"), ("gb200_sxm", "gb200"), ("gb300_sxm", "gb300"),
    ("rtxpro6000_blackwell_server", "rtx_pro_6000_server"),
])
def test_alias_resolution(name, key):
    assert get_gpu(name).key == key


def test_unknown_name_suggests_nearest():
    with pytest.raises(CatalogError) as exc:
        get_gpu("h100_smx")
    err = exc.value
    assert "h100_smx" in str(err) and "h100_sxm" in str(err) and err.key == "gpu"
    assert err.fix
    with pytest.raises(CatalogError, match="mi300x"):
        get_gpu("MI300")
    with pytest.raises(CatalogError, match="known: .*h100_sxm"):
        get_gpu("tpu-v5e")


def test_get_gpu_with_explicit_catalog(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, {"test_gpu": GOOD_ENTRY}))
    assert get_gpu("Test GPU 80GB", cat).key == "test_gpu"
    with pytest.raises(CatalogError):
        get_gpu("h100_sxm", cat)


# ---------------------------------------------------------------- spec methods

def test_peak_tflops_fp8_raises_on_a100(catalog):
    with pytest.raises(KeyError):
        catalog["a100_sxm"].peak_tflops("fp8")
    assert not catalog["a100_sxm"].supports("fp8")


def test_with_overrides(catalog):
    h100 = catalog["h100_sxm"]
    faster = h100.with_overrides(hbm_bw_gbps=2 * h100.hbm_bw_gbps)
    assert faster.hbm_bw_gbps == 6700 and h100.hbm_bw_gbps == 3350
    assert faster.key == h100.key and faster.dense_tflops == h100.dense_tflops
    with pytest.raises(TypeError):
        h100.with_overrides(no_such_field=1)


# ---------------------------------------------------------------- malformed files

def test_good_test_entry_loads(tmp_path):
    spec = load_catalog(write_catalog(tmp_path, {"test_gpu": GOOD_ENTRY}))["test_gpu"]
    assert spec.hbm_bw_gbps == 2000 and spec.aliases == ("Test GPU 80GB",)


@pytest.mark.parametrize("changes,field,text", [
    ({"hbm_bw_gbps": -100}, "hbm_bw_gbps", "positive"),
    ({"hbm_gb": 0}, "hbm_gb", "positive"),
    ({"sm_count": 0}, "sm_count", "positive"),
    ({"hbm_bw_gbps": None}, "hbm_bw_gbps", "missing"),
    ({"name": None}, "name", "missing"),
    ({"hbm_bw_gbps": "3350 GB/s"}, "hbm_bw_gbps", "number"),
    ({"tdp_w": "700"}, "tdp_w", "number"),
    ({"sm_count": 132.5}, "sm_count", "integer"),
    ({"hbm_gb": True}, "hbm_gb", "number"),
    ({"hbm_bandwidth": 3350}, "hbm_bandwidth", "unknown field"),
    ({"dense_tflops": {"bf16": 100, "fp6": 300}}, "dense_tflops.fp6", "unknown dtype"),
    ({"dense_tflops": {"bf16": -1}}, "dense_tflops.bf16", "positive"),
    ({"dense_tflops": {"fp8": 100}}, "dense_tflops", "bf16"),
    ({"vendor": "arm"}, "vendor", "nvidia"),
    ({"memory_bytes": 80 * 10**9 // 2}, "memory_bytes", "marketed"),
    ({"memory_bytes": 85.9e9}, "memory_bytes", "integer"),
    ({"scaleup_bw_gbps": 0, "scaleup_domain_size": 1}, "host_topology", "must declare"),
    ({"host_topology": {"default": "pcie5_bus_p2p"}}, "host_topology.options", "not a topology name"),
    ({"host_topology": {"default": "pcie4_switch_p2p"}}, "host_topology.options", "Gen4, the card is Gen5"),
    ({"host_topology": {"default": "scaleup", "options": ["scaleup"], "measured": "pcie5_switch_p2p"}},
     "host_topology.measured", "not among the options"),
    ({"aliases": "H100"}, "aliases", "list"),
    ({"scaleup_bw_gbps": 0}, "scaleup_domain_size", "no fabric"),
    ({"sources": {"hbm_bw": "x"}}, "sources.hbm_bw", "names no catalog field"),
    ({"unknown": ["hbm_bw"]}, "unknown", "figure fields"),
])
def test_malformed_entry_names_file_and_field(tmp_path, changes, field, text):
    path = write_catalog(tmp_path, {"test_gpu": entry(**changes)})
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    msg = str(exc.value)
    assert str(path) in msg and f"test_gpu.{field}" in msg and text in msg
    assert exc.value.key == field


def test_bad_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(textwrap.dedent("""\
        test_gpu:
          name: Test GPU
          dense_tflops: {bf16: 100
          hbm_gb: 80
        """))
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    msg = str(exc.value)
    assert str(path) in msg and "does not parse" in msg and "line " in msg


def test_duplicate_gpu_key_rejected(tmp_path):
    path = tmp_path / "dup.yaml"
    body = yaml.safe_dump({"test_gpu": GOOD_ENTRY})
    path.write_text(body + body)
    with pytest.raises(CatalogError, match="duplicate key 'test_gpu'"):
        load_catalog(path)


def test_alias_shared_by_two_gpus_rejected(tmp_path):
    path = write_catalog(tmp_path, {"gpu_a": GOOD_ENTRY, "gpu_b": entry(aliases=["test-gpu 80gb"])})
    with pytest.raises(CatalogError, match=r"gpu_b\.aliases.*gpu_a"):
        load_catalog(path)


def test_missing_or_empty_file(tmp_path):
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog(tmp_path / "nope.yaml")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(CatalogError, match="mapping"):
        load_catalog(tmp_path / "empty.yaml")


def test_packaged_file_is_the_default():
    assert DEFAULT_PATH.name == "gpus.yaml" and DEFAULT_PATH.is_file()
    assert set(load_catalog(DEFAULT_PATH)) == set(load_catalog())


# ---------------------------------------------------------------- physical memory (issue 12 §1)

def test_physical_memory_exceeds_marketed_gb_by_the_gib_ratio(catalog):
    h100 = catalog["h100_sxm"]
    assert h100.hbm_gb == 80  # marketed, display only
    assert h100.memory_bytes == 81559 * 2**20  # nvidia-smi MiB total
    assert h100.memory_bytes / (h100.hbm_gb * 1e9) == pytest.approx(1.069, abs=0.001)
    assert catalog["a100_sxm"].memory_bytes == 80 * 2**30
    assert catalog["h200_sxm"].memory_bytes == 143771 * 2**20
    assert catalog["rtx_pro_6000_server"].memory_bytes == 97887 * 2**20
    assert catalog["b300"].memory_bytes == 275040 * 2**20
    assert catalog["gb300"].memory_bytes == 284208 * 2**20
    assert catalog["mi355x"].memory_bytes == 288 * 2**30
    for spec in catalog.values():  # every GPU carries a cited byte figure
        assert isinstance(spec.memory_bytes, int) and spec.memory_bytes > 0
        assert "memory_bytes" in spec.sources or "memory_bytes" in spec.unknown, spec.key
        # GDDR parts are marketed in GiB-ish GB (ratio ~1.0), HBM parts in decimal GB (~1.07)
        assert 0.99 < spec.memory_bytes / (spec.hbm_gb * 1e9) < 1.08, spec.key


def test_new_gpus_of_issue_9(catalog):
    rtx = catalog["rtx_pro_6000_server"]
    assert (rtx.vendor, rtx.scaleup_domain_size, rtx.pcie_gen) == ("nvidia", 1, 5)
    assert rtx.peak_tflops("bf16") == pytest.approx(467.8) and rtx.hbm_bw_gbps == 1792
    b60 = catalog["b60"]
    assert (b60.vendor, b60.collective_library, b60.hbm_gb, b60.hbm_bw_gbps) == ("intel", "oneccl", 24, 456)
    assert catalog["h100_sxm"].collective_library == "nccl" and catalog["mi355x"].collective_library == "rccl"
    assert catalog["b300"].peak_tflops("fp4") == 14000 and catalog["gb300"].peak_tflops("fp4") == 15000
    assert catalog["b300"].peak_tflops("int8") < 200  # Blackwell Ultra cut int8: not the fp8 rate
    assert catalog["mi355x"].sm_count == 256 and catalog["mi355x"].l2_mb == 32
    for key in ("rtx_pro_6000_server", "b60", "b300", "gb300", "mi355x"):
        assert get_gpu(catalog[key].aliases[0]).key == key


# ---------------------------------------------------------------- host topology (issue 12 §3)

def test_topology_is_a_catalog_input_with_a_default(catalog):
    from llmplan.hardware_catalog.loader import parse_topology

    for spec in catalog.values():
        assert spec.default_topology in spec.topologies
        assert spec.measured_topology in ("", *spec.topologies)
        if spec.scaleup_domain_size > 1:
            assert spec.default_topology == "scaleup"
        else:  # PCIe-only boxes: generation matches the card
            assert all(t.pcie_gen == spec.pcie_gen for t in spec.topologies.values())
    l40s = catalog["l40s"]
    assert l40s.measured_topology == l40s.default_topology == "pcie4_switch_no_p2p"
    assert catalog["h100_pcie"].measured_topology == ""  # no collective measurements
    t = parse_topology("pcie5_host_bridge_no_p2p")
    assert (t.gpu_link, t.pcie_gen, t.p2p, t.gpus_per_socket) == ("pcie_host_bridge", 5, False, 4)
    assert parse_topology("pcie4_switch_p2p").p2p and parse_topology("pcie4_switch_p2p").gpu_link == "pcie_switch"


def test_unknown_topology_for_a_gpu_is_a_user_error(catalog):
    from llmplan.hardware_catalog.loader import topology_for

    assert topology_for(catalog["l40s"]).name == "pcie4_switch_no_p2p"
    assert topology_for(catalog["l40s"], "pcie4_host_bridge_p2p").p2p
    with pytest.raises(CatalogError) as exc:
        topology_for(catalog["h100_sxm"], "pcie5_switch_p2p")  # NVLink box: no PCIe collectives
    assert exc.value.key == "gpu.topology.h100_sxm" and "scaleup" in exc.value.fix
    with pytest.raises(CatalogError, match="pcie4_switch_p2p"):
        topology_for(catalog["l40s"], "pcie5_switch_p2p")  # wrong generation for the card

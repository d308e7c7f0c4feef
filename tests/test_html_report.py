"""report.html: self-contained, escaped, tolerant of missing blocks, and rendered by a real
headless Chromium (optimizer/html_report.py)."""

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llmplan.optimizer import html_report
from llmplan.optimizer.day_plan import DayCandidate, plan_day, profile_from_rates
from llmplan.optimizer.price_tiers import PriceTiers


def _deployment(gpu: str, replicas: int, usd_gpu_h: float) -> dict:
    return {
        "gpu": gpu, "replicas": replicas, "gpus_per_replica": 2, "tp": 2, "pp": 1, "ep": 1, "precision": "fp8",
        "weight_only": False, "kv_cache_dtype": "fp8", "max_num_seqs": 128,
        "usd_per_hour": round(replicas * 2 * usd_gpu_h, 4), "usd_per_gpu_hour": usd_gpu_h,
        "capacity_rps_per_replica": 4.1234, "load_rps_per_replica": 3.5,
        "ttft_ms": 412.7, "tpot_ms": 38.2, "ttft_target": "ttft_p90", "tpot_target": "tpot_p90",
        "targets": {"ttft_p90": {"limit_ms": 500.0, "analytical_ms": 398.0, "simulated_ms": 412.7, "probability": 0.934},
                    "tpot_p90": {"limit_ms": 40.0, "analytical_ms": 36.9, "simulated_ms": 38.2}},
        "calibration_tier": "measured",
        "simulated": {"targets": {"ttft_p90": 412.7, "tpot_p90": 38.2}, "requests": 2000},
        "error_band": {"ttft": {"p50_pct": 4.2, "p90_pct": 11.5, "tier": "measured", "extrapolated": []},
                       "tpot": {"p50_pct": 3.1, "p90_pct": 8.25, "tier": "measured", "extrapolated": ["moe_gemm"]}},
    }


def _plan() -> dict:
    return {
        "feasible": True, "total_usd_per_hour": 71.84, "total_gpus": 16, "usd_per_million_output_tokens": 1.2345,
        "deployments": [_deployment("h100_sxm", 4, 4.49)],
        "error_band": {"max_p90_pct": 11.5, "tier": "measured", "wide": False, "threshold_pct": 30.0},
        "binding_constraint": None, "infeasible": None,
        "slo": [{"metric": "ttft", "percentile": 90, "limit_ms": 500.0}, {"metric": "tpot", "percentile": 90, "limit_ms": 40.0}],
        "workload": {"rate_rps": 14.0, "mean_input_tokens": 1024.0, "mean_output_tokens": 256.0, "max_request_tokens": 8192},
        "candidates_evaluated": 312, "candidates_meeting_slo": 41, "rejected": {"memory": 200, "slo": 71},
        "alternatives": [{"total_usd_per_hour": 80.0, "total_gpus": 8, "usd_per_million_output_tokens": 1.5,
                          "deployments": [_deployment("h200", 4, 10.0)]}],
        "notes": ["prompt <script>alert('x')</script> & more"],
        "model": "llama-3.1-70b", "engine": "vllm", "calibration": "default", "seed": 0,
        "deploy": {"pools": [{"name": "h100-tp2", "engine": "vllm", "gpu": "h100_sxm", "replicas": 4, "gpus_per_replica": 2,
                              "load_rps": 14.0, "launch_argv": ["vllm", "serve", "meta-llama/Llama-3.1-70B", "--tensor-parallel-size", "2",
                                                                "--max-num-seqs", "128"],
                              "files": ["deploy/0-h100-tp2/launch.sh", "deploy/0-h100-tp2/k8s.yaml", "../../etc/k8s.yaml"],
                              "benchmark_argv": ["vllm", "bench", "serve", "--request-rate", "14.0"],
                              "docs": "https://docs.vllm.ai (v0.11)", "notes": []}]},
    }


def test_month_cost_probability_and_binding_target_are_shown():
    page = html_report.build(_plan())
    assert "$71.84/h" in page and f"${71.84 * 730:,.0f}/month" in page
    assert "93.4 %" in page                     # P(met) of ttft_p90
    # the binding target is the closest to its limit: TPOT 38.2/40 = 96%, not TTFT 412.7/500 = 83%
    assert "tpot_p90 <b>(binding)</b>" in page and "ttft_p90 <b>(binding)</b>" not in page
    assert "96 %" in page and "83 %" in page

    assert "412.7 ms" in page and "500.0 ms" in page
    assert "+11%" in page                       # the alternative's cost against the chosen one
    assert "h100_sxm" in page and "measured" in page and "moe_gemm" in page


def test_everything_is_escaped_and_nothing_external():
    page = html_report.build(_plan())
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_missing_optional_blocks_are_left_out():
    page = html_report.build({})
    for sec in ("answer", "alternatives", "frontier", "latency", "uncertainty", "assumptions", "artifacts"):
        assert f"id='{sec}'" in page
    assert "id='energy'" not in page and "id='day'" not in page
    bad = html_report.build({"feasible": False, "infeasible": {"message": "H100 <= 2 GPUs: 3 req/s short"}})
    assert "No deployment meets the targets" in bad and "H100 &lt;= 2 GPUs: 3 req/s short" in bad


def test_prices_carry_their_catalog_source_or_say_overridden():
    from llmplan.hardware_catalog.loader import get_gpu

    spec = get_gpu("h100_sxm")
    plan = _plan()
    plan["deployments"][0]["usd_per_gpu_hour"] = spec.usd_per_hour
    prices = {p["gpu"]: p for p in html_report.catalog_assumptions(plan)["prices"]}
    assert prices["h100_sxm"]["source"] == spec.price_source
    assert prices["h200"]["source"].startswith("config override") or prices["h200"]["source"] == "not in the catalog"
    topo = html_report.catalog_assumptions(plan)["topology"]
    assert "h100_sxm" in topo and spec.topology().name in topo["h100_sxm"]


def test_artifacts_inline_the_manifest_but_never_outside_the_run_dir(tmp_path):
    (tmp_path / "deploy" / "0-h100-tp2").mkdir(parents=True)
    (tmp_path / "deploy" / "0-h100-tp2" / "k8s.yaml").write_text("kind: Deployment\nmetadata: {name: h100-tp2}\n")
    (tmp_path.parent / "etc").mkdir(exist_ok=True)
    (tmp_path.parent / "etc" / "k8s.yaml").write_text("SECRET-OUTSIDE\n")
    page = html_report.build(_plan(), artifacts_dir=tmp_path)
    assert "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 2 --max-num-seqs 128" in page
    assert "kind: Deployment" in page and "SECRET-OUTSIDE" not in page
    assert "vllm bench serve --request-rate 14.0" in page


def test_images_are_embedded(tmp_path):
    d = plan_day(profile_from_rates([10.0] * 20 + [40.0] * 4), [DayCandidate("g", "g", 1, 10.0, 4.0)],
                 {"g": PriceTiers("g", 4.0, 2.5)}, scale_up_s=0)
    d.plot(tmp_path / "day.png")
    plan = _plan() | {"day": d.as_dict()}
    page = html_report.build(plan, images={"day": tmp_path / "day.png", "pareto": tmp_path / "absent.png"},
                             latencies={"ttft_ms": [100.0 + i for i in range(200)], "tpot_ms": [30.0 + i / 20 for i in range(200)]})
    assert page.count("data:image/png;base64,") == 2  # day plot + latency figure; the absent pareto is skipped
    assert "no frontier plot" in page
    assert "id='day'" in page and f"{d.saving_pct:,.1f} %" in page


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def test_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary (apt-get install -y chromium)")
    plan = copy.deepcopy(_plan())
    page = tmp_path / "report.html"
    html_report.write(plan, page, latencies={"ttft_ms": [300.0 + (i % 97) * 2 for i in range(500)],
                                             "tpot_ms": [30.0 + (i % 13) for i in range(500)]})
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(flags + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for key in ("$71.84/h", f"${71.84 * 730:,.0f}/month", "93.4 %", "412.7 ms", "Launch artifacts",
                "vllm serve meta-llama/Llama-3.1-70B"):
        assert key in dom.stdout, key
    shot = tmp_path / "report.png"
    run = subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,2000", "--hide-scrollbars", page.as_uri()],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1280)
    assert img[..., :3].std() > 0.05  # not a blank page


def test_risk_blocks_are_shown_when_the_plan_has_them():
    plan = _plan()
    plan["every_slo_probability"] = 0.8123
    plan["confidence"] = {"level": 0.9, "planned_limits_ms": {"ttft_p90": 414.9, "tpot_p90": 34.99}}
    plan["deployments"][0]["headroom"] = {"load_rps_per_replica": 3.5, "capacity_rps_per_replica": 4.0,
                                          "headroom_pct": 12.5, "limited_by": "kv_memory", "detail": "overloaded (KV cache)"}
    page = html_report.build(plan)
    assert "81.2 %" in page and "search.confidence=0.90" in page and "ttft_p90 414.9 ms" in page
    assert "<h3>Headroom</h3>" in page and "kv_memory" in page and "12 %" in page
    assert "<h3>Headroom</h3>" not in html_report.build(_plan())  # no block without the data

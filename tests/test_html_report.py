"""report.html: self-contained, escaped, tolerant of missing blocks, and rendered by a real
headless Chromium (optimizer/html_report.py)."""

import copy
import re
import shutil
import subprocess
from html.parser import HTMLParser
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


# --- the newer plan.json blocks (disaggregated, speculation, fleet, day attainment, KV budget, energy) ---

class _Tables(HTMLParser):
    """Tables by id: {id: [[cell text, ...] per row, header row first]}."""

    def __init__(self):
        super().__init__()
        self.tables, self._id, self._row, self._cell = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._id = a["id"]
            self.tables[self._id] = []
        elif tag == "tr" and self._id:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._id = None
        elif tag == "tr" and self._id and self._row is not None:
            self.tables[self._id].append(self._row)
            self._row = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> dict:
    p = _Tables()
    p.feed(page)
    return p.tables


def _disaggregated(recommended: bool = True, slo_met: bool = True) -> dict:
    return {
        "mode": "disaggregated", "xpyd": "5P1D",
        "pools": [{"role": "prefill", "gpu": "h200_sxm", "workers": 5, "gpus_per_worker": 1, "gpus": 5, "tp": 1, "pp": 1,
                   "ep": 1, "precision": "fp8", "kv_cache_dtype": "fp8", "max_num_seqs": 64, "usd_per_hour": 22.5,
                   "capacity_rps_per_worker": 4.4787, "ttft_ms": 1000.0},
                  {"role": "decode", "gpu": "h100_sxm", "workers": 1, "gpus_per_worker": 2, "gpus": 2, "tp": 2, "pp": 1,
                   "ep": 1, "precision": "fp8", "kv_cache_dtype": "fp8", "max_num_seqs": 256, "usd_per_hour": 7.98,
                   "capacity_rps_per_worker": 26.4332, "tpot_ms": 38.216, "decode_batch": 256}],
        "speculation": None, "total_usd_per_hour": 30.48, "total_gpus": 7, "kv_transfer_ms": 3.466, "kv_link": "network",
        "handoff_ms": 440.0, "cheaper_than_aggregated": True, "recommended": recommended,
        "source": "analytical screen + ILP", "simulate_with": "llmplan simulate deployment.mode=disagg <x>",
        "simulated": {"requests": 600, "workload": "poisson", "overloaded": False, "slo_met": slo_met,
                      "targets": {"ttft_p90": {"limit_ms": 1000.0, "simulated_ms": 727.487},
                                  "tpot_p90": {"limit_ms": 50.0, "simulated_ms": 37.136 if slo_met else 51.2}},
                      "kv_transfer_ms_mean": 3.46564},
        "notes": ["<b>note</b>"],
    }


def _deploy_disagg() -> dict:
    return {"dir": "deploy/disagg", "xpyd": "5P1D", "recommended": True, "router": "m-disagg-router",
            "pools": [{"role": "prefill", "name": "m-prefill", "gpu": "h200_sxm", "workers": 5, "tp": 1, "pp": 1, "ep": 1,
                       "gpus_per_worker": 1, "launch_argv": ["vllm", "serve", "m", "--kv-transfer-config",
                                                             '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'],
                       "notes": ["prefill pool"]},
                      {"role": "decode", "name": "m-decode", "gpu": "h100_sxm", "workers": 1, "tp": 2, "pp": 1, "ep": 1,
                       "gpus_per_worker": 2, "launch_argv": ["vllm", "serve", "m", "--tensor-parallel-size", "2"],
                       "notes": []}],
            "router_argv": ["python3", "toy_proxy_server.py", "--port", "8000"],
            "benchmark_argv": ["vllm", "bench", "serve", "--base-url", "http://m-disagg-router:8000"],
            "files": ["deploy/disagg/prefill/launch.sh", "deploy/disagg/k8s.yaml", "deploy/disagg/../../../x.yaml"]}


def _attainment() -> dict:
    t1, t2 = "TTFT p90 <= 500 ms", "TPOT p90 <= 40 ms"

    def run(label, shares, per):
        return {"label": label, "share_within": {t1: shares[0], t2: shares[1]}, "share_all_targets": shares[2],
                "intervals_simulated": len(per), "intervals_met": sum(p[4] for p in per), "intervals_overloaded":
                sum(p[5] for p in per), "spot_interruptions": 1 if label == "day" else 0, "simulations": 7,
                "intervals": [{"interval": i, "t_start_s": 3600.0 * i, "rate_rps": 10.0 + i, "replicas": [r], "phases": 1,
                               f"share_within[{t1}]": a, f"share_within[{t2}]": b, "share_all_targets": c,
                               "targets_met": ok, "overloaded": over}
                              for i, (r, a, b, c, ok, over) in enumerate(per)]}
    return {"model": ["each phase simulated at steady state"], "lead": "planned", "seed": 0, "requests_per_phase": 600,
            "intervals_simulated": 2, "intervals": 2,
            "day": run("day", (0.9871, 0.9512, 0.9433), [(2, 1.0, 0.998, 0.998, True, False),
                                                         (3, 0.97, 0.9, 0.88, False, True)]),
            "static": run("static", (1.0, 0.9995, 0.9995), [(6, 1.0, 1.0, 1.0, True, False),
                                                            (6, 1.0, 0.999, 0.999, True, False)])}


def _full_plan() -> dict:
    plan = _plan()
    plan["disaggregated"] = _disaggregated()
    plan["deploy"]["disaggregated"] = _deploy_disagg()
    plan["deployments"][0]["speculation"] = {
        "method": "eagle3", "k": 3, "topk": 1, "verify_tokens": 4, "draft_model": None,
        "acceptance_rates": [0.81, 0.62, 0.45], "acceptance_source": "measured <eagle3> rows", "tokens_per_step": 2.4123}
    plan["alternatives"][0]["every_slo_probability"] = 0.6928
    plan["kv_budget"] = [{"pool": "h100_sxm-tp2", "engine": "vllm", "fraction_key": "engine.gpu_memory_utilization",
                          "fraction": 0.9, "fraction_is_engine_default": True, "fraction_source": "vLLM docs v0.11",
                          "device_memory_gib": 79.19, "budget_gib": 71.27, "weights_gib": 33.83, "activation_gib": 1.107,
                          "cuda_graph_gib": 0.5, "runtime_gib": 0.834, "extra_gib": 0.0, "kv_gib": 35.0,
                          "kv_bytes_per_token_per_gpu": 81920.0, "block_size": 16,
                          "kv_capacity_tokens_per_replica": 458752, "assumptions": ["runtime = CUDA context + NCCL"]}]
    plan["energy"] = {"power_model": {"idle_fraction": 0.1, "compute_weight": 1.0, "memory_weight": 0.45,
                                      "sources": {"form": "Hong & Kim, ISCA 2010"}},
                      "pue": 1.2, "usd_per_kwh": 0.1, "unknown": [],
                      "pools": [{"gpu": "h100_sxm", "replicas": 4, "gpus": 8, "tdp_w": 700.0, "utilization_compute": 0.2303,
                                 "utilization_memory": 0.2968, "busy_fraction": 1.0, "power_w_per_gpu": 299.2,
                                 "power_w": 2394.0, "output_tokens_per_s": 5068.49, "note": ""}],
                      "gpu_power_w": 2394.0, "facility_power_w": 2872.8, "joules_per_output_token": 0.4723,
                      "kwh_per_hour": 2.8728, "electricity_usd_per_hour": 0.2873,
                      "total_usd_per_hour_with_electricity": 72.13, "output_tokens_per_s": 5068.49}
    plan["verification"] = {"deployment_simulation": {"requests": 1800, "ttft_ms": {"mean": 132.3, "p90": 412.7},
                                                      "tpot_ms": {"mean": 31.5, "p90": 38.2}}}
    plan["risk"] = {"error_model": {"ttft": {"kind": "empirical", "median_factor": 1.1531, "p90_factor": 2.0404,
                                             "source": "284 held-out residuals"}}}
    plan["served_band"] = {"tpot": {"factor_low": 0.7116, "factor_high": 1.5889, "level": 0.9, "coverage": 0.8743,
                                    "rows": 573, "simulated_mean_ms": 28.79, "mean_ms_low": 20.48, "mean_ms_high": 45.74}}
    return plan


def test_disaggregated_alternative_is_shown_with_its_numbers():
    plan = _full_plan()
    page = html_report.build(plan)
    t = _tables(page)
    # recommended = chosen by the mode selection (optimizer/mode_select.py)
    assert "<h2>Chosen deployment (disaggregated): 5P1D</h2>" in page
    assert "Chosen:" in page and "meets the SLOs in simulation" in page
    assert "5P1D at $30.48/h" in page                                     # pointer in the answer section
    assert f"${30.48 * 730:,.0f}/month" in page and "-58%" in page        # 30.48 / 71.84 - 1
    pools = t["disagg-pools"]
    assert pools[1][:5] == ["prefill", "h200_sxm", "5", "1", "1/1/1"] and pools[1][7] == "$22.50"
    assert pools[2][:5] == ["decode", "h100_sxm", "1", "2", "2/1/1"] and pools[2][8] == "26.43" and pools[2][9] == "38.2 ms"
    # judged by slo_check: TPOT 37.1/50 = 0.743 > TTFT 727.5/1000 = 0.727 -> TPOT binds
    assert t["disagg-targets"][1] == ["ttft_p90", "1,000.0 ms", "727.5 ms", "met"]
    assert t["disagg-targets"][2] == ["tpot_p90 (binding)", "50.0 ms", "37.1 ms", "met"]
    assert "&lt;b&gt;note&lt;/b&gt;" in page and "llmplan simulate deployment.mode=disagg &lt;x&gt;" in page

    missed = copy.deepcopy(plan)
    missed["disaggregated"] = _disaggregated(slo_met=False)
    t = _tables(html_report.build(missed))
    assert t["disagg-targets"][2] == ["tpot_p90 (binding)", "50.0 ms", "51.2 ms", "missed"]
    assert "MISSES an SLO in simulation" in html_report.build(missed)
    plain = copy.deepcopy(plan)
    plain["disaggregated"] = _disaggregated(recommended=False)
    page = html_report.build(plain)
    assert "Chosen:" not in page and "5P1D at $30.48/h" not in page and "id='disaggregated'" in page
    assert "<h2>Disaggregated alternative: 5P1D</h2>" in page
    assert "id='disaggregated'" not in html_report.build(_plan() | {"disaggregated": None})


def test_disaggregated_launch_files_are_shown_and_manifest_stays_in_the_run_dir(tmp_path):
    (tmp_path / "deploy" / "disagg").mkdir(parents=True)
    (tmp_path / "deploy" / "disagg" / "k8s.yaml").write_text("kind: LeaderWorkerSet\nname: <m-decode>\n")
    (tmp_path.parent / "x.yaml").write_text("SECRET-OUTSIDE\n")
    page = html_report.build(_full_plan(), artifacts_dir=tmp_path)
    art = page[page.index("id='artifacts'"):]
    assert "Disaggregated alternative 5P1D (chosen), under deploy/disagg/" in art
    assert ("vllm serve m --kv-transfer-config "
            "&#x27;{&quot;kv_connector&quot;: &quot;NixlConnector&quot;, &quot;kv_role&quot;: &quot;kv_both&quot;}&#x27;") in art
    assert "vllm serve m --tensor-parallel-size 2" in art and "python3 toy_proxy_server.py --port 8000" in art
    assert "vllm bench serve --base-url http://m-disagg-router:8000" in art
    assert "kind: LeaderWorkerSet\nname: &lt;m-decode&gt;" in art and "SECRET-OUTSIDE" not in art


def test_speculation_per_deployment_and_alternative_probability():
    page = html_report.build(_full_plan())
    t = _tables(page)
    assert t["speculation"][1] == ["4x h100_sxm TP2/PP1 fp8 batch 128", "eagle3 k=3, 2.41 tokens/step", "0.81, 0.62, 0.45",
                                   "measured <eagle3> rows"]
    assert "measured &lt;eagle3&gt; rows" in page
    alt = page[page.index("id='alternatives'"):page.index("id='disaggregated'")]
    assert "69.3 %" in alt and ">off<" in alt                              # the alternative's P(every SLO), no speculation
    assert "id='speculation'" not in html_report.build(_plan())           # no table when nothing speculates


def test_fleet_rate_is_shown():
    plan = _plan() | {"fleet": {"gpus": {"h100_sxm": 8}, "gpus_used": {"h100_sxm": 8}, "max_rate_rps": 15.5,
                                "ilp_rate_rps": 17.2245, "max_load": 0.95, "rate_basis": "bisected <below>",
                                "steady_state_runs": [{"rate_rps": 17.2245, "met": False}, {"rate_rps": 15.5, "met": True}],
                                "simulation_meets_slos": True}}
    page = html_report.build(plan)
    assert "<h2>Maximum rate of the fleet</h2>" in page and "8x h100_sxm" in page
    assert "15.50 req/s" in page and "17.22 req/s" in page and "bisected &lt;below&gt;" in page
    assert "misses an SLO" not in page
    plan["fleet"]["simulation_meets_slos"] = False
    assert "misses an SLO" in html_report.build(plan)
    assert "id='fleet'" not in html_report.build(_plan() | {"fleet": None})


def test_day_attainment_autoscaled_against_static():
    d = plan_day(profile_from_rates([10.0, 11.0]), [DayCandidate("g", "g", 1, 10.0, 4.0)],
                 {"g": PriceTiers("g", 4.0, 2.5)}, scale_up_s=0).as_dict()
    d["attainment"] = _attainment()
    page = html_report.build(_plan() | {"day": d})
    t = _tables(page)
    whole = t["day-attainment"]
    assert whole[0][1:3] == ["TTFT p90 <= 500 ms: share of requests within", "TPOT p90 <= 40 ms: share of requests within"]
    assert whole[1] == ["autoscaled", "98.7 %", "95.1 %", "94.3 %", "1 of 2", "1", "1", "7"]
    assert whole[2] == ["static for the peak", "100.0 %", "100.0 %", "100.0 %", "2 of 2", "0", "0", "7"]
    per = t["day-attainment-intervals"]
    assert len(per) == 3
    assert per[2][:8] == ["1", "1.00", "11.00", "3", "97.0 %", "90.0 %", "88.0 %", "missed overloaded"]
    assert per[2][8:] == ["6", "100.0 %", "99.9 %", "99.9 %", "met"]
    assert t["day-prices"][1][:2] == ["g", "$4.000"]
    assert "each phase simulated at steady state" in page
    bad = html_report.build(_plan() | {"day": {"infeasible": "peak <60 req/s> exceeds max_replicas"}})
    assert "No schedule meets the profile" in bad and "peak &lt;60 req/s&gt; exceeds" in bad


def test_kv_budget_energy_and_error_model_are_shown():
    page = html_report.build(_full_plan())
    t = _tables(page)
    kv = t["kv-budget"][1]
    assert kv[:3] == ["h100_sxm-tp2", "vllm", "engine.gpu_memory_utilization=0.9 (engine default)"]
    assert kv[3:] == ["79.2", "71.3", "33.8", "1.11", "0.50", "0.83", "0.00", "35.0", "81,920", "16", "458,752"]
    assert "runtime = CUDA context + NCCL" in page and "vLLM docs v0.11" in page
    e = t["energy-pools"][1]
    assert e[:4] == ["h100_sxm", "4", "8", "700"] and e[4:8] == ["23.0 %", "29.7 %", "299.2", "2,394"]
    assert "2,873 W" in page and "0.472 J" in page and "$0.287/h" in page and "$72.13/h" in page
    assert "Hong &amp; Kim, ISCA 2010" in page
    assert t["risk-error-model"][1] == ["ttft", "empirical", "1.153", "2.040", "284 held-out residuals"]
    assert t["served-band"][1][:4] == ["tpot", "28.8 ms", "20.5 ms", "45.7 ms"]


def test_met_and_binding_follow_slo_check():
    from llmplan.optimizer import slo_check
    from llmplan.optimizer.html_parts import judge
    from llmplan.optimizer.types import SLOTarget

    limits = {"ttft_p90": 500.0, "ttft_p99": 1000.0, "tpot_mean": 40.0, "tpot_p90": 80.0}
    # a tie of value/limit: slo_check prefers a percentile over a mean, then the higher percentile
    values = {"ttft_p90": 400.0, "ttft_p99": 800.0, "tpot_mean": 32.0, "tpot_p90": 40.0}
    met, bind = judge(values, limits)
    slos = [SLOTarget("ttft", 90, 500.0), SLOTarget("ttft", 99, 1000.0), SLOTarget("tpot", 50, 40.0, "mean"),
            SLOTarget("tpot", 90, 80.0)]
    assert bind == slo_check.worst_miss(values, slos)[0].key == "ttft_p99"
    assert all(met.values())
    # a value at its limit is met; a NaN or missing prediction is a miss (slo_check.misses) but never binding
    met, bind = judge({"ttft_p90": 500.0, "ttft_p99": float("nan"), "tpot_mean": None, "tpot_p90": 10.0}, limits)
    assert met == {"ttft_p90": True, "ttft_p99": False, "tpot_mean": False, "tpot_p90": True} and bind == "ttft_p90"
    assert judge({"x_p90": 1.0}, {"x_p90": 2.0}) == ({"x_p90": None}, None)
    met, bind = judge({"ttft_p90": 500.1, "tpot_mean": 41.0}, limits)
    assert met["ttft_p90"] is False and met["tpot_mean"] is False and bind == "tpot_mean"   # 41/40 > 500.1/500
    plan = _plan()
    plan["deployments"][0]["targets"]["tpot_p90"]["simulated_ms"] = None
    plan["deployments"][0]["targets"]["tpot_p90"]["analytical_ms"] = None
    page = html_report.build(plan)
    assert "tpot_p90 <b>(binding)</b>" not in page and "ttft_p90 <b>(binding)</b>" in page
    tpot = next(r for r in page.split("<tr") if ">tpot_p90<" in r and "ms</td>" in r)
    assert "<td>- <span class='muted'>analytical</span></td>" in tpot and "missed" in tpot


def test_full_report_renders_in_headless_chromium_without_console_errors(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary (apt-get install -y chromium)")
    plan = _full_plan()
    plan["day"] = plan_day(profile_from_rates([10.0, 11.0]), [DayCandidate("g", "g", 1, 10.0, 4.0)],
                           {"g": PriceTiers("g", 4.0, 2.5)}, scale_up_s=0).as_dict() | {"attainment": _attainment()}
    plan["fleet"] = {"gpus": {"h100_sxm": 8}, "max_rate_rps": 15.5, "max_load": 0.95}
    page = tmp_path / "report.html"
    html_report.write(plan, page)
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                          "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    assert ":CONSOLE" not in run.stderr, [ln for ln in run.stderr.splitlines() if ":CONSOLE" in ln]
    t = _tables(run.stdout)
    assert t["disagg-pools"][1][0] == "prefill" and t["day-attainment"][1][1] == "98.7 %"
    assert t["kv-budget"][1][-1] == "458,752" and "15.50 req/s" in run.stdout


def test_plan_report_shows_what_plan_json_holds(tmp_path):
    """End to end: `plan report.html=true day.profile=...` on a small model; the page's tables
    carry plan.json's numbers (disaggregated alternative, its launch files, day attainment,
    KV budget, energy, P(met), headroom, speculation)."""
    import html as html_mod
    import json
    import shlex

    from llmplan.cli.hydra_app import compose
    from llmplan.cli.plan_cmd import run_plan
    from llmplan.errors import EXIT_OK

    code = run_plan(compose("plan", ["model=llama3_1_8b", "gpu=h100_sxm", "search=fast", "day.profile=diurnal_24h",
                                     "report.html=true"]), tmp_path)
    assert code == EXIT_OK
    d = json.loads((tmp_path / "plan.json").read_text())
    page = (tmp_path / "report.html").read_text()
    t = _tables(page)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    dep = d["deployments"][0]
    for key, tg in dep["targets"].items():
        assert f"{100 * tg['probability']:,.1f} %" in page, key
    assert f"{dep['headroom']['headroom_pct']:,.0f} %" in page
    assert ">" + html_report.html_sections.speculation_label(dep.get("speculation")) + "<" in page
    dis = d.get("disaggregated")
    if dis:  # the small plan has one today; the checks stay valid if a future search drops it
        assert f"<h2>Disaggregated alternative: {dis['xpyd']}</h2>" in page
        assert [r[:3] for r in t["disagg-pools"][1:]] == [[p["role"], p["gpu"], str(p["workers"])] for p in dis["pools"]]
        for p in d["deploy"]["disaggregated"]["pools"]:
            assert html_mod.escape(shlex.join(p["launch_argv"]), quote=True) in page
        assert "Kubernetes manifest deploy/disagg/k8s.yaml" in page
    att = d["day"]["attainment"]
    assert t["day-attainment"][1][-5] == f"{100 * att['day']['share_all_targets']:,.1f} %"
    assert t["day-attainment"][2][-5] == f"{100 * att['static']['share_all_targets']:,.1f} %"
    assert len(t["day-attainment-intervals"]) == 1 + len(att["day"]["intervals"])
    assert t["kv-budget"][1][-1] == f"{d['kv_budget'][0]['kv_capacity_tokens_per_replica']:,}"
    assert f"{d['energy']['joules_per_output_token']:,.3f} J" in page


def test_latency_section_draws_the_simulated_percentiles_against_the_slo_lines():
    plan = _plan()
    plan["slo"].append({"metric": "tpot", "stat": "mean", "percentile": 50, "limit_ms": 30.0})
    plan["verification"] = {"deployment_simulation": {
        "requests": 1800, "window": {"requests_measured": 992},
        "ttft_ms": {"mean": 132.3, "p50": 94.6, "p90": 412.7, "p99": 521.4},
        "tpot_ms": {"mean": 31.5, "p50": 30.0, "p90": 41.0, "p99": 45.0}}}
    page = html_report.build(plan)
    lat = page[page.index("id='latency'"):page.index("id='uncertainty'")]
    assert lat.count("<svg") == 2 and "992 measured of 1800 simulated requests" in lat
    # the SLO lines: one per target of the metric, with its statistic and limit
    assert "SLO p90 &lt;= 500 ms" in lat and "SLO p90 &lt;= 40 ms" in lat and "SLO mean &lt;= 30 ms" in lat
    bars = {t: c for c, t in re.findall(r"fill='(#[0-9a-f]{6})'><title>([^<]*) ms</title>", lat)}
    assert bars["p90 412.7"] == "#1a7f37"          # TTFT p90 412.7 <= 500: met
    assert bars["p90 41"] == "#b42318"             # TPOT p90 41 > 40: missed
    assert bars["mean 31.5"] == "#b42318"          # TPOT mean 31.5 > 30: missed
    assert bars["p50 94.6"] == "#4c72b0"           # no target at p50
    assert "no per-request latencies" in html_report.build(_plan())


def test_frontier_names_its_files():
    plan = _plan() | {"pareto": {"files": ["pareto.csv"], "rows": 91, "frontiers": ["usd_per_hour_vs_ttft", "<x>"]}}
    page = html_report.build(plan)
    front = page[page.index("id='frontier'"):page.index("id='latency'")]
    assert "pareto.csv: 91 rows on the frontiers usd_per_hour_vs_ttft, &lt;x&gt;" in front

"""Sweeps on Ray: `-m ... hydra/launcher=ray_local` runs every job as a Ray task on a local Ray
instance (hydra-ray-launcher, the `[ray]` extra; docs/SWEEPS.md). Skipped only when the extra
is not installed; the launcher check runs everywhere."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmplan.cli import hydra_app
from llmplan.errors import ConfigError

HAS_RAY = all(importlib.util.find_spec(m) is not None for m in ("ray", "hydra_plugins.hydra_ray_launcher"))


@pytest.mark.skipif(not HAS_RAY, reason="the [ray] extra is not installed (pip install 'llmplan[ray]')")
def test_simulate_sweep_runs_as_ray_tasks_on_a_local_instance(tmp_path):
    sweep = tmp_path / "sweep"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1", RAY_USAGE_STATS_ENABLED="0")
    argv = [sys.executable, "-m", "llmplan.cli", "simulate", "-m", "model=llama3_1_8b", "gpu=h100_sxm",
            "workload.num_requests=200", "workload.steady_state=false", "workload.rate_rps=2,4",
            "hydra/launcher=ray_local", "hydra.launcher.ray.init.num_cpus=2", f"hydra.sweep.dir={sweep}"]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = (sweep / "summary.csv").read_text().splitlines()
    assert len(rows) == 3 and all(",ok," in r for r in rows[1:])
    rates = []
    for job in sorted(d for d in sweep.iterdir() if d.is_dir()):
        cfg = yaml.safe_load((job / ".hydra" / "hydra.yaml").read_text())["hydra"]
        # the Ray launcher ran it: its target in the job's own record, and Ray's job id
        assert cfg["launcher"]["_target_"] == "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"
        assert cfg["runtime"]["choices"]["hydra/launcher"] == "ray_local"
        assert cfg["job"]["id"].startswith("job_id_for_")
        s = json.loads((job / "summary.json").read_text())
        rates.append(s["offered_rate_rps"])
        assert s["requests"] == 200 and s["ttft_ms"]["p90"] > 0
    assert rates == pytest.approx([2, 4], rel=0.25)
    # each job ran in a Ray worker process, whose lines Ray prefixes with the task name
    assert "(_run_job pid=" in p.stdout + p.stderr


def test_a_launcher_without_its_plugin_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(hydra_app.LAUNCHER_PLUGINS, "ray_local", ("hydra_plugins.no_such_plugin_here",
                                                                   "pip install 'llmplan[ray]'"))
    with pytest.raises(ConfigError) as e:
        hydra_app.check_launcher(["model=llama3_1_8b", "hydra/launcher=ray_local"])
    assert e.value.key == "hydra/launcher" and "llmplan[ray]" in e.value.fix
    hydra_app.check_launcher(["hydra/launcher=joblib"])  # no plugin check for the default


def test_the_ray_launcher_config_ships_in_conf():
    from llmplan.paths import conf_dir

    text = (Path(conf_dir()) / "hydra" / "launcher" / "ray_local.yaml").read_text()
    cfg = yaml.safe_load(text)
    assert text.startswith("# @package hydra.launcher") and cfg["defaults"] == ["ray"]
    assert cfg["ray"]["init"]["address"] is None and cfg["ray"]["remote"]["num_cpus"] == 1

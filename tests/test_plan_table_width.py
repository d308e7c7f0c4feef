"""The plan's tables stay readable at 100 columns: no line wider, no cell cut (…), key numbers shown."""

import pytest
from rich.console import Console

from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import plan_from_app
from llmplan.cli.resolve import to_app
from llmplan.optimizer import report

WIDTH = 100


def _render(tmp_path, args):
    app = to_app(compose("plan", args))
    console = Console(width=WIDTH, record=True, color_system=None)
    res, model = plan_from_app(app, console, show_progress=False)
    d = report.write(res, tmp_path, {"model": model.key, "engine": app.engine.name})
    report.render(res, d, console, None)
    return console.export_text(), d, res


def _check_width(text: str) -> None:
    assert max(len(line.rstrip()) for line in text.splitlines()) <= WIDTH
    assert "…" not in text


@pytest.mark.parametrize("extra", [[], ["slo.ttft_p99_ms=3000", "slo.tpot_p99_ms=80"]])
def test_plan_table_fits_100_columns_with_the_key_numbers(tmp_path, extra):
    text, d, _ = _render(tmp_path, ["model=llama3_1_8b", "gpu.candidates=[h100_sxm,a100_sxm]", "search=fast",
                                    "workload.rate_rps=40", *extra])
    assert d["feasible"]
    _check_width(text)
    assert f"${d['total_usd_per_hour']:.2f}/h" in text
    for dep in d["deployments"]:
        row = next(line for line in text.splitlines() if line.strip().startswith(dep["gpu"] + " "))
        assert f" {dep['replicas']} " in row and f"{dep['usd_per_hour']:.2f}" in row
        assert f"{dep['ttft_ms']:.0f}" in row and f"{dep['tpot_ms']:.1f}" in row   # headline figures
        assert f"{dep['analytical_ttft_ms']:.0f} ms" in text                       # analytical, second line
        assert dep["ttft_target"].split("_")[1] in text


def test_infeasible_closest_candidates_fit_100_columns(tmp_path):
    text, d, res = _render(tmp_path, ["model=llama3_1_8b", "gpu.candidates=[h100_sxm,a100_sxm]", "search=fast",
                                      "slo.ttft_p90_ms=5"])
    assert not d["feasible"] and res.diagnosis.cause == "slo"
    assert "Closest candidates" in text
    _check_width(text)
    closest = d["infeasible"]["closest"]
    assert closest["candidate"] in text

"""`llmplan whatif whatif.curve.*`: hardware what-if curves and SLO sweeps (llmplan/cli/whatif_curve.py)."""

import io

import pandas as pd
import pytest
from rich.console import Console

from llmplan.cli.hydra_app import compose
from llmplan.cli.resolve import to_app
from llmplan.cli.text_plot import text_plot
from llmplan.cli.whatif_cmd import run_whatif
from llmplan.cli.whatif_curve import check_curve, scaled_app
from llmplan.errors import EXIT_OK, ConfigError
from llmplan.hardware_catalog.loader import get_gpu

ONE = ["model=llama3_1_8b", "gpu.candidates=[h100_sxm]", "search.tp=[1]", "search.pp=[1]", "search.max_batch=[256]",
       "search.precision=[fp8]", "search.finalists=0", "output.progress=false"]


def _curve(tmp_path, extra):
    buf = io.StringIO()
    code = run_whatif(compose("whatif", ONE + extra), tmp_path, Console(file=buf, width=120, no_color=True))
    return code, pd.read_csv(tmp_path / "whatif_curve.csv"), buf.getvalue()


def test_text_plot_has_title_axes_units_and_one_marker_per_point():
    txt = text_plot([0.5, 1, 2, 4], [10.0, 20.0, None, 35.0], "tokens vs bandwidth", "HBM bandwidth (x baseline)",
                    "tok/s per GPU (tok/s)", width=40, height=8, log_x=True)
    assert txt.splitlines()[0] == "tokens vs bandwidth" and "y: tok/s per GPU (tok/s)" in txt
    assert "x: HBM bandwidth (x baseline) (log scale)" in txt and "no value at x = 2" in txt
    assert txt.count("*") == 3 and "35" in txt and "10" in txt


def test_hbm_bandwidth_curve_raises_throughput_per_gpu(tmp_path):
    code, df, text = _curve(tmp_path, ["whatif.curve.figure=hbm_bw_gbps", "whatif.curve.scales=[0.5,1,2]"])
    assert code == EXIT_OK and list(df["scale"]) == [0.5, 1.0, 2.0] and df["feasible"].all()
    # one candidate shape (its replica count may change with the figure): the curve isolates the figure
    assert df["deployment"].str.split("x ", n=1).str[1].nunique() == 1
    tok = df["capacity_output_tokens_per_s_per_gpu"].to_list()
    usd = df["capacity_usd_per_million_output_tokens"].to_list()
    assert tok[0] < tok[1] < tok[2] and usd[0] > usd[1] > usd[2]
    assert (tmp_path / "whatif_curve.png").stat().st_size > 0
    assert "output tokens/s per GPU at SLO capacity" in text and "x: HBM bandwidth (x baseline)" in text


def test_slo_sweep_cost_never_rises_as_the_slos_loosen(tmp_path):
    extra = ["gpu.candidates=[h100_sxm,a100_sxm]", "search.tp=[1,2]", "search.precision=[bf16,fp8]",
             "workload.rate_rps=30", "whatif.curve.figure=slo", "whatif.curve.scales=[0.5,1,2]"]
    code, df, _ = _curve(tmp_path, extra)
    assert code == EXIT_OK
    cost = df["usd_per_hour"].to_list()
    assert all(b <= a * (1 + 1e-9) for a, b in zip(cost, cost[1:]))


def test_scaled_app_scales_the_named_figure():
    app = to_app(compose("whatif", ONE))
    h100 = get_gpu("h100_sxm")
    bw = scaled_app(app, "hbm_bw_gbps", 2.0, ["h100_sxm"])
    assert bw.gpu.spec_overrides["h100_sxm"]["hbm_bw_gbps"] == pytest.approx(2 * h100.hbm_bw_gbps)
    fl = scaled_app(app, "tflops", 0.5, ["h100_sxm"]).gpu.spec_overrides["h100_sxm"]
    assert fl == pytest.approx({f"{d}_tflops": 0.5 * v for d, v in h100.dense_tflops.items()})
    slo = scaled_app(app, "slo", 0.5, [])
    assert slo.slo.ttft_p90_ms == pytest.approx(0.5 * app.slo.ttft_p90_ms)
    assert app.gpu.spec_overrides == {}  # the baseline is untouched


@pytest.mark.parametrize("extra,key", [
    (["whatif.curve.figure=bandwidth"], "whatif.curve.figure"),
    (["whatif.curve.figure=slo", "whatif.curve.scales=[]"], "whatif.curve.scales"),
    (["whatif.curve.figure=hbm_gb", "whatif.rate_scale=2"], "whatif.curve.figure"),
    (["whatif.curve.figure=rate", "whatif.curve.gpus=[h100_sxm]"], "whatif.curve.gpus"),
])
def test_bad_curves_name_the_key(extra, key):
    with pytest.raises(ConfigError) as exc:
        check_curve(to_app(compose("whatif", ONE + extra)))
    assert exc.value.key == key


def test_non_positive_scale_is_refused_at_compose():
    with pytest.raises(ConfigError) as exc:
        to_app(compose("whatif", ONE + ["whatif.curve.figure=slo", "whatif.curve.scales=[1,0]"]))
    assert "whatif.curve.scales" in str(exc.value.key)

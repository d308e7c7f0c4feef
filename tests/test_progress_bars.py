"""Progress bars: on stderr only, only on a terminal, off with output.progress=false, and never a
change to standard output or the written files (llmplan/progress.py)."""

import io
import json
import re
import sys

import pytest

from llmplan import progress
from llmplan.cli.hydra_app import compose
from llmplan.cli.plan_cmd import run_plan
from llmplan.cli.simulate_cmd import run_simulate
from rich.console import Console


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def tty(monkeypatch):
    """Call it in the test body (pytest's capture re-installs sys.stderr after fixtures): a
    terminal-like stderr that keeps what is written."""
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)

    def use() -> FakeTTY:
        err = FakeTTY()
        monkeypatch.setattr(sys, "stderr", err)
        return err
    return use


def test_no_bar_unless_stderr_is_a_terminal_and_enabled(tty, monkeypatch):
    tty_stderr = tty()
    with progress.stage_progress(None, enabled=False) as update:
        assert update is None
    with progress.stage_progress(None) as update:
        assert update is not None
        update("evaluate", 3, 10)
    assert "evaluate" in tty_stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # piped: nothing drawn
    with progress.stage_progress(None) as update:
        assert update is None
    assert not progress.shows(True)


def test_step_and_fraction_bars(tty):
    tty_stderr = tty()
    with progress.stage_progress(None) as update:
        with progress.step(update, "ILP"):
            pass
    with progress.fraction_progress("simulate") as bar:
        bar(0.5)
        bar(1.7)  # clipped to the bar's end, not beyond
    text = tty_stderr.getvalue()
    assert "ILP" in text and "simulate" in text
    with progress.step(None, "ILP"):  # no bar: a no-op
        pass


def _plain(text: str) -> list[str]:
    """Output lines without the elapsed-time line."""
    return [ln for ln in text.splitlines() if not re.search(r"(planned|simulated) in [0-9.]+ s", ln)]


def _run(fn, overrides, out, bar: bool):
    stdout = io.StringIO()
    code = fn(compose(fn.__name__.removeprefix("run_"), overrides + [f"output.progress={str(bar).lower()}"]), out,
              Console(file=stdout, width=160))
    return code, stdout.getvalue()


def test_plan_bars_go_to_stderr_and_change_no_output(tty, tmp_path):
    tty_stderr = tty()
    ov = ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=1", "search.verify_requests=100"]
    code_off, out_off = _run(run_plan, ov, tmp_path / "off", bar=False)
    assert tty_stderr.getvalue() == ""
    code_on, out_on = _run(run_plan, ov, tmp_path / "on", bar=True)
    err = tty_stderr.getvalue()
    assert code_on == code_off == 0
    for stage in ("evaluate", "simulate", "ILP", "deployment sim"):
        assert stage in err, stage
    assert _plain(out_on.replace(str(tmp_path / "on"), "OUT")) == _plain(out_off.replace(str(tmp_path / "off"), "OUT"))
    on, off = (json.loads((tmp_path / d / "plan.json").read_text()) for d in ("on", "off"))
    assert on == off


def test_simulate_bar_goes_to_stderr_and_changes_no_output(tty, tmp_path):
    tty_stderr = tty()
    ov = ["model=llama3_1_8b", "gpu=h100_sxm", "workload.num_requests=300", "workload.rate_rps=4",
          "workload.steady_state=false"]
    _, out_off = _run(run_simulate, ov, tmp_path / "off", bar=False)
    assert tty_stderr.getvalue() == ""
    _, out_on = _run(run_simulate, ov, tmp_path / "on", bar=True)
    assert "simulate" in tty_stderr.getvalue()
    assert _plain(out_on.replace(str(tmp_path / "on"), "OUT")) == _plain(out_off.replace(str(tmp_path / "off"), "OUT"))
    assert (tmp_path / "on" / "summary.json").read_text() == (tmp_path / "off" / "summary.json").read_text()


def test_sweep_bar_counts_jobs_that_wrote_their_output(tty, tmp_path):
    import time

    from llmplan.cli.hydra_app import _sweep_progress

    err = tty()
    (tmp_path / "0_a").mkdir()
    (tmp_path / "0_a" / "plan.json").write_text("{}")
    (tmp_path / "1_b").mkdir()  # started, nothing written yet
    with _sweep_progress(tmp_path, 3):
        for _ in range(200):  # the poller looks every 0.5 s
            if re.search(r"sweep jobs.*1/3", err.getvalue()):
                break
            time.sleep(0.05)
        assert re.search(r"sweep jobs.*1/3", err.getvalue())
    assert "3/3" in err.getvalue()  # the launcher returned: every job ended


def test_day_plan_and_offline_plan_stages_have_bars(tty, tmp_path):
    prof = tmp_path / "two_hours.csv"
    prof.write_text("t_start_s,rate_rps\n0,2\n3600,6\n")
    err = tty()
    day = ["model=llama3_1_8b", "gpu=h100_sxm", "search.finalists=0", f"day.profile={prof}",
           "day.attainment.requests_per_phase=100"]
    code, _ = _run(run_plan, day, tmp_path / "day", bar=True)
    assert code == 0
    for stage in ("day ILP", "attain day", "attain static"):
        assert stage in err.getvalue(), stage
    err = tty()
    off = ["model=llama3_1_8b", "gpu=h100_sxm", "workload=offline", "workload.num_requests=200",
           "target.tokens_per_s=5000", "search.tp=[1]", "search.precision=[fp8]"]
    code, out = _run(run_plan, off, tmp_path / "off", bar=True)
    assert code == 0 and "offline" in out
    for stage in ("evaluate", "simulate", "ILP"):
        assert stage in err.getvalue(), stage

"""What a disaggregated row's labels identify (calibration/disagg_row_labels.py): labels naming two
measurements at one concurrency make the layout a missing input for every row carrying them; a row
repeating a replayable row's measurement is a ``repeat`` of it; other rows keep their mapping."""

from __future__ import annotations

import math

import pandas as pd

from llmplan.calibration.disagg_row_labels import label_conflicts, repeat_of
from llmplan.calibration.serving_disagg_rows import map_disagg_rows
from llmplan.calibration.serving_rows import SIMULATED
from tests.test_serving_disagg_rows import row

NO_WORKERS = {"prefill_num_workers": math.nan, "decode_num_workers": math.nan, "prefill_batch_size": math.nan,
              "decode_batch_size": math.nan}


def conc(n: int) -> str:
    return f"x; silicon_concurrency={n}"


def test_two_measurements_under_one_label_set_flag_every_row_of_it():
    rows = [row(id="a1", silicon_data_source=conc(1), silicon_ttft_ms=210.0, silicon_tpot_ms=9.1),
            row(id="a8", silicon_data_source=conc(8), silicon_ttft_ms=270.0, silicon_tpot_ms=12.2),
            row(id="b8", silicon_data_source=conc(8), silicon_ttft_ms=405.0, silicon_tpot_ms=23.4),
            row(id="c8", silicon_data_source=conc(8), silicon_ttft_ms=405.0, silicon_tpot_ms=23.4, decode_tp_size=4),
            row(id="agg", mode="agg", silicon_data_source=conc(8), silicon_ttft_ms=1.0)]
    out = label_conflicts(rows)
    # a1 is measured once, but its labels also name the two c8 runs: which one it belongs to is unknown
    assert set(out) == {0, 1, 2}
    assert "concurrency 8" in out[0] and "270 vs 405" in out[0]


def test_the_same_measurement_exported_twice_is_not_a_conflict():
    a = row(id="x_03_25", silicon_data_source=conc(8))
    b = row(id="x_04_06", silicon_data_source=conc(8))
    assert label_conflicts([a, b]) == {}
    # rows without a known concurrency are not compared (their point is unknown)
    assert label_conflicts([row(silicon_data_source="none"), row(silicon_data_source="none", silicon_ttft_ms=9.0)]) == {}


def test_a_conflicted_row_is_not_replayed_even_at_concurrency_one():
    rows = [row(id="c1", silicon_data_source=conc(1), silicon_ttft_ms=212.0, silicon_tpot_ms=7.7, **NO_WORKERS),
            row(id="c1b", silicon_data_source=conc(1), silicon_ttft_ms=1838.0, silicon_tpot_ms=17.0, **NO_WORKERS)]
    maps = map_disagg_rows(pd.DataFrame(rows), {})
    for m in maps.values():
        assert m.case is None and m.status.startswith("missing_input:") and "the layout" in m.status
    assert "prefill_num_workers" in maps[0].status
    # alone, the same row is replayed as 1P1D (one client: any xPyD serves it alike)
    assert map_disagg_rows(pd.DataFrame(rows[:1]), {})[0].status == SIMULATED


def test_a_row_without_workers_repeating_a_replayable_row_is_a_repeat():
    full = row(id="cfg1")
    dump = row(id="dump1", decode_tp_size=4, **NO_WORKERS)              # other pool labels, same measurement
    other = row(id="dump2", silicon_ttft_ms=301.0, **NO_WORKERS)       # another measurement
    assert repeat_of([full, dump, other], [0]) == {1: 0}
    # the model label is not part of the identity (the db dump labels DeepSeek-R1 runs V3)
    assert repeat_of([full, row(id="v3", model_path="deepseek-ai/DeepSeek-V3", **NO_WORKERS)], [0]) == {1: 0}
    assert repeat_of([full, row(id="h200", system="h200_sxm", **NO_WORKERS)], [0]) == {}
    maps = map_disagg_rows(pd.DataFrame([full, dump, other]), {})
    assert maps[0].status == SIMULATED
    assert maps[1].status.startswith("repeat:") and "cfg1" in maps[1].status
    assert maps[2].status.startswith("missing_input:")
    # a replayable row is never turned into a repeat
    assert repeat_of([full, row(id="cfg2")], [0, 1]) == {}

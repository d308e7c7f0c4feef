"""llmplan/cli/gc_tuning.py: fewer collections inside a command, the interpreter's settings restored after."""

import gc

import pytest

from llmplan.cli.gc_tuning import YOUNG_THRESHOLD, few_collections


def test_thresholds_raised_inside_and_restored_after_even_on_error():
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with pytest.raises(RuntimeError):
        with few_collections():
            assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
            assert gc.get_threshold()[1:] == before[1:]
            if frozen_before == 0:  # what existed at the start is never walked again
                assert gc.get_freeze_count() > 0
            raise RuntimeError("the command failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen_before


def test_a_callers_frozen_objects_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with few_collections():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_cycles_are_still_collected():
    class Node:
        pass

    with few_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = id(a)
        del a, b
        assert gc.collect() >= 2  # an explicit collection still frees the cycle
    assert all(id(o) != ref for o in gc.get_objects() if isinstance(o, Node))

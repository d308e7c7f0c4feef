"""The event loop: one ordering key (time, priority, sequence), deterministic, stoppable."""

import math

import pytest

from llmplan.sim.events import PRIORITY_ARRIVAL, PRIORITY_STEP, PRIORITY_WAKE, EventLoop, StopSimulation


def test_events_pop_in_time_then_priority_then_insertion_order():
    loop, seen = EventLoop(), []
    loop.schedule(5.0, PRIORITY_WAKE, seen.append, "wake@5")
    loop.schedule(5.0, PRIORITY_ARRIVAL, seen.append, "arrival@5")
    loop.schedule(1.0, PRIORITY_STEP, seen.append, "step@1")
    loop.schedule(5.0, PRIORITY_ARRIVAL, seen.append, "arrival2@5")
    loop.run()
    assert seen == ["step@1", "arrival@5", "arrival2@5", "wake@5"]
    assert loop.now == 5.0 and loop.events_processed == 4


def test_callbacks_can_schedule_and_time_never_goes_back():
    loop, times = EventLoop(), []

    def tick(k):
        times.append(loop.now)
        if k < 5:
            loop.schedule(loop.now + 1.5, PRIORITY_STEP, tick, k + 1)

    loop.schedule(0.0, PRIORITY_STEP, tick, 0)
    loop.run()
    assert times == [0.0, 1.5, 3.0, 4.5, 6.0, 7.5]
    with pytest.raises(ValueError):
        loop.schedule(1.0, PRIORITY_STEP, tick, 0)


def test_run_until_stop_and_peek():
    loop, seen = EventLoop(), []
    for t in (1.0, 2.0, 3.0):
        loop.schedule(t, PRIORITY_STEP, seen.append, t)
    assert loop.peek() == 1.0
    loop.run(until_ms=2.5)
    assert seen == [1.0, 2.0] and loop.now == 2.5 and len(loop) == 1

    def halt(_):
        raise StopSimulation

    loop.schedule(2.7, PRIORITY_ARRIVAL, halt)
    loop.run()
    assert seen == [1.0, 2.0] and loop.peek() == 3.0
    loop.run()
    assert seen == [1.0, 2.0, 3.0] and loop.peek() == math.inf

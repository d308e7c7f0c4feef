"""The event loop: one heap, one ordering key ``(time_ms, priority, sequence)``.

Modelled on SimPy's core (``simpy/core.py``): events are kept in a binary heap and
popped in order of simulated time; ties are broken first by an integer priority
(lower runs first) and then by a monotonically increasing sequence number, so two
runs with the same inputs pop events in exactly the same order. Nothing here reads
the wall clock or global random state.

Callbacks are plain callables taking one argument; they may schedule further events.
Cancellation is not supported on purpose: owners that may need to ignore a stale
event keep a generation counter and compare it in the callback.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

#: Requests arriving at an instant are processed before anything else at that instant,
#: so a step that starts at the same time can include them.
PRIORITY_ARRIVAL = 0
#: A batch (engine iteration) finishing: tokens appear, requests complete.
PRIORITY_STEP = 1
#: An idle engine waking up to schedule: after every arrival and step at that instant.
PRIORITY_WAKE = 2
#: Bookkeeping that must see the state after everything else at that instant (deadlines).
PRIORITY_LAST = 3

Callback = Callable[[Any], None]


class StopSimulation(Exception):
    """Raised inside a callback (or by :meth:`EventLoop.stop`) to end :meth:`EventLoop.run`."""


class EventLoop:
    """A discrete-event clock and agenda.

    ``now`` is the current simulated time in milliseconds. :meth:`schedule` adds an
    event; :meth:`run` pops events in ``(time, priority, sequence)`` order and calls
    them until the agenda is empty, ``until`` is reached, or :meth:`stop` is called.
    """

    __slots__ = ("now", "_heap", "_seq", "_stopped", "events_processed")

    def __init__(self, start_ms: float = 0.0) -> None:
        self.now: float = start_ms
        self._heap: list[tuple[float, int, int, Callback, Any]] = []
        self._seq = 0
        self._stopped = False
        #: number of callbacks run so far (a cheap measure of simulation work)
        self.events_processed = 0

    def schedule(self, time_ms: float, priority: int, callback: Callback, arg: Any = None) -> None:
        """Run ``callback(arg)`` at ``time_ms`` (never earlier than ``now``)."""
        if time_ms < self.now:
            raise ValueError(f"cannot schedule in the past: {time_ms} < now {self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, priority, self._seq, callback, arg))

    def peek(self) -> float:
        """Time of the next event, or ``inf`` when the agenda is empty."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def stop(self) -> None:
        """End :meth:`run` after the current callback returns."""
        self._stopped = True

    def run(self, until_ms: float = math.inf) -> None:
        """Process events in order until none are left, ``until_ms`` passes, or :meth:`stop`."""
        heap = self._heap
        pop = heapq.heappop
        self._stopped = False
        try:
            while heap and not self._stopped:
                if heap[0][0] > until_ms:
                    self.now = until_ms
                    return
                time_ms, _, _, callback, arg = pop(heap)
                self.now = time_ms
                self.events_processed += 1
                callback(arg)
        except StopSimulation:
            self._stopped = True

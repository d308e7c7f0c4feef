"""Independent, deterministic jobs on forked worker processes (docs/PERFORMANCE.md).

A leaf module (imports nothing of the project), so the simulator can
run work beside itself (:func:`beside`) as well as the planner and the commands (:func:`map_jobs`).

:func:`map_jobs` runs a list of zero-argument callables and returns their results in the
list's order, on up to :func:`worker_count` processes started with ``fork`` (a worker sees
the parent's memory as it was: catalogs, kernel models, the step models' caches). Only the
results travel back (pickled over the pool's pipe, never written anywhere). The answer does
not depend on how many workers run or in which order the jobs finish: a job must be a pure
function of its inputs (a simulation seeded by its own spec and seed is), and every result
is placed by its index.

Sequential in this process (the same code path as before) when one worker is asked or
available, off Linux (``fork`` is the start method used), inside a daemonic process
(a multiprocessing worker cannot start its own), or where Ray is loaded (a sweep's Ray
workers, whose runtime threads a fork would copy mid-flight). A job that raises in a worker is run again
here, so the caller sees the exception it would have seen sequentially (a ``UserError`` with
its key and fix, not a pickled copy). ``LLMPLAN_WORKERS=N`` sets the number of workers
(``1``: sequential); unset, only cores no other process is using get a worker
(:func:`busy_elsewhere`), so a machine other jobs fill runs everything in this process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: environment variable: number of worker processes (1 = sequential)
WORKERS_ENV = "LLMPLAN_WORKERS"
#: at most this many workers by default (the target machines have 2 cores)
DEFAULT_MAX_WORKERS = 4

_JOBS: Sequence[Callable[[], Any]] | None = None  # the jobs of the running map, inherited by forked workers


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def busy_elsewhere(samples: int = 3, path: str = "/proc/loadavg") -> int:
    """CPUs other processes keep busy right now: the runnable threads the kernel counts
    (``/proc/loadavg``'s fourth field, this process included), less this one; the least of a few
    reads. 0 where it cannot be read. Workers go only to idle cores: on a machine other jobs fill,
    forking would slow everyone down (the results are the same either way)."""
    least = None
    for _ in range(samples):
        try:
            with open(path) as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0
        least = running if least is None else min(least, running)
    return max(0, (least or 1) - 1)


def workers_env_error() -> str | None:
    """What is wrong with ``LLMPLAN_WORKERS`` (unset is fine), or None."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    return None if not raw or (raw.isdigit() and int(raw) >= 1) else f"must be an integer >= 1, got {raw!r}"


def worker_count(jobs: int) -> int:
    """Workers for ``jobs`` jobs: ``LLMPLAN_WORKERS`` if set (an integer >= 1), else the CPUs
    available that no other process keeps busy (:func:`busy_elsewhere`), up to
    :data:`DEFAULT_MAX_WORKERS`; never more than the jobs; 1 where forking a pool is not
    possible or wise (:func:`fork_allowed`)."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        why = workers_env_error()
        if why:
            raise ValueError(f"{WORKERS_ENV} {why}")  # the commands refuse it first (exit 2, llmplan.cli.main)
        n = int(raw)
    else:
        n = min(available_cpus() - busy_elsewhere(), DEFAULT_MAX_WORKERS)
    return max(1, min(n, jobs)) if fork_allowed() else 1


def fork_allowed() -> bool:
    """Whether this process may fork workers: on Linux (``fork`` is the start method only Linux
    makes safe for a process with numpy and rich loaded), not a daemonic process (a pool's worker),
    and Ray not loaded (a sweep's Ray worker: its runtime holds threads a fork would copy)."""
    return sys.platform.startswith("linux") and not mp.current_process().daemon and "ray" not in sys.modules


def _run_job(i: int) -> tuple[bool, Any]:
    """In a worker: (True, result) of job ``i``, or (False, None) when it raised."""
    try:
        return True, _JOBS[i]()
    except BaseException:  # noqa: BLE001 - re-run in the parent, which raises it as the caller expects
        return False, None


def map_jobs(jobs: Sequence[Callable[[], Any]], on_result: Callable[[int, int], None] | None = None,
             workers: int | None = None) -> list[Any]:
    """``[job() for job in jobs]``, on forked workers when more than one is available.
    ``on_result(done, total)`` is called in this process as results arrive (progress).
    ``workers``: override :func:`worker_count`."""
    global _JOBS
    jobs = list(jobs)
    n = worker_count(len(jobs)) if workers is None else max(1, min(int(workers), len(jobs))) * fork_allowed()
    out: list[Any] = []
    if n <= 1 or _JOBS is not None:  # sequential (also a map started from inside a job)
        for i, job in enumerate(jobs):
            out.append(job())
            if on_result:
                on_result(i + 1, len(jobs))
        return out
    _JOBS = jobs
    try:
        with mp.get_context("fork").Pool(n) as pool:
            for i, (ok, value) in enumerate(pool.imap(_run_job, range(len(jobs)), chunksize=1)):
                out.append(value if ok else jobs[i]())
                if on_result:
                    on_result(i + 1, len(jobs))
    finally:
        _JOBS = None
    return out


def can_fork_beside() -> bool:
    """Whether :func:`beside` would run its job on a worker (else it runs nothing)."""
    return _JOBS is None and worker_count(2) >= 2


@contextmanager
def beside(job: Callable[[], Any]) -> Iterator[Callable[[], Any] | None]:
    """Start ``job`` on one forked worker while this process goes on (speculative work this
    process may need next). Yields ``result()``, which waits for the job's result (a job that
    raised there is run again here), or None when no worker can be started
    (:func:`can_fork_beside`). Leaving the block stops a job whose result was not taken."""
    global _JOBS
    if not can_fork_beside():
        yield None
        return
    _JOBS = [job]
    pool = mp.get_context("fork").Pool(1)
    try:
        pending = pool.apply_async(_run_job, (0,))

        def result() -> Any:
            ok, value = pending.get()
            return value if ok else job()

        yield result
    finally:
        pool.terminate()
        pool.join()
        _JOBS = None

"""Worker processes for the CPU-bound Python parts of OTLP ingestion (parsing, assembling).

Created only when a file or a set of ready traces is large enough to pay for starting them;
results come back in submission order with a few tasks in flight, so memory stays bounded.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any


def ordered_map(pool: Executor | None, function: Callable[..., Any], arguments: Iterable[tuple],
                in_flight: int = 4) -> Iterator[Any]:
    """`function(*args)` for each of `arguments`, in order; here when `pool` is None."""
    if pool is None:
        for args in arguments:
            yield function(*args)
        return
    pending: deque[Future] = deque()
    for args in arguments:
        pending.append(pool.submit(function, *args))
        if len(pending) >= in_flight:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class LazyPool:
    """A process pool started on first use. Workers are forked: spawned ones would re-run the
    caller's main script, and they only parse JSON and build Arrow tables, never touching the
    parent's DuckDB. Where fork is not available the work runs in this process."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

    def get(self) -> Executor | None:
        """The pool, or None when one worker would do (the work then runs in this process)."""
        if self.workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return None
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

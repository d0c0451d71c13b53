"""The driver's own threads: searches over many rows (candidates, centres) in blocks on a thread pool.

The numba kernels release the GIL, so the driver's searches run in parallel on its threads while the
workers wait for the next pass. Each block writes only its own rows, so a result does not depend on
the number of threads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .blas import one_blas_thread

ROWS_PER_TASK = 8192
"""Rows a thread works on at a time in :func:`over_blocks` unless the caller says otherwise."""

T = TypeVar("T")


@contextlib.contextmanager
def driver_threads() -> Iterator[ThreadPoolExecutor]:
    """A pool of one thread per core, with BLAS on one thread so that its threads do not compete."""
    with one_blas_thread(), ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        yield pool


def blocks_in_order(work: Callable[[int, int], T], n: int, pool: ThreadPoolExecutor | None = None,
                    rows: int | None = None, first: int = 0) -> list[T]:
    """``[work(start, stop)]`` over blocks of ``rows`` (default :data:`ROWS_PER_TASK`) of the rows ``first`` ..
    n, in block order, on ``pool``'s threads (None: this thread). ``work`` writes only its own rows, so
    the results are the serial ones."""
    rows = ROWS_PER_TASK if rows is None else rows

    def block(start: int) -> T:
        return work(start, min(start + rows, n))

    starts = range(first, n, rows)
    return list(pool.map(block, starts) if pool is not None else map(block, starts))


def over_blocks(work: Callable[[int, int], int], n: int, pool: ThreadPoolExecutor | None = None,
                rows: int | None = None, first: int = 0) -> int:
    """The sum of ``work(start, stop)`` over the blocks of :func:`blocks_in_order` (e.g. the distances a
    search evaluated)."""
    return int(sum(blocks_in_order(work, n, pool, rows, first)))

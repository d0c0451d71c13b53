"""Helpers of the chunk operations' contract."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from daskclust.engine.ops import ThreadScratch


def test_scratch_is_reused_per_thread_and_renewed_when_it_does_not_fit():
    """A thread's chunks share its arrays (a shorter chunk their head); a longer chunk, another dtype or
    another row shape gets new arrays; another thread its own; a pickled scratch holds none."""
    scratch = ThreadScratch(np.zeros)
    values, numbers = scratch.rows(10, ((3,), np.float32), ((), np.int64))
    assert values.shape == (10, 3) and numbers.shape == (10,) and not values.any()
    head, _ = scratch.rows(4, ((3,), np.float32), ((), np.int64))
    assert np.shares_memory(head, values) and head.shape == (4, 3)
    for specs in ([((3,), np.float32), ((), np.int64)], [((3,), np.float64), ((), np.int64)],
                  [((5,), np.float64), ((), np.int64)]):
        n_rows = 11 if specs[0] == ((3,), np.float32) else 4
        renewed, _ = scratch.rows(n_rows, *specs)
        assert not np.shares_memory(renewed, values) and renewed.shape == (n_rows, *specs[0][0])
        assert renewed.dtype == specs[0][1]
        values = renewed
    with ThreadPoolExecutor(1) as other:
        theirs = other.submit(scratch.rows, 4, ((5,), np.float64), ((), np.int64)).result()[0]
    assert not np.shares_memory(theirs, values) and len(scratch.held) == 2
    assert pickle.loads(pickle.dumps(ThreadScratch())).held == {}

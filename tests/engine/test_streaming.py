"""Streamed passes read each thread's chunks into reused arrays (:class:`~daskclust.engine.shard.ReadBuffers`),
never under rows an operation kept; chunks digested on first read or only when asked give one fingerprint, and
every chunk comes with the max |x| its validation measured."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import zarr

from daskclust.data import as_chunked_data
from daskclust.engine.engine import Engine
from daskclust.engine.shard import ReadBuffers


class KeepHeads:
    """Keeps a view of the first rows of every chunk (as an operation that keeps rows without copying)."""

    def new_acc(self):
        return []

    def run(self, chunk, acc):
        acc.append((chunk.start, chunk.X[:3]))

    @staticmethod
    def merge(a, b):
        return a + b


class CountReuse:
    """Counts the chunks whose rows arrive in the array of an earlier chunk of the same thread."""

    def new_acc(self):
        return {"seen": [], "reused": 0, "chunks": 0}

    def run(self, chunk, acc):
        acc["reused"] += any(ref() is chunk.X for ref in acc["seen"])
        acc["seen"].append(weakref.ref(chunk.X))
        acc["chunks"] += 1

    @staticmethod
    def merge(a, b):
        return {"seen": [], "reused": a["reused"] + b["reused"], "chunks": a["chunks"] + b["chunks"]}

    @staticmethod
    def compact(acc):
        return {**acc, "seen": []}  # weak references stay on the worker


@pytest.fixture
def store(tmp_path):
    X = np.random.default_rng(0).normal(size=(2400, 5)).astype(np.float32)
    zarr.create_array(str(tmp_path / "x.zarr"), data=X, chunks=(100, 5), compressors=None)
    return str(tmp_path / "x.zarr"), X


def test_rows_an_operation_keeps_are_never_read_over(client_threads, store):
    path, X = store
    with Engine(as_chunked_data(path, chunk_rows=100), client_threads, persist=False) as engine:
        heads = engine.map_reduce(KeepHeads())
    assert len(heads) == 24
    for start, rows in heads:
        np.testing.assert_array_equal(rows, X[start:start + 3])


def test_chunks_are_read_into_the_arrays_of_earlier_chunks(client_threads, store):
    path, _ = store
    with Engine(as_chunked_data(path, chunk_rows=100), client_threads, persist=False) as engine:
        counts = engine.map_reduce(CountReuse())
        threads = len(engine.shards)  # one thread per worker here
    assert counts["chunks"] == 24
    assert counts["reused"] == 24 - ReadBuffers.SIZE * threads  # every chunk after each thread's first two


def test_the_pool_hands_out_only_arrays_nothing_else_holds():
    pool = ReadBuffers()
    assert pool.take() is None
    pool.keep(np.zeros(4))  # read, computed on, let go
    b = np.zeros(4)
    pool.keep(b)  # read, being computed on
    free = pool.take()
    assert free is not None and free is not b
    view = free[:2]  # noqa: F841 - an operation kept a view: it holds its base
    del free
    assert pool.take() is None
    c = np.zeros(4)
    pool.keep(c)  # the arrays held elsewhere leave the pool
    del b, c
    assert pool.take() is not None


class Rows:
    """A pass that reads every row and keeps the largest magnitudes the chunks come with, and their own."""

    def new_acc(self):
        return []

    def run(self, chunk, acc):
        acc.append((chunk.largest, float(np.abs(chunk.X).max())))

    @staticmethod
    def merge(a, b):
        return a + b


@pytest.mark.parametrize("persist", [True, False])
def test_the_content_fingerprint_does_not_depend_on_when_chunks_are_digested(client_threads, store, persist):
    path, X = store
    data = as_chunked_data(path, chunk_rows=300)
    fingerprints = []
    for first_read in (True, False):
        with Engine(data, client_threads, persist=persist, fingerprint=first_read) as engine:
            for _ in range(2):  # the first pass validates the chunks, the second knows them
                largest = engine.map_reduce(Rows())
                assert len(largest) == 8 and all(given == measured for given, measured in largest)
            fingerprints.append(engine.content_fingerprint())
    with Engine(as_chunked_data(X[::-1].copy(), chunk_rows=300), client_threads, fingerprint=False) as engine:
        other = engine.content_fingerprint()
    assert fingerprints[0] == fingerprints[1] != other

"""The per-worker actor that holds chunks and their state and runs passes over them.

One ``Shard`` lives on each worker for the length of a fit. Calling an actor
goes straight from the driver to the worker (no scheduler round trip, about a
millisecond here), which is what lets an iteration cost milliseconds instead of
a Dask task per chunk. The shard runs its chunks on a pool with as many threads
as the worker has, chunks assigned to threads round-robin in index order, so
that its sums only depend on which chunks it holds.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data import BlockSource
from ..data.ranges import checked_rows, weights_problem
from ..errors import InvalidDataError
from ..persistence.chunk_states import PERM, read_state, write_state
from .cluster import WorkerWatch
from .events import ChunkEvents
from .ops import Chunk, ChunkOp, leaving
from .packing import Packed, pack, unpack

_NO_WEIGHTS = np.empty(0, dtype=np.float64)


@dataclass
class _Slot:
    index: int
    start: int
    stop: int
    X: np.ndarray | None = None
    w: np.ndarray | None = None
    validated: bool = False
    largest: float | None = None  # max |x| over the rows, measured when they were validated
    digest: str | None = None  # content digest of the chunk's rows and weights in source order, set when validated
    state: dict[str, np.ndarray] = field(default_factory=dict)
    perm: np.ndarray | None = None  # row order on the worker: local row i is source row perm[i]


def chunk_digest(X: np.ndarray, w: np.ndarray) -> str:
    """BLAKE2b-128 of a chunk's shape, dtype, row bytes and weight bytes (C order): the chunk's part of
    the data's content fingerprint (hashlib releases the GIL while it hashes)."""
    digest = hashlib.blake2b(f"{X.shape}{X.dtype.str}{w.shape}".encode(), digest_size=16)
    digest.update(np.ascontiguousarray(X).data)
    if w.shape[0]:
        digest.update(np.ascontiguousarray(w).data)
    return digest.hexdigest()


def _in_source_order(slot: _Slot, X: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A held chunk's rows and weights in the order of the source (held rows may be sorted by cluster)."""
    if slot.perm is None:
        return X, w
    inverse = np.argsort(slot.perm)
    return X[inverse], (w[inverse] if w.shape[0] else w)


def _worker():
    from distributed import get_worker

    return get_worker()


def _worker_threads() -> int:
    worker = _worker()
    state = getattr(worker, "state", None)
    return int(getattr(state, "nthreads", None) or getattr(worker, "nthreads", 1) or 1)


def _wait_alive(future, address: str) -> Any:
    """The result of an actor call to the worker at ``address``; :class:`WorkerLost` as soon as it
    leaves (the engine's liveness check, :class:`WorkerWatch`, asking through this worker)."""
    return WorkerWatch(_worker(), [address]).result(future)


def tree_merge(op: ChunkOp, accs: list) -> Any:
    """Merge accumulators pairwise as a balanced binary tree (fixed order)."""
    while len(accs) > 1:
        merged = [op.merge(accs[i], accs[i + 1]) for i in range(0, len(accs) - 1, 2)]
        if len(accs) % 2:
            merged.append(accs[-1])
        accs = merged
    return accs[0]


def _references(items: list, i: int) -> int:
    """The reference count of ``items[i]``."""
    return sys.getrefcount(items[i])


_ONLY_LISTED = _references([object()], 0)
"""What :func:`_references` counts for an object that only its list refers to (measured, not assumed:
interpreters count the references of a call's arguments differently)."""


class ReadBuffers:
    """The arrays one streaming thread reads its chunks into, reused from chunk to chunk.

    A fresh 64 MiB array costs the kernel a page fault and a zeroed page every 4 KiB, about as much
    CPU as reading the rows into it from the page cache; so a thread reading chunk k + 1 while it
    computes on chunk k reads into the array of chunk k - 1. An array is handed out again only when
    nothing but this pool refers to it (its reference count): an operation that kept a chunk's rows,
    or a view of them, keeps them, and the pool takes a new array instead.
    """

    SIZE = 2
    """Arrays kept: the chunk computed on and the one being read."""

    def __init__(self):
        self._arrays: list[np.ndarray] = []

    def _free(self) -> list[np.ndarray]:
        return [self._arrays[i] for i in range(len(self._arrays)) if _references(self._arrays, i) == _ONLY_LISTED]

    def take(self) -> np.ndarray | None:
        """A free array to read into (None: none is free, the source allocates one)."""
        free = self._free()
        return free[0] if free else None

    def keep(self, array: np.ndarray) -> None:
        """Pool ``array``, the rows just read; arrays held elsewhere leave the pool."""
        if not any(a is array for a in self._arrays):
            self._arrays = self._free()[: self.SIZE - 1] + [array]


class Shard:
    """Dask actor: a worker's chunks, their per-chunk state, and passes over them.

    Parameters
    ----------
    x_source, w_source : BlockSource or None
        Where rows are read from when they are not pushed by the driver
        (zarr: read directly; dask: each chunk's graph computed here).
    persist : bool
        Keep chunks in memory after the first read (else stream them every pass,
        reading the next chunk of a thread while it computes on the current one).
    state_store : str or None
        A zarr location for the per-row state (K(n), ...) between passes instead
        of worker memory, for N x C' too large for the cluster.
    digests : bool
        Digest each chunk's content when it is first read (:func:`chunk_digest`); else only when
        :meth:`content_digests` asks, reading the chunk again.
    """

    def __init__(self, x_source: BlockSource | None, w_source: BlockSource | None, persist: bool,
                 state_store: str | None = None, digests: bool = True):
        self._x_source = x_source
        self._w_source = w_source
        self._persist = persist
        self._state_store = state_store
        self._digests = digests
        self._slots: dict[int, _Slot] = {}
        self._nthreads = _worker_threads()
        self._pool = ThreadPoolExecutor(self._nthreads, thread_name_prefix="daskclust-shard")
        self._io = ThreadPoolExecutor(self._nthreads, thread_name_prefix="daskclust-io")
        self._bytes_read = 0
        self._count_lock = threading.Lock()

    # ------------------------------------------------------------------ chunks
    def attach(self, specs: list[tuple[int, int, int]], x_refs=None, w_refs=None) -> int:
        """Take charge of chunks ``(index, start, stop)``; returns the rows now held.

        ``x_refs`` / ``w_refs`` are Dask futures of the chunks' data (pushed or
        persisted by the driver), looked up in this worker's memory. Otherwise,
        persisted chunks are read now, in parallel, and validated.
        """
        new = []
        for pos, (index, start, stop) in enumerate(specs):
            slot = _Slot(int(index), int(start), int(stop))
            if x_refs is not None:
                slot.X = self._local(x_refs[pos])
            if w_refs is not None:
                slot.w = self._local(w_refs[pos])
            self._slots[slot.index] = slot
            new.append(slot)
        if self._persist:
            list(self._pool.map(self._load, new))
        return sum(s.stop - s.start for s in self._slots.values())

    @staticmethod
    def _local(ref) -> np.ndarray:
        worker = _worker()
        if ref.key in worker.data:
            return worker.data[ref.key]
        return ref.result()

    def _load(self, slot: _Slot, into: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's rows and weights, read (and validated on first read) if needed; streamed rows are
        read into ``into`` where the source can (:meth:`~daskclust.data.BlockSource.read`)."""
        X = slot.X
        read = 0
        if X is None:
            X = self._x_source.read(slot.start, slot.stop, into)
            read += (slot.stop - slot.start) * self._x_source.row_bytes
        w = slot.w
        if w is None and self._w_source is not None:
            w = self._w_source.read(slot.start, slot.stop)
            read += (slot.stop - slot.start) * self._w_source.row_bytes
        if read:
            with self._count_lock:
                self._bytes_read += read
        X = np.ascontiguousarray(X)
        w = _NO_WEIGHTS if w is None else np.ascontiguousarray(w, dtype=np.float64)
        if not slot.validated:
            self._validate(slot, X, w)
            if self._digests:
                slot.digest = chunk_digest(*(_in_source_order(slot, X, w) if slot.X is not None else (X, w)))
            slot.validated = True
        if slot.perm is not None and slot.X is None:  # streamed: put the fresh rows in the worker's order
            X = np.ascontiguousarray(X[slot.perm])
            w = w[slot.perm] if w.shape[0] else w
        if self._persist:
            slot.X, slot.w = X, w
        return X, w

    @staticmethod
    def _validate(slot: _Slot, X: np.ndarray, w: np.ndarray) -> None:
        """The range rules of :mod:`daskclust.data.ranges` (too small only on the whole data, in
        the first seeding pass: tiny values beside large ones are fine); keeps max |x| in ``slot``."""
        problem, slot.largest = checked_rows(X, slot.start, "cluster", slot.index)
        problem = problem or (weights_problem(w, slot.start, slot.index) if w.shape[0] else None)
        if problem:
            raise InvalidDataError(problem)

    def content_digests(self) -> dict[int, str]:
        """The content digest of every chunk held, by chunk index (:func:`chunk_digest`); chunks not
        read yet are read (and validated) now, in parallel."""
        def digest(slot: _Slot) -> None:
            X, w = self._load(slot)
            if slot.digest is None:  # a shard without digests on first read
                slot.digest = chunk_digest(*_in_source_order(slot, X, w))

        list(self._pool.map(digest, [slot for slot in self._slots.values() if slot.digest is None]))
        return {index: slot.digest for index, slot in self._slots.items()}

    def bytes_read(self) -> int:
        """Bytes this shard has read from its sources (rows times their stored width), for the
        out-of-core benchmarks and the tests that prove a pass did not touch a store."""
        return self._bytes_read

    # ------------------------------------------------------------------ passes
    def run_tree(self, packed_op: Packed, others: list[tuple[Any, str]], events: ChunkEvents | None = None) -> Packed:
        """Run the operation ``packed_op`` over this shard's chunks and the subtree of shards ``others``;
        return the merge. Both travel packed (:mod:`daskclust.engine.packing`); the operation is
        forwarded to the children as received.

        ``others`` lists (shard, worker address) pairs; it is split in two halves
        and the head of each half is asked (directly, worker to worker) to run its
        half before this shard starts on its own chunks, so the whole tree works
        at once and the merged result flows back up: one call from the driver per
        pass, depth log2(workers). A child whose worker leaves the cluster fails
        the pass within ``cluster.LIVENESS_POLL`` seconds, freeing this worker's actor thread.
        With ``events`` (a pass showing progress) every chunk done is reported to the driver
        (:mod:`daskclust.engine.events`). The merge leaves compacted when the op can (``compact``).
        """
        halves = [others[: len(others) // 2], others[len(others) // 2:]]
        pending = [(half[0][1], half[0][0].run_tree(packed_op, half[1:], events)) for half in halves if half]
        op = unpack(packed_op)
        acc = self.run_local(op, events.sender() if events is not None else None)
        for address, future in pending:
            acc = op.merge(acc, unpack(_wait_alive(future, address)))
        return pack(leaving(op, acc))

    def run_local(self, op: ChunkOp, chunk_done: Callable[[], None] | None = None) -> Any:
        """Fold every chunk of this shard into one accumulator with ``op``, calling ``chunk_done``
        after each chunk."""
        order = sorted(self._slots)
        nthreads = max(1, min(self._nthreads, len(order)))
        groups = [order[t::nthreads] for t in range(nthreads)]
        if nthreads == 1:
            accs = [self._run_group(op, groups[0], chunk_done)]
        else:
            accs = list(self._pool.map(lambda g: self._run_group(op, g, chunk_done), groups))
        return tree_merge(op, accs)

    def _run_group(self, op: ChunkOp, indices: list[int], chunk_done: Callable[[], None] | None) -> Any:
        acc = op.new_acc()
        slots = [self._slots[i] for i in indices]
        reads = getattr(op, "reads_rows", True)
        streams = bool(slots) and reads and not self._persist
        buffers = ReadBuffers() if streams else None
        ahead = self._io.submit(self._load, slots[0], buffers.take()) if streams else None
        for pos, slot in enumerate(slots):
            if not reads:
                X = w = None
            elif ahead is not None:  # streaming: this chunk was read while the previous one computed
                X, w = ahead.result()
                buffers.keep(X)
                nxt = pos + 1
                ahead = self._io.submit(self._load, slots[nxt], buffers.take()) if nxt < len(slots) else None
            else:
                X, w = self._load(slot)
            self._state_in(slot)
            op.run(Chunk(slot.index, slot.start, X, w, slot.state, slot.perm, slot.stop - slot.start, slot.largest), acc)
            self._state_out(slot)
            if chunk_done is not None:
                chunk_done()
        return acc

    # ------------------------------------------------------------------ state on disk
    def _state_in(self, slot: _Slot) -> None:
        if self._state_store is None or slot.state:
            return
        slot.state.update(read_state(self._state_store, slot.index, check=False) or {})  # none stored yet: {}

    def _state_out(self, slot: _Slot) -> None:
        if self._state_store is None:
            return
        write_state(self._state_store, slot.index, slot.state)
        slot.state.clear()

    def save_state(self, url: str) -> int:
        """Write every chunk's per-row state and row order under ``url`` (checkpoints, tree stores;
        :mod:`daskclust.persistence.chunk_states`). Returns the number of chunks written."""
        def write(slot):
            self._state_in(slot)
            perm = slot.perm if slot.perm is not None else np.arange(slot.stop - slot.start, dtype=np.int32)
            write_state(url, slot.index, {**slot.state, PERM: perm})
            if self._state_store is not None:
                slot.state.clear()

        list(self._pool.map(write, self._slots.values()))
        return len(self._slots)

    def load_state(self, url: str) -> int:
        """Restore every chunk's per-row state and row order from ``url`` (resume, tree stores)."""
        def read(slot):
            arrays = read_state(url, slot.index)
            if arrays is None:
                raise ValueError(f"the state of chunk {slot.index} is missing")
            perm = arrays.pop(PERM, None)
            n = slot.stop - slot.start
            if perm is None or perm.dtype.kind not in "iu" or perm.shape != (n,) \
                    or not np.array_equal(np.sort(perm), np.arange(n)):
                raise ValueError(f"the row order of chunk {slot.index} is not a permutation of its {n} rows")
            slot.perm = None if np.array_equal(perm, np.arange(len(perm))) else perm
            if slot.X is not None and slot.perm is not None:
                slot.X = np.ascontiguousarray(slot.X[slot.perm])
                if slot.w is not None and slot.w.shape[0]:
                    slot.w = slot.w[slot.perm]
            slot.state = arrays
            self._state_out(slot)

        list(self._pool.map(read, self._slots.values()))
        return len(self._slots)

    def reorder(self, name: str) -> None:
        """Sort every chunk's rows (data, weights, per-row state) by the state array ``name``
        (its first column if 2-D).

        Rows of one cluster then sit together in memory, so E-step kernels walk
        their data sequentially and touch one cluster's centre, neighbourhood
        and statistics at a time: measured on 2 busy cores at C = 16384, 3x
        faster than visiting shuffled rows. The order is a deterministic function
        of the chunk and its state, so models do not depend on where it runs.
        Only worth it for persisted chunks: a streamed chunk would need its rows
        gathered again after every read.
        """
        for slot in self._slots.values():
            self._state_in(slot)
            key = slot.state[name]
            key = key[:, 0] if key.ndim == 2 else key
            order = np.argsort(key, kind="stable").astype(np.int32)
            slot.perm = order if slot.perm is None else slot.perm[order]
            for state_name, value in slot.state.items():
                if isinstance(value, np.ndarray) and value.shape[:1] == key.shape[:1]:
                    slot.state[state_name] = np.ascontiguousarray(value[order])
            if slot.X is not None:
                slot.X = np.ascontiguousarray(slot.X[order])
                if slot.w is not None and slot.w.shape[0]:
                    slot.w = slot.w[order]
            self._state_out(slot)

    def forget(self) -> None:
        """Back to a freshly started shard's state: rows in source order, no per-chunk state, no bytes
        counted, so that a run on a reused engine is the run a new engine would give (the seedings'
        draws are keyed by a row's place in its chunk)."""
        for slot in self._slots.values():
            if slot.X is not None:  # held rows; a streamed chunk is read in source order once perm is gone
                X, w = _in_source_order(slot, slot.X, slot.w if slot.w is not None else _NO_WEIGHTS)
                slot.X = np.ascontiguousarray(X)
                slot.w = w if slot.w is not None else None
            slot.perm = None
            slot.state = {}
        with self._count_lock:
            self._bytes_read = 0

    # ------------------------------------------------------------------ state
    def close(self) -> None:
        self._slots.clear()
        self._pool.shutdown(wait=False)
        self._io.shutdown(wait=False)

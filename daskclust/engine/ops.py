"""The contract between the engine and the algorithms: chunk operations.

An operation is a small picklable object sent to every worker once per pass.
Each worker folds its chunks into accumulators (one per thread, chunks
assigned to threads in a fixed round-robin order), merges them, and the engine
merges the workers' results as a binary tree. ``merge`` must therefore be
associative; sums may differ between cluster layouts only by round-off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class Chunk:
    """What an operation sees of one chunk on a worker.

    X : (n, D) float32/float64 rows, None for operations that declare
    ``reads_rows = False`` (the rows are then not read at all); w : (n,) float64
    weights or a (0,) array (unweighted), None likewise; state : per-chunk
    arrays kept on the worker between passes (K(n), distances to the nearest
    seed, ...), which the operation may read, replace or add to; perm : the
    worker's row order (local row i is row ``perm[i]`` of the chunk in the
    source), None when unchanged; n_rows : rows of the chunk; largest : max |x| over its rows,
    measured when they were validated (None where it was not: rows given to an operation by hand).
    """

    index: int
    start: int
    X: np.ndarray | None
    w: np.ndarray | None
    state: dict[str, np.ndarray] = field(default_factory=dict)
    perm: np.ndarray | None = None
    n_rows: int = 0
    largest: float | None = None

    def __post_init__(self):
        if self.X is not None:
            self.n_rows = self.X.shape[0]

    def source_rows(self, local: np.ndarray) -> np.ndarray:
        """Global row indices (in the source) of local rows."""
        local = np.asarray(local, dtype=np.int64)
        return self.start + (local if self.perm is None else self.perm[local].astype(np.int64))


class ChunkOp(Protocol):
    """A pass over the data: ``new_acc`` / ``run`` per chunk / associative ``merge``.

    An operation may set ``reads_rows = False`` when it only uses the chunks'
    state: a streamed chunk is then not read from its source for this pass. It may define
    ``compact(acc)``, applied to a shard's merged accumulator before it is sent up the tree: the
    same statistics in fewer bytes (the merges' result must not change).
    """

    def new_acc(self) -> Any:
        """A fresh (zero) accumulator."""

    def run(self, chunk: Chunk, acc: Any) -> None:
        """Fold one chunk into ``acc`` (in place), updating ``chunk.state``."""

    def merge(self, a: Any, b: Any) -> Any:
        """Combine two accumulators (may reuse ``a``)."""


def leaving(op: ChunkOp, acc: Any) -> Any:
    """``acc`` as a shard sends it up the tree: compacted when ``op`` defines ``compact``."""
    compact = getattr(op, "compact", None)
    return compact(acc) if compact is not None else acc


@dataclass
class Paired:
    """Two operations in one pass: each chunk is folded by ``first``, then by ``second`` (which sees the
    state ``first`` left); the accumulator is the pair of theirs. It reads the rows if either does."""

    first: Any
    second: Any

    @property
    def reads_rows(self) -> bool:
        return getattr(self.first, "reads_rows", True) or getattr(self.second, "reads_rows", True)

    def new_acc(self) -> tuple:
        return self.first.new_acc(), self.second.new_acc()

    def run(self, chunk: Chunk, acc: tuple) -> None:
        self.first.run(chunk, acc[0])
        self.second.run(chunk, acc[1])

    def merge(self, a: tuple, b: tuple) -> tuple:
        return self.first.merge(a[0], b[0]), self.second.merge(a[1], b[1])

    def compact(self, acc: tuple) -> tuple:
        return leaving(self.first, acc[0]), leaving(self.second, acc[1])


@dataclass
class ThreadScratch:
    """Arrays each worker thread computes its chunks of one pass into, reused from chunk to chunk.

    A fresh array costs the kernel a zeroed page every 4 KiB; an op writing every chunk to a store
    (the sketch pass) computes them all into the same arrays instead. An op holds one as a field: it
    is pickled before any chunk, so each worker starts with none and each of its threads makes its
    own on its first chunk. ``new`` makes them (``np.empty``; ``np.zeros`` for arrays written as
    they are).
    """

    new: Callable[..., np.ndarray] = np.empty
    held: dict = field(default_factory=dict, repr=False, compare=False)

    def rows(self, n_rows: int, *specs: tuple[tuple[int, ...], Any]) -> list[np.ndarray]:
        """Arrays of shape (n_rows, *shape) and dtype for each (shape, dtype) of ``specs``: the heads of
        this thread's arrays where they are as long and of these dtypes, else new ones it keeps."""
        arrays = self.held.get(threading.get_ident())
        kinds = [(tuple(shape), np.dtype(dtype)) for shape, dtype in specs]
        if arrays is None or arrays[0].shape[0] < n_rows or [(a.shape[1:], a.dtype) for a in arrays] != kinds:
            arrays = [self.new((n_rows, *shape), dtype) for shape, dtype in specs]
            self.held[threading.get_ident()] = arrays
        return [a[:n_rows] for a in arrays]


def add_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Merge for accumulators that are dicts of arrays summed element-wise."""
    for name, value in b.items():
        a[name] += value
    return a


def concat_rows(a: dict[str, np.ndarray], b: dict[str, np.ndarray], order: str) -> dict[str, np.ndarray]:
    """Merge for accumulators that are dicts of row lists, kept sorted by ``a[order]``.

    Sorting by a global row index makes the result independent of the merge tree.
    """
    merged = {name: np.concatenate([a[name], b[name]]) for name in a}
    perm = np.argsort(merged[order], kind="stable")
    return {name: value[perm] for name, value in merged.items()}


def merge_row_lists(a: dict[str, np.ndarray], b: dict[str, np.ndarray], order: str = "row") -> dict[str, np.ndarray]:
    """:func:`concat_rows` that passes an empty side through (the merge of row-drawing operations)."""
    if not len(a[order]):
        return b
    if not len(b[order]):
        return a
    return concat_rows(a, b, order)

"""Checks of per-chunk states read back from a store -- a checkpoint's chunk states, a tree store's
trees -- run as one pass without rows before any kernel reads them.

The kernels index with what these states hold (cluster ids in K(n), node and row indices of the
kd-trees): an index out of range would read or write past an array's end inside numba. Each
state the fits keep is checked for its dtype, shape and range:

- K(n) (``K``, ``cell_K``): int, (rows or cells, C'), ids in [-1, C) (-1 = unknown);
- the seed labels: int, (rows,), ids in [0, C);
- a kd-tree (``tree_*``): the layout of :mod:`daskclust.kernels.kdtree` -- children after their
  parent, ``right = left + 1``, row ranges nested in their parent's and split by its children,
  ``order`` a permutation of the chunk's rows, finite statistics -- and its partition
  (``cell_frontier``) node ids whose row ranges cover every row once.

The ids of a valid state are then cast to the type the fit keeps (:func:`cast_ids`).
The row order ``__perm__`` is checked by the shard as it reads it (it reorders the rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk
from ..errors import ClusterError, WorkerLost
from ..kernels.estep import cluster_id_dtype
from ..kernels.kdtree import KDTree
from ..kernels.validation import WEIGHT_MAX, scale_bounds
from ..names import STATE_CELL_FRONTIER, STATE_CELL_K, STATE_CELL_PREFIX, STATE_K, STATE_SEED_LABEL


@dataclass
class CheckStateOp:
    """One pass, no rows read: the problems found in each chunk's state (empty when all is well).
    A valid state's cluster ids are held in the fit's id type from then on (:func:`cast_ids`)."""

    n_clusters: int
    reads_rows = False

    def new_acc(self) -> list[str]:
        return []

    def run(self, chunk: Chunk, acc: list[str]) -> None:
        problem = state_problem(chunk.state, chunk.n_rows, self.n_clusters)
        if problem:
            acc.append(f"chunk {chunk.index}: {problem}")
        else:
            cast_ids(chunk.state, self.n_clusters)

    @staticmethod
    def merge(a: list[str], b: list[str]) -> list[str]:
        return sorted(a + b)


def cast_ids(state: dict, n_clusters: int) -> None:
    """Cast the cluster ids in a checked ``state`` (K(n), K(A), the seed labels) to the type the
    fit's kernels keep (:func:`~daskclust.kernels.estep.cluster_id_dtype`): stores written before
    ids took two bytes hold int32."""
    ids = cluster_id_dtype(n_clusters)
    for key in (STATE_K, STATE_CELL_K, STATE_SEED_LABEL):
        if key in state and state[key].dtype != ids:
            state[key] = state[key].astype(ids)


def check_states(engine, n_clusters: int) -> list[str]:
    """The problems of every chunk's state on ``engine`` (one pass without rows)."""
    return engine.map_reduce(CheckStateOp(n_clusters))


def restore_states(engine, url: str, n_clusters: int, damaged: Callable[[str], Exception]) -> None:
    """Have the workers read their chunks' states from the store at ``url`` and check them; a state
    they cannot read (damaged chunk data, which the driver does not read) or that is not valid raises
    ``damaged(reason)`` (the store's own error type and wording). A lost worker is not damage."""
    try:
        engine.load_state(url)
    except (WorkerLost, ClusterError):
        raise
    except Exception as exc:  # noqa: BLE001 - undecodable or missing chunk state on a worker
        raise damaged(f"a chunk state cannot be read ({type(exc).__name__}: {exc})") from exc
    problems = check_states(engine, n_clusters)
    if problems:
        raise damaged(problems[0] + (f" (and {len(problems) - 1} more chunks)" if len(problems) > 1 else ""))


def _ids(value, shape_rows: int, n_clusters: int, low: int, name: str, ndim: int, min_kept: int = 1) -> str | None:
    """Why ``value`` is not an integer array of ``shape_rows`` rows of cluster ids in [low, C), or None."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != ndim \
            or value.shape[0] != shape_rows:
        return f"{name} is not an integer array of {shape_rows} rows"
    if ndim == 2 and not min_kept <= value.shape[1] <= n_clusters:
        return f"{name} keeps {value.shape[1]} clusters per row, not {min_kept} to {n_clusters}"
    if value.size and (int(value.min()) < low or int(value.max()) >= n_clusters):
        return f"{name} holds cluster ids outside [{low}, {n_clusters})"
    return None


def state_problem(state: dict, n_rows: int, n_clusters: int) -> str | None:
    """Why ``state`` is not a valid state of a chunk of ``n_rows`` rows fitted with ``n_clusters``
    clusters, or None."""
    if STATE_K in state:
        problem = _ids(state[STATE_K], n_rows, n_clusters, -1, "K(n)", 2)
        if problem:
            return problem
    if STATE_SEED_LABEL in state:
        problem = _ids(state[STATE_SEED_LABEL], n_rows, n_clusters, 0, "the seed labels", 1)
        if problem:
            return problem
    if any(key.startswith(STATE_CELL_PREFIX) for key in state):
        return tree_problem(state, n_rows, n_clusters)
    return None


def tree_problem(state: dict, n_rows: int, n_clusters: int | None = None) -> str | None:
    """Why the kd-tree and partition in ``state`` are not a valid tree of ``n_rows`` rows, or None."""
    missing = [name for name in KDTree._fields if STATE_CELL_PREFIX + name not in state]
    if missing:
        return f"the kd-tree lacks {', '.join(missing)}"
    tree = KDTree(*(state[STATE_CELL_PREFIX + name] for name in KDTree._fields))
    ints = (tree.left, tree.right, tree.parent, tree.depth, tree.start, tree.stop)
    if not all(isinstance(a, np.ndarray) and a.dtype.kind in "iu" and a.ndim == 1 for a in ints + (tree.order,)):
        return "the kd-tree's index arrays are not 1-D integer arrays"
    m = tree.left.shape[0]
    if m < 1 or any(a.shape != (m,) for a in ints):
        return "the kd-tree's node arrays differ in length"
    floats = (tree.count, tree.mean, tree.second, tree.direction)
    if not all(isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.shape[:1] == (m,) for a in floats):
        return "the kd-tree's statistics are not float arrays of one row per node"
    D = tree.mean.shape[1] if tree.mean.ndim == 2 else -1
    if D < 1 or tree.count.ndim != 1 or tree.direction.shape != (m, D) \
            or tree.second.shape not in ((m, D), (m, D, D)):
        return "the kd-tree's statistics are not shaped for its dimension"
    largest = scale_bounds(np.float64, D)[1]
    if not all(np.all(np.isfinite(a)) for a in floats) or np.any(tree.count < 0) \
            or np.any(tree.count > max(n_rows, 1) * WEIGHT_MAX) \
            or np.abs(tree.mean).max() > largest or np.abs(tree.second).max() > largest ** 2 \
            or np.abs(tree.direction).max() > 1.0 + 1e-9:
        return "the kd-tree's statistics are not finite, out of range, or a count is negative"
    order = tree.order
    if order.shape != (n_rows,) or not np.array_equal(np.sort(order), np.arange(n_rows)):
        return f"the kd-tree's row order is not a permutation of the chunk's {n_rows} rows"
    nodes = np.arange(m)
    start, stop, left, right = (a.astype(np.int64) for a in (tree.start, tree.stop, tree.left, tree.right))
    if start[0] != 0 or stop[0] != n_rows or np.any(start < 0) or np.any(stop > n_rows) or np.any(start > stop):
        return "the kd-tree's row ranges do not lie within the chunk"
    leaf = left == -1
    if np.any(right[leaf] != -1) or tree.parent[0] != -1:
        return "the kd-tree's leaves or root are malformed"
    inner = nodes[~leaf]
    kids = left[inner]
    if np.any(kids <= inner) or np.any(kids + 1 >= m) or np.any(right[inner] != kids + 1):
        return "the kd-tree's children do not follow their parents"
    if np.any(tree.parent[kids] != inner) or np.any(tree.parent[kids + 1] != inner):
        return "the kd-tree's parent links disagree with its children"
    if np.any(start[kids] != start[inner]) or np.any(stop[kids] != start[kids + 1]) \
            or np.any(stop[kids + 1] != stop[inner]):
        return "the kd-tree's children do not split their parent's rows"
    frontier = state.get(STATE_CELL_FRONTIER)
    if frontier is not None:
        if not isinstance(frontier, np.ndarray) or frontier.dtype.kind not in "iu" or frontier.ndim != 1 \
                or (frontier.size and (int(frontier.min()) < 0 or int(frontier.max()) >= m)):
            return "the partition's cells are not nodes of the tree"
        covered = np.zeros(n_rows + 1, dtype=np.int64)
        np.add.at(covered, start[frontier], 1)
        np.add.at(covered, stop[frontier], -1)
        if not np.all(np.cumsum(covered)[:n_rows] == 1):
            return "the partition's cells do not cover every row once"
        cell_k = state.get(STATE_CELL_K)
        if cell_k is not None and n_clusters is not None:
            return _ids(cell_k, frontier.shape[0], n_clusters, -1, "K(A) of the cells", 2, min_kept=0)
    return None

"""EM on cached cell statistics across the cluster (Verbeek et al. 2006 Secs. 3-4): trees beside their chunks,
truncated E-steps over cells, best-first refinement of the partition.

Per chunk, on its worker, :class:`BuildCellsOp` builds the chunk's kd-tree (principal-component bisector
splits, node statistics: :mod:`daskclust.kernels.kdtree`) and keeps it in the chunk's state with the
chunk's part of the partition (its frontier, initially every node at ``depth``) and each cell's K; it can
ride along the seeding's first pass over the rows (:meth:`~daskclust.engine.engine.Engine.ride_along`). The
E-step (:class:`CellEStepOp`) reads only that state -- never the rows -- packs the frontier's cells
(mean, within-cell covariance; weight n_A) and runs the search's truncated E-step on them with a
cell family (:mod:`daskclust.models.cell_families`). Refinement (:class:`RefineOp`, one pass without rows
after EM has converged on a partition): each chunk scores the split of each of its cells by the gain
n_L F_L + n_R F_R - n_A F_A under the current parameters (each child's F_A = log sum_{s in K(A)} exp
<log pi_s N>_child over its parent's K) and replaces every cell whose gain reaches the threshold by its
children, then those children whose own gain reaches it, and so on down the tree, best first; children
inherit their parent's K. The threshold is each cell's share of the tolerance, ``tol`` |F| W / cells, so
a partition where nothing reaches it could gain less than ``tol`` |F| W by splitting every cell. The rule is
the same for every cell wherever it lies, so the partition does not depend on the workers. EM then
continues on the finer partition; refinement stops when a round expands nothing or every cell is a leaf.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk
from ..errors import InvalidDataError, InvalidParameterError
from ..io import Location
from ..kernels import kdtree
from ..kernels.estep import NDIST_POINTS
from ..kernels.infer import top_components
from ..kernels.rng import stream_key
from ..names import STATE_CELL_FRONTIER, STATE_CELL_K, STATE_CELL_PREFIX, STATE_SEED_LABEL, STREAM_ESTEP
from ..persistence.trees import tree_record, write_tree_store
from ..seeding.passes import NearestIndex
from .estep_op import EStepOp
from .loop import EMResult, EMSettings, LoopState, run_em
from .stored_state import restore_states

TREE_FIELDS = kdtree.KDTree._fields


def save_tree(state: dict, tree: kdtree.KDTree) -> None:
    for name in TREE_FIELDS:
        state[STATE_CELL_PREFIX + name] = getattr(tree, name)


def load_tree(state: dict) -> kdtree.KDTree:
    return kdtree.KDTree(*(state[STATE_CELL_PREFIX + name] for name in TREE_FIELDS))


def packed_cells(tree: kdtree.KDTree, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells ``nodes`` as the cell families read them: (mean, within-cell covariance) rows and n_A."""
    second = tree.second[nodes].reshape(len(nodes), -1)
    return np.ascontiguousarray(np.hstack([tree.mean[nodes], second])), np.ascontiguousarray(tree.count[nodes])


def partition_sizes(tree: kdtree.KDTree, frontier: np.ndarray) -> list:
    """A chunk's (cells in its partition, leaves of its tree, its total weight W)."""
    return [len(frontier), int((tree.left < 0).sum()), tree.count[0] if len(tree.count) else 0.0]


@dataclass
class BuildCellsOp:
    """Build every chunk's tree (reads the rows once) and its initial frontier; returns (cells, leaves, W).
    Nodes of at most max(``leaf_size``, n / ``max_leaves``) of the chunk's n rows stay leaves."""

    leaf_size: int
    full: bool
    depth: int
    max_leaves: int

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        leaf_size = max(self.leaf_size, -(-chunk.n_rows // self.max_leaves))
        tree = kdtree.build_tree(chunk.X, chunk.w, leaf_size, self.full)
        save_tree(chunk.state, tree)
        frontier = kdtree.frontier_at_depth(tree, self.depth)
        chunk.state[STATE_CELL_FRONTIER] = frontier
        chunk.state.pop(STATE_CELL_K, None)
        acc += partition_sizes(tree, frontier)

    @staticmethod
    def merge(a, b):
        a += b
        return a


@dataclass
class CellEStepOp(EStepOp):
    """The truncated E-step over the chunk's cells (its frontier), from the chunk's state only.

    K(A) starts at the component whose mean is nearest to the cell's mean (its distances counted)."""

    reads_rows = False
    reorders_rows = False

    def run(self, chunk: Chunk, acc) -> None:
        tree = load_tree(chunk.state)
        frontier = chunk.state[STATE_CELL_FRONTIER]
        X, w = packed_cells(tree, frontier)
        ids = self.search.init_sets.dtype
        K = chunk.state.get(STATE_CELL_K) if self.keep_state else np.empty((len(frontier), 0), dtype=ids)
        if K is None:
            chunk.state.pop(STATE_SEED_LABEL, None)  # the seeding's, for rows: each cell starts from its mean's
            d2 = ((tree.mean[frontier][:, None, :] - self.kernel.means[None]) ** 2).sum(axis=2)
            K = np.full((len(frontier), self.n_truncated), -1, dtype=ids)
            K[:, 0] = np.argmin(d2, axis=1)
            acc.stats.scal[NDIST_POINTS] += d2.size
        cells = Chunk(chunk.index, 0, X, w, {}, None, len(frontier))
        key = stream_key(self.seed, STREAM_ESTEP, self.iteration, chunk.index)
        acc.search = self.search.estep(cells, self.kernel, self.n_truncated, K, acc.stats, acc.search, key)
        chunk.state[STATE_CELL_K] = K


@dataclass
class RefineOp:
    """Each chunk refines its partition under the parameters ``kernel`` (the module docstring): every cell whose
    split gains at least ``threshold`` (and more than 0) is replaced by its children, level by level down the
    tree, the largest gains of a level first, at most ``fraction`` of the chunk's cells (at least one)
    expanded; children inherit their parent's K. Returns [gain of splitting every cell of the partition it
    found, gain of splitting every cell of the one it leaves, cells expanded, (cell, component) costs evaluated]."""

    kernel: tuple
    threshold: float
    fraction: float

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(4)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        tree = load_tree(chunk.state)
        frontier = chunk.state[STATE_CELL_FRONTIER]
        K = chunk.state[STATE_CELL_K]
        if len(frontier) == 0:
            return
        budget = max(1, int(self.fraction * len(frontier)))
        nodes, rows = frontier, np.arange(len(frontier))  # the cells considered and the row of K each uses
        gain, acc[3] = split_gains(tree, nodes, rows, self.kernel, K, acc[3])
        acc[0] += gain[gain > 0].sum()
        kept_nodes, kept_rows = [], []
        while len(nodes):
            order = np.lexsort((nodes, -gain))  # the largest gains first, then by node
            chosen = order[(gain[order] >= self.threshold) & (gain[order] > 0)][:budget]
            stay = np.ones(len(nodes), dtype=bool)
            stay[chosen] = False
            kept_nodes.append(nodes[stay])
            kept_rows.append(rows[stay])
            acc[1] += gain[stay & (gain > 0)].sum()
            budget -= len(chosen)
            acc[2] += len(chosen)
            split = nodes[chosen]
            nodes = np.concatenate([tree.left[split], tree.right[split]])
            rows = np.concatenate([rows[chosen], rows[chosen]])
            gain, acc[3] = split_gains(tree, nodes, rows, self.kernel, K, acc[3])
        nodes, rows = np.concatenate(kept_nodes), np.concatenate(kept_rows)
        by_start = np.argsort(tree.start[nodes], kind="stable")
        chunk.state[STATE_CELL_FRONTIER] = nodes[by_start]
        chunk.state[STATE_CELL_K] = np.ascontiguousarray(K[rows[by_start]])

    @staticmethod
    def merge(a, b):
        a += b
        return a


def split_gains(tree, nodes, rows_of_K, kernel, K, evaluations: float) -> tuple[np.ndarray, float]:
    """The gain n_L F_L + n_R F_R - n_A F_A of splitting each of ``nodes`` (each over its row of ``K``; -inf for
    a leaf), and ``evaluations`` plus the (cell, component) costs evaluated."""
    gain = np.full(len(nodes), -np.inf)
    inner = np.flatnonzero(tree.left[nodes] >= 0)
    if len(inner) == 0:
        return gain, evaluations
    parents = nodes[inner]
    n = len(parents)
    kids = np.concatenate([tree.left[parents], tree.right[parents]])
    lse_parent, n_parent = cell_lse(tree, parents, kernel, K, rows_of_K[inner])
    lse_kids, n_kids = cell_lse(tree, kids, kernel, K, np.concatenate([rows_of_K[inner], rows_of_K[inner]]))
    gain[inner] = (tree.count[kids[:n]] * lse_kids[:n] + tree.count[kids[n:]] * lse_kids[n:]
                   - tree.count[parents] * lse_parent)
    return gain, evaluations + n_parent + n_kids


def cell_lse(tree, nodes, kernel, K, rows_of_K) -> tuple[np.ndarray, int]:
    """log sum_{s in K} exp(-cost_s / 2) of each cell of ``nodes``, over the K row ``rows_of_K`` of each,
    and the (cell, component) costs evaluated."""
    X, _ = packed_cells(tree, nodes)
    k = max(1, K.shape[1])  # K without columns (exact EM): every component
    idx = np.empty((len(nodes), k), dtype=np.int32)
    q = np.empty((len(nodes), k))
    lse = np.empty(len(nodes))
    evaluations = top_components(X, kernel, np.asarray(rows_of_K, dtype=np.int64), K, k, idx, q, lse)
    return lse, int(evaluations)


@dataclass(frozen=True)
class RefineSettings:
    """Refinement (Verbeek et al. 2006 Sec. 4). ``depth``: the initial partition, every node at that depth of each
    chunk's tree, deepened until the cells number at least ``cells_per_component`` per component. A round
    (:class:`RefineOp`, after EM has converged on the partition) expands every cell whose split gains at least
    ``tol`` |F| W / cells, and their children in turn, at most ``fraction`` of each chunk's cells. Refinement
    stops when splitting every cell of the partition would gain less than ``tol`` |F| W (that round's
    expansions are left unused: the fit is EM's on the partition it scored), when nothing gains its share,
    every cell is a leaf, or after ``max_rounds`` rounds. (Verbeek et al. 2006 expands one cell per round and
    stops when F hardly improves between successive partitions; at N = 10^7 in the cells benchmark, expanding
    the best cells holding half the proposed gain one level a round took 27 rounds and 59 EM iterations, this
    rule 2 rounds and 7 iterations, at the same held-out log-likelihood.)

    ``leaf_size``, ``max_leaves``: a chunk of n rows is split down to nodes of at most max(``leaf_size``,
    n / ``max_leaves``) rows, so that a large chunk's tree keeps about ``max_leaves`` leaves at most: the
    build's time and the trees' memory grow with the leaves, and refinement uses far fewer cells (at
    N = 10^7, 16 chunks of 625,000 rows: 1,964 cells of 888,101 leaves with leaves of 16 rows, 1,899 of
    184,657 with this cap, held-out log-likelihood -4.4147 either way; the tree pass took half the time)."""

    leaf_size: int = 16
    depth: int = 4
    tol: float = 1e-4
    max_rounds: int = 30
    fraction: float = 1.0
    cells_per_component: int = 100
    max_leaves: int = 8192


def initial_depth(refine: RefineSettings, n_components: int, n_chunks: int) -> int:
    """``refine.depth``, deepened until the initial cells (2^depth a chunk) number at least
    ``cells_per_component`` per component: EM on a partition coarse for the mixture settles in a poor
    optimum that refinement does not leave (at k = 50 on 10^5 rows depth 4 dropped 18 components; on
    10^6 rows of a 10-component 5-D mixture 20 cells per component ended 2.9 % below exact EM's held-out
    log-likelihood, 100 cells per component 0.28 %, ad hoc)."""
    wanted = refine.cells_per_component * n_components / max(n_chunks, 1)
    return max(refine.depth, int(np.ceil(np.log2(max(wanted, 1.0)))))


def build_op(refine: RefineSettings, full: bool, n_components: int, n_chunks: int) -> BuildCellsOp:
    """The pass building every chunk's tree and its initial partition (:func:`initial_depth`)."""
    return BuildCellsOp(refine.leaf_size, full, initial_depth(refine, n_components, n_chunks), refine.max_leaves)


def build_cells(engine, refine: RefineSettings, full: bool, store: Location | None = None,
                fingerprint: dict | None = None, n_components: int = 1, built: np.ndarray | None = None) -> np.ndarray:
    """Every chunk's tree and initial partition (one pass over the rows): (cells, leaves, W). ``built``: those of
    trees built already (:func:`build_op` rode along the seeding's first pass).

    With a ``store``: the trees are read from it when it holds trees of the same data (``fingerprint``),
    leaf size and layout -- no pass over the rows -- and written to it otherwise (a fresh store only:
    trees of other data there are refused, never replaced)."""
    meta = {"data": fingerprint, "leaf_size": refine.leaf_size, "max_leaves": refine.max_leaves, "full": full}
    stored, found = tree_record(store) if store is not None and built is None else (False, None)
    if stored:
        if found != meta:
            raise InvalidParameterError(f"the tree store {store} holds trees of other data or settings: "
                                        f"{_differences(found, meta)}; choose another tree_store")
        restore_states(engine, store.url, n_components,
                       lambda why: InvalidDataError(f"the tree store {store} is damaged: {why}"))
        return engine.map_reduce(FrontierOp(initial_depth(refine, n_components, engine.data.n_chunks)))
    if built is None:
        with engine.phase("kd-trees"):
            built = engine.map_reduce(build_op(refine, full, n_components, engine.data.n_chunks))
    if store is not None:
        engine.map_reduce(CountCellsOp())  # drops the seeding's labels: a tree store keeps no state of a fit
        write_tree_store(store, meta, engine.save_state)
    return built


def _differences(found, wanted: dict) -> str:
    """What differs between a tree store's record and this fit's, both sides named (data fields flattened)."""
    if not isinstance(found, dict):
        return f"the store records {found!r}, this fit needs {wanted}"

    def flat(record: dict) -> dict:
        data = record.get("data") if isinstance(record.get("data"), dict) else {"data": record.get("data")}
        return {**{k: v for k, v in record.items() if k != "data"}, **data}

    a, b = flat(found), flat(wanted)
    return "; ".join(f"{k}: store {a.get(k)!r}, this fit {b.get(k)!r}" for k in sorted(set(a) | set(b))
                     if a.get(k) != b.get(k))


@dataclass
class CountCellsOp:
    """(cells, leaves, W) of the partition the chunks hold (a resumed fit's, restored from its checkpoint); the
    seeding's labels of the rows, which the cells do not use, are dropped."""

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        chunk.state.pop(STATE_SEED_LABEL, None)  # each cell starts from its mean's nearest seed
        tree = load_tree(chunk.state)
        acc += partition_sizes(tree, chunk.state[STATE_CELL_FRONTIER])

    merge = staticmethod(BuildCellsOp.merge)


@dataclass
class LeafErrorOp:
    """sum_A n_A (||<x>_A - mu_c(A)||^2 + tr V_A) over every leaf A of the trees, c(A) the centre of ``index``
    (a :class:`~daskclust.seeding.passes.NearestIndex`) nearest to the leaf's mean: the quantization error of
    the centres with each leaf's rows at one centre, a bound from above of the rows' own (no rows read);
    returns [that error, W, distances evaluated]."""

    index: NearestIndex

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        tree = load_tree(chunk.state)
        leaves = np.flatnonzero(tree.left < 0)
        means = np.ascontiguousarray(tree.mean[leaves])
        d2 = np.full(len(leaves), np.inf)
        acc[2] += self.index.search(means, d2, np.zeros(len(leaves), dtype=np.int32))
        second = tree.second[leaves]
        spread = np.trace(second, axis1=1, axis2=2) if tree.full else second.sum(axis=1)
        acc[0] += float(tree.count[leaves] @ (d2 + spread))
        acc[1] += tree.count[leaves].sum()

    merge = staticmethod(BuildCellsOp.merge)


@dataclass
class FrontierOp:
    """The initial partition of trees read from a tree store (no rows read): (cells, leaves, W)."""

    depth: int

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        tree = load_tree(chunk.state)
        frontier = kdtree.frontier_at_depth(tree, self.depth)
        chunk.state[STATE_CELL_FRONTIER] = frontier
        chunk.state.pop(STATE_CELL_K, None)
        acc += partition_sizes(tree, frontier)

    merge = staticmethod(BuildCellsOp.merge)


def run_cells(engine, start: LoopState, settings: EMSettings, search, refine: RefineSettings, report=None,
              full: bool = False, built: np.ndarray | None = None, checkpointer=None) -> tuple[EMResult, list[dict]]:
    """Build the trees (unless ``built``, :func:`build_cells`' result, says they are), then alternate EM on
    the partition (to convergence) and refinement (:class:`RefineOp`); returns the last EM result (its history
    the concatenation of every round's) and one row per round."""
    cells, leaves, W = build_cells(engine, refine, full) if built is None else built
    rounds, state = [], start
    while True:
        before = len(state.history)
        result = run_em(engine, state, settings, search, report, checkpointer, op_class=CellEStepOp)
        history = result.history  # every round's rows, carried through the loop state (and checkpoints)
        F = history[-1]["free_energy"]
        row = {"round": len(rounds), "cells": int(cells), "leaves": int(leaves), "free_energy": F,
               "iterations": len(history) - before, "expanded": 0, "proposed_gain": 0.0, "evaluations": 0}
        rounds.append(row)
        if len(rounds) > refine.max_rounds or cells >= leaves:
            break
        scale = W * max(abs(F), np.finfo(float).tiny)  # |F| summed over the data
        kernel = settings.family.kernel_params(result.params)
        proposed, _, expanded, evaluations = engine.map_reduce(RefineOp(kernel, refine.tol * scale / cells,
                                                                        refine.fraction))
        row["evaluations"] = int(evaluations)
        history[-1]["n_distances"] += row["evaluations"]  # counted with the iteration they followed
        history[-1]["n_distances_points"] += row["evaluations"]
        row["proposed_gain"] = float(proposed) / scale
        row["expanded"] = int(expanded)
        cells += int(expanded)  # a split cell leaves two
        if row["proposed_gain"] < refine.tol or not expanded:
            break  # splitting every cell would raise F by less than tol |F| W: the partition is fine enough
        state = LoopState(0, result.params, None, list(history))
    if built is not None:
        built[0] = cells
    return result, rounds  # its history holds every round's rows (carried in the loop state)

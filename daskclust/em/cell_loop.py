"""EM on cached cell statistics across the cluster (Verbeek et al. 2006 Secs. 3-4): trees beside their chunks,
truncated E-steps over cells, best-first refinement of the partition.

Per chunk, on its worker, :class:`BuildCellsOp` builds the chunk's kd-tree (principal-component bisector
splits, node statistics: :mod:`daskclust.kernels.kdtree`) and keeps it in the chunk's state with the
chunk's part of the partition (its frontier, initially every node at ``depth``) and each cell's K. The
E-step (:class:`CellEStepOp`) reads only that state -- never the rows -- packs the frontier's cells
(mean, within-cell covariance; weight n_A) and runs the search's truncated E-step on them with a
cell family (:mod:`daskclust.models.cell_families`). Refinement (:func:`refine`): each chunk proposes its
cells whose split would raise F most under the current parameters (the gain
n_L F_L + n_R F_R - n_A F_A, each child's F_A = log sum_{s in K(A)} exp <log pi_s N>_child over its
parent's K), the driver keeps the best ones cluster-wide (ties broken by chunk and node, so the
choice does not depend on the workers), and the chunks expand them; children inherit their
parent's K. EM then continues on the finer partition; refinement stops when the relative gain
proposed falls below a tolerance or every cell is a leaf.
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
    """Build every chunk's tree (reads the rows once) and its initial frontier; returns (cells, leaves, W)."""

    leaf_size: int
    full: bool
    depth: int

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        tree = kdtree.build_tree(chunk.X, chunk.w, self.leaf_size, self.full)
        save_tree(chunk.state, tree)
        frontier = kdtree.frontier_at_depth(tree, self.depth)
        chunk.state[STATE_CELL_FRONTIER] = frontier
        chunk.state.pop(STATE_CELL_K, None)
        chunk.state.pop(STATE_SEED_LABEL, None)  # the E-step starts each cell from its mean's nearest seed
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
        K = chunk.state.get(STATE_CELL_K) if self.keep_state else np.empty((len(frontier), 0), dtype=np.int32)
        if K is None:
            d2 = ((tree.mean[frontier][:, None, :] - self.kernel.means[None]) ** 2).sum(axis=2)
            K = np.full((len(frontier), self.n_truncated), -1, dtype=np.int32)
            K[:, 0] = np.argmin(d2, axis=1)
            acc.stats.scal[NDIST_POINTS] += d2.size
        cells = Chunk(chunk.index, 0, X, w, {}, None, len(frontier))
        key = stream_key(self.seed, STREAM_ESTEP, self.iteration, chunk.index)
        acc.search = self.search.estep(cells, self.kernel, self.n_truncated, K, acc.stats, acc.search, key)
        chunk.state[STATE_CELL_K] = K


@dataclass
class ProposeOp:
    """Each chunk's ``per_chunk`` best splits of its frontier by the gain in F (the module docstring);
    returns (gain, chunk, node) rows, gain > 0 only."""

    kernel: tuple
    per_chunk: int

    reads_rows = False

    def new_acc(self) -> dict:
        return {"rows": np.zeros((0, 3)), "evaluations": np.zeros(1)}

    def run(self, chunk: Chunk, acc: dict) -> None:
        tree = load_tree(chunk.state)
        frontier = chunk.state[STATE_CELL_FRONTIER]
        K = chunk.state[STATE_CELL_K]
        inner = np.flatnonzero(tree.left[frontier] >= 0)
        if len(inner) == 0:
            return
        nodes = frontier[inner]
        n = len(nodes)
        kids = np.concatenate([tree.left[nodes], tree.right[nodes]])
        lse_parent, n_parent = cell_lse(tree, nodes, self.kernel, K, inner)
        lse_kids, n_kids = cell_lse(tree, kids, self.kernel, K, np.concatenate([inner, inner]))
        acc["evaluations"][0] += n_parent + n_kids
        gain = (tree.count[kids[:n]] * lse_kids[:n] + tree.count[kids[n:]] * lse_kids[n:]
                - tree.count[nodes] * lse_parent)
        best = np.argsort(-gain, kind="stable")[: self.per_chunk]
        best = best[gain[best] > 0]
        rows = np.column_stack([gain[best], np.full(len(best), chunk.index), nodes[best]])
        acc["rows"] = np.vstack([acc["rows"], rows])

    @staticmethod
    def merge(a, b):
        return {"rows": np.vstack([a["rows"], b["rows"]]), "evaluations": a["evaluations"] + b["evaluations"]}


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


@dataclass
class ExpandOp:
    """Replace the chosen nodes of each chunk's frontier by their children, which inherit K."""

    chosen: dict

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(1)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        nodes = self.chosen.get(chunk.index)
        if nodes is None or len(nodes) == 0:
            return
        tree = load_tree(chunk.state)
        frontier = chunk.state[STATE_CELL_FRONTIER]
        K = chunk.state[STATE_CELL_K]
        new = kdtree.expand(tree, frontier, nodes)
        inherited = np.where(np.isin(new, frontier), new, tree.parent[new])  # a new child takes its parent's row
        by_node = np.argsort(frontier)
        rows = by_node[np.searchsorted(frontier, inherited, sorter=by_node)]
        chunk.state[STATE_CELL_FRONTIER] = new
        chunk.state[STATE_CELL_K] = np.ascontiguousarray(K[rows])
        acc[0] += len(new) - len(frontier)

    @staticmethod
    def merge(a, b):
        a += b
        return a


@dataclass(frozen=True)
class RefineSettings:
    """Refinement (Verbeek et al. 2006 Sec. 4). ``depth``: the initial partition, every node at that depth of each
    chunk's tree, deepened until the cells number at least ``cells_per_component`` per component. A
    round expands the best proposed cells holding ``gain_share`` of the round's proposed gain (at most
    ``fraction`` of the cells, at most ``per_chunk`` proposed per chunk); refinement stops when the gain
    of splitting every proposed cell is below ``tol`` of |F| (summed over the data), when nothing
    gains, or after ``max_rounds`` rounds. (Verbeek et al. 2006's rule, F between successive partitions,
    stopped after one round here: a round expanding the few best cells moves F little even when much
    remains to gain.)"""

    leaf_size: int = 16
    depth: int = 4
    tol: float = 1e-4
    max_rounds: int = 30
    fraction: float = 0.5
    per_chunk: int = 100_000
    gain_share: float = 0.5
    cells_per_component: int = 100


def initial_depth(refine: RefineSettings, n_components: int, n_chunks: int) -> int:
    """``refine.depth``, deepened until the initial cells (2^depth a chunk) number at least
    ``cells_per_component`` per component: EM on a partition coarse for the mixture settles in a poor
    optimum that refinement does not leave (at k = 50 on 10^5 rows depth 4 dropped 18 components; on
    10^6 rows of a 10-component 5-D mixture 20 cells per component ended 2.9 % below exact EM's held-out
    log-likelihood, 100 cells per component 0.28 %, ad hoc)."""
    wanted = refine.cells_per_component * n_components / max(n_chunks, 1)
    return max(refine.depth, int(np.ceil(np.log2(max(wanted, 1.0)))))


def build_cells(engine, refine: RefineSettings, full: bool, store: Location | None = None,
                fingerprint: dict | None = None, n_components: int = 1) -> np.ndarray:
    """Every chunk's tree and initial partition (one pass over the rows): (cells, leaves, W).

    With a ``store``: the trees are read from it when it holds trees of the same data (``fingerprint``),
    leaf size and layout -- no pass over the rows -- and written to it otherwise (a fresh store only:
    trees of other data there are refused, never replaced)."""
    meta = {"data": fingerprint, "leaf_size": refine.leaf_size, "full": full}
    depth = initial_depth(refine, n_components, engine.data.n_chunks)
    stored, found = tree_record(store) if store is not None else (False, None)
    if stored:
        if found != meta:
            raise InvalidParameterError(f"the tree store {store} holds trees of other data or settings: "
                                        f"{_differences(found, meta)}; choose another tree_store")
        restore_states(engine, store.url, n_components,
                       lambda why: InvalidDataError(f"the tree store {store} is damaged: {why}"))
        return engine.map_reduce(FrontierOp(depth))
    with engine.phase("kd-trees"):
        built = engine.map_reduce(BuildCellsOp(refine.leaf_size, full, depth))
    if store is not None:
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
    """(cells, leaves, W) of the partition the chunks hold (a resumed fit's, restored from its checkpoint)."""

    reads_rows = False

    def new_acc(self) -> np.ndarray:
        return np.zeros(3)

    def run(self, chunk: Chunk, acc: np.ndarray) -> None:
        tree = load_tree(chunk.state)
        acc += partition_sizes(tree, chunk.state[STATE_CELL_FRONTIER])

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


def best_proposals(proposed: np.ndarray, refine: RefineSettings, cells: int) -> np.ndarray:
    """The proposals expanded: ordered by gain (then chunk and node, so the choice does not depend on the
    workers), the fewest holding ``gain_share`` of the total gain, at most ``fraction`` of the cells."""
    order = np.lexsort((proposed[:, 2], proposed[:, 1], -proposed[:, 0]))
    ranked = proposed[order]
    share = np.cumsum(ranked[:, 0]) / ranked[:, 0].sum()
    n = int(np.searchsorted(share, refine.gain_share)) + 1
    return ranked[: max(1, min(n, int(np.ceil(refine.fraction * cells))))]


def run_cells(engine, start: LoopState, settings: EMSettings, search, refine: RefineSettings, report=None,
              full: bool = False, built: np.ndarray | None = None, checkpointer=None) -> tuple[EMResult, list[dict]]:
    """Build the trees (unless ``built``, :func:`build_cells`' result, says they are), then alternate EM on
    the partition (to convergence) and refinement; returns the last EM result (its history the
    concatenation of every round's) and one row per round."""
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
        kernel = settings.family.kernel_params(result.params)
        proposals = engine.map_reduce(ProposeOp(kernel, refine.per_chunk))
        row["evaluations"] = int(proposals["evaluations"][0])
        history[-1]["n_distances"] += row["evaluations"]  # counted with the iteration they followed
        history[-1]["n_distances_points"] += row["evaluations"]
        proposed = proposals["rows"]
        if not len(proposed):
            break
        row["proposed_gain"] = float(proposed[:, 0].sum()) / (W * max(abs(F), np.finfo(float).tiny))
        if row["proposed_gain"] < refine.tol:
            break  # splitting every proposed cell would raise F by less than tol: the partition is fine enough
        keep = best_proposals(proposed, refine, cells)
        chosen = {int(c): keep[keep[:, 1] == c, 2].astype(np.int64) for c in np.unique(keep[:, 1])}
        added = engine.map_reduce(ExpandOp(chosen))[0]
        row["expanded"] = len(keep)
        cells += added
        state = LoopState(0, result.params, None, list(history))
    if built is not None:
        built[0] = cells
    return result, rounds  # its history holds every round's rows (carried in the loop state)

"""The cells' operations on one chunk, in this process (Verbeek et al. 2006 Sec. 4): the refinement descent and
the leaves' quantization error, against values computed here from the tree and the rows."""

from __future__ import annotations

import numpy as np
import pytest

from daskclust.em.cell_loop import (
    BuildCellsOp,
    CellEStepOp,
    LeafErrorOp,
    RefineOp,
    cell_lse,
    load_tree,
    split_gains,
)
from daskclust.em.stored_state import CheckStateOp
from daskclust.engine.ops import Chunk
from daskclust.kernels import kdtree
from daskclust.models import Params
from daskclust.models.cell_families import CELL_FAMILIES
from daskclust.names import STATE_CELL_FRONTIER, STATE_CELL_K
from daskclust.search import SearchConfig, make_search
from daskclust.seeding.passes import NearestIndex

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)


def blobs(n=6000, C=4, D=2, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.uniform(-6, 6, (C, D))
    return mu[rng.integers(C, size=n)] + rng.normal(size=(n, D)), mu


def built_chunk(X, leaf_size=16, depth=3, max_leaves=8192, full=True):
    chunk = Chunk(0, 0, X, np.empty(0), {})
    acc = BuildCellsOp(leaf_size, full, depth, max_leaves).new_acc()
    BuildCellsOp(leaf_size, full, depth, max_leaves).run(chunk, acc)
    return chunk, acc


def bound(tree, frontier, kernel, K):
    """F over the partition, unnormalised: sum_A n_A log sum_{s in K(A)} exp <log pi_s N>_A (up to a constant)."""
    lse, _ = cell_lse(tree, frontier, kernel, K, np.arange(len(frontier)))
    return float(tree.count[frontier] @ lse)


@pytest.mark.parametrize("fraction", [1.0, 0.1])
def test_refinement_splits_every_cell_above_the_threshold_and_raises_the_bound_by_their_gains(fraction):
    X, mu = blobs()
    chunk, _ = built_chunk(X)
    family = CELL_FAMILIES["full"]
    kernel = family.kernel_params(Params(mu + 0.5, np.full(4, 0.25), np.broadcast_to(np.eye(2), (4, 2, 2)).copy()))
    tree = load_tree(chunk.state)
    before = chunk.state[STATE_CELL_FRONTIER].copy()
    K = np.empty((len(before), 0), dtype=np.int32)  # every component for every cell (exact E-step)
    chunk.state[STATE_CELL_K] = K
    gains, _ = split_gains(tree, before, np.arange(len(before)), kernel, K, 0.0)
    threshold = float(np.quantile(gains[gains > 0], 0.5))
    acc = RefineOp(kernel, threshold, fraction).new_acc()
    RefineOp(kernel, threshold, fraction).run(chunk, acc)
    after = chunk.state[STATE_CELL_FRONTIER]
    assert acc[0] == pytest.approx(gains[gains > 0].sum(), rel=1e-12)
    # a partition again: the cells tile the chunk's rows, ordered by their first row
    assert tree.start[after[0]] == 0 and tree.stop[after[-1]] == len(X)
    np.testing.assert_array_equal(tree.stop[after[:-1]], tree.start[after[1:]])
    expanded = int(acc[2])
    assert len(after) == len(before) + expanded and chunk.state[STATE_CELL_K].shape == (len(after), 0)
    budget = max(1, int(fraction * len(before)))
    assert 0 < expanded <= budget
    left, _ = split_gains(tree, after, np.arange(len(after)), kernel, chunk.state[STATE_CELL_K], 0.0)
    assert acc[1] == pytest.approx(left[left > 0].sum(), rel=1e-9)
    if expanded < budget:  # not stopped by the budget: no cell left reaches the threshold
        assert (left < threshold).all()
    # at fixed parameters each split raises F by its gain (children keep their parent's K): at least the threshold
    raised = bound(tree, after, kernel, chunk.state[STATE_CELL_K]) - bound(tree, before, kernel, K)
    assert raised >= expanded * threshold * (1 - 1e-12)


@pytest.mark.parametrize("restored", [None, np.int32])
def test_a_cells_first_e_step_starts_each_cell_at_its_means_nearest_component(restored):
    """K(A) starts at the component whose mean is nearest to the cell's mean (with G = 1, C' = 1 and no
    exploration the E-step keeps it); K(A) restored in other ids continues from them in the fit's."""
    X, mu = blobs(seed=2)
    chunk, _ = built_chunk(X)
    family = CELL_FAMILIES["full"]
    kernel = family.kernel_params(Params(mu, np.full(4, 0.25), np.broadcast_to(np.eye(2), (4, 2, 2)).copy()))
    search = make_search("estimated", SearchConfig(4, 1, 1, 0, metric=False))
    search.start(mu, 1.0)
    tree = load_tree(chunk.state)
    frontier = chunk.state[STATE_CELL_FRONTIER]
    nearest = np.argmin(((tree.mean[frontier][:, None, :] - mu[None]) ** 2).sum(axis=2), axis=1)
    if restored is not None:  # as a checkpoint of older code gives it back, checked as a restore checks it
        chunk.state[STATE_CELL_K] = nearest[:, None].astype(restored)
        problems = []
        CheckStateOp(4).run(chunk, problems)
        assert problems == []
    op = CellEStepOp(family, kernel, 1, True, search.payload(), 0, 0)
    acc = op.new_acc()
    op.run(chunk, acc)
    np.testing.assert_array_equal(chunk.state[STATE_CELL_K][:, 0], nearest)
    assert chunk.state[STATE_CELL_K].dtype == np.int16


def test_refinement_children_inherit_their_parents_components():
    X, mu = blobs(seed=1)
    chunk, _ = built_chunk(X, depth=2)
    kernel = CELL_FAMILIES["full"].kernel_params(Params(mu, np.full(4, 0.25),
                                                        np.broadcast_to(np.eye(2), (4, 2, 2)).copy()))
    tree = load_tree(chunk.state)
    before = chunk.state[STATE_CELL_FRONTIER].copy()
    K = np.stack([np.arange(len(before)) % 4, (np.arange(len(before)) + 1) % 4], axis=1).astype(np.int32)
    chunk.state[STATE_CELL_K] = K.copy()
    RefineOp(kernel, 0.0, 1.0).run(chunk, RefineOp(kernel, 0.0, 1.0).new_acc())
    after, K_after = chunk.state[STATE_CELL_FRONTIER], chunk.state[STATE_CELL_K]
    for cell, ks in zip(after, K_after):
        ancestor = cell
        while ancestor not in before:
            ancestor = tree.parent[ancestor]
        np.testing.assert_array_equal(ks, K[np.flatnonzero(before == ancestor)[0]])


def test_leaf_error_is_the_rows_error_with_one_row_a_leaf_and_bounds_it_otherwise():
    X, mu = blobs(n=3000, seed=2)
    centres = mu + 0.7
    exact = ((X[:, None, :] - centres[None]) ** 2).sum(axis=2).min(axis=1).sum()
    for leaf_size, full in ((1, True), (1, False), (16, True), (16, False)):
        chunk, built = built_chunk(X, leaf_size=leaf_size, full=full)
        acc = LeafErrorOp(NearestIndex(centres)).new_acc()
        LeafErrorOp(NearestIndex(centres)).run(chunk, acc)
        assert acc[1] == len(X)
        if leaf_size == 1:
            assert acc[0] == pytest.approx(exact, rel=1e-10)
        else:
            assert exact <= acc[0] <= 1.05 * exact


def test_large_chunks_keep_about_max_leaves_leaves():
    X, _ = blobs(n=20000, seed=3)
    small, _ = built_chunk(X, leaf_size=4, max_leaves=10**6)
    capped, sizes = built_chunk(X, leaf_size=4, max_leaves=256)
    a, b = load_tree(small.state), load_tree(capped.state)
    rows = b.stop - b.start
    leaf_size = -(-20000 // 256)  # max(4, ceil(n / max_leaves))
    assert rows[b.left < 0].max() <= leaf_size < rows[b.left >= 0].min()
    assert (b.left < 0).sum() < (a.left < 0).sum() / 8
    assert sizes[1] == (b.left < 0).sum() and sizes[2] == len(X)
    lv = kdtree.leaves(b)  # still a partition of the rows
    assert b.start[lv[0]] == 0 and b.stop[lv[-1]] == len(X) and (b.stop[lv[:-1]] == b.start[lv[1:]]).all()

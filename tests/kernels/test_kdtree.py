"""kd-trees with principal-component splits (Verbeek et al. 2006 Sec. 4) against numpy, on plain arrays."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from daskclust.kernels.kdtree import (
    EXPLICIT_MAX_D,
    build_tree,
    children,
    expand,
    frontier_at_depth,
    is_leaf,
    leaves,
    node_rows,
    second_moments,
)

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)

NO_W = np.empty(0)


def anisotropic(n, D, seed=0, offset=100.0, dtype=np.float64):
    """Three elongated blobs far from the origin (a cancellation trap for <xx^T> - <x><x>^T)."""
    rng = np.random.default_rng(seed)
    scales = 3.0 * 0.8 ** np.arange(D)
    centres = rng.uniform(-20, 20, (3, D)) + offset
    lab = rng.integers(0, 3, n)
    return (centres[lab] + rng.standard_normal((n, D)) * scales).astype(dtype)


def reference_stats(X, w, rows):
    """(count, mean, covariance, raw second moment) of rows by numpy; unit weights when they sum to 0."""
    R = X[rows].astype(np.float64)
    ws = np.ones(len(rows)) if w.size == 0 else w[rows]
    count = ws.sum()
    we = ws if count > 0 else np.ones(len(rows))
    mean = np.average(R, axis=0, weights=we)
    C = R - mean
    cov = (we[:, None] * C).T @ C / we.sum()
    raw = (we[:, None] * R).T @ R / we.sum()
    return count, mean, cov, raw


def close(a, b, rtol=1e-10, floor=0.0):
    """a == b to rtol relative to b's largest entry, or to ``floor``."""
    np.testing.assert_allclose(a, b, rtol=rtol, atol=max(rtol * np.abs(b).max(initial=0.0), floor))


def cov_floor(mean):
    """What numpy's own rounding of the mean adds to a covariance: (eps |<x>|)^2."""
    return (4 * np.finfo(np.float64).eps * np.abs(mean).max()) ** 2


def check_partition(tree, cells, n):
    """cells tile order[0:n] and cover every row exactly once."""
    assert tree.start[cells[0]] == 0 and tree.stop[cells[-1]] == n
    np.testing.assert_array_equal(tree.stop[cells[:-1]], tree.start[cells[1:]])
    rows = np.concatenate([node_rows(tree, c) for c in cells])
    np.testing.assert_array_equal(np.sort(rows), np.arange(n))


def projections(X, tree, node, rows):
    """(x - mean) . v summed over j in order, as the kernel does."""
    p = np.zeros(len(rows))
    for j in range(X.shape[1]):
        p = p + (X[rows, j].astype(np.float64) - tree.mean[node, j]) * tree.direction[node, j]
    return p


@pytest.mark.parametrize("D", [2, 3])  # 2: the split axis in closed form
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_node_statistics_match_numpy(D, full, weighted, dtype):
    X = anisotropic(500, D, seed=1, dtype=dtype)
    rng = np.random.default_rng(2)
    w = rng.uniform(0, 3, len(X)) * (rng.random(len(X)) > 0.2) if weighted else NO_W
    tree = build_tree(X, w, 4, full)
    assert tree.second.shape == ((tree.n_nodes, D, D) if full else (tree.n_nodes, D))
    central, raw = second_moments(tree)
    for i in range(tree.n_nodes):
        count, mean, cov, rawref = reference_stats(X, w, node_rows(tree, i))
        close(tree.count[i], count)
        close(tree.mean[i], mean)
        close(central[i], cov if full else np.diag(cov), floor=cov_floor(mean))
        close(raw[i], rawref if full else np.diag(rawref))
    # the statistics of Eqs. 11-13 are additive: n_A <x x^T>_A is the sum over the children
    inner = np.flatnonzero(~is_leaf(tree, np.arange(tree.n_nodes)))
    lo, hi = children(tree, inner)
    np.testing.assert_allclose(tree.count[inner], tree.count[lo] + tree.count[hi], rtol=1e-12)
    scale = np.abs(raw[inner]).max()
    extra = (slice(None),) + (None,) * (raw.ndim - 1)
    np.testing.assert_allclose((tree.count[inner])[extra] * raw[inner],
                               (tree.count[lo])[extra] * raw[lo] + (tree.count[hi])[extra] * raw[hi],
                               rtol=1e-10, atol=1e-10 * scale * tree.count[0])


@pytest.mark.parametrize("leaf_size", [1, 7, 64])
def test_leaves_and_frontiers_partition_the_rows(leaf_size):
    X = anisotropic(700, 4, seed=3)
    tree = build_tree(X, NO_W, leaf_size, False)
    lv = leaves(tree)
    check_partition(tree, lv, len(X))
    assert (tree.stop[lv] - tree.start[lv]).max() <= leaf_size
    inner = tree.left >= 0
    assert (tree.stop - tree.start)[inner].min() > leaf_size
    for depth in [0, 1, 2, 5, int(tree.depth.max()) + 3]:
        cells = frontier_at_depth(tree, depth)
        check_partition(tree, cells, len(X))
        assert (tree.depth[cells] <= depth).all()
        assert (tree.depth[cells][~is_leaf(tree, cells)] == depth).all()
    assert frontier_at_depth(tree, 0).tolist() == [0]
    np.testing.assert_array_equal(frontier_at_depth(tree, int(tree.depth.max()) + 3), lv)
    # expanding every cell of depth 1 gives the frontier at depth 2
    f1 = frontier_at_depth(tree, 1)
    np.testing.assert_array_equal(expand(tree, f1, f1), frontier_at_depth(tree, 2))
    with pytest.raises(ValueError):
        frontier_at_depth(tree, -1)


def test_tree_layout_is_breadth_first():
    tree = build_tree(anisotropic(300, 2, seed=4), NO_W, 3, False)
    inner = np.flatnonzero(tree.left >= 0)
    np.testing.assert_array_equal(tree.right[inner], tree.left[inner] + 1)
    assert (tree.left[inner] > inner).all()
    np.testing.assert_array_equal(tree.parent[tree.left[inner]], inner)
    np.testing.assert_array_equal(tree.depth[tree.left[inner]], tree.depth[inner] + 1)
    assert (np.diff(tree.depth) >= 0).all()
    assert tree.parent[0] == -1 and tree.depth[0] == 0
    assert (tree.right[tree.left < 0] == -1).all()
    assert (tree.direction[tree.left < 0] == 0).all()


@pytest.mark.parametrize("D", [2, 3, EXPLICIT_MAX_D + 16])  # closed form / covariance formed / products over the rows
@pytest.mark.parametrize("weighted", [False, True])
def test_splits_at_the_principal_component_bisector(D, weighted):
    X = anisotropic(400, D, seed=5)
    w = np.random.default_rng(6).uniform(0.5, 2, len(X)) if weighted else NO_W
    tree = build_tree(X, w, 2, False)
    checked = 0
    for i in np.flatnonzero(tree.left >= 0):
        v = tree.direction[i]
        assert abs(np.linalg.norm(v) - 1) < 1e-12
        lo, hi = tree.left[i], tree.right[i]
        assert (projections(X, tree, i, node_rows(tree, lo)) <= 0).all()
        assert (projections(X, tree, i, node_rows(tree, hi)) > 0).all()
        if tree.stop[i] - tree.start[i] < 16:
            continue
        _, _, cov, _ = reference_stats(X, w, node_rows(tree, i))
        with threadpool_limits(1, user_api="blas"):  # threaded 80 x 80 eigh crawls on a busy machine
            vals, vecs = np.linalg.eigh(cov)
        assert v @ cov @ v >= 0.95 * vals[-1]  # nearly the largest variance, even when POWER_MAX_ITER stops it
        if vals[-2] < 0.5 * vals[-1]:  # well conditioned: the power iteration has converged
            ref = vecs[:, -1] * np.sign(vecs[:, -1] @ v)
            assert np.abs(v - ref).max() < 1e-6
            checked += 1
    assert checked >= 4


def test_two_by_two_axis_in_closed_form():
    """The leading eigenvector of a 2 x 2 covariance, signed along the start axis j0 of power iteration, against
    numpy; the start axis where both eigenvalues are equal; no axis for a zero or infinite matrix."""
    from daskclust.kernels.kdtree import _eigen_2x2

    rng = np.random.default_rng(15)
    v = np.empty(2)
    for _ in range(200):
        A = rng.standard_normal((2, 2)) * rng.uniform(1e-3, 1e3, 2)
        S = A @ A.T
        j0 = int(np.argmax(np.diag(S)))
        assert _eigen_2x2(S, v, j0) == 1
        vals, vecs = np.linalg.eigh(S)
        ref = vecs[:, -1] * np.sign(vecs[j0, -1])
        assert abs(np.linalg.norm(v) - 1) < 1e-12 and v[j0] >= 0
        assert np.abs(v - ref).max() < 1e-9 * max(1.0, vals[-1] / max(vals[-1] - vals[0], 1e-300))
    for S, j0, axis in ((np.diag([1.0, 4.0]), 1, [0, 1]), (np.diag([3.0, 3.0]), 1, [0, 1]),
                        (np.diag([3.0, 3.0]), 0, [1, 0]), (np.array([[2.0, -1.0], [-1.0, 2.0]]), 0, None)):
        assert _eigen_2x2(S, v, j0) == 1
        if axis is not None:
            np.testing.assert_array_equal(v, axis)
        else:  # eigenvalues 3 (along (1, -1)) and 1
            np.testing.assert_allclose(v, np.array([1.0, -1.0]) / np.sqrt(2), rtol=1e-15)
    assert _eigen_2x2(np.zeros((2, 2)), v, 0) == -1
    assert _eigen_2x2(np.array([[np.inf, 0.0], [0.0, 1.0]]), v, 0) == -1


def test_build_is_deterministic():
    X = anisotropic(800, 5, seed=7, dtype=np.float32)
    w = np.random.default_rng(8).uniform(0, 1, len(X))
    for full in (True, False):
        a, b = build_tree(X, w, 3, full), build_tree(X.copy(), w.copy(), 3, full)
        for name in a._fields:
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name


def test_finest_partition_is_single_rows():
    X = anisotropic(257, 3, seed=9)
    tree = build_tree(X, NO_W, 1, True)
    lv = leaves(tree)
    assert len(lv) == len(X) and tree.n_nodes == 2 * len(X) - 1
    assert (tree.stop[lv] - tree.start[lv] == 1).all()
    rows = tree.order[tree.start[lv]]
    np.testing.assert_array_equal(tree.mean[lv], X[rows])
    assert (tree.second[lv] == 0).all()


def test_small_chunks():
    X = anisotropic(5, 2, seed=10)
    tree = build_tree(X, NO_W, 8, True)  # n < leaf_size: the root is a leaf
    assert tree.n_nodes == 1 and tree.left[0] == -1
    close(tree.mean[0], X.mean(0))
    close(tree.second[0], np.cov(X.T, bias=True))
    one = build_tree(X[:1], NO_W, 1, False)
    assert one.n_nodes == 1 and one.count[0] == 1
    np.testing.assert_array_equal(one.mean[0], X[0])
    assert (one.second[0] == 0).all()
    empty = build_tree(X[:0], NO_W, 1, True)
    assert empty.n_nodes == 0 and empty.second.shape == (0, 2, 2)
    assert len(frontier_at_depth(empty, 2)) == 0 and len(leaves(empty)) == 0


def test_one_feature():
    X = np.random.default_rng(11).standard_normal((300, 1)) * 4 + 7
    for full in (True, False):
        tree = build_tree(X, NO_W, 5, full)
        assert (np.abs(tree.direction[tree.left >= 0]) == 1).all()
        for i in range(tree.n_nodes):
            rows = node_rows(tree, i)
            close(tree.mean[i], X[rows].mean(0))
            close(tree.second[i].ravel(), [X[rows, 0].var()])
        lv = leaves(tree)
        # in one dimension the cells are intervals, ordered along the axis
        assert (X[tree.order, 0][tree.stop[lv[:-1]] - 1] < X[tree.order, 0][tree.start[lv[1:]]]).all()


def test_duplicated_rows_are_leaves():
    base = np.array([[0.1, 2.0], [0.3, -1.0], [0.7, 5.0]])
    X = np.repeat(base, [50, 1, 30], axis=0)
    tree = build_tree(X, NO_W, 1, True)
    lv = leaves(tree)
    assert len(lv) == 3
    assert sorted((tree.stop - tree.start)[lv]) == [1, 30, 50]
    for c in lv:
        rows = node_rows(tree, c)
        assert (X[rows] == X[rows[0]]).all()
        np.testing.assert_array_equal(tree.mean[c], X[rows[0]])  # exactly, not 0.1 * 50 / 50
        assert (tree.second[c] == 0).all()
    same = build_tree(np.repeat(base[:1], 40, axis=0), NO_W, 1, False)  # all rows identical
    assert same.n_nodes == 1 and (same.second == 0).all()


def test_constant_columns():
    rng = np.random.default_rng(12)
    X = np.column_stack([np.full(400, 3.3), rng.standard_normal((400, 2)) * [5, 1], np.full(400, -1.0)])
    for full in (True, False):
        tree = build_tree(X.astype(np.float32), NO_W, 2, full)
        assert np.isfinite(tree.mean).all() and np.isfinite(tree.second).all()
        assert (tree.direction[:, [0, 3]] == 0).all()  # no split leans on a constant column
        diag = np.diagonal(tree.second, axis1=1, axis2=2) if full else tree.second
        assert (diag[:, [0, 3]] == 0).all()
        check_partition(tree, leaves(tree), len(X))


def test_zero_weights():
    X = anisotropic(300, 3, seed=13)
    w = np.zeros(len(X))
    tree = build_tree(X, w, 1, True)  # no weight at all: one cell, count 0, unweighted statistics
    assert tree.n_nodes == 1 and tree.count[0] == 0
    close(tree.mean[0], X.mean(0))
    close(tree.second[0], np.cov(X.T, bias=True))
    # positive weight on three distinct rows only: the nodes whose weighted rows coincide stop
    w[[5, 17, 250]] = [1.0, 2.0, 0.5]
    for full in (True, False):
        tree = build_tree(X, w, 1, full)
        assert np.isfinite(tree.mean).all() and np.isfinite(tree.second).all()
        lv = leaves(tree)
        check_partition(tree, lv, len(X))
        assert (tree.count[lv] > 0).sum() == 3
        for c in lv:
            count, mean, cov, _ = reference_stats(X, w, node_rows(tree, c))
            close(tree.mean[c], mean)
            close(tree.second[c], cov if full else np.diag(cov), floor=cov_floor(mean))
            if count > 0:
                assert (tree.second[c] == 0).all()


def test_large_magnitudes_still_split():
    """Covariances of ~1e300: the power iteration's norm must not square them (overflow)."""
    X = np.random.default_rng(14).standard_normal((200, 3)) * [3e149, 1e149, 1e148]
    tree = build_tree(X, NO_W, 1, False)
    assert tree.n_nodes == 2 * len(X) - 1
    assert np.isfinite(tree.second).all() and np.isfinite(tree.direction).all()
    close(tree.second[0], X.var(0))


def test_invalid_input():
    X = anisotropic(10, 2)
    with pytest.raises(ValueError):
        build_tree(X, -np.ones(10), 1, False)
    with pytest.raises(ValueError):
        build_tree(X, np.ones(9), 1, False)
    with pytest.raises(ValueError):
        build_tree(X, NO_W, 0, False)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError):
        build_tree(bad, NO_W, 1, False)

"""The k-means|| reduction on the driver (daskclust.seeding.reduction) against numpy references,
and the distance counts of the seeding's driver-side work."""

from __future__ import annotations

import numpy as np
import pytest

from daskclust.kernels.balltree import build_ball_tree, greedy_kmeanspp_tree, tree_neighbours
from daskclust.kernels.rng import stream_key
from daskclust.kernels.seeding import weighted_means
from daskclust.seeding.passes import pruning_test
from daskclust.seeding.reduction import (
    _tree_neighbour_table,
    greedy_kmeanspp,
    n_restarts,
    reduce_candidates,
    weighted_lloyd,
)

from reference import reference_greedy, reference_local_greedy


def sq_distances(A, B):
    return ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)


def exact_gains(n_points):
    """The neighbourhood arrays of the tree kernel that make it count every saving exactly."""
    return np.empty((n_points, 0), dtype=np.int32), np.empty((n_points, 0))


def weighted_points(seed, n=300, dim=2, groups=12):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-30, 30, (groups, dim))
    P = centres[rng.integers(0, groups, n)] + rng.standard_normal((n, dim))
    return P, rng.uniform(0.5, 4.0, n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dense_greedy_equals_the_numpy_reference(seed):
    P, w = weighted_points(seed, dim=6)
    key = stream_key(seed, 5)
    chosen, n_dist = greedy_kmeanspp(P, w, 10, 4, key, dense=True, exact_tail=0.0)
    np.testing.assert_array_equal(chosen, reference_greedy(P, w, 10, 4, key))
    assert n_dist == len(P) * (1 + 9 * 4)  # the first centre, then 4 trials against every point per step


@pytest.mark.parametrize("seed, leaf_size", [(0, 1), (1, 8), (2, 32)])
def test_tree_greedy_equals_the_numpy_reference_in_tree_order(seed, leaf_size):
    """The pruned kernel draws over the tree's order of the points; the same greedy on the points
    in that order, unpruned, makes the same choices with fewer distances."""
    P, w = weighted_points(seed)
    order, *tree, n_build = build_ball_tree(P, leaf_size)
    assert sorted(order) == list(range(len(P)))
    key = stream_key(seed, 6)
    chosen, n_dist = greedy_kmeanspp_tree(*tree, P[order], w[order], 10, 4, key, *exact_gains(len(P)))
    np.testing.assert_array_equal(chosen, reference_greedy(P[order], w[order], 10, 4, key))
    n_nodes = len(tree[0])
    assert 0 < n_dist < (len(P) + n_nodes) * (1 + 9 * 5)  # each evaluation: nodes + members
    assert n_build == sum(hi - lo for lo, hi in zip(tree[0], tree[1]))


@pytest.mark.parametrize("seed, dense, k", [(0, False, 8), (1, False, 3), (2, True, 8), (3, True, 5)])
def test_local_greedy_equals_the_numpy_reference(seed, dense, k):
    """Savings counted over each trial's k nearest points: the tree kernel (in tree order) and the
    matrix products make the reference's choices."""
    P, w = weighted_points(seed, dim=6 if dense else 2)
    key = stream_key(seed, 7)
    chosen, n_dist = greedy_kmeanspp(P, w, 12, 5, key, dense=dense, exact_tail=0.0, neighbours=k)
    if dense:
        np.testing.assert_array_equal(chosen, reference_local_greedy(P, w, 12, 5, key, k))
    else:
        order = build_ball_tree(P)[0]
        position = np.argsort(order)
        np.testing.assert_array_equal(position[chosen], reference_local_greedy(P[order], w[order], 12, 5, key, k))
    assert n_dist > len(P) * k  # the neighbourhoods' distances are counted


def test_a_neighbourhood_of_every_point_is_the_exact_greedy():
    """With every point in each neighbourhood the local saving is the saving: same choices."""
    P, w = weighted_points(4)
    order, *tree, _ = build_ball_tree(P)
    pts, M = np.ascontiguousarray(P[order]), len(P)
    nbr, dist = np.empty((M, M), dtype=np.int32), np.empty((M, M))
    tree_neighbours(*tree, pts, np.arange(M), M, 0, M, nbr, dist)
    key = stream_key(4, 8)
    local, _ = greedy_kmeanspp_tree(*tree, pts, w[order], 15, 6, key, nbr, dist * dist)
    exact, _ = greedy_kmeanspp_tree(*tree, pts, w[order], 15, 6, key, *exact_gains(M))
    np.testing.assert_array_equal(local, exact)


def test_dense_neighbours_match_brute_force(monkeypatch):
    from daskclust.kernels import dense

    monkeypatch.setattr(dense, "TILE_SCORES", 2500 * 7)  # tiles of 7 rows: blocks of several tiles
    P, _ = weighted_points(6, n=2500, dim=5)
    P = P - P.mean(0)
    pn = np.einsum("md,md->m", P, P)
    idx, d2 = np.empty((len(P), 6), dtype=np.int32), np.empty((len(P), 6))
    n_dist = sum(dense.dense_neighbours(P, 6, a, b, pn, idx, d2) for a, b in [(0, 1000), (1000, 2500)])
    D2 = sq_distances(P, P)
    np.testing.assert_array_equal(idx[:, 0], np.arange(len(P)))
    np.testing.assert_array_equal(np.sort(idx[:, 1:], 1), np.sort(np.argsort(D2, 1, kind="stable")[:, 1:6], 1))
    np.testing.assert_allclose(d2, np.take_along_axis(D2, idx.astype(np.int64), 1), rtol=1e-9, atol=1e-9)
    assert n_dist == len(P) ** 2


@pytest.mark.parametrize("k", [0, 6])
def test_dense_greedy_far_from_the_origin_makes_the_same_choices(k):
    """The dense greedy expands distances as ||p||^2 + ||q||^2 - 2 p.q; about the points' mean, so
    points 1e8 from the origin (where the expansion about the origin loses every digit of their
    spread) are chosen as at the origin."""
    P, w = weighted_points(8, n=400, dim=8, groups=16)
    key = stream_key(8, 1)
    here, _ = greedy_kmeanspp(P, w, 16, 4, key, dense=True, exact_tail=0.25, neighbours=k)
    far, _ = greedy_kmeanspp(P + 1e8, w, 16, 4, key, dense=True, exact_tail=0.25, neighbours=k)
    np.testing.assert_array_equal(far, here)


def test_ball_tree_nodes_bound_their_points():
    """Every node's radius covers its points around its centre (the mean), children split their
    parent's range at the median of its widest coordinate, and leaves hold at most leaf_size points
    (with repeated coordinates too)."""
    P, _ = weighted_points(5, n=500, dim=3)
    P[::3, 0] = np.round(P[::3, 0])  # ties at the medians
    order, lo, hi, left, centre, radius, _ = build_ball_tree(P, 7)
    for n in range(len(lo)):
        pts = P[order[lo[n]:hi[n]]]
        np.testing.assert_allclose(centre[n], pts.mean(0))
        assert np.sqrt(((pts - centre[n]) ** 2).sum(1)).max() <= radius[n] * (1 + 1e-12)
        if left[n] >= 0:
            assert left[n] > n and (lo[left[n]], hi[left[n]], hi[left[n] + 1]) == (lo[n], lo[left[n] + 1], hi[n])
            widest = np.argmax(pts.max(0) - pts.min(0))  # split at the median of the widest coordinate
            below, above = P[order[lo[n]:hi[left[n]]], widest], P[order[lo[left[n] + 1]:hi[n]], widest]
            assert len(below) == (hi[n] - lo[n]) // 2 and below.max() <= above.min()
        else:
            assert hi[n] - lo[n] <= 7


def test_dense_exact_tail_takes_the_largest_gain():
    """The last steps of the dense greedy take the point that lowers sum w d^2 most among all."""
    P, w = weighted_points(3, n=200, dim=16, groups=20)
    chosen, _ = greedy_kmeanspp(P, w, 20, 3, stream_key(3), dense=True, exact_tail=0.25)
    D2 = sq_distances(P, P)
    for k in range(15, 20):
        d2 = D2[chosen[:k]].min(0)
        gains = (w * np.maximum(d2[None, :] - D2, 0.0)).sum(1)
        np.testing.assert_allclose(gains[chosen[k]], gains.max(), rtol=1e-9)


def test_dense_tail_with_neighbourhoods_takes_the_largest_local_saving():
    """With neighbourhoods the exact tail takes the unchosen point of largest local saving."""
    P, w = weighted_points(3, n=200, dim=16, groups=20)
    k = 6
    chosen, _ = greedy_kmeanspp(P, w, 20, 3, stream_key(3), dense=True, exact_tail=0.25, neighbours=k)
    D2 = sq_distances(P, P)
    near = np.argsort(D2, 1, kind="stable")[:, :k]
    for step in range(15, 20):
        d2 = D2[chosen[:step]].min(0)
        local = np.array([(w[near[p]] * np.maximum(d2[near[p]] - D2[p, near[p]], 0.0)).sum() for p in range(len(P))])
        local[chosen[:step]] = -np.inf
        np.testing.assert_allclose(local[chosen[step]], local.max(), rtol=1e-9)


def test_weighted_means_and_lloyd_match_numpy():
    P, w = weighted_points(4, n=200, dim=3)
    labels = np.random.default_rng(0).integers(0, 7, len(P)).astype(np.int32)
    labels[labels == 6] = 0  # centre 6 gets no point: it keeps its value
    centres = np.random.default_rng(1).standard_normal((7, 3))
    before = centres.copy()
    weighted_means(P, w, labels, centres)
    for c in range(6):
        np.testing.assert_allclose(centres[c], np.average(P[labels == c], axis=0, weights=w[labels == c]))
    np.testing.assert_array_equal(centres[6], before[6])
    single = np.zeros(len(P), dtype=np.int32)
    single[17] = 1
    out = np.zeros((2, 3))
    weighted_means(P, np.full(len(P), 0.3), single, out)
    np.testing.assert_array_equal(out[1], P[17])  # a lone point is its centre exactly

    for dense in (False, True):
        start = P[:7].copy()
        ref = start.copy()
        for _ in range(50):  # plain weighted Lloyd
            lab = sq_distances(P, ref).argmin(1)
            ref = np.array([np.average(P[lab == c], axis=0, weights=w[lab == c]) if (lab == c).any() else ref[c]
                            for c in range(7)])
        got, lab, d2, n_dist = weighted_lloyd(P, w, start, dense, 50)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(lab, sq_distances(P, got).argmin(1))
        np.testing.assert_allclose(d2, sq_distances(P, got).min(1), rtol=1e-9, atol=1e-9)
        assert n_dist > 0


def test_lloyd_searches_only_points_whose_centre_may_not_be_nearest(monkeypatch):
    """Lloyd's iterations skip the points provably still nearest to their centre (Elkan's lemma) and
    give the centres and labels of iterations that search every point, each point labelled with its
    nearest centre; fewer distances are evaluated, so the skip is exercised."""
    from daskclust.seeding import reduction

    P, w = weighted_points(6, n=3000, dim=2, groups=60)  # overlapping groups: many points near a bisector
    P = np.vstack([P, P[:50]])  # duplicate points
    w = np.concatenate([w, w[:50]])
    start = P[:40].copy()
    start[39] = start[38]  # two centres at one place: the gap is 0, nothing skipped near them
    skipping = weighted_lloyd(P, w, start, False, 6)
    monkeypatch.setattr(reduction, "search_unsettled", lambda index, P, d2, labels, pool=None:
                        reduction.search_in_blocks(index, P, d2, labels, pool))
    full = weighted_lloyd(P, w, start, False, 6)
    np.testing.assert_array_equal(skipping[0], full[0])
    np.testing.assert_array_equal(skipping[1], full[1])
    np.testing.assert_allclose(skipping[2], full[2], rtol=1e-12, atol=0)
    np.testing.assert_array_equal(skipping[1], sq_distances(P, skipping[0]).argmin(1))
    assert skipping[3] < 0.8 * full[3]


@pytest.mark.parametrize("dense", [False, True])
def test_reduction_cost_labels_and_restarts(dense):
    P, w = weighted_points(5, n=400, dim=4 if dense else 2, groups=15)
    w[::7] = 0.0  # candidates of no mass: not clustered
    red = reduce_candidates(P, w, 15, seed=3, dense=dense)
    D2 = sq_distances(P, red.centres)
    np.testing.assert_allclose(red.cost, (w * D2.min(1)).sum(), rtol=1e-9)
    alone = reduce_candidates(P[w > 0], w[w > 0], 15, seed=3, dense=dense)
    np.testing.assert_array_equal(red.centres, alone.centres)  # massless candidates change nothing
    single = reduce_candidates(P, w, 15, seed=3, dense=dense, restarts=1)
    assert red.cost <= single.cost  # the best of n_restarts(15) runs, the first of which is `single`
    assert n_restarts(15) > 1 and red.n_dist > single.n_dist
    again = reduce_candidates(P, w, 15, seed=3, dense=dense)
    np.testing.assert_array_equal(red.centres, again.centres)
    assert reduce_candidates(P[:10], np.ones(10), 15, seed=3, dense=dense) is None


def test_reduction_covers_separated_weighted_groups_in_many_dimensions():
    rng = np.random.default_rng(8)
    centres = rng.uniform(-10, 10, (40, 64))
    labels = np.repeat(np.arange(40), 10)
    P = centres[labels] + rng.standard_normal((400, 64))
    red = reduce_candidates(P, rng.uniform(1, 3, 400), 40, seed=1, dense=True)
    nearest = sq_distances(P, red.centres).argmin(1)
    assert len(set(nearest.tolist())) == 40
    assert all(len(set(nearest[labels == g].tolist())) == 1 for g in range(40))


def test_pruning_test_counts_what_it_evaluates():
    """The probe's count: building the tree over half the points (one distance per point and node
    holding it) plus the queries' evaluations, which ``tree_nearest`` reports."""
    rng = np.random.default_rng(7)
    points = rng.standard_normal((500, 64))
    fails, n_dist = pruning_test(points, seed=2)
    half = 250
    order, lo, hi, *_, n_build = build_ball_tree(points[:half])
    assert n_build == (hi - lo).sum()
    assert fails and n_dist > n_build
    assert n_dist - n_build <= 250 * (2 * len(lo) + half)  # each query: at most every node and point



@pytest.mark.parametrize("dense", [False, True])
def test_reduction_on_threads_is_the_serial_reduction(dense, monkeypatch):
    """The searches split in blocks over threads give the serial result exactly: the tree's neighbour
    table (brute force's; the greedy's choices equal the reference's) and Lloyd's searches (the same
    centres, labels, distances and counts as one thread, every row given its nearest centre)."""
    from concurrent.futures import ThreadPoolExecutor

    from daskclust import threads

    monkeypatch.setattr(threads, "ROWS_PER_TASK", 64)  # several blocks per search
    P, w = weighted_points(11, n=600, dim=8 if dense else 2, groups=30)
    key = stream_key(2, 0)
    with ThreadPoolExecutor(3) as pool:
        chosen, _ = greedy_kmeanspp(P, w, 30, 12, key, dense, exact_tail=0.0, neighbours=8, pool=pool)
        threaded = weighted_lloyd(P, w, P[chosen], dense, 5, pool=pool)
    if dense:
        np.testing.assert_array_equal(chosen, reference_local_greedy(P, w, 30, 12, key, 8))
    else:
        order, *tree, _ = build_ball_tree(P)
        np.testing.assert_array_equal(np.argsort(order)[chosen],
                                      reference_local_greedy(P[order], w[order], 30, 12, key, 8))
        pts = np.ascontiguousarray(P[order])
        nbr, nd2 = np.empty((len(P), 8), dtype=np.int32), np.empty((len(P), 8))
        with ThreadPoolExecutor(3) as pool:
            _tree_neighbour_table(tree, pts, 8, nbr, nd2, pool)
        D2 = sq_distances(pts, pts)
        near = np.array([sorted(range(len(P)), key=lambda j, i=i: (j != i, D2[i, j], j))[:8] for i in range(len(P))])
        np.testing.assert_array_equal(nbr, near)
        np.testing.assert_allclose(nd2, np.sqrt(np.take_along_axis(D2, near, 1)), rtol=1e-12, atol=1e-12)
    for got, want in zip(threaded, weighted_lloyd(P, w, P[chosen], dense, 5)):
        np.testing.assert_array_equal(got, want)
    centres, labels, d2, _ = threaded
    np.testing.assert_array_equal(labels, sq_distances(P, centres).argmin(1))  # every row searched
    np.testing.assert_allclose(d2, sq_distances(P, centres).min(1), rtol=1e-9, atol=1e-9)

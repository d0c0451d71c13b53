"""Kernels against slow references, on plain numpy (no Dask)."""

from __future__ import annotations

import numpy as np
import pytest

from daskclust.kernels.balltree import build_ball_tree, greedy_kmeanspp_tree, tree_nearest
from daskclust.kernels.estep import (
    CHANGED,
    LSE,
    N_SCALARS,
    NDIST_POINTS,
    QE,
    W,
    all_distances,
    estep_full,
    insert_sorted,
)
from daskclust.kernels.rng import stream_key, uniform
from daskclust.kernels.search import RADIX_BITS, gather_pairs, pair_entries, radix_order
from daskclust.kernels.seeding import afkmc2_chains, bernoulli_sample, exponential_keys
from daskclust.kernels.validation import first_invalid_weight, first_nonfinite_row, max_abs
from daskclust.models import MeanParams

from reference import sq_distances, truncated_estep

pytestmark = pytest.mark.boundscheck  # also run under NUMBA_BOUNDSCHECK=1 (README, .ci/run)


def run_estep(X, w, centres, sigma2, n_truncated, K=None):
    C, D = centres.shape
    S0, S1, SD2, scal = np.zeros(C), np.zeros((C, D)), np.zeros(C), np.zeros(N_SCALARS)
    if K is None:
        K = np.full((len(X), n_truncated), -1, dtype=np.int32)
    estep_full(X, w, MeanParams(centres, sigma2), n_truncated, K, (S0, S1, SD2), scal)
    return S0, S1, SD2, scal, K


@pytest.mark.parametrize("n_truncated", [1, 3, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_estep_matches_dense_reference(n_truncated, dtype, weighted):
    rng = np.random.default_rng(n_truncated)
    X = rng.standard_normal((300, 4)).astype(dtype)
    centres = rng.standard_normal((7, 4))
    w = rng.uniform(0, 2, 300) if weighted else np.ones(300)
    S0, S1, SD2, scal, K = run_estep(X, w if weighted else np.empty(0), centres, 0.7, n_truncated)
    ref = truncated_estep(X.astype(np.float64), w, centres, 0.7, n_truncated)
    rtol = 1e-10 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(S0, ref["S0"], rtol=rtol)
    np.testing.assert_allclose(S1, ref["S1"], rtol=rtol, atol=1e-9)
    np.testing.assert_allclose(SD2, ref["SD2"], rtol=rtol)
    np.testing.assert_allclose([scal[W], scal[LSE], scal[QE]], [ref["W"], ref["LSE"], ref["QE"]], rtol=rtol)
    assert scal[NDIST_POINTS] == 300 * 7
    if n_truncated < 7:  # the exact EM branch only guarantees the best cluster first
        np.testing.assert_array_equal(K, ref["K"])
    np.testing.assert_array_equal(K[:, 0], ref["labels"])
    assert scal[CHANGED] == 300  # every row started at -1


def test_estep_counts_changed_assignments():
    X = np.array([[0.0], [10.0]])
    centres = np.array([[0.0], [10.0]])
    K = np.array([[0], [0]], dtype=np.int32)
    *_, scal, K = run_estep(X, np.empty(0), centres, 1.0, 1, K)
    assert scal[CHANGED] == 1
    np.testing.assert_array_equal(K[:, 0], [0, 1])


def test_insert_sorted_keeps_k_smallest_in_order():
    rng = np.random.default_rng(0)
    d = rng.random(50)
    top_d, top_c = np.empty(5), np.empty(5, dtype=np.int64)
    size = 0
    for c, value in enumerate(d):
        size = insert_sorted(top_d, top_c, size, 5, value, c)
    np.testing.assert_array_equal(top_c, np.argsort(d)[:5])
    np.testing.assert_array_equal(top_d, np.sort(d)[:5])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 17, 1000, 20_000])
@pytest.mark.parametrize("largest", [1, 2 ** RADIX_BITS - 1, 2 ** RADIX_BITS, 2 ** 24 + 3, 2 ** 62])
def test_radix_order_is_numpys_stable_argsort(n, largest):
    """An even and an odd number of passes, keys repeated or not, up to 2^62; equal keys keep their
    order (the pairs' sums are then the same fold whenever they are summed)."""
    keys = np.random.default_rng(n).integers(0, largest, size=n + 5, endpoint=True)
    before = keys.copy()
    np.testing.assert_array_equal(radix_order(keys, n), np.argsort(keys[:n], kind="stable"))
    np.testing.assert_array_equal(keys, before)


@pytest.mark.parametrize("n_records, block", [(0, 7), (5, 3), (50_000, 4_000), (300_000, 30_000)])
def test_gathered_pairs_are_each_pairs_left_fold(n_records, block):
    """Records gathered block by block (summed in place whenever the buffers overflow, several times for
    the larger cases) give each distinct key once, ascending, with its values summed left to right in
    record order, bit for bit, and its weights likewise."""
    rng = np.random.default_rng(n_records)
    C = max(1, int(np.sqrt(n_records / 3)))  # about 3 records a pair
    centres = rng.standard_normal((C, 2))
    keys = rng.integers(0, C, n_records) * C + rng.integers(0, C, n_records)  # pair keys i * C + j
    vals, wts = rng.standard_normal(n_records), rng.uniform(0.1, 2.0, n_records)
    rec = (np.empty(0, dtype=np.int64), np.empty(0), np.empty(0), np.int64(0))
    for start in range(0, n_records, block):
        stop = min(n_records, start + block)
        rec = gather_pairs(*rec, keys[start:stop].copy(), vals[start:stop].copy(), wts[start:stop].copy(),
                           stop - start)
    got_keys, got_vals, got_wts, rank, d = pair_entries(*rec, centres)
    expected = {}
    for key, val, wt in zip(keys.tolist(), vals.tolist(), wts.tolist()):
        s, t = expected.get(key, (None, None))
        expected[key] = (val, wt) if s is None else (s + val, t + wt)
    assert d == len(expected) and got_keys.tolist() == sorted(expected)
    assert [(v, t) for v, t in zip(got_vals.tolist(), got_wts.tolist())] == [expected[k] for k in sorted(expected)]
    np.testing.assert_allclose(rank, ((centres[got_keys // C] - centres[got_keys % C]) ** 2).sum(axis=1))


def test_all_distances():
    rng = np.random.default_rng(1)
    X, centres = rng.standard_normal((100, 3)), rng.standard_normal((9, 3))
    out = np.empty((100, 9))
    all_distances(X, centres, out)
    np.testing.assert_allclose(out, np.sqrt(sq_distances(X, centres)))


def test_validation_kernels_find_first_bad_row():
    X = np.zeros((5, 2))
    assert first_nonfinite_row(X) == -1
    X[3, 1] = np.nan
    X[4, 0] = np.inf
    assert first_nonfinite_row(X) == 3
    assert first_invalid_weight(np.array([1.0, 0.0, 2.0])) == -1
    assert first_invalid_weight(np.array([1.0, -0.5, np.nan])) == 1
    assert first_invalid_weight(np.array([1.0, np.inf])) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_abs_is_the_largest_magnitude_nan_ignored(dtype):
    rng = np.random.default_rng(0)
    for X in (rng.normal(size=(300, 7)), -rng.uniform(1, 2, (50, 3)), rng.uniform(1, 2, (50, 3)),
              np.full((4, 2), -0.0), np.array([[1.0, -np.inf]]), np.zeros((0, 3))):
        X = X.astype(dtype)
        want = float(np.abs(X).max()) if X.size else 0.0
        assert max_abs(X) == want and not np.signbit(max_abs(X))
    X = rng.normal(size=(300, 7)).astype(dtype)
    want = float(np.abs(X).max())
    X[5, 2] = np.nan
    assert max_abs(X) == want


def test_counter_rng_is_uniform_and_keyed():
    key = stream_key(7, 1, 2, 3)
    u = np.array([uniform(key, i) for i in range(20000)])
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 1800
    assert stream_key(7, 1, 2, 3) == key and stream_key(7, 1, 2, 4) != key
    assert uniform(key, 5) == u[5]


@pytest.mark.parametrize("D, leaf_size", [(1, 1), (2, 8), (16, 8), (2, 64)])
def test_ball_tree_search_is_exact(D, leaf_size):
    rng = np.random.default_rng(D)
    P = rng.standard_normal((800, D)) * 2 + rng.integers(0, 15, (800, 1))
    Q = rng.standard_normal((500, D)) * 2 + rng.integers(0, 15, (500, 1))
    order, *tree, _ = build_ball_tree(P, leaf_size)
    ids = order + 7
    ref = sq_distances(Q, P)
    mind2, label = np.full(500, np.inf), np.zeros(500, dtype=np.int32)
    n_eval = tree_nearest(Q, *tree, P[order], ids, mind2, label)
    np.testing.assert_allclose(mind2, ref.min(1))
    np.testing.assert_array_equal(label - 7, ref.argmin(1))
    if D <= 2 and leaf_size <= 8:
        assert n_eval < 500 * 800 / 4  # it prunes
    bound = ref.min(1) * rng.uniform(0.5, 2.0, 500)  # an existing better bound wins, label untouched
    mind2, label = bound.copy(), np.full(500, -1, dtype=np.int32)
    tree_nearest(Q, *tree, P[order], ids, mind2, label)
    np.testing.assert_allclose(mind2, np.minimum(bound, ref.min(1)))
    assert ((label == -1) == (bound <= ref.min(1))).all()


def test_sampling_kernels_respect_mass():
    mass = np.array([0.0, 1.0, 3.0])
    keys = np.array([exponential_keys(stream_key(1, i), mass) for i in range(4000)])
    assert np.isinf(keys[:, 0]).all()
    first = keys.argmin(1)
    assert abs((first == 2).mean() - 0.75) < 0.03
    kept = bernoulli_sample(stream_key(3), np.empty(0), np.array([0.0, 0.5, 10.0] * 2000), 1.0, np.arange(6000))
    rows = kept % 3
    assert (rows != 0).all()
    assert abs((rows == 1).sum() / 2000 - 0.5) < 0.05 and (rows == 2).sum() == 2000


def exact_gains(n_points):
    """The neighbourhood arrays of the tree kernel that make it count every saving exactly."""
    return np.empty((n_points, 0), dtype=np.int32), np.empty((n_points, 0))


def test_greedy_kmeanspp_finds_separated_groups():
    rng = np.random.default_rng(4)
    centres = np.arange(8)[:, None] * np.array([[100.0, 0.0]])
    P = np.repeat(centres, 20, axis=0) + rng.standard_normal((160, 2))
    order, *tree, _ = build_ball_tree(P)
    chosen, _ = greedy_kmeanspp_tree(*tree, P[order], np.ones(160), 8, 4, stream_key(1), *exact_gains(160))
    assert len(set((order[chosen] // 20).tolist())) == 8


def test_greedy_kmeanspp_weights_steer_the_choice():
    """Two far groups; the heavy one gets the first centre almost surely, and a point of
    zero weight is never chosen."""
    P = np.array([[0.0, 0.0], [0.1, 0.0], [50.0, 0.0], [500.0, 0.0]])
    w = np.array([1000.0, 1000.0, 1.0, 0.0])
    order, *tree, _ = build_ball_tree(P, leaf_size=1)
    picks = [order[greedy_kmeanspp_tree(*tree, P[order], w[order], 2, 3, stream_key(s), *exact_gains(4))[0]]
             for s in range(30)]
    assert all(3 not in p for p in picks)
    assert sum(p[0] in (0, 1) for p in picks) >= 28


def test_afkmc2_chains_with_long_chains_cover_groups():
    rng = np.random.default_rng(5)
    groups = np.arange(6)[:, None] * np.array([[50.0, 0.0]])
    cands = groups[rng.integers(0, 6, 5 * 200)] + rng.standard_normal((1000, 2))
    q = np.full(1000, 1e-3)
    out = afkmc2_chains(groups[0] + 0.1, cands, np.ones(1000), q, 6, 200, stream_key(2))
    assert len(set(np.round(out[:, 0] / 50).astype(int).tolist())) == 6


def test_dense_nearest_matches_brute_force():
    from daskclust.kernels.dense import dense_nearest

    rng = np.random.default_rng(6)
    X, cands = rng.standard_normal((3000, 40)), rng.standard_normal((300, 40))
    mind2, label = np.full(3000, np.inf), np.zeros(3000, dtype=np.int32)
    assert dense_nearest(X, cands, 10, mind2, label) == 3000 * 300
    ref = sq_distances(X, cands)
    np.testing.assert_allclose(mind2, ref.min(1), rtol=1e-9)
    np.testing.assert_array_equal(label - 10, ref.argmin(1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_nearest_is_exact_far_from_the_origin(dtype):
    """Rows near well-separated candidates all about 1e4 from the origin: the expansion
    ||x||^2 - 2 x.c + ||c||^2 of float32 rows loses every digit of their distances there; the search
    still finds each row's nearest candidate and gives its exact squared distance (several tiles)."""
    from daskclust.kernels.dense import TILE_SCORES, dense_nearest

    rng = np.random.default_rng(8)
    cands = 1e4 + 10.0 * rng.standard_normal((500, 40))
    X = (cands[rng.integers(500, size=3 * TILE_SCORES // 500)] + rng.standard_normal((3 * TILE_SCORES // 500, 40)))
    X = X.astype(dtype)
    mind2, label = np.full(len(X), np.inf), np.zeros(len(X), dtype=np.int32)
    dense_nearest(X, cands, 0, mind2, label)
    ref = sq_distances(X.astype(np.float64), cands)
    np.testing.assert_array_equal(label, ref.argmin(1))
    np.testing.assert_allclose(mind2, ref.min(1), rtol=1e-9)


def test_dense_nearest_lowers_only_what_its_candidates_improve():
    from daskclust.kernels.dense import dense_nearest

    rng = np.random.default_rng(9)
    X, cands = rng.standard_normal((1000, 20)), rng.standard_normal((50, 20))
    ref = sq_distances(X, cands).min(1)
    mind2 = np.where(np.arange(1000) % 2 == 0, ref / 2, np.inf)
    label = np.full(1000, -7, dtype=np.int32)
    dense_nearest(X, cands, 100, mind2, label)
    np.testing.assert_array_equal(label[::2], -7)
    np.testing.assert_allclose(mind2[::2], ref[::2] / 2)
    np.testing.assert_allclose(mind2[1::2], ref[1::2], rtol=1e-12)
    assert (label[1::2] >= 100).all()
    assert dense_nearest(X[:0], cands, 0, mind2[:0], label[:0]) == 0


def test_pruning_probe_tells_low_from_high_dimension():
    from daskclust.seeding.passes import pruning_test

    rng = np.random.default_rng(7)
    grid = np.repeat(np.arange(100)[:, None] * 6.0, 5, axis=0)
    low = np.column_stack([grid[:, 0], np.zeros(500)]) + rng.standard_normal((500, 2))
    high = rng.standard_normal((500, 64))
    assert not pruning_test(low)[0]
    assert pruning_test(high)[0]
    assert pruning_test(high[:40]) == (False, 0)  # too few points to measure: no index, no distance


@pytest.mark.parametrize("exact_tail", [0.0, 0.25])
def test_dense_greedy_covers_separated_groups_in_many_dimensions(exact_tail):
    from daskclust.seeding.reduction import greedy_kmeanspp

    rng = np.random.default_rng(8)
    centres = rng.uniform(-10, 10, (40, 64))
    labels = np.repeat(np.arange(40), 10)
    P = centres[labels] + rng.standard_normal((400, 64))
    chosen, _ = greedy_kmeanspp(P, np.ones(400), 40, 3, stream_key(1), dense=True, exact_tail=exact_tail)
    assert len(set(chosen.tolist())) == 40
    if exact_tail:  # the exact tail never leaves a group without a centre
        assert len(set(labels[chosen].tolist())) == 40

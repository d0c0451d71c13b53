"""KMeans' exact inertia from the rows' K(n): settled rows by the triangle inequality, the rest searched."""

import numpy as np
import pytest

from daskclust.em.exact_cost import SETTLE_NEIGHBOURS, SettledCostOp, settling_table
from daskclust.engine.ops import Chunk
from daskclust.kernels.settle import settle_nearest
from daskclust.names import STATE_K
from daskclust.seeding.passes import NearestIndex


def _problem(C=60, D=12, n=4000, seed=0):
    """Overlapping blobs of unequal spread in D dimensions, centres near (not at) their means."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(C, D)) * 3
    labels = rng.integers(C, size=n)
    X = means[labels] + rng.normal(size=(n, D)) * rng.uniform(0.3, 2.0, C)[labels, None]
    return X.astype(np.float32), means + rng.normal(size=(C, D)) * 0.2, labels


def _exact(X, means):
    d = ((X.astype(np.float64)[:, None, :] - means[None]) ** 2).sum(2)
    return d.argmin(1), d.min(1)


@pytest.mark.parametrize("guess_kind", ["nearest", "random", "none"])
def test_settled_rows_have_their_exact_nearest_centre(guess_kind):
    X, means, labels = _problem()
    true_label, true_d2 = _exact(X, means)
    rng = np.random.default_rng(1)
    guess = {"nearest": true_label, "random": rng.integers(len(means), size=len(X)),
             "none": np.full(len(X), -1)}[guess_kind].astype(np.int16)
    neighbours, radius, _ = settling_table(means, 8)
    d2, label = np.full(len(X), np.inf), np.zeros(len(X), dtype=np.int32)
    settled = settle_nearest(X, means, guess, neighbours, radius, d2, label)
    np.testing.assert_array_equal(label[settled], true_label[settled])
    np.testing.assert_allclose(d2[settled], true_d2[settled], rtol=1e-12)
    assert np.isinf(d2[~settled]).all()
    if guess_kind == "nearest":
        assert 0.2 < settled.mean() < 1.0  # the bound settles many rows here, not all
    if guess_kind == "none":
        assert not settled.any()


def test_the_bound_settles_exactly_the_rows_it_proves():
    """A row is settled iff its best among {b} + N(b) beats r_b - ||y - mu_b||: checked in numpy."""
    X, means, _ = _problem(seed=2)
    true_label, _ = _exact(X, means)
    neighbours, radius, _ = settling_table(means, 5)
    d2, label = np.full(len(X), np.inf), np.zeros(len(X), dtype=np.int32)
    settled = settle_nearest(X, means, true_label, neighbours, radius, d2, label)
    Xd = X.astype(np.float64)
    cands = np.concatenate([true_label[:, None], neighbours[true_label]], axis=1)
    best = ((Xd[:, None, :] - means[cands]) ** 2).sum(2).min(1)
    own = np.sqrt(((Xd - means[true_label]) ** 2).sum(1))
    bound = radius[true_label] - own
    np.testing.assert_array_equal(settled, (bound > 0) & (best < bound ** 2 * (1 - 1e-9)))
    # the radius is the distance to the farthest of the G nearest other centres
    cd = np.sqrt(((means[:, None, :] - means[None]) ** 2).sum(2))
    np.testing.assert_allclose(radius, np.sort(cd, axis=1)[:, 5], rtol=1e-12)


def test_a_table_of_every_other_centre_settles_every_guessed_row():
    X, means, _ = _problem(C=SETTLE_NEIGHBOURS + 1)
    neighbours, radius, n_dist = settling_table(means)
    assert n_dist == 0 and np.isinf(radius).all()
    assert all(sorted(neighbours[b]) == [c for c in range(len(means)) if c != b] for b in range(len(means)))


@pytest.mark.parametrize("with_sets", [True, False])
def test_the_pass_gives_the_exact_weighted_cost_and_counts_its_distances(with_sets):
    X, means, _ = _problem(seed=3)
    true_label, true_d2 = _exact(X, means)
    w = np.random.default_rng(4).uniform(0.5, 2, len(X))
    state = {STATE_K: np.stack([true_label, (true_label + 1) % len(means)], axis=1).astype(np.int16)} if with_sets else {}
    chunk = Chunk(0, 0, X, w, state)
    neighbours, radius, _ = settling_table(means)
    index = NearestIndex(means, dense=True)
    op = SettledCostOp(means, neighbours, radius, index)
    acc = op.new_acc()
    op.run(chunk, acc)
    assert acc["qe"][0] == pytest.approx(float(w @ true_d2), rel=1e-10)
    if with_sets:
        settled = settle_nearest(X, means, true_label, neighbours, radius, np.full(len(X), np.inf),
                                 np.zeros(len(X), dtype=np.int32))
        expected = len(X) * (1 + SETTLE_NEIGHBOURS) + np.count_nonzero(~settled) * len(means)
    else:
        expected = len(X) * len(means)
    assert acc["n_dist"][0] == expected


def test_exact_inertia_matches_the_brute_force_cost_after_a_fit(client):
    import daskclust

    X, means, _ = _problem(C=40, n=6000, seed=5)
    km = daskclust.KMeans(40, max_iter=3, tol=0, random_state=0, chunk_rows=1000).fit(X, client=client)
    _, d2 = _exact(X, np.asarray(km.cluster_centers_, dtype=np.float64))
    assert km.inertia_ == pytest.approx(d2.sum(), rel=1e-9)

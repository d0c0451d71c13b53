"""The mixtures' start, as scikit-learn's: init="k-means++" (GaussianMixture's default for the families
with learned variances), greedy k-means++ on every row while the driver's work is small, on a weighted
sample beyond, in two passes over the data
whatever C; then k-means until scikit-learn's KMeans rule stops it (the centres' total squared shift at
most tol times the data's mean variance, from the first pass's moments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import daskclust
from daskclust.data import as_chunked_data
from daskclust.em.loop import EMSettings, LoopState, run_em
from daskclust.engine.engine import Engine
from daskclust.kernels.rng import stream_key
from daskclust.models import FAMILIES
from daskclust.names import STREAM_KMEANSPP
from daskclust.search import SearchConfig, make_search
from daskclust.seeding import methods, seed
from daskclust.seeding.passes import pruning_test

from conftest import birch, blobs
from reference import reference_greedy


def sorted_rows(A):
    return A[np.lexsort(A.T[::-1])]


def high_dimensional(seed, n=400, dim=24, groups=9):
    """Blobs in many dimensions, where no ball tree prunes: the greedy steps run on matrix products,
    in the rows' own order."""
    X, _ = blobs(n, dim, groups, seed=seed, spread=3.0)
    assert pruning_test(X, seed)[0]
    return X


@pytest.mark.parametrize("seed_value, weighted", [(0, False), (1, True), (2, True)])
def test_the_seeds_are_greedy_kmeanspp_on_every_row(client, seed_value, weighted):
    """Below the budget the first pass gathers every row (with its weight) and the seeds are those of
    scikit-learn's greedy k-means++ (2 + ln C trials per centre) on them, drawn from the k-means++
    stream: the numpy reference makes the same choices."""
    X = high_dimensional(seed_value)
    C = 9
    w = np.random.default_rng(seed_value).integers(1, 5, len(X)).astype(float) if weighted else None
    model = daskclust.KMeans(C, init="k-means++", max_iter=0, random_state=seed_value)
    model.fit(X, sample_weight=w, client=client)
    chosen = reference_greedy(X, np.ones(len(X)) if w is None else w, C, 2 + int(math.log(C)),
                              stream_key(seed_value, STREAM_KMEANSPP))
    np.testing.assert_array_equal(sorted_rows(model.centres_), sorted_rows(X[chosen]))


def test_two_passes_whatever_the_number_of_clusters(client):
    """The first pass (validation and the sample), then the assignment of every row to its seed
    (numbered in spatial order)."""
    X, _ = birch(64, points=30, seed=3)
    data = as_chunked_data(X, chunk_rows=300)
    for C in (8, 64):
        with Engine(data, client) as engine:
            before = engine.n_passes
            result = seed(engine, "k-means++", C, seed=5)
            assert engine.n_passes - before == 2
        assert len(np.unique(result.centres, axis=0)) == C


def test_beyond_the_budget_a_weighted_sample_is_seeded(client, monkeypatch):
    """With a budget of a few rows per cluster the sample has KMEANSPP_PER_CLUSTER rows per cluster;
    its seeds are data rows of positive weight and cover the BIRCH grid nearly as well as the
    seeding on every row."""
    X, _ = birch(36, points=60, seed=7)
    w = np.concatenate([np.ones(len(X) - 100), np.zeros(100)])
    full = [daskclust.KMeans(36, init="k-means++", max_iter=0, random_state=s).fit(X, sample_weight=w, client=client)
            for s in range(4)]
    monkeypatch.setattr(methods, "KMEANSPP_BUDGET", 1)
    assert methods.kmeanspp_rows(36, 2, len(X)) == methods.KMEANSPP_PER_CLUSTER * 36 < len(X)
    sampled = [daskclust.KMeans(36, init="k-means++", max_iter=0, random_state=s).fit(X, sample_weight=w,
                                                                                     client=client)
               for s in range(4)]
    rows = {tuple(r) for r in X[w > 0]}
    for model in sampled:
        assert all(tuple(c) in rows for c in model.centres_)
    inertia = np.mean([m.inertia_ for m in sampled]) / np.mean([m.inertia_ for m in full])
    assert inertia < 1.3, inertia


def test_sample_size_rule():
    """Every row within the budget; beyond, at least KMEANSPP_PER_CLUSTER rows per cluster and C rows;
    never more values than KMEANSPP_MAX_VALUES (but C rows)."""
    assert methods.kmeanspp_rows(260, 16, 16_000) == 16_000  # uci_letter at the realdata suites' C = 260
    assert methods.kmeanspp_rows(500, 16, 18_000) == methods.KMEANSPP_BUDGET // (500 * 8 * 16) < 18_000
    per_row = 4096 * (2 + int(math.log(4096))) * 2
    assert methods.kmeanspp_rows(4096, 2, 10**7) == max(16 * 4096, methods.KMEANSPP_BUDGET // per_row)
    assert methods.kmeanspp_rows(2, 512, 10**8) == methods.KMEANSPP_MAX_VALUES // 512
    assert methods.kmeanspp_rows(100_000, 512, 10**8) == 100_000
    assert methods.kmeanspp_rows(50, 3, 49) == 49


def test_the_first_pass_gives_the_data_variance(client):
    """SeedResult.data_variance: the mean over features of the weighted variance, merged over 13 chunks."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((1300, 3)) * [1.0, 5.0, 0.1] + [1e4, -3.0, 0.0]
    w = rng.uniform(0.0, 3.0, len(X))
    with Engine(as_chunked_data(X, sample_weight=w, chunk_rows=100), client) as engine:
        result = seed(engine, "k-means||", 4, seed=0)
    mean = w @ X / w.sum()
    np.testing.assert_allclose(result.data_variance, (w @ (X - mean) ** 2 / w.sum()).mean(), rtol=1e-10)


def test_kmeans_stops_by_scikit_learns_rule(client):
    """With ``shift_tol`` Lloyd (full search) stops after the first M-step that moves the centres by at
    most tol times the data's mean variance, where scikit-learn's KMeans(tol=...) stops: the same M-step,
    counted and returned by both."""
    X, _ = birch(25, points=40, seed=6)
    X = X * [1.0, 3.0]
    C, tol = 25, 1e-3
    init = X[np.random.default_rng(1).choice(len(X), C, replace=False)]
    from sklearn.cluster import KMeans as SKKMeans

    ref = SKKMeans(C, init=init, n_init=1, tol=tol, algorithm="lloyd").fit(X)
    assert 3 <= ref.n_iter_ < 100  # stopped by the shift, not by max_iter or unchanged labels
    family = FAMILIES["kmeans"]
    with Engine(as_chunked_data(X, chunk_rows=200), client) as engine:
        variance = seed(engine, init, C, seed=0).data_variance
        settings = EMSettings(C, 1, family, 300, 0.0, shift_tol=tol * variance)
        result = run_em(engine, LoopState(0, family.initial_params(init, 1.0, 0.0)), settings,
                        make_search("full", SearchConfig(C, 1)))
    assert result.converged and result.n_iter == ref.n_iter_  # both count the iteration that stopped
    np.testing.assert_allclose(result.params.means, ref.cluster_centers_, rtol=1e-9, atol=1e-9)

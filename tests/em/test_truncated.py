"""Truncated E-steps: every strategy keeps the free energy monotone, reduces to the exact
algorithms where it must, does not depend on the cluster layout, and finds the clusters."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans as SKKMeans

import daskclust
from daskclust.cli.demo import recovered_fraction

from conftest import assert_non_decreasing, assert_same_model, birch, blobs
from reference import gmm_em

STRATEGIES = ["full", "exhaustive", "estimated", "sampled"]


def model(kind, C, search, **kw):
    if kind == "kmeans":
        return daskclust.KMeans(C, search=search, **kw)
    return daskclust.GaussianMixture(C, covariance_type="isotropic", search=search, n_truncated=3,
                                     init_params="seeding", **kw)


@pytest.mark.parametrize("search", STRATEGIES)
@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
@pytest.mark.parametrize("data", ["birch", "blobs"])
@pytest.mark.parametrize("variant", ["explore+weights", "no-explore"])
def test_free_energy_never_decreases(client, search, kind, data, variant):
    X, _ = birch(64, points=40, seed=21) if data == "birch" else blobs(2000, 6, 40, seed=21)
    C = 64 if data == "birch" else 40
    weighted = variant == "explore+weights"
    w = np.random.default_rng(5).uniform(0.1, 3.0, len(X)) if weighted else None
    fitted = model(kind, C, search, init="afkmc2", random_state=2, tol=0, max_iter=20, n_neighbors=3,
                   n_explore=1 if weighted else 0, n_init_esteps=2).fit(X, sample_weight=w, client=client)
    assert len(fitted.history_) > 5
    assert_non_decreasing([row["free_energy"] for row in fitted.history_])


def test_gmm_full_search_with_all_components_is_exact_em(client):
    X, _ = birch(9, points=40, seed=22)
    init = X[:9] + 0.3
    ours = daskclust.GaussianMixture(9, covariance_type="isotropic", n_truncated=9, search="full", init=init,
                                     init_params="seeding", tol=0, max_iter=6, reg_covar=0,
                                     n_init_esteps=0).fit(X, client=client)
    rows, mu = gmm_em(X, init, 6)
    np.testing.assert_allclose([r["free_energy"] for r in ours.history_], [r[0] for r in rows], rtol=1e-8)
    np.testing.assert_allclose(ours.means_, mu, rtol=1e-8)


def test_gmm_full_search_with_one_component_is_lloyd(client):
    X, _ = birch(25, points=40, seed=23)
    init = X[:25]
    ours = daskclust.GaussianMixture(25, covariance_type="isotropic", n_truncated=1, search="full", init=init,
                                     init_params="seeding", tol=0, max_iter=5, reg_covar=0,
                                     n_init_esteps=0).fit(X, client=client)
    ref = SKKMeans(25, init=init, n_init=1, tol=0, max_iter=5, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(ours.means_, ref.cluster_centers_, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_exhaustive_with_every_cluster_as_neighbour_equals_full(client, kind):
    X, _ = blobs(1500, 4, 20, seed=24)
    common = dict(init="random", random_state=4, tol=0, max_iter=12, n_explore=0, n_init_esteps=1)
    full = model(kind, 20, "full", **common).fit(X, client=client)
    exhaustive = model(kind, 20, "exhaustive", n_neighbors=20, **common).fit(X, client=client)
    assert_same_model(full, exhaustive, rtol=1e-10)


@pytest.mark.parametrize("search", STRATEGIES)
@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_same_model_on_one_and_two_workers(client, client_one_worker, search, kind):
    X, _ = birch(49, points=40, seed=25)
    est = model(kind, 49, search, random_state=6, tol=0, max_iter=10, chunk_rows=130)
    assert_same_model(clone(est).fit(X, client=client), clone(est).fit(X, client=client_one_worker))


@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_recovers_the_birch_grid(client, kind):
    """var-k-means-S / var-GMM-S with their defaults (k-means|| seeds) find >= 95% of the
    true centres of the 10 x 10 BIRCH grid, median over 5 seeds. From AFK-MC2 seeds
    (m = 5) the median is 82-84% with any search, full included: the seeding decides,
    see docs/benchmarks.md."""
    X, centres = birch(100, points=100, seed=26)
    fractions = []
    for seed in range(5):
        est = daskclust.KMeans(100, random_state=seed) if kind == "kmeans" else \
            daskclust.GaussianMixture(100, covariance_type="isotropic", random_state=seed)
        fitted = est.fit(X, client=client)
        fractions.append(recovered_fraction(centres, fitted.centres_)[0])
    assert np.median(fractions) >= 0.95, fractions


@pytest.mark.parametrize("kind", ["kmeans", "gmm"])
def test_truncation_loses_nothing_from_afkmc2_seeds(client, kind):
    """From AFK-MC2 seeds (m = 5) the sublinear search recovers as many true centres of
    the 10 x 10 BIRCH grid as the exact algorithm (Lloyd, or EM over all components)
    from the same seeds, median over 5 seeds: what the AFK-MC2 seeds miss, no
    search finds again (the issue's 95 % from AFK-MC2 is out of reach for both)."""
    X, centres = birch(100, points=100, seed=26)
    medians = {}
    for search in ("estimated", "full"):
        fractions = []
        for seed in range(5):
            if kind == "kmeans":
                est = daskclust.KMeans(100, search=search, init="afkmc2", random_state=seed)
            else:
                est = daskclust.GaussianMixture(100, covariance_type="isotropic", search=search, init="afkmc2", random_state=seed,
                                                n_truncated=5 if search == "estimated" else 100)
            fractions.append(recovered_fraction(centres, est.fit(X, client=client).centres_)[0])
        medians[search] = np.median(fractions)
    assert medians["estimated"] >= medians["full"] - 0.02, medians


def test_truncated_search_evaluates_far_fewer_distances(client):
    X, _ = birch(400, points=30, seed=27)
    fitted = daskclust.KMeans(400, random_state=0).fit(X, client=client)
    *speedups, last = [row["distance_speedup"] for row in fitted.history_]
    # iteration 0 also pays the seeds' exact neighbours, C (C - 1) centre distances
    assert len(speedups) >= 2 and speedups[0] < min(speedups[1:])
    assert min(speedups[1:]) > 400 / 12  # G + explore = 11 candidates (fewer where neighbourhoods overlap)
    assert last > 1  # the last row also counts the exact-inertia pass, which the ball tree prunes

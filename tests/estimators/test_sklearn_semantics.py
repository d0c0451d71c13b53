"""scikit-learn's semantics of the parameters and outputs a user of its KMeans and GaussianMixture
relies on, each against scikit-learn itself where it computes the same thing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse
import sklearn.exceptions
from sklearn.mixture import GaussianMixture as SKGaussianMixture

import daskclust
from daskclust.errors import ConvergenceWarning
from daskclust.models.inference import SCORE_TOLERANCE

from conftest import blobs


@pytest.fixture(scope="module")
def X():
    return blobs(600, 3, 5, seed=7)[0]


def as_sklearn(model):
    """scikit-learn's GaussianMixture holding ``model``'s parameters."""
    sk = SKGaussianMixture(model.n_components, covariance_type=model.covariance_type)
    sk.weights_, sk.means_, sk.covariances_ = model.weights_, model.means_, model.covariances_
    sk.precisions_cholesky_, sk.precisions_ = model.precisions_cholesky_, model.precisions_
    return sk


def test_the_default_covariance_type_is_scikit_learns():
    assert daskclust.GaussianMixture().covariance_type == SKGaussianMixture().covariance_type == "full"


def test_a_mixture_stopped_by_max_iter_warns_as_scikit_learns(client, X):
    assert issubclass(ConvergenceWarning, sklearn.exceptions.ConvergenceWarning)
    with pytest.warns(sklearn.exceptions.ConvergenceWarning, match="did not converge"):
        model = daskclust.GaussianMixture(5, max_iter=1, tol=0, random_state=0).fit(X, client=client)
    assert not model.converged_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        daskclust.GaussianMixture(5, random_state=0).fit(X, client=client)  # converges: no warning


def test_lower_bounds_are_every_e_step_of_the_run(client, X):
    model = daskclust.GaussianMixture(5, covariance_type="diag", random_state=0).fit(X, client=client)
    assert model.lower_bounds_ == [row["free_energy"] for row in model.history_]
    assert model.lower_bounds_[-1] == model.lower_bound_
    assert np.all(np.diff(model.lower_bounds_) >= -1e-9)


@pytest.mark.parametrize("cov_type", ["full", "diag", "spherical", "tied"])
def test_predict_proba_is_the_whole_exact_posterior_by_default(client, X, cov_type):
    model = daskclust.GaussianMixture(5, covariance_type=cov_type, n_truncated=2, random_state=0).fit(X, client=client)
    proba = model.predict_proba(X)
    assert isinstance(proba, np.ndarray) and proba.shape == (len(X), 5)
    np.testing.assert_allclose(proba, as_sklearn(model).predict_proba(X), rtol=0, atol=1e-9)
    top = model.predict_proba(X, top_k=2)
    assert scipy.sparse.issparse(top) and top.getnnz(axis=1).max() == 2
    kept = top.toarray() > 0
    np.testing.assert_allclose(top.toarray()[kept], proba[kept], rtol=0, atol=SCORE_TOLERANCE)  # its normaliser
    with pytest.raises(daskclust.errors.InvalidParameterError, match="top_k"):
        model.predict_proba(X, top_k=6)


def test_warm_start_continues_from_the_fitted_model(client, X):
    model = daskclust.GaussianMixture(5, covariance_type="diag", warm_start=True, max_iter=1, tol=0, random_state=0,
                                      n_truncated=None, search="full")
    bounds = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for _ in range(4):
            model.fit(X, client=client)
            bounds.append(model.lower_bound_)
    assert np.all(np.diff(bounds) >= -1e-9) and bounds[-1] > bounds[0]  # each fit goes on where the last ended
    again = daskclust.GaussianMixture(5, covariance_type="diag", warm_start=True, max_iter=0, random_state=5,
                                      n_truncated=None, search="full")
    again.set_params(max_iter=1, tol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = again.fit(X, client=client).means_.copy()
        again.set_params(max_iter=0, random_state=9)  # another seed: a warm start does not seed again
        np.testing.assert_allclose(again.fit(X, client=client).means_, first, rtol=0, atol=1e-12)


@pytest.mark.parametrize("init_params", ["k-means++", "random_from_data"])
def test_one_row_starts_are_scikit_learns(client, X, init_params):
    """scikit-learn's M-step on one row per component: distinct rows of X as means, equal weights, and
    covariances reg_covar (max_iter=0 returns the start)."""
    model = daskclust.GaussianMixture(5, covariance_type="diag", init_params=init_params, max_iter=0, reg_covar=1e-3,
                                      random_state=3, n_truncated=None).fit(X, client=client)
    rows = {tuple(row) for row in X}
    assert all(tuple(mean) in rows for mean in model.means_) and len({tuple(m) for m in model.means_}) == 5
    np.testing.assert_allclose(model.weights_, 0.2)
    np.testing.assert_allclose(model.covariances_, 1e-3)


def test_kmeans_accepts_scikit_learns_parameters(client, X):
    for algorithm in ("lloyd", "elkan"):
        model = daskclust.KMeans(5, algorithm=algorithm, copy_x=False, random_state=0).fit(X, client=client)
        assert model.cluster_centers_.shape == (5, 3)
    with pytest.raises(daskclust.errors.InvalidParameterError, match="algorithm"):
        daskclust.KMeans(5, algorithm="auto").fit(X, client=client)


def test_kmeans_callable_init_is_called_as_scikit_learns(client, X):
    calls = []

    def first_rows(data, n_clusters, random_state):
        calls.append((data is X, n_clusters, type(random_state)))
        return data[:n_clusters]

    model = daskclust.KMeans(5, init=first_rows, max_iter=0, random_state=0).fit(X, client=client)
    assert calls == [(True, 5, np.random.RandomState)]
    np.testing.assert_array_equal(model.cluster_centers_, X[:5])


def test_kmeans_array_init_runs_once_with_a_warning(client, X):
    with pytest.warns(RuntimeWarning, match="performing only one init"):
        model = daskclust.KMeans(5, init=X[:5], n_init=3, random_state=0).fit(X, client=client)
    assert model.cluster_centers_.shape == (5, 3)


@pytest.mark.parametrize("init, n_init, runs", [("random", "auto", 10), ("k-means++", "auto", 1),
                                               ("k-means||", "auto", 1), ("random", 2, 2)])
def test_kmeans_n_init_auto_runs_as_scikit_learns(client, X, init, n_init, runs):
    """n_init="auto": 10 runs for init="random", one for the others; counted by the fits' first E-steps."""
    first_esteps = []
    daskclust.KMeans(5, init=init, n_init=n_init, random_state=0, max_iter=2,
                     callback=lambda row: first_esteps.append(row["iteration"] == 0)).fit(X, client=client)
    assert sum(first_esteps) == runs


def test_kmeans_elkan_with_one_cluster_warns_as_scikit_learns(client, X):
    with pytest.warns(RuntimeWarning, match="algorithm='elkan' doesn't make sense for a single cluster"):
        daskclust.KMeans(1, algorithm="elkan", random_state=0).fit(X, client=client)


def test_kmeans_n_iter_counts_the_iteration_that_finds_labels_unchanged(client):
    """scikit-learn's count on its own test data (test_kmeans_results): one update, then unchanged labels."""
    X = np.array([[0, 0], [0.5, 0], [0.5, 1], [1, 1]], dtype=np.float64)
    model = daskclust.KMeans(2, init=np.array([[0, 0], [1, 1]], dtype=np.float64), search="full").fit(X, client=client)
    assert model.n_iter_ == 2 and model.converged_
    np.testing.assert_allclose(model.cluster_centers_, [[0.25, 0], [0.75, 1]])


def test_kmeans_centres_are_assignable_and_feature_names_are_scikit_learns(client, X):
    model = daskclust.KMeans(5, random_state=0).fit(X, client=client)
    model.cluster_centers_ = X[:5]
    np.testing.assert_array_equal(model.predict(X[:5]), np.arange(5))
    assert list(model.get_feature_names_out()) == [f"kmeans{i}" for i in range(5)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_attributes_keep_the_datas_float_dtype(client, X, dtype):
    km = daskclust.KMeans(5, random_state=0).fit(X.astype(dtype), client=client)
    assert km.cluster_centers_.dtype == dtype
    gm = daskclust.GaussianMixture(5, random_state=0).fit(X.astype(dtype), client=client)
    for name in ("weights_", "means_", "covariances_", "precisions_", "precisions_cholesky_"):
        assert getattr(gm, name).dtype == dtype, name
    np.testing.assert_allclose(gm.predict_proba(X[:50]), as_sklearn(gm).predict_proba(X[:50]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_kmeans_fits_sparse_input_as_its_dense_rows(client, X, fmt):
    """scipy.sparse in memory is densified chunk by chunk: the fit and every output equal the dense ones."""
    sparse = scipy.sparse.random(600, 8, density=0.3, format=fmt, random_state=1) * 10
    dense = sparse.toarray()
    a = daskclust.KMeans(4, random_state=0, chunk_rows=128).fit(sparse, client=client)
    b = daskclust.KMeans(4, random_state=0, chunk_rows=128).fit(dense, client=client)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.transform(sparse), b.transform(dense))


def test_gaussian_mixture_refuses_sparse_input_as_scikit_learns(client, X):
    with pytest.raises(daskclust.errors.InvalidDataError, match="sparse"):
        daskclust.GaussianMixture(3).fit(scipy.sparse.csr_matrix(X), client=client)


def test_kmeans_moves_empty_clusters_to_the_farthest_rows_across_chunks(client):
    """Two centres start far from every row: each empty cluster takes one of the farthest rows (weighted
    rows, several chunks), so every cluster ends with rows, and the free energy never decreases."""
    X, _ = blobs(400, 2, 4, seed=3)
    init = np.vstack([X[:2], X[:2].mean(0) + 1e3, X[:2].mean(0) - 1e3])
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    model = daskclust.KMeans(4, init=init, chunk_rows=50, random_state=0).fit(X, sample_weight=w, client=client)
    assert np.all(model.cluster_sizes_ > 0) and len(np.unique(model.labels_)) == 4
    F = np.array([row["free_energy"] for row in model.history_])
    assert np.all(np.diff(F) >= -1e-12 * np.abs(F[1:]))


def test_kmeans_inertia_is_the_exact_cost_of_the_final_centres(client):
    """Under the default (truncated) search inertia_ is sum_n w_n min_c ||x_n - mu_c||^2 of the final
    centres, computed here with numpy."""
    X, _ = blobs(3000, 4, 50, seed=5)
    model = daskclust.KMeans(50, random_state=0).fit(X, client=client)
    d2 = ((X[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1).min(1)
    assert model.inertia_ == pytest.approx(d2.sum(), rel=1e-9)


@pytest.mark.parametrize("max_iter", [2, 300])
def test_kmeans_inertia_pass_is_counted_in_the_last_history_row(client, max_iter):
    """Lloyd (full search, tol=0): stopped by max_iter=2 the final centres' inertia takes one more pass,
    whose distances the last row adds to the E-step's N C; at the fixed point (max_iter=300) that E-step
    already evaluated it and the row holds N C alone. Either way inertia_ is the exact cost. Random seeds:
    Lloyd from them is still moving after two iterations."""
    X, _ = blobs(1500, 3, 12, seed=4)
    model = daskclust.KMeans(12, init="random", search="full", tol=0, max_iter=max_iter, random_state=1).fit(
        X, client=client)
    d2 = ((X[:, None, :] - model.cluster_centers_[None]) ** 2).sum(-1).min(1)
    assert model.inertia_ == pytest.approx(d2.sum(), rel=1e-9)
    last = model.history_[-1]
    fixed_point = last["n_changed"] == 0
    assert fixed_point == (max_iter == 300)
    if fixed_point:
        assert last["n_distances_points"] == len(X) * 12
    else:
        assert len(X) * 12 < last["n_distances_points"] <= 2 * len(X) * 12


def test_kmeans_tol_is_scikit_learns_centre_shift_rule(client):
    """tol=1e-3 with Lloyd (full search) from the same centres: scikit-learn's iteration count and centres."""
    from sklearn.cluster import KMeans as SKKMeans

    X, _ = blobs(2000, 3, 20, seed=8)
    init = X[np.random.default_rng(2).choice(len(X), 20, replace=False)]
    ours = daskclust.KMeans(20, init=init, tol=1e-3, search="full").fit(X, client=client)
    ref = SKKMeans(20, init=init, n_init=1, tol=1e-3, algorithm="lloyd").fit(X)
    assert ours.n_iter_ == ref.n_iter_ < 300
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-9, atol=1e-9)

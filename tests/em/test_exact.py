"""Full search reproduces the exact algorithms: Lloyd's k-means and EM for the isotropic GMM."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from sklearn.cluster import KMeans as SKKMeans

import daskclust

from conftest import birch
from reference import gmm_em


def as_input(kind, X, tmp_path):
    if kind == "numpy":
        return X
    if kind == "dask":
        return da.from_array(X, chunks=(700, 2))
    if kind == "xarray":
        return xr.DataArray(X, dims=("sample", "feature"))
    store = str(tmp_path / "X.zarr")
    z = zarr.create_array(store, shape=X.shape, chunks=(500, 2), dtype=X.dtype)
    z[:] = X
    return z if kind == "zarr" else store


@pytest.mark.parametrize("kind", ["numpy", "dask", "zarr", "path", "xarray"])
def test_kmeans_full_search_equals_sklearn_lloyd(client, tmp_path, kind):
    X, _ = birch(49, points=80, seed=1)
    init = X[np.random.default_rng(0).choice(len(X), 49, replace=False)]
    ours = daskclust.KMeans(49, search="full", init=init, tol=0, max_iter=300, n_init_esteps=0).fit(as_input(kind, X, tmp_path), client=client)
    ref = SKKMeans(49, init=init, n_init=1, tol=0, max_iter=300, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-6)
    assert ours.converged_


@pytest.mark.parametrize("n_iter", [1, 4])
def test_kmeans_fixed_iterations_equal_sklearn(client, n_iter):
    X, _ = birch(25, points=100, seed=2)
    init = X[:25]
    ours = daskclust.KMeans(25, search="full", init=init, tol=0, max_iter=n_iter, n_init_esteps=0).fit(X, client=client)
    ref = SKKMeans(25, init=init, n_init=1, tol=0, max_iter=n_iter, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-6)


def test_gmm_exact_em_equals_numpy_reference_iteration_by_iteration(client):
    X, _ = birch(16, points=50, seed=4)
    init = X[:16] + 0.5
    n_iter = 12
    model = daskclust.GaussianMixture(16, covariance_type="isotropic", n_truncated=None, init=init, init_params="seeding",
                                      tol=0, max_iter=n_iter, reg_covar=0.0, n_init_esteps=0).fit(X, client=client)
    rows, mu = gmm_em(X, init, n_iter)
    assert len(model.history_) == n_iter + 1
    for row, (F, sigma2, qe) in zip(model.history_, rows):
        np.testing.assert_allclose(row["free_energy"], F, rtol=1e-8)
        np.testing.assert_allclose(row["sigma2"], sigma2, rtol=1e-8)
        np.testing.assert_allclose(row["quantization_error"], qe, rtol=1e-8)
    np.testing.assert_allclose(model.means_, mu, rtol=1e-8)


def test_gmm_reg_covar_is_added_to_the_variance(client):
    X, _ = birch(9, points=40, seed=5)
    init = X[:9]
    model = daskclust.GaussianMixture(9, covariance_type="isotropic", n_truncated=None, init=init, init_params="seeding",
                                      tol=0, max_iter=3, reg_covar=0.25, n_init_esteps=0).fit(X, client=client)
    rows, mu = gmm_em(X, init, 3, reg=0.25)
    np.testing.assert_allclose([r["sigma2"] for r in model.history_], [r[1] for r in rows], rtol=1e-8)
    np.testing.assert_allclose(model.means_, mu, rtol=1e-8)

"""Degenerate data and parameters: fewer distinct points than clusters, sigma^2 = 0, values whose
squared distances leave float64, NaN parameters, dask arrays of unknown chunk sizes (issue 8)."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import daskclust
from daskclust.errors import ConvergenceWarning, InvalidDataError, InvalidParameterError
from daskclust.kernels.validation import max_abs, scale_bounds

INITS = ["k-means||", "afkmc2", "k-means++", "random"]
FEWER = "found smaller than n_clusters"


def assert_finite(model):
    """Centres, variance, inertia and every number of the history are finite."""
    assert np.isfinite(model.centres_).all()
    assert np.isfinite(model.sigma2_) and np.isfinite(model.inertia_)
    for row in model.history_:
        assert all(np.isfinite(value) for key, value in row.items() if key != "data"), row


def one_hot(repeats: int = 50) -> np.ndarray:
    """8 distinct rows, each repeated."""
    return np.tile(np.eye(8), (repeats, 1))


@pytest.mark.parametrize("init", INITS)
def test_identical_rows_fit_with_a_warning(client, init):
    X = np.ones((5000, 3)) if init == "k-means||" else np.ones((500, 3))
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(1\) found smaller than n_clusters \(8\)\. Possibly due to duplicate points in X: the data have fewer"):
        model = daskclust.KMeans(8, init=init, random_state=0).fit(X, client=client)
    assert_finite(model)
    assert (model.centres_ == 1.0).all()
    assert model.inertia_ == 0.0 and model.sigma2_ == 0.0


@pytest.mark.parametrize("search", ["full", "exhaustive", "sampled"])
def test_all_zero_data_fit_with_every_search(client, search):
    with pytest.warns(ConvergenceWarning, match=FEWER):
        model = daskclust.KMeans(4, search=search, random_state=0).fit(np.zeros((200, 2)), client=client)
    assert_finite(model)
    assert (model.centres_ == 0.0).all() and model.inertia_ == 0.0


@pytest.mark.parametrize("init", INITS)
def test_fewer_distinct_rows_than_clusters_is_deterministic(client, init):
    X = one_hot()
    models = []
    for _ in range(2):
        with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(8\) found smaller than n_clusters \(16\)"):
            models.append(daskclust.KMeans(16, init=init, n_init=1, random_state=3, max_iter=5).fit(X, client=client))
    assert_finite(models[0])
    np.testing.assert_array_equal(models[0].centres_, models[1].centres_)
    if init != "random":  # k-means++-like seedings find every distinct row (random draws rows, which repeat)
        np.testing.assert_array_equal(np.unique(models[0].centres_, axis=0), np.unique(X, axis=0))
        assert models[0].inertia_ == 0.0


@pytest.mark.parametrize("init", INITS)
def test_as_many_distinct_rows_as_clusters_fit_exactly_without_warning(client, init):
    X = np.random.default_rng(0).standard_normal((6, 3))
    model = daskclust.KMeans(6, init=init, random_state=1).fit(X, client=client)  # a warning would fail the test
    assert_finite(model)
    assert model.inertia_ == 0.0 and model.sigma2_ == 0.0
    np.testing.assert_array_equal(np.unique(model.centres_, axis=0), np.unique(X, axis=0))


@pytest.mark.parametrize("n_positive", [1, 3])
def test_fewer_positive_weights_than_clusters(client, n_positive):
    X = np.random.default_rng(1).standard_normal((100, 2))
    w = np.zeros(100)
    w[10:10 + n_positive] = 1.0
    with pytest.warns(ConvergenceWarning, match=rf"Number of distinct clusters \({n_positive}\) found smaller than n_clusters \(4\)"):
        model = daskclust.KMeans(4, random_state=0).fit(X, sample_weight=w, client=client)
    assert_finite(model)
    assert model.inertia_ == 0.0
    np.testing.assert_array_equal(np.unique(model.centres_, axis=0), np.unique(X[10:10 + n_positive], axis=0))


@pytest.mark.parametrize("n_truncated", [2, None])
def test_gmm_without_reg_covar_on_constant_data(client, n_truncated):
    X = np.full((300, 3), 0.5)
    with pytest.warns(ConvergenceWarning, match=FEWER):
        model = daskclust.GaussianMixture(4, covariance_type="isotropic", n_truncated=n_truncated, reg_covar=0.0, random_state=0).fit(
            X, client=client)
    assert_finite(model)
    assert model.sigma2_ > 0  # the floored variance the model used, so that its density is defined
    assert (model.means_ == 0.5).all()


def test_gmm_zero_weight_rows_far_from_collapsed_components(client):
    """Positive weight only on rows at 0: sigma^2 = 0 and centres at 0, so the variance floor is
    the smallest normal number and the far zero-weight rows have log-sum-exp -inf (not 0 * -inf)."""
    X = np.vstack([np.zeros((20, 2)), np.full((20, 2), 1e6)])
    w = np.r_[np.ones(20), np.zeros(20)]
    with pytest.warns(ConvergenceWarning, match=FEWER):
        model = daskclust.GaussianMixture(2, covariance_type="isotropic", n_truncated=None, reg_covar=0.0, random_state=0).fit(
            X, sample_weight=w, client=client)
    assert_finite(model)


@pytest.mark.parametrize("scale, match", [
    (1e200, r"too large to cluster: max \|x\| = .*e\+200.*overflow float64; rescale"),
    (1e-170, r"too small to cluster: max \|x\| = .*e-170.*underflows float64; rescale"),
])
def test_values_whose_squared_distances_leave_float64_are_refused(client, scale, match):
    X = np.random.default_rng(0).standard_normal((200, 3)) * scale
    with pytest.raises(InvalidDataError, match=match):
        daskclust.KMeans(3).fit(X, client=client)


def test_tiny_values_beside_normal_ones_are_accepted(client):
    X = np.random.default_rng(0).standard_normal((200, 2))
    X[:100] *= 1e-170  # a chunk of tiny values alone would underflow; beside the others it is fine
    model = daskclust.KMeans(2, chunk_rows=50, random_state=0).fit(X, client=client)
    assert_finite(model)


def test_scale_kernels():
    X = np.array([[1.0, -3.0], [2.0, 0.5]])
    assert max_abs(X) == 3.0 and max_abs(X.astype(np.float32)) == 3.0 and max_abs(np.zeros((0, 2))) == 0.0
    low, high = scale_bounds(np.float64, 3)  # squared distances of 3 features are at most 4 * 3 max|x|^2
    assert 12 * (0.99 * high) ** 2 < np.finfo(np.float64).max and 12 * (1.01 * high) ** 2 == np.inf
    assert 12 * (1.01 * low) ** 2 > np.finfo(np.float64).tiny > 12 * (0.99 * low) ** 2


@pytest.mark.parametrize("params, name", [
    (dict(reg_covar=np.nan), "reg_covar"),
    (dict(reg_covar=np.inf), "reg_covar"),
    (dict(tol=float("nan")), "tol"),
    (dict(tol=np.inf), "tol"),
    (dict(oversampling_factor=np.nan), "oversampling_factor"),
])
def test_nonfinite_parameters_are_refused(params, name):
    with pytest.raises(InvalidParameterError, match=rf"{name} must be a finite number, got (np\.float64\()?(nan|inf)"):
        daskclust.GaussianMixture(2, covariance_type="isotropic", **params).fit(np.zeros((10, 2)), client=object())  # before the client is used


def test_dask_input_with_unknown_chunk_sizes_is_refused_before_any_work():
    x = da.from_array(np.random.default_rng(0).standard_normal((100, 3)), chunks=(20, 3))
    with pytest.raises(InvalidDataError, match=r"row chunk sizes of X are unknown.*X\.compute_chunk_sizes\(\)"):
        daskclust.KMeans(2).fit(x[x[:, 0] > 0], client=object())
    w = da.ones(100, chunks=20)
    with pytest.raises(InvalidDataError, match=r"row chunk sizes of sample_weight are unknown"):
        daskclust.KMeans(2).fit(x, sample_weight=w[w > 0], client=object())

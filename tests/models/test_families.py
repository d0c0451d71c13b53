"""The mixture families with learned weights (spherical, diag, full) on the model seam: exact EM
against numpy and scikit-learn, monotone free energy under every search, one or two workers,
resume, inference, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse
from sklearn.exceptions import ConvergenceWarning as SKConvergenceWarning
from sklearn.mixture import GaussianMixture as SKGaussianMixture

import daskclust
from daskclust.errors import (
    ConvergenceError,
    ConvergenceWarning,
    InvalidDataError,
    InvalidParameterError,
    OutputRefusedError,
)
from daskclust.kernels.rng import stream_key, uniform
from daskclust.models import FAMILIES
from daskclust.models.inference import SCORE_TOLERANCE
from daskclust.names import STREAM_RANDOM_START
from daskclust.persistence import checkpoint

from conftest import Interrupt, interrupt_at
from reference import assert_same_mixture, gaussian_em_step, mixture_data

FAMILY_NAMES = ("spherical", "diag", "full")
SEARCHES = ("full", "exhaustive", "estimated", "sampled")


def initial_parameters(X, C, cov_type, seed=1):
    """Distinct initial weights, means and precisions (scikit-learn's layouts)."""
    rng = np.random.default_rng(seed)
    D = X.shape[1]
    weights = rng.dirichlet(np.full(C, 5.0))
    means = X[rng.choice(len(X), C, replace=False)] + 0.1
    var = rng.uniform(2.0, 6.0, C)
    if cov_type == "spherical":
        cov = var
    elif cov_type == "diag":
        cov = var[:, None] * rng.uniform(0.5, 1.5, (C, D))
    else:
        B = rng.standard_normal((C, D, D)) * 0.5
        cov = var[:, None, None] * np.eye(D) + B @ B.transpose(0, 2, 1)
    return weights, means, cov


def precisions(cov, cov_type):
    return np.linalg.inv(cov) if cov_type == "full" else 1.0 / cov


def exact_model(cov_type, C, weights, means, cov, n_iter, reg):
    return daskclust.GaussianMixture(
        C, covariance_type=cov_type, n_truncated=None, search="full", weights_init=weights, means_init=means,
        precisions_init=precisions(cov, cov_type), reg_covar=reg, max_iter=n_iter, tol=0, random_state=0)


@pytest.fixture(scope="module")
def X():
    return mixture_data()


@pytest.mark.parametrize("cov_type", FAMILY_NAMES)
@pytest.mark.parametrize("weighted", [False, True])
def test_exact_em_equals_numpy_reference_iteration_by_iteration(client, X, cov_type, weighted):
    C, n_iter, reg = 5, 4, 1e-3
    w = np.random.default_rng(2).uniform(0.2, 3.0, len(X)) if weighted else np.ones(len(X))
    weights, means, cov = initial_parameters(X, C, cov_type)
    model = exact_model(cov_type, C, weights, means, cov, n_iter, reg).fit(
        X, sample_weight=w if weighted else None, client=client)
    free_energies = []
    for _ in range(n_iter):
        ll, weights, means, cov = gaussian_em_step(X, w, weights, means, cov, cov_type, reg)
        free_energies.append(ll)
    free_energies.append(gaussian_em_step(X, w, weights, means, cov, cov_type, reg)[0])
    np.testing.assert_allclose(model.weights_, weights, rtol=1e-8)
    np.testing.assert_allclose(model.means_, means, rtol=1e-8)
    np.testing.assert_allclose(model.covariances_, cov, rtol=1e-8)
    np.testing.assert_allclose([r["free_energy"] for r in model.history_], free_energies, rtol=1e-8)


@pytest.mark.parametrize("cov_type, learn", [("isotropic", True), ("spherical", False), ("full", False)])
def test_weights_learned_or_kept_on_request(client, X, cov_type, learn):
    """isotropic with learned weights, the others with their initial weights kept: exact EM equals numpy."""
    C, n_iter, reg = 5, 4, 1e-3
    w = np.ones(len(X))
    weights, means, cov = initial_parameters(X, C, "spherical" if cov_type == "isotropic" else cov_type)
    if cov_type == "isotropic":
        cov = np.asarray(3.0)
    model = exact_model(cov_type, C, weights, means, cov, n_iter, reg).set_params(learn_weights=learn).fit(
        X, client=client)
    free_energies = []
    for _ in range(n_iter + 1):
        ll, new_weights, new_means, new_cov = gaussian_em_step(X, w, weights, means, cov, cov_type, reg, learn)
        free_energies.append(ll)
        if len(free_energies) <= n_iter:
            weights, means, cov = new_weights, new_means, new_cov
    np.testing.assert_allclose(model.weights_, weights, rtol=1e-8)
    np.testing.assert_allclose(model.means_, means, rtol=1e-8)
    np.testing.assert_allclose(model.sigma2_ if cov_type == "isotropic" else model.covariances_, cov, rtol=1e-8)
    np.testing.assert_allclose([r["free_energy"] for r in model.history_], free_energies, rtol=1e-8)


@pytest.mark.filterwarnings("ignore:Number of distinct clusters")  # a component may be dropped (weight 0)
@pytest.mark.parametrize("search", SEARCHES)
def test_isotropic_with_learned_weights_never_decreases(client, search):
    X = mixture_data(seed=6, n=1200, C=12)
    model = daskclust.GaussianMixture(12, covariance_type="isotropic", learn_weights=True, search=search,
                                      n_truncated=2, n_neighbors=4, init="random", random_state=7, tol=0,
                                      max_iter=12, chunk_rows=300).fit(X, client=client)
    F = np.array([r["free_energy"] for r in model.history_])
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:])), np.diff(F)
    assert not np.allclose(model.weights_, 1 / 12)


@pytest.mark.parametrize("cov_type", FAMILY_NAMES)
@pytest.mark.parametrize("n_iter", [1, 10])
def test_exact_em_matches_sklearn_from_the_same_initial_parameters(client, X, cov_type, n_iter):
    C, reg = 5, 1e-6
    weights, means, cov = initial_parameters(X, C, cov_type)
    ours = exact_model(cov_type, C, weights, means, cov, n_iter, reg).fit(X, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SKConvergenceWarning)
        sk = SKGaussianMixture(C, covariance_type=cov_type, weights_init=weights, means_init=means,
                               precisions_init=precisions(cov, cov_type), reg_covar=reg, max_iter=n_iter,
                               tol=0).fit(X)
    assert ours.n_iter_ == sk.n_iter_ == n_iter
    np.testing.assert_allclose(ours.weights_, sk.weights_, rtol=1e-6)
    np.testing.assert_allclose(ours.means_, sk.means_, rtol=1e-6)
    np.testing.assert_allclose(ours.covariances_, sk.covariances_, rtol=1e-6)
    np.testing.assert_allclose(ours.precisions_cholesky_, sk.precisions_cholesky_, rtol=1e-6)
    np.testing.assert_allclose(ours.precisions_, sk.precisions_, rtol=1e-6)
    # inference with the same parameters: scikit-learn's on ours
    np.testing.assert_allclose(ours.score_samples(X, exact=True), sk.score_samples(X), rtol=1e-8)
    np.testing.assert_allclose(ours.bic(X), sk.bic(X), rtol=1e-8)
    np.testing.assert_allclose(ours.aic(X), sk.aic(X), rtol=1e-8)
    assert (ours.predict(X) == sk.predict(X)).mean() > 0.99


@pytest.mark.parametrize("cov_type", FAMILY_NAMES)
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("init_params", ["kmeans", "seeding"])
def test_free_energy_never_decreases(client, cov_type, search, weighted, dtype, init_params):
    X = mixture_data(seed=3, n=1200, C=12).astype(dtype)
    w = np.random.default_rng(4).uniform(0.0, 2.0, len(X)) if weighted else None
    model = daskclust.GaussianMixture(12, covariance_type=cov_type, search=search, n_truncated=2, n_neighbors=4,
                                      init="random", init_params=init_params, random_state=7, tol=0, max_iter=12,
                                      chunk_rows=300)
    model.fit(X, sample_weight=w, client=client)
    F = np.array([r["free_energy"] for r in model.history_])
    assert np.all(np.isfinite(F)) and len(F) == 13
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:])), np.diff(F)
    assert F[-1] > F[0] + (0.05 if init_params == "seeding" else 0.0)  # it learns something


@pytest.mark.parametrize("cov_type", FAMILY_NAMES + ("tied",))
def test_same_model_on_one_and_two_workers_and_after_resume(client, client_one_worker, tmp_path, X, cov_type):
    def model(**kw):
        return daskclust.GaussianMixture(8, covariance_type=cov_type, n_truncated=2, random_state=5, tol=0,
                                         max_iter=8, chunk_rows=200, **kw)

    two = model().fit(X, client=client)
    one = model().fit(X, client=client_one_worker)
    assert_same_mixture(two, one)
    with pytest.raises(Interrupt):
        model(callback=interrupt_at(5)).fit(X, client=client, checkpoint=tmp_path / "run", checkpoint_every=2)
    assert checkpoint.list_checkpoints(str(tmp_path / "run"))[-1] == "ckpt-000004"
    resumed = model().fit(X, client=client, resume=tmp_path / "run")
    assert_same_mixture(two, resumed)


@pytest.mark.parametrize("cov_type", FAMILY_NAMES)
def test_save_and_load_keep_the_model(client, tmp_path, X, cov_type):
    model = daskclust.GaussianMixture(4, covariance_type=cov_type, random_state=0, max_iter=3).fit(X, client=client)
    model.save(tmp_path / "m.zarr")
    loaded = daskclust.load(tmp_path / "m.zarr")
    assert_same_mixture(model, loaded)
    assert loaded.lower_bound_ == model.lower_bound_
    with pytest.raises(OutputRefusedError):  # labels inside the model's store: refused, as for KMeans
        loaded.predict(X, output=tmp_path / "m.zarr" / "labels.zarr", inputs=[tmp_path / "m.zarr"])
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize("cov_type", ["isotropic", *FAMILY_NAMES])
def test_inference_outputs(client, X, cov_type):
    model = daskclust.GaussianMixture(6, covariance_type=cov_type, n_truncated=3, random_state=0).fit(X, client=client)
    proba = model.predict_proba(X, top_k=3)
    assert scipy.sparse.issparse(proba) and proba.shape == (len(X), 6)
    assert proba.getnnz(axis=1).max() <= 3
    assert np.all(np.asarray(proba.sum(axis=1)).ravel() <= 1.0 + 1e-12)  # the 3 largest posterior values
    labels = model.predict(X)
    assert np.array_equal(labels, np.asarray(proba.argmax(axis=1)).ravel())
    exact = model.score_samples(X, exact=True)
    found = model.score_samples(X)
    assert np.all(np.isfinite(exact)) and np.all(np.abs(found - exact) <= 1e-9 + 1e-12 * np.abs(exact))
    # by default the full posterior, dense, as scikit-learn's
    dense = model.predict_proba(X)
    assert isinstance(dense, np.ndarray) and dense.shape == (len(X), 6)
    np.testing.assert_allclose(dense.sum(1), 1.0, rtol=1e-12)
    top = proba.toarray() > 0  # normalised within SCORE_TOLERANCE, as the top-k search bounds it
    np.testing.assert_allclose(proba.toarray()[top], dense[top], rtol=0, atol=SCORE_TOLERANCE)
    import dask.array as da

    lazy = model.predict_proba(da.from_array(X, chunks=200))
    assert isinstance(lazy, da.Array) and lazy.shape == (len(X), 6)
    np.testing.assert_allclose(lazy.compute(), dense, rtol=1e-12)
    idx, val = model.predict_proba(da.from_array(X, chunks=200), top_k=3)
    assert idx.shape == (len(X), 3) and val.shape == (len(X), 3)
    np.testing.assert_array_equal(idx.compute()[:, 0], labels)
    Y, comp = model.sample(500, random_state=0)
    assert Y.shape == (500, X.shape[1]) and comp.shape == (500,)


def test_far_rows_do_not_underflow_to_nan(client, X):
    model = daskclust.GaussianMixture(4, covariance_type="full", random_state=0).fit(X, client=client)
    far = np.full((3, X.shape[1]), 1e6)
    assert np.all(np.isfinite(model.score_samples(far, exact=True)))
    assert np.all(model.predict_proba(far).sum(axis=1) > 0.999)


def test_component_that_loses_its_mass_is_dropped_and_the_free_energy_stays_monotone(client):
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (300, 2)), rng.normal(20, 1, (300, 2))])
    means = np.array([[0.0, 0.0], [20.0, 20.0], [1e4, 1e4]])  # the third is far from every row
    model = daskclust.GaussianMixture(3, covariance_type="diag", n_truncated=None, search="full", means_init=means,
                                      tol=0, max_iter=5, random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"Number of distinct clusters \(2\)"):
        model.fit(X, client=client)
    assert model.weights_[2] == 0.0
    np.testing.assert_array_equal(model.means_[2], means[2])
    assert np.all(model.predict(X) != 2)
    F = np.array([r["free_energy"] for r in model.history_])
    assert np.all(np.isfinite(F)) and np.all(np.diff(F) >= -1e-12)


@pytest.mark.parametrize("cov_type", ["diag", "full"])
def test_constant_feature_gives_no_nan(client, cov_type):
    X = mixture_data(seed=5, n=400, D=3, C=3)
    X[:, 1] = 7.0
    model = daskclust.GaussianMixture(3, covariance_type=cov_type, random_state=0).fit(X, client=client)
    assert np.all(np.isfinite(model.covariances_)) and np.all(np.isfinite(model.score_samples(X)))


def test_singular_full_covariance_without_reg_covar_is_a_clear_error(client):
    X = np.repeat(np.arange(40.0)[:, None], 2, axis=1)  # on a line: every covariance singular
    with pytest.raises(ConvergenceError, match="reg_covar"):
        daskclust.GaussianMixture(2, covariance_type="full", reg_covar=0.0, random_state=0).fit(X, client=client)


@pytest.mark.parametrize("params, match", [
    (dict(covariance_type="banded"), "covariance_type"),
    (dict(reg_covar=-1.0), "reg_covar"),
    (dict(weights_init=[0.5, 0.6]), r"The parameter 'weights' should be normalized"),
    (dict(covariance_type="diag", precisions_init=np.ones(2)), r"The parameter 'diag precision' should have the shape"),
])
def test_bad_parameters_are_refused_before_any_work(params, match):
    with pytest.raises(InvalidParameterError, match=match):
        daskclust.GaussianMixture(2, **params).fit(np.random.default_rng(0).normal(size=(20, 2)), client=object())


def test_more_truncated_than_components_keeps_them_all(client, X):
    a = daskclust.GaussianMixture(4, covariance_type="diag", n_truncated=9, random_state=0, max_iter=3)
    b = daskclust.GaussianMixture(4, covariance_type="diag", n_truncated=None, random_state=0, max_iter=3)
    assert_same_mixture(a.fit(X, client=client), b.fit(X, client=client))


def test_all_zero_weights_are_refused(client, X):
    with pytest.raises(InvalidDataError, match="sample_weight sums to zero"):
        daskclust.GaussianMixture(2).fit(X, sample_weight=np.zeros(len(X)), client=client)


def test_every_family_is_registered():
    assert set(FAMILIES) == {"kmeans", "isotropic", "spherical", "diag", "full", "tied"}


@pytest.mark.parametrize("cov_type", ["isotropic", *FAMILY_NAMES])
def test_kmeans_start_is_each_k_means_cluster(client, X, cov_type):
    """init_params="kmeans": each component starts as its cluster of KMeans (same seed, same tol): its share
    of the rows, its mean and its covariance + reg_covar (scikit-learn's start). With C = 5 <= the
    neighbourhood size every row's k-means cluster is its nearest centre, so the clusters are KMeans'
    labels (KMeans seeded as the mixture is)."""
    C, reg = 5, 1e-3
    km = daskclust.KMeans(C, init="k-means++", random_state=3).fit(X, client=client)
    start = daskclust.GaussianMixture(C, covariance_type=cov_type, random_state=3, reg_covar=reg, max_iter=0,
                                      init="k-means++", n_truncated=None).fit(X, client=client)
    labels = km.labels_
    np.testing.assert_allclose(start.means_, km.cluster_centers_, rtol=0, atol=1e-10)
    diff = X - km.cluster_centers_[labels]
    if cov_type == "isotropic":
        np.testing.assert_allclose(start.covariances_, (diff ** 2).sum() / X.size + reg, rtol=1e-10)
        return
    np.testing.assert_allclose(start.weights_, np.bincount(labels, minlength=C) / len(X), rtol=1e-12)
    for c in range(C):
        d = diff[labels == c]
        expected = {"spherical": (d ** 2).mean() + reg, "diag": (d ** 2).mean(0) + reg,
                    "full": d.T @ d / len(d) + reg * np.eye(X.shape[1])}[cov_type]
        np.testing.assert_allclose(start.covariances_[c], expected, rtol=1e-9)


@pytest.mark.parametrize("cov_type", ["isotropic", "spherical", "diag", "full", "tied"])
def test_init_auto_is_the_family_seeding(client, X, cov_type, seeding="k-means||"):
    """init="auto" (the default): k-means|| for every family (the realdata-mixtures bench's choice)."""
    auto = daskclust.GaussianMixture(6, covariance_type=cov_type, init_params="seeding", random_state=4, max_iter=0,
                                     n_truncated=None).fit(X, client=client)
    named = daskclust.KMeans(6, init=seeding, random_state=4, max_iter=0).fit(X, client=client)
    np.testing.assert_array_equal(auto.means_, named.cluster_centers_)


def test_init_params_seeding_starts_from_the_seeds(client, X):
    model = daskclust.GaussianMixture(5, covariance_type="diag", init_params="seeding", random_state=3, max_iter=0,
                                      n_truncated=None).fit(X, client=client)
    np.testing.assert_allclose(model.weights_, 0.2)
    assert np.ptp(model.covariances_) == 0.0  # sigma^2 I for every component


def random_start_reference(X, C, cov_type, reg, seed, chunk_rows):
    """scikit-learn's init_params="random" in numpy: responsibilities u_nc / sum_c u_nc with row n of chunk k
    drawing u_nc = uniform(stream_key(seed, STREAM_RANDOM_START, k), i C + c), i its index in the chunk, then
    the M-step of Bishop 9.24-9.26 (+ reg on the variances)."""
    U = np.empty((len(X), C))
    for start in range(0, len(X), chunk_rows):
        key = stream_key(seed, STREAM_RANDOM_START, start // chunk_rows)
        for i in range(min(chunk_rows, len(X) - start)):
            U[start + i] = [uniform(key, i * C + c) for c in range(C)]
    R = U / U.sum(1, keepdims=True)
    nk = R.sum(0)
    means = R.T @ X / nk[:, None]
    scatter = np.stack([(R[:, c, None] * (X - means[c])).T @ (X - means[c]) for c in range(C)])
    D = X.shape[1]
    cov = {"isotropic": np.trace(scatter.sum(0)) / X.size + reg,
           "spherical": np.einsum("cjj->c", scatter) / nk / D + reg,
           "diag": np.einsum("cjj->cj", scatter) / nk[:, None] + reg,
           "full": scatter / nk[:, None, None] + reg * np.eye(D),
           "tied": scatter.sum(0) / len(X) + reg * np.eye(D)}[cov_type]
    return nk / len(X), means, cov


@pytest.mark.parametrize("cov_type", ["isotropic", "spherical", "diag", "full", "tied"])
def test_init_params_random_is_the_m_step_of_random_responsibilities(client, X, cov_type):
    """init_params="random" (scikit-learn's): the start (max_iter=0) is the family's M-step from the
    responsibilities of the counter-based draws, computed here in numpy."""
    C, reg, seed, chunk_rows = 4, 1e-3, 11, 200
    start = daskclust.GaussianMixture(C, covariance_type=cov_type, init_params="random", random_state=seed,
                                      reg_covar=reg, max_iter=0, chunk_rows=chunk_rows).fit(X, client=client)
    weights, means, cov = random_start_reference(X, C, cov_type, reg, seed, chunk_rows)
    np.testing.assert_allclose(start.means_, means, rtol=1e-10)
    np.testing.assert_allclose(start.covariances_, cov, rtol=1e-9)
    if cov_type != "isotropic":  # equal weights there (not learned)
        np.testing.assert_allclose(start.weights_, weights, rtol=1e-10)


def test_init_params_random_does_not_depend_on_the_workers(client, client_one_worker, X):
    fits = [daskclust.GaussianMixture(5, covariance_type="diag", init_params="random", random_state=2, max_iter=5,
                                      tol=0, chunk_rows=128).fit(X, client=c) for c in (client, client_one_worker)]
    assert_same_mixture(*fits)  # to 1e-12: the workers' statistics are summed in another order

"""The tied family (one covariance shared by all components, scikit-learn's "tied"): its kernels
against numpy, exact EM against scikit-learn and a weighted numpy EM from the same start, monotone
truncated EM under every search, scikit-learn's attributes and estimator checks, inference, sampling,
saving, and the estimators that do not fit it refusing it (one or two workers and resuming: test_families)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning as SKConvergenceWarning
from sklearn.mixture import GaussianMixture as SKGaussianMixture
from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky
from sklearn.utils.estimator_checks import parametrize_with_checks

import daskclust
from daskclust.errors import ConvergenceError, InvalidParameterError
from daskclust.kernels.estep import LSE, QE, W, estep_full
from daskclust.models import FAMILIES, Params
from daskclust.models.inference import SCORE_TOLERANCE, MixtureIndex
from daskclust.models.tied import TiedParams

from reference import assert_same_mixture, gaussian_log_joint, mixture_data

SEARCHES = ("full", "exhaustive", "estimated", "sampled")
TIED = FAMILIES["tied"]


@pytest.fixture(scope="module")
def X():
    return mixture_data()


def tied_parameters(X, C, seed=1):
    """Distinct initial weights and means, and one shared covariance (scikit-learn's layouts)."""
    rng = np.random.default_rng(seed)
    D = X.shape[1]
    weights = rng.dirichlet(np.full(C, 5.0))
    means = X[rng.choice(len(X), C, replace=False)] + 0.1
    B = rng.standard_normal((D, D))
    return weights, means, 3.0 * np.eye(D) + B @ B.T


def log_joint(X, weights, means, cov):
    """log pi_c N(x; mu_c, Sigma) (N, C): the textbook full-covariance log-joint with Sigma for every c."""
    return gaussian_log_joint(X, weights, means, np.broadcast_to(cov, (len(means), *cov.shape)), "full")


def tied_em_step(X, w, weights, means, cov, reg):
    """One exact EM iteration of the weighted tied mixture in numpy (Bishop 9.24-9.26 with the covariances
    pooled): (log-likelihood per point at the given parameters, new weights, means, covariance)."""
    lj = log_joint(X, weights, means, cov)
    lse = logsumexp(lj, axis=1)
    R = np.exp(lj - lse[:, None]) * w[:, None]
    nk = R.sum(0)
    new_means = R.T @ X / nk[:, None]
    scatter = sum((R[:, c, None] * (X - new_means[c])).T @ (X - new_means[c]) for c in range(len(nk)))
    return float((w * lse).sum() / w.sum()), nk / nk.sum(), new_means, scatter / nk.sum() + reg * np.eye(X.shape[1])


def exact_model(C, weights, means, cov, n_iter, reg):
    return daskclust.GaussianMixture(
        C, covariance_type="tied", n_truncated=None, search="full", weights_init=weights, means_init=means,
        precisions_init=np.linalg.inv(cov), reg_covar=reg, max_iter=n_iter, tol=0, random_state=0)


# -- kernels ---------------------------------------------------------------------------------------

@pytest.mark.boundscheck
@pytest.mark.parametrize("n_truncated", [1, 3, 6])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_estep_kernel_matches_numpy(n_truncated, dtype):
    """The kernels' statistics with the tied overloads: S0, S1 per component and the one (D, D) upper
    triangle of sum_n w_n sum_c q_c(n) (y_n - mu_c)(y_n - mu_c)^T, and the log-sum-exp."""
    rng = np.random.default_rng(n_truncated)
    C, D = 6, 4
    X = rng.standard_normal((250, D)).astype(dtype) * 3
    w = rng.uniform(0.1, 2.0, len(X))
    weights, means, cov = tied_parameters(X.astype(np.float64), C, seed=n_truncated)
    params = Params(means, weights, cov)
    kernel = TIED.kernel_params(params)
    assert isinstance(kernel, TiedParams) and kernel.chol_inv.shape == (D, D)
    stats = TIED.new_stats(C, D)
    assert stats.S2.shape == (D, D)  # one shared second moment, whatever C
    K = np.full((len(X), n_truncated), -1, dtype=np.int32)
    estep_full(X, w, kernel, n_truncated, K, stats.arrays(), stats.scal)

    Xd = X.astype(np.float64)
    lj = log_joint(Xd, weights, means, cov)
    top = np.argsort(-lj, axis=1, kind="stable")[:, :n_truncated]
    kept = np.take_along_axis(lj, top, axis=1)
    lse = logsumexp(kept, axis=1)
    q = np.zeros_like(lj)
    np.put_along_axis(q, top, np.exp(kept - lse[:, None]), axis=1)
    R = q * w[:, None]
    S2 = sum((R[:, c, None] * (Xd - means[c])).T @ (Xd - means[c]) for c in range(C))
    rtol = 1e-10 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(stats.S0, R.sum(0), rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(stats.S1, R.T @ Xd, rtol=rtol, atol=1e-9)
    np.testing.assert_allclose(stats.S2, np.triu(S2), rtol=rtol, atol=1e-9)
    log_norm = TIED.log_norm(kernel, D)
    np.testing.assert_allclose(stats.scal[LSE] / stats.scal[W] + log_norm, (w * lse).sum() / w.sum(), rtol=rtol)
    np.testing.assert_allclose(stats.scal[QE], (w * ((Xd - means[top[:, 0]]) ** 2).sum(1)).sum(), rtol=rtol)
    np.testing.assert_array_equal(K[:, 0], top[:, 0])


# -- exact EM --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_iter", [1, 10])
def test_exact_em_matches_sklearn_from_the_same_initial_parameters(client, X, n_iter):
    C, reg = 5, 1e-6
    weights, means, cov = tied_parameters(X, C)
    ours = exact_model(C, weights, means, cov, n_iter, reg).fit(X, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SKConvergenceWarning)
        sk = SKGaussianMixture(C, covariance_type="tied", weights_init=weights, means_init=means,
                               precisions_init=np.linalg.inv(cov), reg_covar=reg, max_iter=n_iter, tol=0).fit(X)
    assert ours.n_iter_ == sk.n_iter_ == n_iter
    for name in ("weights_", "means_", "covariances_", "precisions_", "precisions_cholesky_"):
        assert getattr(ours, name).shape == getattr(sk, name).shape
        np.testing.assert_allclose(getattr(ours, name), getattr(sk, name), rtol=1e-6, err_msg=name)
    # scikit-learn's lower bound of iteration t is the E-step before its M-step: our history rows 0 .. n - 1;
    # our lower_bound_ is the E-step after the last M-step, the log-likelihood of the final parameters
    F = [row["free_energy"] for row in ours.history_]
    np.testing.assert_allclose(F[:n_iter], sk.lower_bounds_, rtol=1e-6)
    np.testing.assert_allclose(F[n_iter - 1], sk.lower_bound_, rtol=1e-6)
    np.testing.assert_allclose(ours.lower_bound_, sk.score(X), rtol=1e-6)
    # inference and model selection with the same parameters
    np.testing.assert_allclose(ours.score_samples(X, exact=True), sk.score_samples(X), rtol=1e-8)
    np.testing.assert_allclose(ours.bic(X), sk.bic(X), rtol=1e-8)
    np.testing.assert_allclose(ours.aic(X), sk.aic(X), rtol=1e-8)
    assert ours.n_parameters() == sk._n_parameters()
    assert (ours.predict(X) == sk.predict(X)).mean() > 0.99


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("learn_weights", [True, False])
def test_exact_em_equals_numpy_reference_iteration_by_iteration(client, X, weighted, learn_weights):
    C, n_iter, reg = 5, 4, 1e-3
    w = np.random.default_rng(2).uniform(0.2, 3.0, len(X)) if weighted else np.ones(len(X))
    weights, means, cov = tied_parameters(X, C)
    model = exact_model(C, weights, means, cov, n_iter, reg).set_params(learn_weights=learn_weights).fit(
        X, sample_weight=w if weighted else None, client=client)
    free_energies = []
    for t in range(n_iter + 1):
        ll, new_weights, new_means, new_cov = tied_em_step(X, w, weights, means, cov, reg)
        free_energies.append(ll)
        if t < n_iter:
            weights, means, cov = (new_weights if learn_weights else weights), new_means, new_cov
    np.testing.assert_allclose(model.weights_, weights, rtol=1e-8)
    np.testing.assert_allclose(model.means_, means, rtol=1e-8)
    np.testing.assert_allclose(model.covariances_, cov, rtol=1e-8)
    np.testing.assert_allclose([r["free_energy"] for r in model.history_], free_energies, rtol=1e-8)
    np.testing.assert_allclose(model.sigma2_, np.trace(cov) / X.shape[1] * weights.sum(), rtol=1e-8)


# -- truncated EM ----------------------------------------------------------------------------------

@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("init_params", ["kmeans", "seeding"])
def test_free_energy_never_decreases(client, search, weighted, init_params):
    X = mixture_data(seed=3, n=1200, C=12).astype(np.float32 if weighted else np.float64)
    w = np.random.default_rng(4).uniform(0.0, 2.0, len(X)) if weighted else None
    model = daskclust.GaussianMixture(12, covariance_type="tied", search=search, n_truncated=2, n_neighbors=4,
                                      init="random", init_params=init_params, random_state=7, tol=0, max_iter=12,
                                      chunk_rows=300).fit(X, sample_weight=w, client=client)
    F = np.array([r["free_energy"] for r in model.history_])
    assert np.all(np.isfinite(F)) and len(F) == 13
    assert np.all(np.diff(F) >= -1e-9 * np.abs(F[1:])), np.diff(F)
    assert F[-1] > F[0] + (0.05 if init_params == "seeding" else 0.0)  # it learns something
    assert model.covariances_.shape == (3, 3)


def test_kmeans_start_is_the_pooled_covariance_of_the_k_means_clusters(client, X):
    """init_params="kmeans": weights and means of KMeans' clusters (same seed and seeding) and the shared
    covariance of the rows about their cluster's mean, + reg_covar (scikit-learn's tied start)."""
    C, reg = 5, 1e-3
    km = daskclust.KMeans(C, init="k-means++", random_state=3).fit(X, client=client)
    start = daskclust.GaussianMixture(C, covariance_type="tied", random_state=3, reg_covar=reg, max_iter=0, init="k-means++",
                                      n_truncated=None).fit(X, client=client)
    labels = km.labels_
    diff = X - km.cluster_centers_[labels]
    np.testing.assert_allclose(start.means_, km.cluster_centers_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(start.weights_, np.bincount(labels, minlength=C) / len(X), rtol=1e-12)
    np.testing.assert_allclose(start.covariances_, diff.T @ diff / len(X) + reg * np.eye(X.shape[1]), rtol=1e-9)


# -- scikit-learn's attributes, inference, sampling, saving ----------------------------------------------

@pytest.fixture(scope="module")
def fitted(client, X):
    return daskclust.GaussianMixture(6, covariance_type="tied", n_truncated=3, random_state=0).fit(X, client=client)


def as_sklearn(model):
    sk = SKGaussianMixture(model.n_components, covariance_type="tied")
    sk.weights_, sk.means_, sk.covariances_ = model.weights_, model.means_, model.covariances_
    sk.precisions_cholesky_ = _compute_precision_cholesky(model.covariances_, "tied")
    sk.precisions_ = sk.precisions_cholesky_ @ sk.precisions_cholesky_.T
    return sk


def test_attributes_are_sklearns_layout_and_values(fitted, X):
    D = X.shape[1]
    for name in ("covariances_", "precisions_", "precisions_cholesky_"):
        assert getattr(fitted, name).shape == (D, D), name
    sk = as_sklearn(fitted)
    np.testing.assert_allclose(fitted.precisions_cholesky_, sk.precisions_cholesky_, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(fitted.precisions_, sk.precisions_, rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(fitted.precisions_cholesky_, np.triu(fitted.precisions_cholesky_))
    np.testing.assert_allclose(fitted.precisions_ @ fitted.covariances_, np.eye(D), atol=1e-10)
    np.testing.assert_array_equal(fitted.covariances_, fitted.covariances_.T)
    assert fitted.sigma2_ == pytest.approx(np.trace(fitted.covariances_) / D)


def test_inference_equals_sklearns_for_the_same_parameters(fitted, X):
    sk = as_sklearn(fitted)
    test = mixture_data(seed=9, n=500)
    np.testing.assert_allclose(fitted.score_samples(test, exact=True), sk.score_samples(test), rtol=0, atol=1e-9)
    found = fitted.score_samples(test)
    assert np.all(found <= sk.score_samples(test) + 1e-9)
    assert np.all(found >= sk.score_samples(test) - SCORE_TOLERANCE - 1e-9)
    assert fitted.score(test) == pytest.approx(sk.score(test), abs=1e-9)
    np.testing.assert_allclose(fitted.predict_proba(test), sk.predict_proba(test), rtol=0, atol=1e-9)
    top = fitted.predict_proba(test, top_k=3).toarray()  # 3 entries per row, exact values
    assert np.all((top > 0).sum(1) <= 3)
    np.testing.assert_allclose(top[top > 0], sk.predict_proba(test)[top > 0], rtol=0, atol=1e-9)
    joint = sk._estimate_weighted_log_prob(test)
    labels = fitted.predict(test)
    assert np.all(joint[np.arange(len(test)), labels] >= joint.max(axis=1) - 1e-9)


@pytest.mark.parametrize("C", [7, 300])
def test_index_finds_the_exact_best_components(C):
    """The bounded search (Family.cost_floor: the smallest eigenvalue of Sigma^-1 for every component) against
    the textbook log-joint, with an ill-conditioned shared covariance and weights spanning decades."""
    rng = np.random.default_rng(C)
    D = 6
    means = rng.integers(-4, 5, (C, D)).astype(np.float64)
    weights = rng.dirichlet(np.full(C, 0.3)) + 1e-3
    weights /= weights.sum()
    A = rng.standard_normal((D, D)) * 10.0 ** rng.uniform(-2, 1, D)
    params = Params(means, weights, A @ A.T + 1e-6 * np.eye(D))
    X = np.round(means[rng.choice(C, 3000, p=weights)] + rng.standard_normal((3000, D)) @ A.T)
    joint = log_joint(X, weights, means, params.covariances)
    exact_ll = logsumexp(joint, axis=1)
    idx, q, ll = MixtureIndex(TIED, params).top(X, 4)
    rows = np.arange(len(X))[:, None]
    rounding = 1e-12 * np.abs(joint).max(axis=1)
    best = -np.sort(-joint, axis=1)[:, :4]
    assert np.all(np.abs(joint[rows, idx] - best) <= rounding[:, None] + 1e-12)
    np.testing.assert_allclose(q, np.exp(joint - exact_ll[:, None])[rows, idx], rtol=1e-8, atol=1e-12)
    assert np.all(ll <= exact_ll + rounding) and np.all(ll >= exact_ll - SCORE_TOLERANCE - rounding)


def test_sample_draws_from_the_shared_covariance(fitted, X):
    Y, labels = fitted.sample(40000, random_state=0)
    assert Y.shape == (40000, X.shape[1]) and labels.shape == (40000,)
    np.testing.assert_allclose(np.bincount(labels, minlength=6) / len(Y), fitted.weights_, atol=0.01)
    deviations = Y - fitted.means_[labels]
    np.testing.assert_allclose(deviations.T @ deviations / len(Y), fitted.covariances_, rtol=0,
                               atol=0.05 * np.abs(fitted.covariances_).max())
    again, _ = fitted.sample(40000, random_state=0)
    np.testing.assert_array_equal(Y, again)


def test_save_and_load_keep_the_model(fitted, tmp_path, X):
    fitted.save(tmp_path / "m.zarr")
    loaded = daskclust.load(tmp_path / "m.zarr")
    assert_same_mixture(fitted, loaded)
    for name in ("precisions_", "precisions_cholesky_", "sigma2_", "lower_bound_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(fitted, name))
    np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))
    np.testing.assert_array_equal(loaded.score_samples(X, exact=True), fitted.score_samples(X, exact=True))


def test_stored_covariance_that_is_not_a_covariance_is_refused():
    C, D = 3, 2
    means, weights = np.zeros((C, D)), np.full(C, 1 / C)
    assert TIED.params_problem(Params(means, weights, np.eye(D)), C, D) is None
    assert "shape (2, 2)" in TIED.params_problem(Params(means, weights, np.stack([np.eye(D)] * C)), C, D)
    assert "not symmetric" in TIED.params_problem(Params(means, weights, np.array([[1.0, 0.5], [0.0, 1.0]])), C, D)
    assert "positive definite" in TIED.params_problem(Params(means, weights, np.array([[1.0, 2.0], [2.0, 1.0]])),
                                                      C, D)


@parametrize_with_checks([daskclust.GaussianMixture(n_components=3, covariance_type="tied", random_state=0)],
                         xfail_strict=True)
def test_sklearn_compatible(client, estimator, check):
    with client.as_current():
        check(estimator)


# -- refusals --------------------------------------------------------------------------------------

@pytest.mark.parametrize("precisions, match", [
    (np.stack([np.eye(2)] * 2), r"'tied precision' should have the shape of \(2, 2\), but got \(2, 2, 2\)"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), "'tied precision' should be symmetric, positive-definite"),
])
def test_bad_precisions_init_is_refused_before_any_work(precisions, match):
    with pytest.raises(InvalidParameterError, match=match):
        daskclust.GaussianMixture(2, covariance_type="tied", precisions_init=precisions).fit(
            np.random.default_rng(0).normal(size=(20, 2)), client=object())


def test_singular_covariance_without_reg_covar_is_a_clear_error(client):
    X = np.repeat(np.arange(40.0)[:, None], 2, axis=1)  # on a line: the shared covariance is singular
    with pytest.raises(ConvergenceError, match="ill-defined empirical covariance.*reg_covar.*'tied'"):
        daskclust.GaussianMixture(2, covariance_type="tied", reg_covar=0.0, random_state=0).fit(X, client=client)


@pytest.mark.parametrize("estimator", [daskclust.CellGaussianMixture, daskclust.GreedyGaussianMixture,
                                       daskclust.SketchedGaussianMixture])
def test_estimators_without_a_tied_family_refuse_it(estimator):
    with pytest.raises(InvalidParameterError, match="covariance_type='tied' is not supported"):
        estimator(2, covariance_type="tied").fit(np.random.default_rng(0).normal(size=(20, 4)), client=object())

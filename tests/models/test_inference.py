"""Inference for new rows under each family's own cost: the search through balls of components and a
cost bound (:func:`daskclust.kernels.infer.bounded_top`) against the textbook log-joint over every
component, on the data where the Euclidean nearest mean is most often wrong -- integer-valued
features, components collapsed onto single values, variances spanning six orders of magnitude,
unequal weights -- and the estimators' predict / predict_proba / score_samples on held-out rows."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.mixture import GaussianMixture as SKGaussianMixture

import daskclust
from daskclust.models import FAMILIES, Params
from daskclust.models.inference import SCORE_TOLERANCE, MixtureIndex

from reference import gaussian_log_joint

FAMILY_NAMES = ("kmeans", "isotropic", "isotropic-weighted", "spherical", "diag", "full")


def hard_parameters(family: str, C: int, D: int, seed: int) -> Params:
    """Means on an integer grid, variances log-uniform over 1e-4 .. 1e2 (a quarter of them collapsed
    to 1e-6 along some features), weights spanning three orders of magnitude."""
    rng = np.random.default_rng(seed)
    means = rng.integers(-4, 5, (C, D)).astype(np.float64) + rng.normal(0, 0.3, (C, D)) * (rng.random((C, 1)) < 0.5)
    weights = rng.dirichlet(np.full(C, 0.3)) + 1e-3
    weights /= weights.sum()
    var = 10.0 ** rng.uniform(-4, 2, (C, D))
    collapsed = rng.random((C, D)) < 0.25
    var[collapsed] = 1e-6
    if family in ("kmeans", "isotropic"):
        return Params(means, np.full(C, 1.0 / C), np.asarray(0.7))
    if family == "isotropic-weighted":
        return Params(means, weights, np.asarray(0.7))
    if family == "spherical":
        return Params(means, weights, var.mean(axis=1))
    if family == "diag":
        return Params(means, weights, var)
    A = rng.standard_normal((C, D, D)) * np.sqrt(var)[:, None, :]
    return Params(means, weights, A @ A.transpose(0, 2, 1) + 1e-6 * np.eye(D))


def family_of(name: str):
    if name == "isotropic-weighted":
        return FAMILIES["isotropic"].with_weights(True)
    return FAMILIES[name]


def exact_log_joint(name: str, params: Params, X: np.ndarray) -> np.ndarray:
    """The reference log pi_c N(x; mu_c, Sigma_c) (k-means: the isotropic mixture of its centres)."""
    cov_type = "isotropic" if name in ("kmeans", "isotropic", "isotropic-weighted") else name
    return gaussian_log_joint(X, params.weights, params.means, params.covariances, cov_type)


def integer_rows(params: Params, n: int, seed: int) -> np.ndarray:
    """Rows drawn from the mixture and rounded to integers (the discrete features of real tables),
    plus a tenth drawn uniformly over the grid."""
    rng = np.random.default_rng(seed)
    C, D = params.means.shape
    comp = rng.choice(C, n, p=params.weights)
    cov = params.covariances
    if cov.ndim == 0:
        z = rng.standard_normal((n, D)) * np.sqrt(cov)
    elif cov.ndim == 1:
        z = rng.standard_normal((n, D)) * np.sqrt(cov[comp])[:, None]
    elif cov.ndim == 2:
        z = rng.standard_normal((n, D)) * np.sqrt(cov[comp])
    else:
        z = np.einsum("nij,nj->ni", np.linalg.cholesky(cov)[comp], rng.standard_normal((n, D)))
    X = np.round(params.means[comp] + z)
    X[: n // 10] = rng.integers(-6, 7, (n // 10, D))
    return np.clip(X, -8, 8)


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("C", [7, 300])
def test_index_finds_the_exact_best_components_and_log_likelihood(name, C):
    params = hard_parameters(name, C, 6, seed=C)
    X = integer_rows(params, 3000, seed=1)
    joint = exact_log_joint(name, params, X)
    exact_ll = logsumexp(joint, axis=1)
    posterior = np.exp(joint - exact_ll[:, None])
    index = MixtureIndex(family_of(name), params)
    k = 4
    idx, q, ll = index.top(X, k)
    rows = np.arange(len(X))[:, None]
    rounding = 1e-12 * np.abs(joint).max(axis=1)  # the two computations' float64 rounding (|log-joint| up to 1e5)
    # the k components found are the k of largest log-joint (up to exact ties)
    best = -np.sort(-joint, axis=1)[:, :k]
    assert np.all(np.abs(joint[rows, idx] - best) <= rounding[:, None] + 1e-12)
    np.testing.assert_allclose(q, posterior[rows, idx], rtol=1e-8, atol=1e-12)
    # the log-likelihood: never above the exact value, never more than the tolerance below it
    assert np.all(ll <= exact_ll + rounding)
    assert np.all(ll >= exact_ll - SCORE_TOLERANCE - rounding)
    labels = index.labels(X)
    assert np.all(joint[np.arange(len(X)), labels] >= joint.max(axis=1) - rounding)
    exact = MixtureIndex(family_of(name), params, exact=True).top(X, k)
    assert np.all(np.abs(exact[2] - exact_ll) <= rounding)


@pytest.mark.parametrize("name", ["spherical", "diag", "full"])
def test_the_euclidean_nearest_mean_is_often_wrong_on_these_data(name):
    """The test data above are hard: the nearest mean is not the most likely component for many rows."""
    params = hard_parameters(name, 300, 6, seed=300)
    X = integer_rows(params, 3000, seed=1)
    joint = exact_log_joint(name, params, X)
    nearest = np.argmin(((X[:, None, :] - params.means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest != joint.argmax(axis=1)) > 0.3


def test_dropped_components_are_never_chosen():
    params = hard_parameters("diag", 50, 4, seed=3)
    weights = params.weights.copy()
    weights[:10] = 0.0
    params = params.replace(weights=weights / weights.sum())
    X = integer_rows(params, 1000, seed=2)
    idx, q, ll = MixtureIndex(FAMILIES["diag"], params).top(X, 3)
    assert np.all(idx >= 10) and np.all(np.isfinite(ll)) and np.all(q[:, 0] > 0)


def discrete_data(n: int, D: int, seed: int) -> np.ndarray:
    """Integer-valued features in few levels with unequal spreads, standardised: a table of counts
    and ratings (the letter data's kind)."""
    rng = np.random.default_rng(seed)
    centres = rng.integers(0, 16, (12, D))
    comp = rng.integers(0, 12, n)
    scale = rng.uniform(0.2, 3.0, (12, D))
    X = np.clip(np.round(centres[comp] + rng.standard_normal((n, D)) * scale[comp]), 0, 15)
    return (X - X.mean(0)) / X.std(0)


def as_sklearn(model, cov_type):
    sk = SKGaussianMixture(model.n_components, covariance_type=cov_type)
    sk.weights_, sk.means_, sk.covariances_ = model.weights_, model.means_, model.covariances_
    sk.precisions_cholesky_ = model.precisions_cholesky_
    return sk


@pytest.mark.parametrize("cov_type", ["spherical", "diag", "full"])
def test_new_rows_get_the_exact_label_posterior_and_score(client, cov_type):
    X = discrete_data(6000, 6, seed=0)
    train, test = X[:4000], X[4000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a component collapsing onto a value may not converge in max_iter
        model = daskclust.GaussianMixture(60, covariance_type=cov_type, random_state=0).fit(train, client=client)
    sk = as_sklearn(model, cov_type)
    joint = sk._estimate_weighted_log_prob(test)
    labels = model.predict(test)
    assert np.mean(joint[np.arange(len(test)), labels] >= joint.max(axis=1) - 1e-9) == 1.0
    np.testing.assert_allclose(model.score_samples(test), sk.score_samples(test), rtol=0, atol=1e-6)
    assert model.score(test) == pytest.approx(sk.score(test), abs=1e-6)
    dense = model.predict_proba(test)
    np.testing.assert_allclose(dense, sk.predict_proba(test), rtol=0, atol=1e-9)
    top = model.predict_proba(test, top_k=5).toarray()  # 5 entries per row, exact values
    kept = top > 0
    np.testing.assert_allclose(top[kept], sk.predict_proba(test)[kept], rtol=0, atol=1e-9)

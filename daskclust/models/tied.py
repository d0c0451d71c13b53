"""Tied Gaussian mixture: p(y) = sum_c pi_c N(y; mu_c, Sigma), one covariance shared by all components,
scikit-learn's "tied".

Sigma = L L^T (Cholesky, lower). Kernel (:class:`TiedParams`) holds M = L^-1 once (a triangular solve,
no inverse): cost_c(y) = ||M (y - mu_c)||^2 + 2 sum_i log L_ii - 2 log pi_c, scale 1 (:mod:`.gaussian`),
D (D + 1) flops per (row, component) pair as for "full", but one factor for all C components.

Statistics: S0[c], S1[c] as for every family, and a single second moment about the E-step's means,
S2 = upper triangle of sum_n w_n sum_c q_c(n) (y_n - mu_c)(y_n - mu_c)^T, (D, D) whatever C (the shared
covariance needs only the sum over components). M-step (scikit-learn's
``_estimate_gaussian_covariances_tied``, the mean of the components' scatter about their new means),
by the parallel-axis identity per component:

    Sigma = (S2 - sum_c S0[c] delta_c delta_c^T) / W + reg_covar I,  delta_c = mu_c^new - mu_c,

W = sum_c S0[c]. scikit-learn's ``covariances_``, ``precisions_`` and ``precisions_cholesky_`` are
(D, D); ``precisions_cholesky_`` is M^T (upper).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..kernels.estep import N_SCALARS
from .base import Params, SuffStats, updated_means
from .full import add_centred_outer, inverted_precision_matrices, lower_inverse, matrix_problem, whitened_sq_norm
from .gaussian import WeightedFamily, ill_defined, log_weights
from .overloads import register

TiedParams = namedtuple("TiedParams", ["means", "chol_inv", "const"])
"""(C, D) means, the (D, D) shared M = L^-1 (lower triangular) and (C,) log det Sigma - 2 log pi_c."""


def _cost(x, c, params):
    return whitened_sq_norm(x, params.means[c], params.chol_inv) + params.const[c]


def _add_point(x, wq, c, value, params, stats):
    """S0[c] += wq, S1[c] += wq x, and the one shared S2 += wq (x - mu_c)(x - mu_c)^T (upper triangle)."""
    stats[0][c] += wq
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
    add_centred_outer(x, wq, params.means[c], stats[2])


register(TiedParams, cost=_cost, add_point=_add_point)


def cholesky(covariance: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the shared (D, D) covariance; :func:`~.gaussian.ill_defined` when it is
    not positive definite."""
    try:
        return np.linalg.cholesky(covariance)
    except np.linalg.LinAlgError:
        raise ill_defined("tied") from None


def factors(covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(L, M = L^-1), both lower triangular, of the shared covariance Sigma = L L^T (forward substitution)."""
    L = cholesky(covariance)
    return L, np.ascontiguousarray(lower_inverse(L[None])[0])


class TiedFamily(WeightedFamily):
    """Weights pi_c and one full covariance shared by all components."""

    name = "tied"

    def covariance_shape(self, n_clusters, n_features):
        return (n_features, n_features)

    def new_stats(self, n_clusters, n_features):
        C, D = n_clusters, n_features
        return SuffStats(np.zeros(C), np.zeros((C, D)), np.zeros((D, D)), np.zeros(N_SCALARS))

    def initial_covariances(self, variance, n_clusters, n_features):
        return variance * np.eye(n_features)

    def average_variances(self, covariances):
        return np.trace(covariances) / covariances.shape[0]

    def covariance_problem(self, covariances):
        return matrix_problem(covariances[None])

    def precisions(self, covariances):
        chol = np.ascontiguousarray(factors(covariances)[1].T)
        return chol @ chol.T, chol

    def inverted_precisions(self, precisions):
        return inverted_precision_matrices(precisions[None], self.name)[0]

    def sample_deviations(self, z, covariances, labels):
        return z @ cholesky(covariances).T

    def covariances_for_empty(self, covariances, empty):
        return covariances.copy()  # shared by all components

    def n_parameters(self, n_clusters, n_features):
        weights = n_clusters - 1 if self.learn_weights else 0
        return n_clusters * n_features + weights + n_features * (n_features + 1) // 2

    def kernel_params(self, params):
        L, M = factors(params.covariances)
        log_det = 2.0 * np.log(np.diagonal(L)).sum()
        return TiedParams(params.means, M, log_det - 2.0 * log_weights(params.weights))

    def cost_floor(self, kernel):
        """||M v||^2 >= s_min(M)^2 ||v||^2 (s_min: the smallest singular value of M = L^-1, i.e. 1 / the
        largest eigenvalue of Sigma): a_cj = s_min(M)^2 for every c and j, b = const."""
        s_min = np.linalg.svd(kernel.chol_inv, compute_uv=False)[-1]
        return np.full(kernel.means.shape, s_min ** 2), kernel.const

    def second_about(self, stats, shift):
        """One (D, D) upper triangle shared by all components."""
        return stats.S2 - np.triu(np.einsum("c,ci,cj->ij", stats.S0, shift, shift))

    def m_step(self, stats: SuffStats, params: Params, reg: float) -> Params:
        means, shift = updated_means(stats, params.means)
        total = stats.S0.sum()
        D = means.shape[1]
        upper = self.second_about(stats, shift)
        second = upper + np.triu(upper, 1).T  # the kernels add the upper triangle only
        cov = second / total + reg * np.eye(D)
        cov = np.triu(cov) + np.triu(cov, 1).T  # exactly symmetric
        weights = stats.S0 / total if self.learn_weights else params.weights
        return Params(means, weights, cov)

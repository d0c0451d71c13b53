"""Full-covariance Gaussian mixture: p(y) = sum_c pi_c N(y; mu_c, Sigma_c), scikit-learn's "full".

Sigma_c = L_c L_c^T (Cholesky, lower). Kernel (:class:`FullParams`) holds M_c = L_c^-1 (lower, from a
triangular solve: no covariance is ever inverted): cost_c(y) = ||M_c (y - mu_c)||^2 + 2 sum_i log L_c,ii
- 2 log pi_c, scale 1 (:mod:`.gaussian`), D (D + 1) flops per (row, component) pair.
S2[c] = upper triangle of sum_n w_n q_c(n) (y_n - mu_c)(y_n - mu_c)^T. M-step:
Sigma_c = (S2[c] - S0[c] delta_c delta_c^T) / S0[c] + reg_covar I, delta_c = mu_c^new - mu_c.
scikit-learn's ``precisions_cholesky_`` is M_c^T (upper).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from ..errors import ConvergenceError, InvalidParameterError
from .base import SuffStats
from .gaussian import WeightedFamily, ill_defined, log_weights
from .overloads import register

FullParams = namedtuple("FullParams", ["means", "chol_inv", "const"])
"""(C, D) means, (C, D, D) M_c = L_c^-1 (lower triangular) and (C,) log det Sigma_c - 2 log pi_c."""


@njit(inline="always")
def whitened_sq_norm(x, mu, M):
    """||M (x - mu)||^2 for a lower-triangular M: the squared Mahalanobis distance when M = L^-1, Sigma = L L^T."""
    s = 0.0
    for k in range(x.shape[0]):
        z = 0.0
        for j in range(k + 1):
            z += M[k, j] * (float(x[j]) - mu[j])
        s += z * z
    return s


@njit(inline="always")
def add_centred_outer(x, wq, mu, S2):
    """S2 += wq (x - mu)(x - mu)^T, upper triangle."""
    for j in range(x.shape[0]):
        tj = wq * (float(x[j]) - mu[j])
        for k in range(j, x.shape[0]):
            S2[j, k] += tj * (float(x[k]) - mu[k])


def _cost(x, c, params):
    return whitened_sq_norm(x, params.means[c], params.chol_inv[c]) + params.const[c]


def _add_point(x, wq, c, value, params, stats):
    stats[0][c] += wq
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
    add_centred_outer(x, wq, params.means[c], stats[2][c])


register(FullParams, cost=_cost, add_point=_add_point)


@njit(cache=True)
def lower_inverse(L):
    """M_c = L_c^-1 for every lower-triangular L_c of (C, D, D), by forward substitution."""
    C, D = L.shape[0], L.shape[1]
    M = np.zeros_like(L)
    for c in range(C):
        for col in range(D):
            M[c, col, col] = 1.0 / L[c, col, col]
            for i in range(col + 1, D):
                s = 0.0
                for j in range(col, i):
                    s += L[c, i, j] * M[c, j, col]
                M[c, i, col] = -s / L[c, i, i]
    return M


def cholesky(covariances: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of (C, D, D) covariances; :func:`~.gaussian.ill_defined` when one is not
    positive definite."""
    try:
        return np.linalg.cholesky(covariances)
    except np.linalg.LinAlgError:
        raise ill_defined("full") from None


def precisions_cholesky(covariances: np.ndarray) -> np.ndarray:
    """scikit-learn's ``precisions_cholesky_`` of full covariances: (L_c^-1)^T, upper triangular."""
    return np.ascontiguousarray(lower_inverse(cholesky(covariances)).transpose(0, 2, 1))


def matrix_problem(covariances: np.ndarray) -> str | None:
    """Why finite (C, D, D) matrices are not covariances (symmetric positive definite), or None."""
    if not np.allclose(covariances, np.swapaxes(covariances, 1, 2), rtol=1e-10, atol=0):
        return "its covariances are not symmetric"
    try:
        np.linalg.cholesky(covariances)
    except np.linalg.LinAlgError:
        return "its covariances are not positive definite"
    return None


def inverted_precision_matrices(precisions: np.ndarray, covariance_type: str) -> np.ndarray:
    """Covariances Sigma_c = P_c^-1 of (C, D, D) precisions, through the Cholesky factor of each and a
    triangular solve (no matrix inverse): P = L L^T, so Sigma = L^-T L^-1;
    :class:`InvalidParameterError` (scikit-learn's words) when one is not symmetric positive definite."""
    refused = InvalidParameterError(f"'{covariance_type} precision' should be symmetric, positive-definite")
    if not np.allclose(precisions, precisions.transpose(0, 2, 1)):
        raise refused
    try:
        M = lower_inverse(cholesky(precisions))
    except ConvergenceError:
        raise refused from None
    return M.transpose(0, 2, 1) @ M


class FullFamily(WeightedFamily):
    """Weights pi_c and a full covariance per component."""

    name = "full"

    def covariance_shape(self, n_clusters, n_features):
        return (n_clusters, n_features, n_features)

    def new_stats(self, n_clusters, n_features):
        return SuffStats.zeros(n_clusters, n_features, (n_features, n_features))

    def initial_covariances(self, variance, n_clusters, n_features):
        return np.broadcast_to(variance * np.eye(n_features), (n_clusters, n_features, n_features)).copy()

    def average_variances(self, covariances):
        return np.trace(covariances, axis1=1, axis2=2) / covariances.shape[1]

    def covariance_problem(self, covariances):
        return matrix_problem(covariances)

    def precisions(self, covariances):
        chol = precisions_cholesky(covariances)
        return chol @ chol.transpose(0, 2, 1), chol

    def inverted_precisions(self, precisions):
        return inverted_precision_matrices(precisions, self.name)

    def sample_deviations(self, z, covariances, labels):
        return np.einsum("nij,nj->ni", cholesky(covariances)[labels], z)

    def kernel_params(self, params):
        L = cholesky(params.covariances)
        log_det = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        return FullParams(params.means, lower_inverse(L), log_det - 2.0 * log_weights(params.weights))

    def cost_floor(self, kernel):
        """||M_c v||^2 >= s_min(M_c)^2 ||v||^2 (s_min: the smallest singular value of M_c = L_c^-1, i.e.
        1 / the largest eigenvalue of Sigma_c): a_cj = s_min(M_c)^2 for every j, b = const."""
        s_min = np.linalg.svd(kernel.chol_inv, compute_uv=False)[:, -1]
        return np.repeat((s_min ** 2)[:, None], kernel.means.shape[1], axis=1), kernel.const

    def second_about(self, stats, shift):
        """The upper triangle, as the kernels add it."""
        return stats.S2 - np.triu(stats.S0[:, None, None] * shift[:, :, None] * shift[:, None, :])

    def covariances(self, stats, shift, reg, has_mass):
        S0 = stats.S0[has_mass][:, None, None]
        upper = self.second_about(stats, shift)[has_mass]
        second = upper + np.triu(upper, 1).transpose(0, 2, 1)  # the kernels add the upper triangle only
        return second / S0 + reg * np.eye(shift.shape[1])

    def covariance_parameters(self, n_features):
        return n_features * (n_features + 1) // 2

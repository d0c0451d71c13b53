"""Diagonal Gaussian mixture: p(y) = sum_c pi_c N(y; mu_c, diag(sigma_c1^2 .. sigma_cD^2)), scikit-learn's "diag".

Kernel (:class:`DiagParams`): cost_c(y) = sum_j (y_j - mu_cj)^2 / sigma_cj^2 + sum_j log sigma_cj^2
- 2 log pi_c, scale 1 (:mod:`.gaussian`); S2[c, j] = sum_n w_n q_c(n) (y_nj - mu_cj)^2. M-step:
sigma_cj^2 = (S2[c, j] - S0[c] (mu_cj^new - mu_cj)^2) / S0[c] + reg_covar. Cost per (row, component)
pair: 3 D flops, against 2 D for the spherical family.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .base import SuffStats, variance_floor
from .gaussian import WeightedFamily, log_weights
from .overloads import register

DiagParams = namedtuple("DiagParams", ["means", "prec", "const"])
"""(C, D) means, (C, D) precisions 1 / sigma_cj^2 and (C,) sum_j log sigma_cj^2 - 2 log pi_c."""


def _cost(x, c, params):
    mu = params.means[c]
    prec = params.prec[c]
    s = 0.0
    for j in range(x.shape[0]):
        t = float(x[j]) - mu[j]
        s += t * t * prec[j]
    return s + params.const[c]


def _add_point(x, wq, c, value, params, stats):
    stats[0][c] += wq
    mu = params.means[c]
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
        t = float(x[j]) - mu[j]
        stats[2][c, j] += wq * t * t


register(DiagParams, cost=_cost, add_point=_add_point)


class DiagFamily(WeightedFamily):
    """Weights pi_c and a diagonal covariance per component."""

    name = "diag"

    def covariance_shape(self, n_clusters, n_features):
        return (n_clusters, n_features)

    def new_stats(self, n_clusters, n_features):
        return SuffStats.zeros(n_clusters, n_features, (n_features,))

    def average_variances(self, covariances):
        return covariances.mean(axis=1)

    def kernel_params(self, params):
        var = variance_floor(params.covariances, params.means)
        return DiagParams(params.means, 1.0 / var, np.log(var).sum(axis=1) - 2.0 * log_weights(params.weights))

    def cost_floor(self, kernel):
        """cost_c(x) = sum_j (x_j - mu_cj)^2 / sigma_cj^2 + const_c exactly: a = the precisions, b = const."""
        return kernel.prec, kernel.const

    def second_about(self, stats, shift):
        return stats.S2 - stats.S0[:, None] * shift ** 2

    def covariances(self, stats, shift, reg, has_mass):
        S0 = stats.S0[has_mass][:, None]
        return variance_floor(np.maximum(self.second_about(stats, shift)[has_mass], 0.0) / S0 + reg,
                              stats.S1[has_mass] / S0)

    def covariance_parameters(self, n_features):
        return n_features

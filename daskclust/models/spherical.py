"""Spherical Gaussian mixture: p(y) = sum_c pi_c N(y; mu_c, sigma_c^2 I), scikit-learn's "spherical".

Kernel (:class:`SphericalParams`): cost_c(y) = ||y - mu_c||^2 / sigma_c^2 + D log sigma_c^2 - 2 log pi_c,
scale 1 (:mod:`.gaussian`); S2[c] = sum_n w_n q_c(n) ||y_n - mu_c||^2. M-step:
sigma_c^2 = (S2[c] - S0[c] ||mu_c^new - mu_c||^2) / (D S0[c]) + reg_covar.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..kernels.estep import sqdist
from .base import variance_floor
from .gaussian import WeightedFamily, log_weights
from .overloads import add_point_trace, register

SphericalParams = namedtuple("SphericalParams", ["means", "inv_var", "const"])
"""(C, D) means, (C,) 1 / sigma_c^2 and (C,) D log sigma_c^2 - 2 log pi_c."""


register(SphericalParams, cost=lambda x, c, params: sqdist(x, params.means[c]) * params.inv_var[c] + params.const[c],
         add_point=add_point_trace)


class SphericalFamily(WeightedFamily):
    """Weights pi_c and one variance sigma_c^2 per component."""

    name = "spherical"

    def covariance_shape(self, n_clusters, n_features):
        return (n_clusters,)

    def kernel_params(self, params):
        var = variance_floor(params.covariances, params.means)
        D = params.means.shape[1]
        return SphericalParams(params.means, 1.0 / var, D * np.log(var) - 2.0 * log_weights(params.weights))

    def cost_floor(self, kernel):
        """cost_c(x) = ||x - mu_c||^2 / sigma_c^2 + const_c exactly: a_cj = 1 / sigma_c^2, b = const."""
        return np.repeat(kernel.inv_var[:, None], kernel.means.shape[1], axis=1), kernel.const

    def covariances(self, stats, shift, reg, has_mass):
        S0 = stats.S0[has_mass]
        D = stats.S1.shape[1]
        within = np.maximum(self.second_about(stats, shift)[has_mass], 0.0)
        return variance_floor(within / (D * S0) + reg, stats.S1[has_mass] / S0[:, None])

    def covariance_parameters(self, n_features):
        return 1

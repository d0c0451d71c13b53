"""The isotropic equal-weight Gaussian mixture of Forster & Lücke 2018 / Lücke & Forster 2019: p(y) = (1/C) sum_c N(y; mu_c, sigma^2 I).

Kernel side (:class:`MeanParams`): cost = ||y - mu_c||^2, scale = sigma^2, so the
responsibilities are those of Forster & Lücke 2018 Eq. 5; k-means (:mod:`.kmeans`) shares the kernel.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..kernels.estep import W, sqdist
from .base import Family, Params, updated_means, variance_floor
from .gaussian import log_weights
from .overloads import add_point_trace, register

MeanParams = namedtuple("MeanParams", ["means", "sigma2"])
"""The kernels' parameters of the mean families (k-means, isotropic): (C, D) float64 means and the
floored shared variance. cost = ||x - mu_c||^2, scale = sigma^2 (Forster & Lücke 2018 Eq. 5)."""


def _mean_add_point(x, wq, c, value, params, stats):
    """S2 gets the cost itself, ||x - mu_c||^2."""
    stats[0][c] += wq
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
    stats[2][c] += wq * value


register(MeanParams, cost=lambda x, c, params: sqdist(x, params.means[c]), add_point=_mean_add_point,
         scale=lambda params: params.sigma2, euclid=lambda x, c, params, value: value,
         pair_value=lambda params, value: np.sqrt(value))  # Forster & Lücke 2018 Eq. 8 averages distances

WeightedMeanParams = namedtuple("WeightedMeanParams", ["means", "sigma2", "shift"])
"""The isotropic mixture with learned weights: cost = ||x - mu_c||^2 + shift[c], shift[c] = -2 sigma^2 log pi_c
(+inf for a dropped component), scale = sigma^2. Not a distance: the estimated search records its cost."""

register(WeightedMeanParams, cost=lambda x, c, params: sqdist(x, params.means[c]) + params.shift[c],
         add_point=add_point_trace, scale=lambda params: params.sigma2)


class SharedVarianceFamily(Family):
    """What k-means and the isotropic mixture share: equal weights, one variance, Euclidean cost."""

    metric = True
    learn_weights = False
    default_n_explore = 1  # Forster & Lücke 2018's "+1"

    def covariance_shape(self, n_clusters, n_features):
        return ()

    def covariance_problem(self, covariances):
        return "its variance is negative" if covariances < 0 else None

    def covariances_attribute(self, params):
        """sigma^2 once per component, as scikit-learn's spherical ``covariances_``."""
        return np.full(len(params.means), float(params.covariances))

    def model_covariances(self, covariances, sigma2):
        return np.asarray(sigma2)

    def covariances_for_empty(self, covariances, empty):
        return covariances.copy()  # shared by all components

    def initial_params(self, centres, sigma2, reg):
        C = len(centres)
        return Params(centres, np.full(C, 1.0 / C), np.asarray(float(sigma2) + reg))

    def kernel_params(self, params):
        return MeanParams(params.means, float(variance_floor(float(params.covariances), params.means)))

    def m_step(self, stats, params, reg):
        """Truncated M-step of the means and the shared variance (Forster & Lücke 2018 Eq. 4 with the q of Eq. 5).

        mu_c = sum_n w_n q_c(n) y_n / sum_n w_n q_c(n); a cluster with no mass keeps
        its centre. sigma^2 = sum_n sum_c w_n q_c(n) ||y_n - mu_c^new||^2 / (D sum_n w_n),
        obtained from the second moment about the old centres by the parallel-axis
        identity  sum q ||y - mu_new||^2 = sum q ||y - mu_old||^2 - S0 ||mu_new - mu_old||^2
        (:meth:`~daskclust.models.base.Family.second_about`), which avoids the cancellation of
        sum q ||y||^2 - S0 ||mu_new||^2. ``reg`` is added to sigma^2 (``reg_covar``). The weights stay equal.
        """
        new, shift = updated_means(stats, params.means)
        within = max(float(self.second_about(stats, shift).sum()), 0.0)
        D = params.means.shape[1]
        return params.replace(means=new, covariances=np.asarray(within / (D * stats.scal[W]) + reg))

    def cost_floor(self, kernel):
        """cost_c(x) = ||x - mu_c||^2 (+ shift_c with learned weights): a = 1, b = 0 (or the shift)."""
        C, D = kernel.means.shape
        return np.ones((C, D)), np.array(getattr(kernel, "shift", np.zeros(C)), dtype=np.float64)

    def log_norm(self, kernel, n_features):
        """-log C - (D/2) log(2 pi sigma^2) (Forster & Lücke 2018 Eq. 2)."""
        return -math.log(len(kernel.means)) - 0.5 * n_features * math.log(2 * math.pi * kernel.sigma2)

    def n_parameters(self, n_clusters, n_features):
        return n_clusters * n_features + 1


class IsotropicFamily(SharedVarianceFamily):
    """var-GMM (Forster & Lücke 2018): soft responsibilities over the C' clusters of K(n); the free energy
    is Eq. 7 of Lücke & Forster 2019 at the E-step's parameters, the log-likelihood when C' = C.

    Equal weights as in Forster & Lücke 2018 unless ``with_weights(True)``: then pi_c = S0[c] / W and the
    kernels take :class:`WeightedMeanParams` (cost ||y - mu_c||^2 - 2 sigma^2 log pi_c).
    """

    name = "isotropic"
    learn_weights = False

    @property
    def metric(self) -> bool:
        return not self.learn_weights

    def kernel_params(self, params):
        if not self.learn_weights:
            return super().kernel_params(params)
        sigma2 = float(variance_floor(float(params.covariances), params.means))
        return WeightedMeanParams(params.means, sigma2, -2.0 * sigma2 * log_weights(params.weights))

    def m_step(self, stats, params, reg):
        new = super().m_step(stats, params, reg)
        return new.replace(weights=stats.S0 / stats.S0.sum()) if self.learn_weights else new

    def log_norm(self, kernel, n_features):
        if not self.learn_weights:
            return super().log_norm(kernel, n_features)
        return -0.5 * n_features * math.log(2 * math.pi * kernel.sigma2)  # log pi_c is in the cost

    def n_parameters(self, n_clusters, n_features):
        return super().n_parameters(n_clusters, n_features) + (n_clusters - 1 if self.learn_weights else 0)

    def free_energy(self, stats, params, kernel, new):
        """Eq. 7 of Lücke & Forster 2019 at the E-step's (floored) sigma^2, which the history reports."""
        return super().free_energy(stats, params, kernel, new)[0], kernel.sigma2

    def final_params(self, stats, params, kernel):
        return params.replace(covariances=np.asarray(kernel.sigma2))

"""k-means as the C' = 1 limit of truncated EM (Lücke & Forster 2019, Prop. 3)."""

from __future__ import annotations

import math

import numpy as np

from ..kernels.estep import QE, W
from .base import variance_floor
from .isotropic import SharedVarianceFamily


def kmeans_free_energy(n_clusters: int, n_features: int, sigma2: float) -> float:
    """k-means free energy per point (Lücke & Forster 2019 Prop. 3, Eq. 15): -log C - (D/2) log(2 pi e sigma^2).

    ``sigma2`` is the variance after the M-step, sum_n ||y_n - mu_c(n)||^2 / (D N), floored
    by :func:`~daskclust.models.base.variance_floor`.
    """
    return float(-math.log(n_clusters) - 0.5 * n_features * math.log(2 * math.pi * math.e * sigma2))


class KMeansFamily(SharedVarianceFamily):
    """Hard assignments (C' = 1): each row adds to its nearest cluster only.

    The free energy is Eq. 15 after the M-step's variance update; during initial
    E-steps without an M-step, Eq. 7 at the current parameters, so the history
    never decreases either way.
    """

    name = "kmeans"
    hard = True

    def free_energy(self, stats, params, kernel, new):
        if new is None:
            return super().free_energy(stats, params, kernel, new)[0], kernel.sigma2
        C, D = new.means.shape
        sigma2 = float(new.covariances)
        return kmeans_free_energy(C, D, float(variance_floor(sigma2, new.means))), sigma2

    def final_params(self, stats, params, kernel):
        """sigma^2 = sum_n w_n ||y_n - mu_c(n)||^2 / (D W) of the last E-step."""
        D = params.means.shape[1]
        return params.replace(covariances=np.asarray(float(stats.scal[QE]) / (D * stats.scal[W])))

"""The isotropic equal-weight Gaussian mixture of seeds 000 / 004: p(y) = (1/C) sum_c N(y; mu_c, sigma^2 I)."""

from __future__ import annotations

import math

from ..kernels.estep import LSE, W
from .base import Family, MeanStats


def truncated_free_energy(stats: MeanStats, n_clusters: int, n_features: int, sigma2: float) -> float:
    """Truncated free energy per point (seed 004 Eq. 7) at the E-step's parameters.

    F = (1/W) sum_n w_n log sum_{c in K(n)} (1/C) N(y_n; mu_c, sigma^2 I), ``sigma2``
    being the floored variance the E-step used (``EStepOp.kernel_sigma2``).
    """
    scal = stats.scal
    return float(scal[LSE] / scal[W] - math.log(n_clusters) - 0.5 * n_features * math.log(2 * math.pi * sigma2))


class IsotropicFamily(Family):
    """var-GMM (seed 000): soft responsibilities over the C' clusters of K(n); the free energy
    is Eq. 7 of seed 004 at the E-step's parameters, the log-likelihood when C' = C."""

    name = "isotropic"

    def free_energy(self, stats, kernel_sigma2, new_centres, new_sigma2):
        C, D = stats.S1.shape
        return truncated_free_energy(stats, C, D, kernel_sigma2), kernel_sigma2

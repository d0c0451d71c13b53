"""What the mixtures with learned weights and per-component covariances share (spherical, diag, full).

Their kernel cost is the negative log-joint, cost_c(y) = -2 log pi_c N(y; mu_c, Sigma_c) - D log 2 pi
= (y - mu_c)^T Sigma_c^-1 (y - mu_c) + log det Sigma_c - 2 log pi_c, with scale 1: the E-step keeps
the C' components of largest log-joint (Lücke & Forster 2019 Prop. 1 in its general form) and
q_c(y) = exp(-(cost_c - cost_min) / 2) / Z. The M-step (Forster & Lücke 2018 Eq. 4 generalised; scikit-learn's
``_estimate_gaussian_parameters``) is

    pi_c = S0[c] / W,  mu_c = S1[c] / S0[c],
    Sigma_c = (S2[c] - S0[c] (mu_c^new - mu_c)(mu_c^new - mu_c)^T) / S0[c] + reg_covar I

with S2 the second moment about the E-step's means (parallel-axis identity). A component that
loses all its mass (S0 = 0) is dropped: weight 0 (cost +inf, no row selects it again), its mean
and covariance kept so that C and the arrays' shapes stay fixed. It contributed p(y, c) = 0 to
every row's sum already, so dropping it leaves the free energy unchanged (monotone).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConvergenceError
from .base import Family, Params, SuffStats, updated_means


def log_weights(weights: np.ndarray) -> np.ndarray:
    """log pi_c, -inf for a dropped component."""
    with np.errstate(divide="ignore"):
        return np.log(weights)


class WeightedFamily(Family):
    """Base of the families with learned weights and per-component covariances."""

    def initial_params(self, centres, sigma2, reg):
        C, D = centres.shape
        return Params(centres, np.full(C, 1.0 / C), self.initial_covariances(float(sigma2) + reg, C, D))

    def m_step(self, stats: SuffStats, params: Params, reg: float) -> Params:
        means, shift = updated_means(stats, params.means)
        has_mass = stats.S0 > 0
        cov = params.covariances.copy()
        cov[has_mass] = self.covariances(stats, shift, reg, has_mass)
        weights = stats.S0 / stats.S0.sum() if self.learn_weights else params.weights
        return Params(means, weights, cov)

    def covariances(self, stats: SuffStats, shift: np.ndarray, reg: float, has_mass: np.ndarray) -> np.ndarray:
        """The new covariances of the components with mass (the M-step above). A variance that reaches 0
        (a component collapsed onto repeated rows with ``reg_covar=0``) is raised to the variance floor
        (:func:`~.base.variance_floor`) by the diagonal and spherical families, where scikit-learn's raise;
        a covariance matrix that is not positive definite is :func:`ill_defined`, as scikit-learn's."""
        raise NotImplementedError

    def n_parameters(self, n_clusters, n_features):
        weights = n_clusters - 1 if self.learn_weights else 0
        return n_clusters * n_features + weights + n_clusters * self.covariance_parameters(n_features)

    def covariance_parameters(self, n_features: int) -> int:
        raise NotImplementedError


def ill_defined(family: str) -> ConvergenceError:
    """scikit-learn's error for a covariance that is not positive definite."""
    return ConvergenceError(
        "Fitting the mixture model failed because some components have ill-defined empirical covariance "
        "(for instance caused by singleton or collapsed samples). Try to decrease the number of components, "
        f"increase reg_covar, or scale the input data. (covariance_type={family!r})")

"""Sparsified Gaussian mixtures (SGMM, Kightley & Becker 2019 Sec. II-D): diagonal or spherical mixtures fitted on sketches.

A sketch row is y = R^T x~, the Q entries of the preconditioned row x~ at its indices i_1 .. i_Q
(:mod:`daskclust.transforms.sketch`); the kernels read it packed, values then indices carried as bits
(:func:`~daskclust.transforms.sketch.pack_sketch`, :mod:`daskclust.kernels.index_bits`). The model
lives in the full P-dimensional preconditioned space, and a row's likelihood is that of its observed
entries (Kightley & Becker 2019 Eqs. 14-16, diagonal case): with S_c = diag(s_c),

    cost_c(y) = sum_q (y_q - mu_{c,i_q})^2 / s_{c,i_q} + sum_q log s_{c,i_q} - 2 log pi_c

(-2 log pi_c p_c^R(y) - Q log 2 pi), scale 1, so the responsibilities are Eq. 17 and the truncated
E-step keeps the C' components of smallest cost. Statistics per component and feature, P_i = R_i R_i^T
selecting the observed entries (Eq. 29):

    S0[c] = sum_i w_i r_ic,   N[c, p] = sum_i w_i r_ic [p in R_i],
    S1[c, p] = sum_i w_i r_ic [p in R_i] y_ip,   S2[c, p] = sum_i w_i r_ic [p in R_i] (y_ip - mu_cp)^2

and the M-step (Eqs. 19, 27, 28): pi_c = S0[c] / W, mu_cp = S1[c, p] / N[c, p],
s_cp = (S2[c, p] - N[c, p] (mu_cp^new - mu_cp)^2) / N[c, p] + reg_covar; spherical:
s_c = sum_p (S2[c, p] - N[c, p] (mu_cp^new - mu_cp)^2) / sum_p N[c, p] + reg_covar. A feature
no row of a component observed keeps its mean and variance. This is exact EM on the likelihood
of the observed entries, prod_i sum_c pi_c N(y_i; R_i^T mu_c, R_i^T S_c R_i): the free energy
(LSE / W - Q/2 log 2 pi) never decreases, truncated or not. Cost O(Q) per (row, component) pair:
O(N K Q) per iteration, O(N C' G Q) with the estimated neighbourhoods. With Q = P and no
preconditioning it is the diagonal (spherical) family iteration by iteration.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from ..kernels.estep import LSE, N_SCALARS, W
from ..kernels.index_bits import index_at
from .base import HALF_LOG_2PI, Params, SuffStats, variance_floor
from .gaussian import WeightedFamily, log_weights
from .overloads import register

SketchParams = namedtuple("SketchParams", ["means", "prec", "log_var", "log_weight2"])
"""(C, P) means, precisions 1 / s_cp and log s_cp (spherical: each row constant), and (C,) -2 log pi_c."""


def _cost(x, c, params):
    Q = x.shape[0] // 2
    mu = params.means[c]
    prec = params.prec[c]
    log_var = params.log_var[c]
    s = 0.0
    for q in range(Q):
        p = index_at(x[Q + q])
        t = x[q] - mu[p]
        s += t * t * prec[p] + log_var[p]
    return s + params.log_weight2[c]


def _add_point(x, wq, c, value, params, stats):
    Q = x.shape[0] // 2
    mu = params.means[c]
    stats[0][c] += wq
    for q in range(Q):
        p = index_at(x[Q + q])
        stats[1][c, p] += wq * x[q]
        t = x[q] - mu[p]
        stats[2][c, p] += wq * t * t
        stats[3][c, p] += wq


def _euclid(x, c, params, value):
    """||y - R^T mu_c||^2 over the observed entries (the sketch's quantization error)."""
    Q = x.shape[0] // 2
    mu = params.means[c]
    s = 0.0
    for q in range(Q):
        t = x[q] - mu[index_at(x[Q + q])]
        s += t * t
    return s


register(SketchParams, cost=_cost, add_point=_add_point, euclid=_euclid)


@dataclass
class SketchStats(SuffStats):
    """:class:`SuffStats` plus N[c, p], the responsibility mass that observed feature p."""

    N: np.ndarray = None

    @classmethod
    def zeros(cls, n_clusters: int, n_features: int, second=()) -> SketchStats:
        C, P = n_clusters, n_features
        return cls(np.zeros(C), np.zeros((C, P)), np.zeros((C, P)), np.zeros(N_SCALARS), np.zeros((C, P)))

    def arrays(self):
        return self.S0, self.S1, self.S2, self.N

    def merge(self, other: SketchStats) -> SketchStats:
        super().merge(other)
        self.N += other.N
        return self


class SketchedFamily(WeightedFamily):
    """Diagonal ("diag") or spherical SGMM on sketches of ``n_kept`` entries (the module docstring)."""

    def __init__(self, covariance_type: str = "diag", n_kept: int = 1):
        self.covariance_type = covariance_type
        self.name = f"sketched-{covariance_type}"
        self.diagonal = covariance_type == "diag"
        self.n_kept = int(n_kept)

    def covariance_shape(self, n_clusters, n_features):
        return (n_clusters, n_features) if self.diagonal else (n_clusters,)

    def average_variances(self, covariances):
        return covariances.mean(axis=1) if self.diagonal else covariances

    def new_stats(self, n_clusters, n_features):
        return SketchStats.zeros(n_clusters, n_features)

    def kernel_params(self, params: Params) -> SketchParams:
        C, P = params.means.shape
        var = variance_floor(params.covariances, params.means)
        var = np.broadcast_to(var if self.diagonal else var[:, None], (C, P))
        return SketchParams(params.means, np.ascontiguousarray(1.0 / var), np.ascontiguousarray(np.log(var)),
                            -2.0 * log_weights(params.weights))

    def m_step(self, stats: SketchStats, params: Params, reg: float) -> Params:
        observed = stats.N > 0
        counts = np.where(observed, stats.N, 1.0)
        means = np.where(observed, stats.S1 / counts, params.means)
        spread = np.maximum(stats.S2 - stats.N * (means - params.means) ** 2, 0.0)  # about the new means
        has_mass = stats.S0 > 0
        cov = params.covariances.copy()
        if self.diagonal:
            cov = np.where(observed, spread / counts + reg, cov)
        else:
            cov[has_mass] = spread[has_mass].sum(axis=1) / stats.N[has_mass].sum(axis=1) + reg
        weights = stats.S0 / stats.S0.sum() if self.learn_weights else params.weights
        return Params(means, weights, cov)

    def bootstrap(self, stats: SketchStats, means: np.ndarray, sigma2: float, reg: float) -> Params:
        """The parameters after the hard bootstrap (Kightley & Becker 2019 Sec. III): every row given to its nearest
        seed by Eq. 30 (``stats``, centred on the seeds ``means``), weights by Eq. 19 and variances by
        Eq. 28 about the seeds; a feature no row of a seed observed gets ``sigma2``. Every weight
        keeps at least 1e-10 of the mass, so no seed is dropped before its first E-step."""
        observed = stats.N > 0
        counts = np.where(observed, stats.N, 1.0)
        if self.diagonal:
            cov = np.where(observed, stats.S2 / counts, sigma2) + reg
        else:
            total = stats.N.sum(axis=1)
            cov = np.where(total > 0, stats.S2.sum(axis=1) / np.maximum(total, 1e-300), sigma2) + reg
        mass = stats.S0 + 1e-10 * stats.S0.sum()
        return Params(means, mass / mass.sum(), cov)

    def free_energy(self, stats, params, kernel, new):
        """LSE / W - (Q/2) log 2 pi: the truncated log-likelihood per row of the observed entries."""
        return float(stats.scal[LSE] / stats.scal[W] - self.n_kept * HALF_LOG_2PI), self.mean_variance(params)

    def covariance_parameters(self, n_features: int) -> int:
        return n_features if self.diagonal else 1



SKETCHED_COVARIANCE_TYPES = ("diag", "spherical")
"""The ``covariance_type`` values :class:`SketchedFamily` fits (Kightley & Becker 2019's diagonal case and
its spherical restriction)."""

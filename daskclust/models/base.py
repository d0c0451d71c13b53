"""What every model family provides to the EM loop, and the statistics the mean families share.

A family owns its sufficient statistics (a typed value with ``merge``), its
M-step and its free energy; the loop (:mod:`daskclust.em.loop`) only calls
them. The E-step kernels (:mod:`daskclust.kernels.estep`,
:mod:`daskclust.kernels.search`) fill the statistics; a family is chosen by the
estimator (``KMeans`` -> :class:`~daskclust.models.kmeans.KMeansFamily`,
``GaussianMixture`` -> :class:`~daskclust.models.isotropic.IsotropicFamily`).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba.core import types
from numba.extending import overload

from ..kernels import family as kernel
from ..kernels.estep import N_SCALARS, W, sqdist

_EPS = float(np.finfo(np.float64).eps)
_TINY = float(np.finfo(np.float64).tiny)


@dataclass
class MeanStats:
    """Additive statistics of the truncated E-step (seed 000 Eq. 4 with the q of Eq. 5), float64:

    S0[c] = sum_n w_n q_c(n), S1[c] = sum_n w_n q_c(n) y_n, SD2[c] = sum_n w_n q_c(n) ||y_n - mu_c||^2
    (about the E-step's centres), and the scalars of :mod:`daskclust.kernels.estep` (W, LSE,
    QE, distance counts, changed rows).
    """

    S0: np.ndarray
    S1: np.ndarray
    SD2: np.ndarray
    scal: np.ndarray

    @classmethod
    def zeros(cls, n_clusters: int, n_features: int) -> MeanStats:
        return cls(np.zeros(n_clusters), np.zeros((n_clusters, n_features)), np.zeros(n_clusters),
                   np.zeros(N_SCALARS))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-component statistics as the kernels' ``stats`` tuple (IN/OUT); ``scal`` is passed apart."""
        return self.S0, self.S1, self.SD2

    def merge(self, other: MeanStats) -> MeanStats:
        """Add ``other`` in place (the statistics are sums over rows); returns self."""
        self.S0 += other.S0
        self.S1 += other.S1
        self.SD2 += other.SD2
        self.scal += other.scal
        return self


MeanParams = namedtuple("MeanParams", ["means", "sigma2"])
"""The kernels' parameters of the mean families (k-means, isotropic): (C, D) float64 means and the
floored shared variance. cost = ||x - mu_c||^2, scale = sigma^2 (seed 000 Eq. 5)."""


def _is_mean_params(params) -> bool:
    return isinstance(params, types.BaseNamedTuple) and params.instance_class is MeanParams


@overload(kernel.cost, inline="always")
def _mean_cost(x, c, params):
    if _is_mean_params(params):
        return lambda x, c, params: sqdist(x, params.means[c])
    return None


@overload(kernel.scale, inline="always")
def _mean_scale(params):
    if _is_mean_params(params):
        return lambda params: params.sigma2
    return None


@overload(kernel.euclid, inline="always")
def _mean_euclid(x, c, params, value):
    if _is_mean_params(params):
        return lambda x, c, params, value: value
    return None


@overload(kernel.add_point, inline="always")
def _mean_add_point(x, wq, c, value, params, stats):
    """S0[c] += wq, S1[c] += wq x, SD2[c] += wq ||x - mu_c||^2 (see :class:`MeanStats`)."""
    if _is_mean_params(params):
        def impl(x, wq, c, value, params, stats):
            stats[0][c] += wq  # no tuple unpacking: numba's IR inlining then dropped the SD2 update
            for j in range(x.shape[0]):
                stats[1][c, j] += wq * x[j]
            stats[2][c] += wq * value
        return impl
    return None


def variance_floor(sigma2: float, centres: np.ndarray) -> float:
    """``sigma2`` raised to at least (eps max|mu|)^2, the variance of float64 rounding at the
    centres' scale, and to at least the smallest normal float: the one variance floor.

    A fit whose points coincide with their centres has sigma^2 = 0 (k-means of N = C
    points, constant data, ``reg_covar=0``), which 1 / (2 sigma^2) and log sigma^2
    cannot take. A mean of identical rows may differ from them by rounding; against
    this floor a distance of a few rounding errors costs a few units in the
    log-sum-exp, not ~1e300 as against the smallest float.
    """
    return max(float(sigma2), (_EPS * float(np.abs(centres).max())) ** 2, _TINY)


def mean_m_step(stats: MeanStats, centres: np.ndarray, reg: float = 0.0) -> tuple[np.ndarray, float]:
    """Truncated M-step of the means and the shared variance (seed 000 Eq. 4 with the q of Eq. 5).

    mu_c = sum_n w_n q_c(n) y_n / sum_n w_n q_c(n); a cluster with no mass keeps
    its centre. sigma^2 = sum_n sum_c w_n q_c(n) ||y_n - mu_c^new||^2 / (D sum_n w_n),
    obtained from the second moment about the old centres by the parallel-axis
    identity  sum q ||y - mu_new||^2 = sum q ||y - mu_old||^2 - S0 ||mu_new - mu_old||^2,
    which avoids the cancellation of sum q ||y||^2 - S0 ||mu_new||^2. ``reg`` is
    added to sigma^2 (``reg_covar``).
    """
    S0, S1, SD2 = stats.S0, stats.S1, stats.SD2
    has_mass = S0 > 0
    new = np.divide(S1, S0[:, None], out=centres.copy(), where=has_mass[:, None])  # no boolean gathers
    shift2 = np.einsum("cd,cd->c", new - centres, new - centres)
    within = max(float(SD2.sum() - np.dot(S0, shift2)), 0.0)
    D = centres.shape[1]
    return new, within / (D * stats.scal[W]) + reg


class Family:
    """A model family: its statistics, M-step and free energy (all on the driver).

    ``hard``: every row belongs to one cluster (C' = 1, k-means); its assignments
    unchanged mean the M-step repeats itself (a fixed point).
    """

    name = ""
    hard = False

    def new_stats(self, n_clusters: int, n_features: int) -> MeanStats:
        return MeanStats.zeros(n_clusters, n_features)

    def kernel_params(self, centres: np.ndarray, sigma2: float) -> MeanParams:
        """The parameters as the E-step kernels take them (``sigma2`` already floored)."""
        return MeanParams(centres, float(sigma2))

    def m_step(self, stats: MeanStats, centres: np.ndarray, reg: float) -> tuple[np.ndarray, float]:
        return mean_m_step(stats, centres, reg)

    def free_energy(self, stats: MeanStats, kernel_sigma2: float, new_centres: np.ndarray | None,
                    new_sigma2: float | None) -> tuple[float, float]:
        """(free energy per point, the variance it belongs to) of an iteration whose E-step used
        ``kernel_sigma2``; ``new_*`` are the M-step's result, None when no M-step followed."""
        raise NotImplementedError

    def final_sigma2(self, stats: MeanStats, kernel_sigma2: float) -> float:
        """The variance reported with the fitted centres (those of the last E-step)."""
        return kernel_sigma2

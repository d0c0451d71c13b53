"""M-step and free energies, computed on the driver from merged statistics."""

from __future__ import annotations

import math

import numpy as np

from ..kernels.estep import LSE, W

_EPS = float(np.finfo(np.float64).eps)
_TINY = float(np.finfo(np.float64).tiny)


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


def m_step(acc: dict[str, np.ndarray], centres: np.ndarray, reg: float = 0.0) -> tuple[np.ndarray, float]:
    """Truncated M-step (seed 000 Eq. 4 with the truncated q of Eq. 5).

    mu_c = sum_n w_n q_c(n) y_n / sum_n w_n q_c(n); a cluster with no mass keeps
    its centre. sigma^2 = sum_n sum_c w_n q_c(n) ||y_n - mu_c^new||^2 / (D sum_n w_n),
    obtained from the second moment about the old centres by the parallel-axis
    identity  sum q ||y - mu_new||^2 = sum q ||y - mu_old||^2 - S0 ||mu_new - mu_old||^2,
    which avoids the cancellation of sum q ||y||^2 - S0 ||mu_new||^2. ``reg`` is
    added to sigma^2 (``reg_covar``).
    """
    S0, S1, SD2 = acc["S0"], acc["S1"], acc["SD2"]
    has_mass = S0 > 0
    new = np.divide(S1, S0[:, None], out=centres.copy(), where=has_mass[:, None])  # no boolean gathers
    shift2 = np.einsum("cd,cd->c", new - centres, new - centres)
    within = max(float(SD2.sum() - np.dot(S0, shift2)), 0.0)
    D = centres.shape[1]
    sigma2 = within / (D * acc["scal"][W]) + reg
    return new, sigma2


def gmm_free_energy(acc: dict[str, np.ndarray], n_clusters: int, n_features: int, sigma2: float) -> float:
    """Truncated free energy per point (seed 004 Eq. 7) at the E-step's parameters.

    F = (1/W) sum_n w_n log sum_{c in K(n)} (1/C) N(y_n; mu_c, sigma^2 I), ``sigma2``
    being the floored variance the E-step used (``EStepOp.kernel_sigma2``).
    """
    scal = acc["scal"]
    return float(scal[LSE] / scal[W] - math.log(n_clusters) - 0.5 * n_features * math.log(2 * math.pi * sigma2))


def kmeans_free_energy(n_clusters: int, n_features: int, sigma2: float) -> float:
    """k-means free energy per point (seed 004 Prop. 3, Eq. 15): -log C - (D/2) log(2 pi e sigma^2).

    ``sigma2`` is the variance after the M-step, sum_n ||y_n - mu_c(n)||^2 / (D N), floored
    by :func:`variance_floor`.
    """
    return float(-math.log(n_clusters) - 0.5 * n_features * math.log(2 * math.pi * math.e * sigma2))

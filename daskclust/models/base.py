"""What every model family provides to the EM loop: parameters, statistics, M-step, free energy.

A family owns its parameters (:class:`Params`, on the driver), their form for the
E-step kernels (a namedtuple of the family's own class, for which the family's
module registers the kernels' numba overloads, see :mod:`daskclust.kernels.family`),
its sufficient statistics (:class:`SuffStats`, merged as a tree), its M-step and its
free energy; the loop (:mod:`daskclust.em.loop`) only calls them. Families are
looked up by name in :data:`daskclust.models.FAMILIES`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError
from ..kernels.estep import LSE, N_SCALARS, W
from ..kernels.validation import scale_bounds

_EPS = float(np.finfo(np.float64).eps)
_TINY = float(np.finfo(np.float64).tiny)
HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


@dataclass
class SuffStats:
    """Additive statistics of the truncated E-step (Forster & Lücke 2018 Eq. 4 with the q of Eq. 5), float64:

    S0[c] = sum_n w_n q_c(n), S1[c] = sum_n w_n q_c(n) y_n, S2[c] = the second moment about the
    E-step's mean mu_c, sum_n w_n q_c(n) (y_n - mu_c)(y_n - mu_c)^T reduced to the family's
    layout (:meth:`Family.new_stats`; e.g. trace: (C,); diagonal: (C, D); upper triangle of the full
    matrix: (C, D, D)),
    and the scalars of :mod:`daskclust.kernels.estep` (W, LSE, QE, distance counts, changed rows).
    Centring on the E-step's means avoids the cancellation of sum q y y^T - S0 mu mu^T.
    """

    S0: np.ndarray
    S1: np.ndarray
    S2: np.ndarray
    scal: np.ndarray

    @classmethod
    def zeros(cls, n_clusters: int, n_features: int, second: tuple[int, ...] = ()) -> SuffStats:
        """Zero statistics; ``second`` is the trailing shape of S2 per component."""
        return cls(np.zeros(n_clusters), np.zeros((n_clusters, n_features)), np.zeros((n_clusters, *second)),
                   np.zeros(N_SCALARS))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-component statistics as the kernels' ``stats`` tuple (IN/OUT); ``scal`` is passed apart."""
        return self.S0, self.S1, self.S2

    def merge(self, other: SuffStats) -> SuffStats:
        """Add ``other`` in place (the statistics are sums over rows); returns self."""
        self.S0 += other.S0
        self.S1 += other.S1
        self.S2 += other.S2
        self.scal += other.scal
        return self


@dataclass
class Params:
    """A mixture's parameters on the driver, float64 (scikit-learn's layouts).

    means : (C, D); weights : (C,), summing to 1 (0 for a component that lost all its
    mass); covariances : the family's layout -- a 0-d array sigma^2 shared by all
    components (k-means, isotropic), (C,) variances (spherical), (C, D) (diagonal)
    or (C, D, D) (full): :meth:`Family.covariance_shape`.
    """

    means: np.ndarray
    weights: np.ndarray
    covariances: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        return {"means": self.means, "weights": self.weights, "covariances": self.covariances}

    def replace(self, **changes) -> Params:
        return Params(**{**self.arrays(), **changes})


def variance_floor(sigma2, means: np.ndarray):
    """``sigma2`` (a number or an array) raised to at least (eps max|mu|)^2, the variance of float64
    rounding at the means' scale, and to at least the smallest normal float: the one variance floor.

    A fit whose points coincide with their centres has sigma^2 = 0 (k-means of N = C
    points, constant data, ``reg_covar=0``), which 1 / (2 sigma^2) and log sigma^2
    cannot take. A mean of identical rows may differ from them by rounding; against
    this floor a distance of a few rounding errors costs a few units in the
    log-sum-exp, not ~1e300 as against the smallest float.
    """
    return np.maximum(sigma2, max((_EPS * float(np.abs(means).max())) ** 2, _TINY))


def updated_means(stats: SuffStats, means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mu_c = S1[c] / S0[c] (Forster & Lücke 2018 Eq. 4); a component without mass keeps its mean.
    Also returns the shifts mu_new - mu_old (for the parallel-axis identity)."""
    has_mass = stats.S0 > 0
    new = np.divide(stats.S1, stats.S0[:, None], out=means.copy(), where=has_mass[:, None])  # no boolean gathers
    return new, new - means


class Family:
    """A model family: its parameters, statistics, M-step and free energy (all on the driver), and
    everything the estimators need of its covariance layout.

    ``hard``: every row belongs to one cluster (C' = 1, k-means); its assignments
    unchanged mean the M-step repeats itself (a fixed point). ``metric``: the kernel
    cost is a squared Euclidean distance, so the estimated search may bound pairs
    with the triangle inequality (Forster & Lücke 2018 Eq. 8); other families estimate their
    neighbourhoods from the cost itself (docs/algorithms/families.md).

    The covariance layout is the family's alone: the shape of :attr:`Params.covariances`
    (:meth:`covariance_shape`) and of the statistics (:meth:`new_stats`), the initial covariances,
    the checks of stored ones, and, for the estimators, scikit-learn's attributes
    (``covariances_``, ``precisions_``, ``precisions_cholesky_``), ``precisions_init``, sampling and
    the parameter count. The defaults here are those of the layouts whose ``covariances_`` are
    variances (one or D per component: spherical, diagonal, and the shared variance shown per
    component); the full and tied families override them with matrices. No caller asks which
    layout a family has.
    """

    name = ""
    hard = False
    metric = False
    learn_weights = True
    """Whether the M-step learns the weights pi_c = S0[c] / W (else they stay as initialised)."""
    default_n_explore = 5
    """Components drawn uniformly per row and iteration besides the search's candidates when the
    estimator's ``n_explore`` is None (docs: :class:`daskclust.GaussianMixture`)."""
    default_init = "k-means||"
    """The seeding ``init="auto"`` resolves to: k-means||, whose restarts and Lloyd steps lower the
    k-means cost. From its seeds the mixtures with learned variances reach scikit-learn's held-out
    likelihood (within 0.5 %) on 140 of the 180 rows of the ``realdata-mixtures`` bench, from
    k-means++'s on 116; the isotropic mixture's quantization error on BIRCH C=1024 is 7 % lower from
    it (the ``wallclock`` gate)."""

    def with_weights(self, learned: bool) -> Family:
        """This family with its weights learned or kept as initialised (equal)."""
        if learned == self.learn_weights:
            return self
        family = copy.copy(self)
        family.learn_weights = learned
        return family

    # the layout ---------------------------------------------------------------
    def covariance_shape(self, n_clusters: int, n_features: int) -> tuple[int, ...]:
        """Shape of :attr:`Params.covariances` (and of ``precisions_init``)."""
        raise NotImplementedError

    def new_stats(self, n_clusters: int, n_features: int) -> SuffStats:
        """Zero statistics; by default S2 is the trace, (C,)."""
        return SuffStats.zeros(n_clusters, n_features)

    def initial_covariances(self, variance: float, n_clusters: int, n_features: int) -> np.ndarray:
        """sigma^2 I in the family's layout (:meth:`covariance_shape`)."""
        return np.full(self.covariance_shape(n_clusters, n_features), float(variance))

    def average_variances(self, covariances: np.ndarray) -> np.ndarray:
        """tr(Sigma_c) / D of each component, or one value shared by all (for :meth:`mean_variance`)."""
        return covariances

    def covariance_problem(self, covariances: np.ndarray) -> str | None:
        """Why finite covariances of the right shape are not covariances of this family, or None."""
        return "its variances are not all positive" if np.any(covariances <= 0) else None

    def covariances_attribute(self, params: Params) -> np.ndarray:
        """scikit-learn's ``covariances_`` of the parameters."""
        return params.covariances

    def model_covariances(self, covariances: np.ndarray, sigma2: float) -> np.ndarray:
        """:attr:`Params.covariances` back from the fitted attributes ``covariances_`` and ``sigma2_``."""
        return covariances

    def precisions(self, covariances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """scikit-learn's (``precisions_``, ``precisions_cholesky_``) of ``covariances_``."""
        precisions = 1.0 / covariances
        return precisions, np.sqrt(precisions)

    def covariances_from_precisions(self, precisions, n_clusters: int, n_features: int) -> np.ndarray:
        """:attr:`Params.covariances` from scikit-learn-style ``precisions_init``, checked
        (:class:`InvalidParameterError` for a wrong shape or values that are not precisions)."""
        prec = np.asarray(precisions, dtype=np.float64)
        shape = self.covariance_shape(n_clusters, n_features)
        if prec.shape != shape:
            raise InvalidParameterError(f"The parameter '{self.name} precision' should have the shape of {shape}, "
                                        f"but got {prec.shape}")
        if not np.all(np.isfinite(prec)):
            raise InvalidParameterError(f"'{self.name} precision' should be finite")
        return self.inverted_precisions(prec)

    def inverted_precisions(self, precisions: np.ndarray) -> np.ndarray:
        """The covariances of finite precisions of the right shape (:meth:`covariances_from_precisions`)."""
        if np.any(precisions <= 0):
            raise InvalidParameterError(f"'{self.name} precision' should be positive")
        return 1.0 / precisions

    def sample_deviations(self, z: np.ndarray, covariances: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Standard normal rows ``z`` (n, D) made draws of N(0, Sigma_label) for each row's component,
        ``covariances`` being ``covariances_``."""
        return z * np.sqrt(covariances[labels]).reshape(len(labels), -1)

    def covariances_for_empty(self, covariances: np.ndarray, empty: np.ndarray) -> np.ndarray:
        """The covariances with those of the ``empty`` components (a start's clusters without rows)
        replaced by the mean of the others'; a copy."""
        cov = covariances.copy()
        cov[empty] = cov[~empty].mean(axis=0)
        return cov

    def n_parameters(self, n_clusters: int, n_features: int) -> int:
        """Free parameters (for BIC / AIC): means, weights and covariances."""
        raise NotImplementedError

    # checks -------------------------------------------------------------------
    def params_problem(self, params: Params, n_clusters: int, n_features: int) -> str | None:
        """Why ``params`` (read from a model or checkpoint) are not a density of this family with C
        components in D dimensions, or None: float arrays of the family's shapes, finite, weights
        pi_c >= 0 with sum_c pi_c = 1, and covariances as :meth:`covariance_problem` wants them
        (variances > 0, a shared 0-d variance >= 0 raised to the variance floor by the kernels,
        covariance matrices symmetric positive definite)."""
        C, D = n_clusters, n_features
        shapes = {"means": (C, D), "weights": (C,), "covariances": self.covariance_shape(C, D)}
        for name, shape in shapes.items():
            value = np.asarray(getattr(params, name))
            if value.dtype.kind != "f" or value.shape != shape:
                return f"its {name} are not a float array of shape {shape}"
            if not np.all(np.isfinite(value)):
                return f"its {name} are not all finite"
        weights, cov = np.asarray(params.weights), np.asarray(params.covariances)
        largest = scale_bounds(np.float64, D)[1]  # beyond it, squared distances overflow
        if np.abs(np.asarray(params.means)).max() > largest or np.abs(cov).max() > largest ** 2:
            return (f"its means exceed {largest:.3g} or its covariances {largest ** 2:.3g} in magnitude (squared "
                    "distances would overflow)")
        if np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
            return "its weights are not non-negative numbers summing to 1"
        return self.covariance_problem(cov)

    # EM -----------------------------------------------------------------------
    def initial_params(self, centres: np.ndarray, sigma2: float, reg: float) -> Params:
        """The parameters before the first E-step, from the seeds and the seeding's variance sigma^2
        (equal weights, covariances sigma^2 I + reg)."""
        raise NotImplementedError

    def kernel_params(self, params: Params):
        """The parameters as the E-step kernels take them (floored, factorised, logs precomputed)."""
        raise NotImplementedError

    def m_step(self, stats: SuffStats, params: Params, reg: float) -> Params:
        raise NotImplementedError

    def free_energy(self, stats: SuffStats, params: Params, kernel, new: Params | None) -> tuple[float, float]:
        """(free energy per point, the variance of the history row) of an iteration whose E-step used
        ``params`` (``kernel`` as the kernels took them); ``new`` is the M-step's result, None when no
        M-step followed.

        Here the truncated free energy at the E-step's parameters (Lücke & Forster 2019 Eq. 7, general form),
        F = (1/W) sum_n w_n log sum_{c in K(n)} pi_c N(y_n; mu_c, Sigma_c) = LSE / W + log_norm,
        the log-likelihood per point when C' = C, and sum_c pi_c tr(Sigma_c) / D.
        """
        D = stats.S1.shape[1]
        return float(stats.scal[LSE] / stats.scal[W] + self.log_norm(kernel, D)), self.mean_variance(params)

    def log_norm(self, kernel, n_features: int) -> float:
        """log pi_c N(y; mu_c, Sigma_c) = log_norm - cost_c(y) / (2 scale): the constant the kernels leave out."""
        return -n_features * HALF_LOG_2PI

    def cost_floor(self, kernel) -> tuple[np.ndarray, np.ndarray]:
        """(a (C, D), b (C,)) such that cost_c(x) >= sum_j a_cj (x_j - mu_cj)^2 + b_c for every row x:
        the lower bound through which :func:`~daskclust.kernels.infer.bounded_top` rules components
        out without evaluating them (b_c = +inf for a component without weight)."""
        raise NotImplementedError

    def second_about(self, stats: SuffStats, shift: np.ndarray) -> np.ndarray:
        """S2 about the shifted means mu_c + shift_c, where shift_c = S1[c] / S0[c] - mu_c (the M-step's
        new means; the parallel-axis identity): sum_n q_c(n) (y_n - mu_c - shift_c)(...)^T
        = S2[c] - S0[c] shift_c shift_c^T, in the family's layout (here the trace, (C,))."""
        return stats.S2 - stats.S0 * np.einsum("cd,cd->c", shift, shift)

    def moved(self, stats: SuffStats, means: np.ndarray, new_means: np.ndarray) -> SuffStats:
        """Statistics about ``means`` re-centred about ``new_means``, so that statistics of later E-steps, centred
        on those means, add to them (stepwise and incremental EM): about their own M-step's means (then the
        second term below is zero) or any others. With ybar_c = S1[c] / S0[c] the component's mean of the rows,
        sum_n q_c(n) (y_n - m_c)(...)^T = [the same about ybar_c] + S0[c] (ybar_c - m_c)(ybar_c - m_c)^T:
        the first term is :meth:`second_about` with shift ybar - mu, the second minus :meth:`second_about` of
        the statistics without S2 and shift ybar - m. A component without weight keeps its (zero) S2."""
        has_mass = stats.S0 > 0
        row_means = np.divide(stats.S1, stats.S0[:, None], out=np.zeros_like(stats.S1), where=has_mass[:, None])
        to_rows = np.where(has_mass[:, None], row_means - means, 0.0)
        from_rows = np.where(has_mass[:, None], row_means - new_means, 0.0)
        without_second = SuffStats(stats.S0, stats.S1, np.zeros_like(stats.S2), stats.scal)
        second = self.second_about(stats, to_rows) - self.second_about(without_second, from_rows)
        return SuffStats(stats.S0.copy(), stats.S1.copy(), second, stats.scal.copy())

    def final_params(self, stats: SuffStats, params: Params, kernel) -> Params:
        """The parameters reported after the last E-step (which used ``params``)."""
        return params

    def mean_variance(self, params: Params) -> float:
        """sum_c pi_c tr(Sigma_c) / D: the spread the searches scale their first thresholds by."""
        per = np.broadcast_to(self.average_variances(params.covariances), params.weights.shape)
        return float(np.dot(params.weights, per))

"""What predict, predict_proba and score_samples run on each block of rows: an exact search of every
row's best components under the family's own cost (Mahalanobis distance, log-determinant and log
weight), through balls of components and a lower bound of the cost that holds for each of them."""

from __future__ import annotations

import math

import numpy as np

from ..kernels.ballindex import build_ball_index
from ..kernels.infer import bounded_top
from .base import Family, Params

SCORE_TOLERANCE = 1e-9
"""Largest amount (nats per row) by which a score (log-likelihood) found through the index may be
below the exact log sum over all C components: components whose cost bound leaves them less than
this share of the evaluated mass together are not evaluated."""

GROUPS_PER_SQRT_C = 2.0
"""Groups of components: this many times sqrt(C). Smaller groups rule out more components (each
costs D or D^2 flops to evaluate) for more group distances (D flops each) per row."""

_SAFETY = 1e-9
"""Relative slack on the bounds (metrics shrunk, radii grown) so that rounding never rules out a
component the exact cost would keep."""


class MixtureIndex:
    """An exact search of a fitted mixture's components for new rows.

    The components are grouped in about 2 sqrt(C) balls of their means; each family gives a lower
    bound of its cost, cost_c(x) >= ||x - mu_c||^2_{a_c} + b_c (:meth:`Family.cost_floor`), and
    :func:`~daskclust.kernels.infer.bounded_top` evaluates only the components whose bound does not
    rule them out (see there). ``top(X, k)`` returns the exact k most responsible components of
    each row with their posterior responsibilities, and the log-likelihood within
    :data:`SCORE_TOLERANCE` of the exact value (``exact=True``: every component evaluated, the
    exact log sum). The cost of a row is that of the group centres plus the components that could
    matter: O(sqrt(C) D) where the means are well separated relative to the covariances, O(C D) at
    worst -- scikit-learn's.
    """

    def __init__(self, family: Family, params: Params, exact: bool = False):
        C, D = params.means.shape
        self.kernel = family.kernel_params(params)
        self.log_norm = family.log_norm(self.kernel, D)
        self.n_components = C
        self.exact = exact
        metric, const = family.cost_floor(self.kernel)
        self.groups = cost_groups(np.asarray(params.means, dtype=np.float64), np.asarray(metric, dtype=np.float64),
                                  np.asarray(const, dtype=np.float64))

    def _search(self, X: np.ndarray, k: int, log_margin: float):
        n = X.shape[0]
        k = min(k, self.n_components)
        idx = np.empty((n, k), dtype=np.int32)
        q = np.empty((n, k))
        lse = np.empty(n)
        bounded_top(X, self.kernel, *self.groups, k, log_margin, idx, q, lse)
        return idx, q, lse

    def labels(self, X: np.ndarray) -> np.ndarray:
        """The most responsible component of each row (n,) int32, exactly (ties to the lower cost found first)."""
        return self._search(X, 1, 0.0)[0][:, 0]

    def top(self, X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices (n, k) int32, posterior responsibilities (n, k), log-likelihood (n,)) of a block: the
        k most responsible components, q_c = pi_c N(y; mu_c, Sigma_c) / p(y), and log p(y) (within
        :data:`SCORE_TOLERANCE`, or exact with ``exact``)."""
        margin = np.inf if self.exact else math.log(self.n_components / SCORE_TOLERANCE)
        idx, q, lse = self._search(X, k, margin)
        return idx, q, lse + self.log_norm


def cost_groups(means: np.ndarray, metric: np.ndarray, const: np.ndarray):
    """The arrays :func:`~daskclust.kernels.infer.bounded_top` takes after the family's parameters:
    (group centres (B, D), group metrics (B, D), group constants (B,), radii (B,), offsets (B + 1,),
    members (C,) int64, member distances (C,), member constants (C,)).

    Groups: about 2 sqrt(C) balls of the means (a few Lloyd steps, :func:`build_ball_index`) in the
    components' typical metric (the median of a_c per feature), so that a group holds components
    near each other in the geometry the bound uses; the grouping only changes how much is pruned,
    never the result.
    """
    C, D = means.shape
    typical = np.sqrt(np.median(metric, axis=0))
    gcent, _, offsets, _, _, ids = build_ball_index(means * typical, seed=0,
                                                   n_groups=max(1, int(GROUPS_PER_SQRT_C * np.sqrt(C))))
    B = len(gcent)
    members = ids.astype(np.int64)
    g_of = np.repeat(np.arange(B), np.diff(offsets))
    sizes = np.maximum(np.diff(offsets), 1)
    centres = np.zeros((B, D))
    np.add.at(centres, g_of, means[members])
    centres /= sizes[:, None]
    gmetric = np.full((B, D), np.inf)
    np.minimum.at(gmetric, g_of, metric[members])
    gmetric = np.where(np.isfinite(gmetric), gmetric, 0.0) * (1.0 - _SAFETY)
    diff = means[members] - centres[g_of]
    mdist = np.sqrt(np.einsum("nd,nd->n", diff * gmetric[g_of], diff))
    order = np.lexsort((mdist, g_of))  # within each group by distance to its centre
    members, mdist = members[order], mdist[order]
    mconst = const[members]
    radius = np.zeros(B)
    np.maximum.at(radius, g_of, mdist)
    gconst = np.full(B, np.inf)
    np.minimum.at(gconst, g_of, mconst)
    return (centres, gmetric, gconst, radius * (1.0 + _SAFETY), offsets.astype(np.int64), members, mdist, mconst)

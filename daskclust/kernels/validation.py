"""Value checks made in the first pass over each chunk."""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def first_nonfinite_row(X):
    """Index of the first row of ``X`` holding NaN or +-inf, or -1 if there is none."""
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            if not np.isfinite(X[i, j]):
                return i
    return -1


WEIGHT_MAX = float(np.finfo(np.float64).max) / 2.0 ** 53
"""The largest sample weight: sums of up to 2^53 weights (and of weighted squared distances at the
scale bounds' limit, divided by the total weight) cannot overflow."""
WEIGHT_MIN = float(np.finfo(np.float64).tiny)
"""The smallest positive sample weight: below it a weight is subnormal, its share of a total
rounds to zero and ratios of such weights lose their precision."""


@njit(nogil=True, cache=True)
def first_invalid_weight(w):
    """Index of the first weight that is NaN, +-inf, negative, above ``WEIGHT_MAX`` or positive but
    below ``WEIGHT_MIN`` (subnormal), or -1 if there is none (0 is a valid weight)."""
    for i in range(w.shape[0]):
        if not (np.isfinite(w[i]) and w[i] >= 0.0 and w[i] <= WEIGHT_MAX and (w[i] == 0.0 or w[i] >= WEIGHT_MIN)):
            return i
    return -1


def extremes(X: np.ndarray) -> tuple[float, float]:
    """(min x, max x) over ``X`` ((0.0, 0.0) when empty), NaN if ``X`` holds one: two vectorised numpy
    reductions (they release the GIL), a quarter of the CPU of a loop testing every value."""
    if X.size == 0:
        return 0.0, 0.0
    return float(X.min()), float(X.max())


@njit(nogil=True, cache=True)
def _max_abs_loop(X):
    m = 0.0
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            a = abs(float(X[i, j]))
            if a > m:
                m = a
    return m


def max_abs(X: np.ndarray) -> float:
    """Largest |x| over ``X`` (0.0 when empty; NaN ignored), for the scale checks of
    :func:`scale_bounds`: max(max x, -min x) from :func:`extremes`, a loop where NaN hides them."""
    lo, hi = extremes(X)
    if math.isnan(lo) or math.isnan(hi):
        return _max_abs_loop(X)
    return abs(max(hi, -lo))


def scale_bounds(dtype, n_features: int) -> tuple[float, float]:
    """The range of max|x| outside which clustering in ``dtype`` fails: squared distances
    between rows, at most 4 D max|x|^2, overflow above the upper bound, and every one of
    them underflows (below the smallest normal number) under the lower bound."""
    info = np.finfo(dtype)
    return math.sqrt(float(info.tiny) / (4 * n_features)), math.sqrt(float(info.max) / (4 * n_features))

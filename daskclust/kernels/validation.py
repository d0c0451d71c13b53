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


@njit(nogil=True, cache=True)
def first_invalid_weight(w):
    """Index of the first weight that is negative, NaN or +-inf, or -1 if there is none."""
    for i in range(w.shape[0]):
        if not (np.isfinite(w[i]) and w[i] >= 0.0):
            return i
    return -1


@njit(nogil=True, cache=True)
def max_abs(X):
    """Largest |x| over ``X`` (0.0 when empty), for the scale checks of :func:`scale_bounds`."""
    m = 0.0
    n, d = X.shape
    for i in range(n):
        for j in range(d):
            a = abs(float(X[i, j]))
            if a > m:
                m = a
    return m


def scale_bounds(dtype, n_features: int) -> tuple[float, float]:
    """The range of max|x| outside which clustering in ``dtype`` fails: squared distances
    between rows, at most 4 D max|x|^2, overflow above the upper bound, and every one of
    them underflows (below the smallest normal number) under the lower bound."""
    info = np.finfo(dtype)
    return math.sqrt(float(info.tiny) / (4 * n_features)), math.sqrt(float(info.max) / (4 * n_features))

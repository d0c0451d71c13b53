"""Value checks made in the first pass over each chunk."""

from __future__ import annotations

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

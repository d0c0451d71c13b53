"""Exact nearest centres settled from a guess by the triangle inequality.

A row y guessed to lie nearest to centre b is compared with b and b's G nearest centres N(b); every
other centre c is at least ||mu_c - mu_b|| - ||y - mu_b|| >= r_b - ||y - mu_b|| away, r_b the
distance from mu_b to the farthest of N(b). So when the nearest of {b} + N(b) is closer than
r_b - ||y - mu_b||, it is the nearest of all C centres, found with G + 1 distances instead of C.
A wrong guess is never wrong here, only unsettled (the caller searches those rows in full).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .estep import sqdist

SETTLE_MARGIN = 1e-9
"""Relative margin of the bound: far above the round-off of a squared distance in float64, so a row
settled by rounding alone would have had to tie within it."""


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def settle_nearest(X, means, guess, neighbours, radius, d2, label):
    """Settle each row's nearest centre from its guess (IN/OUT d2, label; returns the settled mask).

    X (n, D); means (C, D); guess (n,) the guessed nearest centre of each row, -1 for none;
    neighbours (C, G) each centre's G nearest other centres; radius (C,) r_b, the distance to the
    farthest of them (inf when they are all the others). A row i with b = guess[i] >= 0 is
    settled when min over {b} + N(b) of ||y_i - mu_c||^2 < (r_b - ||y_i - mu_b||)^2 (1 - margin);
    its d2[i], label[i] are then that minimum and its centre (ties to the smaller index). Compiled
    with reassociation, as the E-step kernels: a distance's D terms are summed in SIMD lanes.
    """
    n = X.shape[0]
    settled = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        b = np.int64(guess[i])
        if b < 0:
            continue
        own = sqdist(X[i], means[b])
        best = own
        arg = b
        for j in range(neighbours.shape[1]):
            c = np.int64(neighbours[b, j])
            d = sqdist(X[i], means[c])
            if d < best or (d == best and c < arg):
                best = d
                arg = c
        bound = radius[b] - np.sqrt(own)
        if bound > 0.0 and best < bound * bound * (1.0 - SETTLE_MARGIN):
            settled[i] = True
            d2[i] = best
            label[i] = arg
    return settled

"""Registering a family's kernel functions (:mod:`daskclust.kernels.family`) for its parameter class.

:func:`register` installs numba overloads of ``cost``, ``scale``, ``add_point``, ``euclid``,
``pair_value``, ``pair_settled`` and ``pair_floor_reaches`` that apply when the kernels get a
namedtuple of that class; each is inlined into the kernels (``inline="always"``). The defaults are
those of the families whose cost is a negative log-joint: ``euclid`` recomputes ||x - mu_c||^2 and
``pair_value`` is the cost itself; the estimated search records every pair outside G_c unless the
family gives a bound (:func:`settled_by_the_means` and :func:`cost_at_mean_reaches` of its cost for
the Gaussian families, whose cost takes a mean as a row; sketches keeping every feature have their own).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import types
from numba.extending import overload

from ..kernels import family as kernel
from ..kernels.estep import sqdist


def scale_one(params):
    return 1.0


def euclid_recomputed(x, c, params, value):
    return sqdist(x, params.means[c])


def cost_as_pair_value(params, value):
    return value


def record_every_pair(params, d, db, thr):
    return 1


def no_pair_floor(params, b, c, thr):
    return False


def settled_by_the_means(params, d, db, thr):
    """Nothing settled from the row's own costs (no triangle inequality for a negative log-joint):
    0 while G_b has an estimate to beat (thr finite), else 1 (recorded)."""
    return 0 if thr < np.inf else 1


def cost_at_mean_reaches(cost):
    """``pair_floor_reaches`` of a family whose ``cost`` is convex in the row (a quadratic form plus a
    constant): cost_c(mu_b) >= thr, since by Jensen's inequality the mean cost of c over rows whose
    mean is mu_b is at least cost_c(mu_b). The cost is compiled out of line here: inlined a second
    time into the kernel, numba 0.68 lost a loop variable's scope (NumbaIRAssumptionWarning)."""
    at_mean = njit(cost)

    def reaches(params, b, c, thr):
        return at_mean(params.means[b], c, params) >= thr

    return reaches


def add_point_trace(x, wq, c, value, params, stats):
    """S0[c] += wq, S1[c] += wq x, S2[c] += wq ||x - mu_c||^2 (statistics indexed, not unpacked:
    a tuple unpacked inside an inlined overload lost an update, numba 0.68)."""
    stats[0][c] += wq
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
    stats[2][c] += wq * sqdist(x, params.means[c])


def register(cls, *, cost, add_point, scale=scale_one, euclid=euclid_recomputed, pair_value=cost_as_pair_value,
             pair_settled=record_every_pair, pair_floor_reaches=no_pair_floor):
    """Make the kernels' functions call these implementations for parameters of class ``cls``."""

    def matches(params) -> bool:
        return isinstance(params, types.BaseNamedTuple) and params.instance_class is cls

    @overload(kernel.cost, inline="always")
    def _cost(x, c, params):
        return cost if matches(params) else None

    @overload(kernel.scale, inline="always")
    def _scale(params):
        return scale if matches(params) else None

    @overload(kernel.add_point, inline="always")
    def _add_point(x, wq, c, value, params, stats):
        return add_point if matches(params) else None

    @overload(kernel.euclid, inline="always")
    def _euclid(x, c, params, value):
        return euclid if matches(params) else None

    @overload(kernel.pair_value, inline="always")
    def _pair_value(params, value):
        return pair_value if matches(params) else None

    @overload(kernel.pair_settled, inline="always")
    def _pair_settled(params, d, db, thr):
        return pair_settled if matches(params) else None

    @overload(kernel.pair_floor_reaches, inline="always")
    def _pair_floor_reaches(params, b, c, thr):
        return pair_floor_reaches if matches(params) else None

"""Registering a family's kernel functions (:mod:`daskclust.kernels.family`) for its parameter class.

:func:`register` installs numba overloads of ``cost``, ``scale``, ``add_point``, ``euclid`` and
``pair_value`` that apply when the kernels get a namedtuple of that class; each is inlined into
the kernels (``inline="always"``). The defaults are those of the families whose cost is a negative
log-joint: ``euclid`` recomputes ||x - mu_c||^2 and ``pair_value`` is the cost itself.
"""

from __future__ import annotations

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


def add_point_trace(x, wq, c, value, params, stats):
    """S0[c] += wq, S1[c] += wq x, S2[c] += wq ||x - mu_c||^2 (statistics indexed, not unpacked:
    a tuple unpacked inside an inlined overload lost an update, numba 0.68)."""
    stats[0][c] += wq
    for j in range(x.shape[0]):
        stats[1][c, j] += wq * x[j]
    stats[2][c] += wq * sqdist(x, params.means[c])


def register(cls, *, cost, add_point, scale=scale_one, euclid=euclid_recomputed, pair_value=cost_as_pair_value):
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

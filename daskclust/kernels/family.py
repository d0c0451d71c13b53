"""What the E-step kernels ask of a model family, resolved when numba compiles them.

A family's parameters reach the kernels as a namedtuple of the family's own class
(e.g. :class:`daskclust.models.base.MeanParams`), and the family's module
registers, with numba's ``@overload``, what these functions do for that class.
The kernels (:mod:`daskclust.kernels.estep`, :mod:`daskclust.kernels.search`)
call only these, so a new family is one new module and the kernels are
specialised for it at compile time: no run-time dispatch, the family's code
inlined into the loop (measured: as fast as the hand-written kernel).

``cost(x, c, params)``
    How far row x is from component c: -2 s log p(x, c) up to a term that does not
    depend on c, s = ``scale(params)``. Smaller is more responsible; the kernels keep
    the C' components of smallest cost (Lücke & Forster 2019 Prop. 1 in its general form).
``scale(params)``
    s above: responsibilities are q_c(x) = exp(-(cost_c - cost_min) / 2 s) / Z.
``add_point(x, wq, c, value, params, stats)``
    Add row x with weight w q_c(x) to component c's statistics (the tuple ``stats``);
    ``value`` is ``cost(x, c, params)``.
``euclid(x, c, params, value)``
    ||x - mu_c||^2 (the quantization error's term), ``value`` being ``cost(x, c, params)``.
``pair_value(params, value)``
    What the estimated search averages over the rows closest to a component (Forster & Lücke 2018
    Eq. 8): the distance sqrt(value) for the Euclidean (mean) families, the cost itself
    -- the negative log-joint -- for the others.

The stubs below only name the functions; calling them outside numba is an error.
A family registers its implementations with :func:`daskclust.models.overloads.register`,
as overloads with ``inline="always"`` (inlined into the kernel's IR; without it the calls
stayed out of line and the truncated E-step took 1.5x as long); its ``add_point`` indexes
the statistics tuple (``stats[0][c] += ...``): a tuple unpacked inside an inlined overload
lost one of its updates (numba 0.68).

numba's on-disk cache keys a kernel on its own source file only: after editing a
family's overloads, delete the kernels' cache (``__pycache__/*.nbi``, ``*.nbc``) or
the kernels keep the old code. Installing a new version rewrites the files, which
invalidates the cache.
"""

from __future__ import annotations


def cost(x, c, params):  # pragma: no cover - replaced by the families' overloads when compiled
    raise NotImplementedError("daskclust.kernels.family.cost is compiled by numba for a family's parameters")


def scale(params):  # pragma: no cover
    raise NotImplementedError("daskclust.kernels.family.scale is compiled by numba for a family's parameters")


def add_point(x, wq, c, value, params, stats):  # pragma: no cover
    raise NotImplementedError("daskclust.kernels.family.add_point is compiled by numba for a family's parameters")


def euclid(x, c, params, value):  # pragma: no cover
    raise NotImplementedError("daskclust.kernels.family.euclid is compiled by numba for a family's parameters")


def pair_value(params, value):  # pragma: no cover
    raise NotImplementedError("daskclust.kernels.family.pair_value is compiled by numba for a family's parameters")

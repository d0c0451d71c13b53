"""Integer indices carried in float64 rows as their 64 bits.

A sketch row is one float64 row of the engine's chunks, its values then its indices
(:func:`daskclust.transforms.sketch.pack_sketch`). Each index i travels as the float64 whose bits
are those of the int64 i, so a kernel reads it back with a bitcast (:func:`index_at`), which
costs no instruction, where a float-to-int conversion per access made the sketched E-step kernel
take 1.3x as long (Kightley & Becker 2019's SGMM, every entry read once per component for its
cost and once for its statistics; C = 3, Q = 31 of P = 784). The bits of an index in [0, 2^52)
are a subnormal float64: finite, never NaN, never part of any arithmetic; the rows are only
copied (numpy, Dask and pickle keep the bits).
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import intrinsic


def indices_as_floats(indices: np.ndarray) -> np.ndarray:
    """``indices`` (integers) as float64 carrying the bits of their int64 values: the block a packed
    row holds them in."""
    return np.ascontiguousarray(indices, dtype=np.int64).view(np.float64)


def floats_as_indices(block: np.ndarray) -> np.ndarray:
    """The int64 indices a packed block carries (the inverse of :func:`indices_as_floats`)."""
    return np.ascontiguousarray(block, dtype=np.float64).view(np.int64)


@intrinsic
def index_at(typingctx, value):
    """The int64 whose bits the float64 ``value`` carries (:func:`indices_as_floats`), inside numba."""
    if value != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return types.int64(types.float64), codegen

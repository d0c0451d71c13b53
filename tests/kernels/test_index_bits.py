"""Indices carried in float64 rows as their bits (daskclust.kernels.index_bits)."""

import pickle

import dask.array as da
import numpy as np
from numba import njit

from daskclust.kernels.index_bits import floats_as_indices, index_at, indices_as_floats


@njit(cache=True)
def read_indices(block):
    out = np.empty(block.shape, dtype=np.int64)
    for i in range(block.shape[0]):
        for j in range(block.shape[1]):
            out[i, j] = index_at(block[i, j])
    return out


def test_indices_survive_packing_copies_and_transport():
    """Every index of every unsigned and signed width up to 2^52 comes back exactly from a packed row
    after the copies a row goes through (hstack, Dask concatenation, pickle), in numpy and in numba."""
    rng = np.random.default_rng(0)
    for dtype, top in ((np.uint8, 255), (np.uint16, 65535), (np.uint32, 2**32 - 1), (np.int64, 2**52 - 1)):
        indices = rng.integers(0, top, size=(37, 5), endpoint=True).astype(dtype)
        indices[0, 0], indices[0, 1] = 0, top
        rows = np.hstack([rng.normal(size=(37, 5)), indices_as_floats(indices)])
        assert np.isfinite(rows).all()
        lazy = da.concatenate([da.from_array(rows[:, :5], chunks=(10, 5)),
                               da.from_array(indices, chunks=(10, 5)).astype(np.int64).view(np.float64)], axis=1)
        for copy in (rows, pickle.loads(pickle.dumps(rows)), lazy.compute()):
            np.testing.assert_array_equal(copy.view(np.int64)[:, 5:], indices.astype(np.int64))
            np.testing.assert_array_equal(floats_as_indices(copy[:, 5:]), indices.astype(np.int64))
            np.testing.assert_array_equal(read_indices(np.ascontiguousarray(copy[:, 5:])), indices.astype(np.int64))

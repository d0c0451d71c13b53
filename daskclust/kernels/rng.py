"""Counter-based random numbers, keyed by (seed, stream, iteration, chunk).

A stream key is derived on the driver with :func:`stream_key`; inside kernels
the i-th draw of a stream is ``uniform(key, i)``. No state is carried between
calls, so results do not depend on which worker or thread runs a chunk, nor on
the order in which chunks run (the splitmix64 finaliser of Steele et al. 2014).
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True)
def mix64(z):
    """splitmix64 finaliser: a bijective avalanche of a 64-bit integer."""
    z = uint64(z)
    z = (z ^ (z >> uint64(30))) * _M1
    z = (z ^ (z >> uint64(27))) * _M2
    return z ^ (z >> uint64(31))


@njit
def uniform(key, counter):
    """The ``counter``-th uniform draw in [0, 1) of the stream ``key``."""
    z = mix64(uint64(key) + (uint64(counter) + uint64(1)) * _GOLDEN)
    return float(z >> uint64(11)) * (1.0 / 9007199254740992.0)


@njit
def randint(key, counter, n):
    """The ``counter``-th integer draw in [0, n) of the stream ``key``."""
    return min(int(uniform(key, counter) * n), n - 1)


def stream_key(*parts: int) -> np.uint64:
    """Combine integers (seed, stream id, iteration, chunk, ...) into one stream key."""
    key = np.uint64(0x243F6A8885A308D3)
    with np.errstate(over="ignore"):
        for part in parts:
            key = np.uint64(mix64(np.uint64(key) ^ (np.uint64(int(part) & 0xFFFFFFFFFFFFFFFF) + _GOLDEN)))
    return key

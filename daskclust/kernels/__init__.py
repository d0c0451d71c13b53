"""Numba kernels: pure functions of numpy arrays, one chunk at a time.

They never import Dask, are single-threaded, release the GIL
(``nogil=True``) and accumulate in float64 into caller-allocated buffers
(marked IN/OUT in the docstrings). Parallelism comes from the engine running
several chunks at once on a worker's threads.
"""

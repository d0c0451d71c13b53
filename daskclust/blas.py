"""The driver's BLAS threads.

OpenBLAS threads that have just shared a product busy-wait for their next one (about 2^28 cycles)
before they sleep. On the driver that spin takes a core from the workers of a local cluster: after a
multithreaded ``np.dot`` of C = 16,384 weights (the searches' mean variance, every iteration) the
spinning thread took 70 ms of CPU during each 90 ms E-step pass of KMeans on BIRCH, and the workers'
kernels waited for it. The driver's own products are small (parameters, not rows), so one thread
serves them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from threadpoolctl import threadpool_limits


def one_blas_thread() -> AbstractContextManager:
    """Single-threaded BLAS in this process inside the ``with`` block (restored on exit)."""
    return threadpool_limits(1, user_api="blas")

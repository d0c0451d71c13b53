"""The kernels' scratch memory is bounded whatever the chunk size (issue 9, item 7).

The worker's address space is capped with RLIMIT_AS, which, unlike Dask's
memory limit on the resident size, also counts pages that were allocated but
never touched: the old pair buffers of ``estep_truncated`` (rows x pairs per row
x 24 bytes, 3 GB for these 4 million rows) cannot hide behind Linux's lazy
commit.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from distributed import Client, LocalCluster

import daskclust

ROWS = 4_000_000
HEADROOM = 1_200_000_000
"""Bytes of address space the worker may add to what it uses after a small fit."""


def _cap_address_space(headroom: int) -> int:
    import resource

    with open("/proc/self/status") as fh:
        size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize"))
    limit = size + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit


@pytest.fixture(scope="module")
def capped_client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="8GiB") as cluster, Client(cluster, set_as_default=False) as client:
        small = np.random.default_rng(0).standard_normal((5000, 2)).astype(np.float32)
        daskclust.GaussianMixture(20, covariance_type="isotropic", random_state=0, max_iter=2).fit(small, client=client)  # compile, import
        client.run(_cap_address_space, HEADROOM)
        yield client


def test_one_chunk_of_millions_of_rows_fits_in_bounded_memory(capped_client):
    rng = np.random.default_rng(1)
    centres = rng.uniform(-50, 50, (100, 2))
    X = (centres[rng.integers(0, 100, ROWS)] + rng.standard_normal((ROWS, 2))).astype(np.float32)
    model = daskclust.GaussianMixture(100, covariance_type="isotropic", random_state=0, max_iter=2, chunk_rows=ROWS)
    model.fit(X, client=capped_client)
    assert model.n_iter_ == 2
    f = [row["free_energy"] for row in model.history_]
    assert all(b >= a - 1e-9 * abs(a) for a, b in pairwise(f))
    # the cap is in force: the old buffers' size cannot be allocated on that worker
    with pytest.raises(MemoryError):
        capped_client.submit(np.empty, ROWS * 31 * 3, pure=False).result()

"""A fit submitted to a Dask scheduler that is already running, given its address.

To try it on one machine, start a scheduler and two single-threaded workers:

    dask scheduler --host 127.0.0.1 &                              # tcp://127.0.0.1:8786
    dask worker tcp://127.0.0.1:8786 --nworkers 2 --nthreads 1 &

then run ``python examples/fit_on_scheduler.py tcp://127.0.0.1:8786 [workdir]`` (or set
DASKCLUST_SCHEDULER to the address and leave it out). The estimator connects by itself
(``scheduler_address=``, a runtime setting never saved with the model); the workers read the zarr
store and write the labels at the same paths as this script, so the data live in a directory all of
them reach: here a local one (workers on this machine), on a real cluster an object-store URL
(s3://..., gs://...) or a shared file system (deploy/ has recipes for clusters).

DASKCLUST_EXAMPLE_SMALL=1: a small size, for CI.
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from distributed import Client

import daskclust
from daskclust.datasets import make_blobs

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
N, D, C = (20_000, 8, 32) if SMALL else (1_000_000, 16, 256)


def main(address: str, workdir: Path) -> None:
    with Client(address) as client:
        threads = client.nthreads()
        print(f"scheduler {address}: {len(threads)} worker(s), {sum(threads.values())} thread(s)")
    store = workdir / "blobs.zarr"
    make_blobs(store, N, D, C, seed=0, overwrite=True)  # written by this process, chunk by chunk
    print(f"data: {N:,} x {D} float32 in {store}")

    model = daskclust.KMeans(C, random_state=0, scheduler_address=address, verbose=1).fit(str(store))
    print(f"fitted on the scheduler's workers: {model.n_iter_} iterations, inertia {model.inertia_:.6g}, "
          f"the workers read {model.bytes_read_ / 1e6:.1f} MB from the store")

    with Client(address):  # the active client: the workers write the labels, span by span
        labels = model.predict(str(store), output=workdir / "labels.zarr", overwrite=True)
    sizes = np.bincount(labels[:], minlength=C)
    print(f"labels written by the workers to {workdir / 'labels.zarr'}: {labels.shape[0]:,} rows, "
          f"cluster sizes {sizes.min():,}-{sizes.max():,}")


if __name__ == "__main__":
    args = sys.argv[1:]
    address = args.pop(0) if args and "://" in args[0] else os.environ.get("DASKCLUST_SCHEDULER")
    if address is None:
        sys.exit("usage: python examples/fit_on_scheduler.py SCHEDULER_ADDRESS [workdir] "
                 "(or set DASKCLUST_SCHEDULER=tcp://host:8786)")
    with tempfile.TemporaryDirectory() as tmp:
        main(address, Path(args[0] if args else tmp))

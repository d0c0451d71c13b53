"""Data larger than the memory a fit may use: streamed from a zarr store at an fsspec URL every
iteration, with checkpoints; the fit is interrupted, resumed from its last checkpoint, and ends
with the model an uninterrupted fit gives.

The store is at a local ``file://`` URL, standing in for object storage (``s3://bucket/x.zarr``
with ``storage_options``): daskclust opens every input and output through fsspec, so only the
URL changes. (``memory://`` would not do: fsspec's memory file system lives in one process, and
Dask worker processes would each see an empty one.) ``memory_budget`` is set below the data's
size, so nothing is persisted: every pass reads the chunks from the store again, one chunk ahead
of the computation, and ``bytes_read_`` shows it. The checkpoints go to a local directory (on a
cluster, one every worker reaches: a shared file system). A callback raising KeyboardInterrupt stands in
for Ctrl-C, a killed job or a lost driver.

Run: python examples/larger_than_ram.py [workdir]     (DASKCLUST_EXAMPLE_SMALL=1: a small size, for CI)
"""

import os
import sys
import tempfile
from pathlib import Path

import fsspec
import numpy as np

import daskclust
from daskclust.datasets import make_blobs
from daskclust.persistence.checkpoint import list_checkpoints

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
N, D, C = (40_000, 8, 32) if SMALL else (2_000_000, 16, 256)
MAX_ITER, INTERRUPT_AFTER, EVERY = 8, 5, 2


def stop_after(iteration: int):
    """A callback interrupting the fit once it has reported ``iteration``."""
    def callback(row: dict) -> None:
        if row["iteration"] == iteration:
            raise KeyboardInterrupt(f"interrupted after iteration {iteration}")
    return callback


def main(workdir: Path) -> None:
    base = f"file://{workdir.resolve()}"  # s3://bucket/prefix, with storage_options, on object storage
    url, run = f"{base}/blobs.zarr", str(workdir / "run")  # checkpoints: a directory every worker reaches
    make_blobs(url, N, D, C, separation=3.0, seed=0, overwrite=True)  # touching blobs: many iterations
    data_bytes = N * D * 4
    stored = fsspec.filesystem("file").du(str(workdir / "blobs.zarr"))
    budget = data_bytes // 4
    print(f"data: {N:,} x {D} float32 = {data_bytes / 1e6:.1f} MB at {url} ({stored / 1e6:.1f} MB compressed); "
          f"memory_budget {budget / 1e6:.1f} MB")

    def model(**kwargs):
        return daskclust.KMeans(C, random_state=0, tol=0, max_iter=MAX_ITER, memory_budget=budget, **kwargs)

    whole = model().fit(url)
    print(f"uninterrupted fit: {whole.n_iter_} iterations, read {whole.bytes_read_ / 1e6:.1f} MB from the store "
          f"= {whole.bytes_read_ / data_bytes:.1f} times the data (the seeding's passes and every iteration stream it)")

    try:
        model(callback=stop_after(INTERRUPT_AFTER)).fit(url, checkpoint=run, checkpoint_every=EVERY, overwrite=True)
        raise AssertionError("the fit was not interrupted")
    except KeyboardInterrupt as stop:
        print(f"{stop}; checkpoints in {run}: {', '.join(list_checkpoints(run))}")

    resumed = model(verbose=1).fit(url, resume=run)
    energies = [[row["free_energy"] for row in fit.history_] for fit in (resumed, whole)]
    same = np.array_equal(resumed.cluster_centers_, whole.cluster_centers_) and energies[0] == energies[1]
    print(f"resumed fit: {resumed.n_iter_} iterations, inertia {resumed.inertia_:.6g}, read "
          f"{resumed.bytes_read_ / 1e6:.1f} MB (no seeding, only the iterations after the checkpoint); the same "
          f"centres and free energies as the uninterrupted fit: {same}")
    if not same:
        raise AssertionError("the resumed model differs from the uninterrupted fit's")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else tmp))

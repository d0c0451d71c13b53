"""Fit k-means and a Gaussian mixture on a zarr store, predict labels into zarr, save and reload.

Run: python examples/fit_zarr.py [workdir]     (DASKCLUST_EXAMPLE_SMALL=1: a small size, for CI)
"""

import os
import sys
import tempfile
from pathlib import Path

import daskclust
from daskclust.datasets import make_birch

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
C = 64 if SMALL else 256


def main(workdir: Path) -> None:
    data = workdir / "birch.zarr"
    make_birch(data, n_clusters=C, overwrite=True)  # 100 C x 2, written chunk by chunk

    kmeans = daskclust.KMeans(n_clusters=C, random_state=0, verbose=1).fit(str(data))
    print("k-means: inertia", kmeans.inertia_, "after", kmeans.n_iter_, "iterations")

    labels = kmeans.predict(str(data), output=workdir / "labels.zarr", overwrite=True)  # replaces only labels
    print("labels written:", labels.shape, labels.dtype)

    kmeans.save(workdir / "kmeans.zarr", overwrite=True)  # replaces only a daskclust model
    again = daskclust.load(workdir / "kmeans.zarr")
    assert (again.cluster_centers_ == kmeans.cluster_centers_).all()

    gmm = daskclust.GaussianMixture(n_components=C, n_truncated=5, random_state=0).fit(str(data))
    print("GMM: sigma^2 =", gmm.sigma2_, "free energy", gmm.history_[-1]["free_energy"])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else tmp))

"""Truncation x coreset x sketch in one call: SGMM (Kightley & Becker 2019) on a lightweight coreset (Exarchakis et al. 2022) of the
sketched rows, fitted by truncated EM, on data generated into a zarr store.

The data are written chunk by chunk (never held whole), sketched in one pass into a zarr sketch
store (Q = 16 of P = 256 preconditioned entries per row), and the fit then reads only the sketch:
a coreset of m = 2^14 sketched rows, truncated EM on it (C' = 3 of C = 20 components, estimated
neighbourhoods), then two refining iterations on all N sketches. A coreset of sketches needs more
rows than one of whole rows: each feature of each component is estimated from about m Q / (P C)
observations (here 51); with m = 4096 (13) the fit is visibly worse.

Run: python examples/coreset_sketch.py [workdir]
DASKCLUST_EXAMPLE_SMALL=1 (for CI): the same coreset + sketch path on N = 20,000 rows of P = 64
features, C = 8, m = 4096 (m Q / (P C) = 128).
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import zarr

from daskclust import SketchedGaussianMixture
from daskclust.transforms import Sketch

SMALL = os.environ.get("DASKCLUST_EXAMPLE_SMALL") == "1"
N, P, C = (20_000, 64, 8) if SMALL else (200_000, 256, 20)
CHUNK = N // 10
M, Q = 2**12 if SMALL else 2**14, 16


def write_data(path: Path, seed: int = 0) -> np.ndarray:
    """C classes of "images" (each lights a random 15 % of the P pixels) over unit noise; returns the labels."""
    rng = np.random.default_rng(seed)
    prototypes = 3.0 * (rng.random((C, P)) < 0.15)
    labels = rng.integers(C, size=N)
    X = zarr.create_array(path, shape=(N, P), chunks=(CHUNK, P), dtype="float32")
    for start in range(0, N, CHUNK):
        rows = labels[start:start + CHUNK]
        X[start:start + CHUNK] = prototypes[rows] + rng.standard_normal((len(rows), P))
    return labels


def purity(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of rows whose cluster's most common class is their own."""
    return sum(np.bincount(truth[found == k]).max() for k in np.unique(found)) / len(truth)


def main(workdir: Path) -> None:
    from distributed import Client, LocalCluster

    labels = write_data(workdir / "X.zarr")
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        sketch = Sketch(n_kept=Q, random_state=0).fit_transform(str(workdir / "X.zarr"), client=client,
                                                                 output=workdir / "sketch.zarr", overwrite=True)
        print(f"sketch: {sketch.n_samples:,} rows x {sketch.n_kept} of {sketch.n_features} entries "
              f"({sketch.values.dtype}, indices {sketch.indices.dtype})")
        model = SketchedGaussianMixture(C, n_kept=Q, n_truncated=3, coreset=M, refine_iter=2,
                                        random_state=0).fit(sketch, client=client)
    coreset_rows = [r for r in model.history_ if r["data"] == "coreset"]
    full_rows = [r for r in model.history_ if r["data"] == "full"]
    print(f"coreset phase: {len(coreset_rows)} E-steps on {model.coreset_['size']} rows, free energy "
          f"{coreset_rows[0]['free_energy']:.3f} -> {coreset_rows[-1]['free_energy']:.3f}")
    print(f"full data: {len(full_rows)} E-steps on {N:,} sketches, free energy "
          + " -> ".join(f"{r['free_energy']:.3f}" for r in full_rows))
    print(f"distance evaluations: coreset construction {model.coreset_['n_distances']:,}, seeding and assignment "
          f"{model.seeding_distances_:,}, per E-step on the coreset {coreset_rows[-1]['n_distances']:,} and on all "
          f"sketches {full_rows[-1]['n_distances']:,} (exact EM: {N * C:,} per E-step, each of P entries, not Q)")
    print(f"bytes read by the fit: {model.bytes_read_ / 1e6:.1f} MB (the raw data: {N * P * 4 / 1e6:.0f} MB)")
    print(f"purity of the clusters on the sketches: {purity(np.asarray(model.labels_), labels):.3f}")
    print(f"means_ in the raw space: {model.means_.shape}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else tmp))

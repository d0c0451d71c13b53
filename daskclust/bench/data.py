"""In-memory benchmark data (the same generators as ``daskclust make-data``, held as numpy)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ..datasets import birch_grid_centres, make_blobs


def birch_array(n_clusters: int, points: int = 100, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """BIRCH grid data of Forster & Lücke 2018 (sigma^2 = 1, spacing 4 sqrt 2), rows shuffled, and its centres."""
    centres = birch_grid_centres(n_clusters)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(n_clusters), points))
    return centres[labels] + rng.standard_normal((len(labels), 2)), centres


def blobs_array(n_samples: int, n_features: int, n_clusters: int, seed: int = 0,
                separation: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``daskclust make-data blobs`` data (float32) read back into memory, and its centres."""
    with tempfile.TemporaryDirectory() as tmp:
        group = make_blobs(Path(tmp) / "blobs.zarr", n_samples, n_features, n_clusters, seed=seed,
                           separation=separation)
        return np.asarray(group["X"][:]), np.asarray(group["centers"][:])

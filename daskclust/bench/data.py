"""In-memory benchmark data (the same generators as ``daskclust make-data``, held as numpy)."""

from __future__ import annotations

import numpy as np

from ..datasets import birch_grid_centres


def birch_array(n_clusters: int, points: int = 100, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """BIRCH grid data of seed 000 (sigma^2 = 1, spacing 4 sqrt 2), rows shuffled, and its centres."""
    centres = birch_grid_centres(n_clusters)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(n_clusters), points))
    return centres[labels] + rng.standard_normal((len(labels), 2)), centres

"""The E-step as a chunk operation: parameters in, additive statistics out, K(n) kept per chunk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk, add_arrays
from ..kernels.estep import N_SCALARS, estep_full


def new_stats(n_clusters: int, n_features: int) -> dict[str, np.ndarray]:
    """Zero sufficient statistics (see :mod:`daskclust.kernels.estep`)."""
    return {
        "S0": np.zeros(n_clusters),
        "S1": np.zeros((n_clusters, n_features)),
        "SD2": np.zeros(n_clusters),
        "scal": np.zeros(N_SCALARS),
    }


def initial_sets(chunk: Chunk, n_keep: int) -> np.ndarray:
    """K(n) before the first E-step: the seeding's nearest centre first, -1 (unknown) elsewhere."""
    K = np.full((chunk.n_rows, n_keep), -1, dtype=np.int32)
    seed_label = chunk.state.get("seed_label")
    if seed_label is not None:
        K[:, 0] = seed_label
    return K


@dataclass
class EStepOp:
    """One E-step over every chunk.

    centres : (C, D) float64; sigma2 : variance for the responsibilities;
    n_keep : C' (1 = k-means, C = exact EM); keep_state : keep K(n) on the
    workers (needed to count changed assignments and for truncated search).
    """

    centres: np.ndarray
    sigma2: float
    n_keep: int
    keep_state: bool

    def new_acc(self) -> dict[str, np.ndarray]:
        return new_stats(*self.centres.shape)

    def run(self, chunk: Chunk, acc: dict[str, np.ndarray]) -> None:
        if self.keep_state:
            K = chunk.state.get("K")
            if K is None:
                K = initial_sets(chunk, self.n_keep)
        else:
            K = np.empty((chunk.n_rows, 0), dtype=np.int32)
        estep_full(chunk.X, chunk.w, self.centres, self.sigma2, self.n_keep, K,
                   acc["S0"], acc["S1"], acc["SD2"], acc["scal"])
        if self.keep_state:
            chunk.state["K"] = K

    merge = staticmethod(add_arrays)

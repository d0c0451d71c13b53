"""The E-step as a chunk operation: parameters in, additive statistics out, K(n) kept per chunk."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engine.ops import Chunk
from ..kernels.estep import N_SCALARS, estep_full
from ..kernels.rng import stream_key
from ..kernels.search import NEIGHBOURHOOD, SAMPLED, estep_truncated
from ..search import SearchPayload
from ..search.pairs import PairStats
from .mstep import variance_floor

STREAM_ESTEP = 41
_NO_TABLE = np.zeros((0, 0))
_NO_NEIGHBOURS = np.zeros((0, 0), dtype=np.int32)
_IDENTITY = np.zeros(0, dtype=np.int32)
_NO_ROWS = (np.zeros((0, 0), dtype=np.int32), np.zeros((0, 0)), np.zeros(0, dtype=np.int32))


def new_stats(n_clusters: int, n_features: int) -> dict[str, np.ndarray]:
    """Zero sufficient statistics (see :mod:`daskclust.kernels.estep`)."""
    return {
        "S0": np.zeros(n_clusters),
        "S1": np.zeros((n_clusters, n_features)),
        "SD2": np.zeros(n_clusters),
        "scal": np.zeros(N_SCALARS),
    }


def initial_sets(chunk: Chunk, init_sets: np.ndarray) -> np.ndarray:
    """K(n) before the first E-step: the row of ``init_sets`` of each row's seed centre
    (the seed centre, then its nearest centres); -1 (unknown) where no seed is known."""
    seed_label = chunk.state.get("seed_label")
    if seed_label is None:
        return np.full((chunk.n_rows, init_sets.shape[1]), -1, dtype=np.int32)
    return init_sets[seed_label]


@dataclass
class EStepOp:
    """One E-step over every chunk.

    centres : (C, D) float64; sigma2 : variance for the responsibilities;
    n_keep : C' (1 = k-means, C = exact EM); keep_state : keep K(n) on the
    workers; search : which clusters each point evaluates; seed, iteration :
    key the exploratory and sampled draws (with the chunk index). The kernels
    get ``kernel_sigma2``, sigma2 raised to :func:`variance_floor` (sigma^2 = 0
    when every point sits on its centre).
    """

    centres: np.ndarray
    sigma2: float
    n_keep: int
    keep_state: bool
    search: SearchPayload
    seed: int = 0
    iteration: int = 0
    kernel_sigma2: float = field(init=False)

    def __post_init__(self):
        self.kernel_sigma2 = variance_floor(self.sigma2, self.centres)

    def new_acc(self) -> dict:
        acc = new_stats(*self.centres.shape)
        if self.search.collect:
            C = self.centres.shape[0]
            acc["pairs"] = PairStats.empty(C, self.search.pairs_per_row, self.search.mode == "sampled")
            if self.search.mode == "neighbourhood":
                acc["tsum"] = np.zeros(self.search.neighbours.shape)
                acc["tcnt"] = np.zeros(self.search.neighbours.shape)
        return acc

    def run(self, chunk: Chunk, acc: dict) -> None:
        if self.keep_state:
            K = chunk.state.get("K")
            if K is None:
                K = initial_sets(chunk, self.search.init_sets)
                chunk.state.pop("seed_label", None)  # K(n) holds it from now on
        else:
            K = np.empty((chunk.n_rows, 0), dtype=np.int32)
        stats = (acc["S0"], acc["S1"], acc["SD2"], acc["scal"])
        s = self.search
        key = stream_key(self.seed, STREAM_ESTEP, self.iteration, chunk.index)
        if s.mode == "full":
            estep_full(chunk.X, chunk.w, self.centres, self.kernel_sigma2, self.n_keep, K, *stats)
        else:
            sampled = s.mode == "sampled"
            neighbours = _NO_NEIGHBOURS if sampled else s.neighbours
            rows = (s.row_idx, s.row_cdf, s.row_len) if sampled else _NO_ROWS
            thresholds = s.thresholds if s.thresholds is not None else np.zeros(0)
            tsum, tcnt = (acc["tsum"], acc["tcnt"]) if "tsum" in acc else (_NO_TABLE, _NO_TABLE)
            source_row = chunk.perm if chunk.perm is not None else _IDENTITY
            keys, sums, weights, rank = estep_truncated(chunk.X, chunk.w, self.centres, self.kernel_sigma2, K,
                                    SAMPLED if sampled else NEIGHBOURHOOD, neighbours, thresholds, *rows, s.n_draws,
                                    s.n_explore, key, s.collect, *stats, tsum, tcnt, source_row)
            if s.collect:
                pairs = acc["pairs"]
                acc["pairs"] = pairs.merge(PairStats(keys, sums, weights, rank, pairs.n_clusters, pairs.per_row,
                                                     pairs.symmetric))
        if self.keep_state:
            chunk.state["K"] = K

    @staticmethod
    def merge(a: dict, b: dict) -> dict:
        for name, value in b.items():
            if name == "pairs":
                a[name] = a[name].merge(value)
            else:
                a[name] += value
        return a

"""What each search strategy sends to the workers with the centres, and the E-step it runs there.

A payload knows its kernel and its arguments, and owns the extra accumulator its
strategy digests on the driver (None when it needs none): the E-step operation
(:class:`daskclust.em.estep_op.EStepOp`) only hands it the chunk, the
parameters, K(n) and the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk
from ..kernels.estep import estep_full
from ..kernels.search import NEIGHBOURHOOD, SAMPLED, estep_truncated
from ..models.base import SuffStats
from .pairs import PairStack, PairStats

_NO_TABLE = np.zeros((0, 0))
_NO_NEIGHBOURS = np.zeros((0, 0), dtype=np.int32)
_NO_THRESHOLDS = np.zeros(0)
_IDENTITY = np.zeros(0, dtype=np.int32)
_NO_ROWS = (np.zeros((0, 0), dtype=np.int32), np.zeros((0, 0)), np.zeros(0, dtype=np.int32))


def _source_row(chunk: Chunk) -> np.ndarray:
    """The original index of each (reordered) row: the pair statistics are keyed by it."""
    return chunk.perm if chunk.perm is not None else _IDENTITY


@dataclass
class FullPayload:
    """Every cluster for every row (:func:`~daskclust.kernels.estep.estep_full`).

    init_sets : (C, C') K(n) of a row whose seed centre is c, for a chunk without K(n) yet.
    """

    init_sets: np.ndarray

    def new_acc(self, n_clusters: int) -> None:
        return None

    def estep(self, chunk: Chunk, params, n_truncated: int, K, stats: SuffStats, acc, key):
        estep_full(chunk.X, chunk.w, params, n_truncated, K, stats.arrays(), stats.scal)
        return acc


@dataclass
class NeighbourhoodAcc:
    """The estimated search's statistics (Forster & Lücke 2018 Eq. 8): per (c, g) sums and counts of the
    distances from the points closest to c to its g-th neighbour, and the pairs outside G_c."""

    tsum: np.ndarray
    tcnt: np.ndarray
    pairs: PairStack

    def merge(self, other: NeighbourhoodAcc) -> NeighbourhoodAcc:
        self.tsum += other.tsum
        self.tcnt += other.tcnt
        self.pairs.merge(other.pairs)
        return self

    def compacted(self) -> NeighbourhoodAcc:
        return NeighbourhoodAcc(self.tsum, self.tcnt, self.pairs.compacted())


@dataclass
class NeighbourhoodPayload:
    """Candidates from the neighbourhoods G_c of K(n)'s clusters plus ``n_explore`` random ones
    (Forster & Lücke 2018 Algs. 1-2). ``thresholds`` (estimated search) make the kernel record the pairs
    that could enter a neighbourhood, those outside G_c from every ``pair_stride``-th row and, with
    ``explored_pairs``, from the exploration draws too (:func:`~daskclust.kernels.search.estep_truncated`);
    the exhaustive search records nothing."""

    init_sets: np.ndarray
    n_explore: int
    neighbours: np.ndarray
    thresholds: np.ndarray | None = None
    pairs_per_row: int = 0
    pair_stride: int = 1
    pair_phase: int = 0
    explored_pairs: bool = True

    @property
    def collect(self) -> bool:
        return self.thresholds is not None

    def new_acc(self, n_clusters: int) -> NeighbourhoodAcc | None:
        if not self.collect:
            return None
        return NeighbourhoodAcc(np.zeros(self.neighbours.shape), np.zeros(self.neighbours.shape),
                                PairStack(n_clusters, self.pairs_per_row, False))

    def estep(self, chunk, params, n_truncated, K, stats, acc, key):
        tsum, tcnt = (acc.tsum, acc.tcnt) if self.collect else (_NO_TABLE, _NO_TABLE)
        thresholds = self.thresholds if self.collect else _NO_THRESHOLDS
        keys, sums, weights, rank = estep_truncated(
            chunk.X, chunk.w, params, K, NEIGHBOURHOOD, self.neighbours, thresholds, *_NO_ROWS, 0,
            self.n_explore, key, self.collect, stats.arrays(), stats.scal, tsum, tcnt, _source_row(chunk),
            self.pair_stride, self.pair_phase, self.explored_pairs)
        if self.collect:
            acc.pairs.add(PairStats(keys, sums, weights, rank, len(params.means), self.pairs_per_row, False))
        return acc


@dataclass
class SampledPayload:
    """D-GMM (Exarchakis et al. 2022 Alg. 1): ``n_draws`` candidates drawn from the similarity row of each
    row's best cluster (``row_idx``, cumulative weights ``row_cdf``, lengths ``row_len``) plus
    ``n_explore`` random ones; the kernel returns the similarity pairs (Eq. 12)."""

    init_sets: np.ndarray
    n_explore: int
    row_idx: np.ndarray
    row_cdf: np.ndarray
    row_len: np.ndarray
    n_draws: int
    pairs_per_row: int

    def new_acc(self, n_clusters: int) -> PairStack:
        return PairStack(n_clusters, self.pairs_per_row, True)

    def estep(self, chunk, params, n_truncated, K, stats, acc, key):
        keys, sums, weights, rank = estep_truncated(
            chunk.X, chunk.w, params, K, SAMPLED, _NO_NEIGHBOURS, _NO_THRESHOLDS, self.row_idx,
            self.row_cdf, self.row_len, self.n_draws, self.n_explore, key, True, stats.arrays(), stats.scal,
            _NO_TABLE, _NO_TABLE, _source_row(chunk))
        return acc.add(PairStats(keys, sums, weights, rank, len(params.means), self.pairs_per_row, True))

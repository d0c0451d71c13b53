"""The E-step as a chunk operation: parameters in, additive statistics out, K(n) kept per chunk."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ops import Chunk
from ..kernels.rng import stream_key
from ..models import Family, SuffStats
from ..names import STATE_K, STATE_SEED_LABEL, STREAM_ESTEP


def initial_sets(chunk: Chunk, init_sets: np.ndarray) -> np.ndarray:
    """K(n) before the first E-step: the row of ``init_sets`` of each row's seed centre
    (the seed centre, then its nearest centres); -1 (unknown) where no seed is known. Its ids have
    the type of ``init_sets`` (:func:`~daskclust.kernels.estep.cluster_id_dtype`)."""
    seed_label = chunk.state.get(STATE_SEED_LABEL)
    if seed_label is None:
        return np.full((chunk.n_rows, init_sets.shape[1]), -1, dtype=init_sets.dtype)
    return init_sets[seed_label]


@dataclass
class EStepAcc:
    """What an E-step pass returns: the family's statistics and the search's accumulator
    (None when the search digests nothing)."""

    stats: SuffStats
    search: object | None

    def merge(self, other: EStepAcc) -> EStepAcc:
        self.stats = self.stats.merge(other.stats)
        if self.search is not None:
            self.search = self.search.merge(other.search)
        return self

    def compacted(self) -> EStepAcc:
        """The search's pair statistics pruned (the same result after any further merges)."""
        return EStepAcc(self.stats, self.search.compacted() if self.search is not None else None)


@dataclass
class EStepOp:
    """One E-step over every chunk.

    family : the model family (its statistics); kernel : its parameters as the
    kernels take them (:meth:`~daskclust.models.Family.kernel_params`, computed once on
    the driver: floored, factorised); n_truncated : C' (1 = k-means, C = exact EM);
    keep_state : keep K(n) on the workers; search : the strategy's payload, which
    runs the kernel (:mod:`daskclust.search.payloads`); seed, iteration : key the
    exploratory and sampled draws (with the chunk index).
    """

    reorders_rows = True
    """Whether the rows may be sorted by K(n) after the first E-step (the engine's ``reorder``)."""

    family: Family
    kernel: tuple
    n_truncated: int
    keep_state: bool
    search: object
    seed: int = 0
    iteration: int = 0

    def new_acc(self) -> EStepAcc:
        C, D = self.kernel.means.shape
        return EStepAcc(self.family.new_stats(C, D), self.search.new_acc(C))

    def run(self, chunk: Chunk, acc: EStepAcc) -> None:
        if self.keep_state:
            K = chunk.state.get(STATE_K)
            if K is None:
                K = initial_sets(chunk, self.search.init_sets)
                chunk.state.pop(STATE_SEED_LABEL, None)  # K(n) holds it from now on
        else:
            K = np.empty((chunk.n_rows, 0), dtype=self.search.init_sets.dtype)
        key = stream_key(self.seed, STREAM_ESTEP, self.iteration, chunk.index)
        acc.search = self.search.estep(chunk, self.kernel, self.n_truncated, K, acc.stats, acc.search, key)
        if self.keep_state:
            chunk.state[STATE_K] = K

    @staticmethod
    def merge(a: EStepAcc, b: EStepAcc) -> EStepAcc:
        return a.merge(b)

    @staticmethod
    def compact(acc: EStepAcc) -> EStepAcc:
        return acc.compacted()

"""Pair statistics of the partial E-steps, reduced in the worker tree with a bounded size.

The estimated search (Forster & Lücke 2018 Eq. 8) sums, per pair (c, c~), distances of the
points closest to c to the centre c~; the sampled search (Exarchakis et al. 2022 Eq. 12) sums
a similarity per unordered pair {i, j}. Both are additive, so they merge like
the other statistics, but the number of distinct pairs grows with the data.
Every merge therefore prunes: each row c keeps only its ``per_row`` pairs whose
centres are closest to mu_c (ties by index); for unordered pairs a pair stays
when it is kept by either of its rows.

Because the order (the centre-to-centre distance, the same on every worker)
does not depend on the statistics, this selection commutes with the merge: a
pair that survives the final merge is among its row's ``per_row`` closest in
every partial result that contains it, so it was never dropped on the way and
its sums are complete; pruning may also be skipped at any merge. The driver
prunes what it receives (:meth:`PairStats.pruned`), and the result is the same
whatever the number of chunks and workers and the shape of the tree. A merge
prunes once it holds more than twice what a pruned set can hold
(:attr:`PairStats.capacity`), so every message holds at most 2 C x per_row pairs
(4 C x per_row for unordered pairs), and pruning costs linear time amortised. A worker gathers
its chunks' pairs in a :class:`PairStack`, which merges sets of similar sizes only (merging each
chunk's few thousand pairs into one accumulator of up to 2 C x per_row cost O(C) per chunk), and
prunes what it sends up the tree (:meth:`PairStack.compacted`). Forster & Lücke 2018's bound motivates the order: the points closest to c
have their mean at the new mu_c, so by Jensen's inequality their mean distance
to c~ is at least ||mu_c_new - mu_c~||; pairs whose centres are far apart cannot
enter G_c.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..kernels.search import merge_pairs, top_pairs_mask

_NO_KEYS = np.zeros(0, dtype=np.int64)
_NO_VALUES = np.zeros(0)


@dataclass
class PairStats:
    """Summed statistics per pair key i * C + j (keys ascending, unique).

    sums, weights : the summed values and weights of the pair; rank :
    ||mu_i - mu_j||^2, the pruning order; n_clusters : C; per_row : pairs kept
    per row; symmetric : keys are unordered pairs i < j (kept when either row keeps them).
    """

    keys: np.ndarray
    sums: np.ndarray
    weights: np.ndarray
    rank: np.ndarray
    n_clusters: int
    per_row: int
    symmetric: bool

    @classmethod
    def empty(cls, n_clusters: int, per_row: int, symmetric: bool) -> PairStats:
        return cls(_NO_KEYS, _NO_VALUES, _NO_VALUES, _NO_VALUES, n_clusters, per_row, symmetric)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.sums.nbytes + self.weights.nbytes + self.rank.nbytes

    def merge(self, other: PairStats) -> PairStats:
        """The pairs of both, summed per key, then pruned (see the module docstring)."""
        if not len(other):
            return self
        if not len(self):
            return other if len(other) <= self.capacity else other.pruned()
        keys, sums, weights, rank = merge_pairs(self.keys, self.sums, self.weights, self.rank, other.keys,
                                                other.sums, other.weights, other.rank)
        merged = PairStats(keys, sums, weights, rank, self.n_clusters, self.per_row, self.symmetric)
        return merged.pruned() if len(merged) > self.capacity else merged

    @property
    def capacity(self) -> int:
        """Pairs a merge may hold before it prunes: twice the C x per_row a pruned set can hold
        (pruning is deferred until then; the amortised cost is linear in the pairs merged)."""
        return 2 * self.n_clusters * self.per_row * (2 if self.symmetric else 1)

    def pruned(self) -> PairStats:
        """Each row's ``per_row`` pairs of smallest rank (ties: smaller partner index first)."""
        keep = top_pairs_mask(self.keys, self.rank, self.n_clusters, self.per_row, self.symmetric)
        if keep.all():
            return self
        return PairStats(self.keys[keep], self.sums[keep], self.weights[keep], self.rank[keep], self.n_clusters,
                         self.per_row, self.symmetric)


@dataclass
class PairStack:
    """Pair statistics gathered from many chunks, merged like a merge sort's runs.

    ``parts`` holds :class:`PairStats` of decreasing sizes; a part added merges with the top
    while the top is at most twice its size, so every pair takes part in O(log) merges and
    folding n chunks costs O(total log total), not n merges with a growing accumulator. The
    merged result is the same as any merge tree's (see the module).
    """

    n_clusters: int
    per_row: int
    symmetric: bool
    parts: list[PairStats] = field(default_factory=list)

    def add(self, part: PairStats) -> PairStack:
        if not len(part):
            return self
        while self.parts and len(self.parts[-1]) <= 2 * len(part):
            part = self.parts.pop().merge(part)
        self.parts.append(part)
        return self

    def merge(self, other: PairStack) -> PairStack:
        for part in other.parts:
            self.add(part)
        return self

    def merged(self) -> PairStats:
        """All parts merged into one (unpruned beyond the merges' own bound)."""
        out = PairStats.empty(self.n_clusters, self.per_row, self.symmetric)
        for part in reversed(self.parts):  # smallest first
            out = part.merge(out) if len(out) else part
        return out

    def pruned(self) -> PairStats:
        """The pairs each row keeps (:meth:`PairStats.pruned` of everything gathered)."""
        return self.merged().pruned()

    def compacted(self) -> PairStack:
        """The same statistics as one pruned part: what a worker sends up the tree (at most
        C x per_row pairs, or 2 C x per_row unordered)."""
        merged = self.pruned()
        return PairStack(self.n_clusters, self.per_row, self.symmetric, [merged] if len(merged) else [])

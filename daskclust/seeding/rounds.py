"""The k-means|| rounds (Bahmani et al. 2012) on the driver, over the rows the seeding's first pass gathered.

The first pass sends a uniform sample of the rows (every row while the rounds' budget allows, see
:func:`~daskclust.seeding.methods.round_sample_rate`), each weighted w / rate. On it, round r keeps
each row with probability min(1, l w d^2 / phi), l = oversampling_factor * C, phi = sum w d^2 over the
sample, and lowers d^2 with the new candidates exactly. A row's draw is keyed by its place in the source,
so the candidates depend on neither the chunks' order nor the number of workers. The searches run in
blocks of rows on a thread pool (the kernels release the GIL; the matrix products on one BLAS thread
each): the workers wait during the seeding, and each round as a pass over the chunks cost a Dask pass.
Where ball trees prune, a round searches only the rows its candidates can come nearer to
(:func:`lower_nearest`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.rng import stream_key
from ..kernels.seeding import bernoulli_sample, weighted_sum
from ..names import STREAM_BERNOULLI
from ..threads import driver_threads
from .passes import SKIP_MARGIN, NearestIndex, search_in_blocks, search_rows


@dataclass
class Candidates:
    """The rounds' candidates (M, D) float64, in the order drawn; each one's mass, sum_n w_n over the
    sample's rows nearest to it (an estimate of the data's when the sample is not every row); and
    the distances evaluated (searches and index builds)."""

    points: np.ndarray
    mass: np.ndarray
    n_dist: int


def oversample(sample: dict[str, np.ndarray], first: np.ndarray, n_clusters: int, *, seed: int,
               oversampling_factor: float, init_rounds: int, dense: bool) -> Candidates:
    """``init_rounds`` k-means|| rounds from the candidate ``first`` over ``sample`` (global ``row`` ids,
    values ``X``, weights ``w``): ball trees over each round's candidates, or matrix products where
    the trees do not prune (``dense``)."""
    X, w, rows = sample["X"], sample["w"], sample["row"]
    mind2 = np.full(len(X), np.inf)
    label = np.zeros(len(X), dtype=np.int32)
    ell = oversampling_factor * n_clusters
    parts = [np.asarray(first, dtype=np.float64)[None, :]]
    n_total = 1
    with driver_threads() as pool:
        n_dist = search_in_blocks(NearestIndex(parts[0]), X, mind2, label, pool)
        for r in range(1, init_rounds + 1):
            phi = weighted_sum(w, mind2)
            if phi <= 0:
                break
            keep = bernoulli_sample(stream_key(seed, STREAM_BERNOULLI, r), w, mind2, ell / phi, rows)
            if len(keep) == 0:
                continue
            new = np.ascontiguousarray(X[keep], dtype=np.float64)
            index = NearestIndex(new, n_total, dense=dense)
            if dense:  # distances concentrate: the bound of lower_nearest would rarely skip a row
                n_dist += index.n_build + search_in_blocks(index, X, mind2, label, pool)
            else:
                n_dist += index.n_build + lower_nearest(index, np.concatenate(parts), X, mind2, label, pool)
            parts.append(new)
            n_total += len(new)
    mass = np.bincount(label, weights=w, minlength=n_total)
    return Candidates(np.concatenate(parts), mass, int(n_dist))


def lower_nearest(index: NearestIndex, candidates: np.ndarray, X: np.ndarray, mind2: np.ndarray,
                  label: np.ndarray, pool=None) -> int:
    """Lower each row's squared distance ``mind2`` to its nearest candidate ``label`` (IN/OUT) with the
    points of ``index`` (numbered after ``candidates``, the points the labels number), as a search of
    every row would, but searching only the rows a new point can come nearer to. Returns the distances
    evaluated.

    A new point y is nearer to a row x than x's candidate c only if ||c - y|| < 2 ||x - c||, since
    ||x - y|| >= ||c - y|| - ||x - c||. So each candidate c first finds its nearest new point within
    2 max ||x - c|| over its rows (a search bounded by that radius, s_c^2 its squared distance, or the
    bound when none is nearer), and a row is searched only when s_c^2 < 4 ||x - c||^2 (1 + SKIP_MARGIN):
    every skipped row's new distances exceed its own by far more than their round-off, so the result
    is the full search's bit for bit.
    """
    widest = np.zeros(len(candidates))
    np.maximum.at(widest, label, mind2)
    s2 = 4.0 * (1.0 + SKIP_MARGIN) * widest
    n_dist = search_in_blocks(index, candidates, s2, np.zeros(len(candidates), dtype=np.int32), pool)
    rows = np.flatnonzero(s2[label] < 4.0 * (1.0 + SKIP_MARGIN) * mind2)
    return n_dist + search_rows(index, X, rows, mind2, label, pool)

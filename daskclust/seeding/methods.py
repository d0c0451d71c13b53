"""The seeding algorithms, written as sequences of passes over the engine.

Each returns ``(centres, qe, W, n_distances)`` where qe = sum_n w_n d(y_n)^2 to
the row's seed centre and W = sum_n w_n, and leaves ``seed_label`` on every chunk.
"""

from __future__ import annotations

import numpy as np

from ..kernels.rng import stream_key
from ..kernels.seeding import afkmc2_chains
from ..names import STREAM_AFKMC2_CHAINS, STREAM_AFKMC2_SPLIT
from .passes import (
    AssignOp,
    BernoulliOp,
    DrawOp,
    MapLabelsOp,
    NearestIndex,
    NearestUpdateOp,
    PotentialsOp,
    ProposalDrawOp,
    ProposalMassOp,
    keep_drawn,
    pruning_test,
)
from .reduction import n_trials as _n_trials
from .reduction import reduce_candidates

PROBE_ROWS = 256
"""Rows drawn (in proportion to w) to measure whether ball indexes prune on this data."""

DENSE_SAMPLE = 32
DENSE_BUDGET = 1 << 35
"""Where pruning fails, each k-means|| candidate costs a distance for every row the rounds see,
so they see all rows (and the candidate weights are exact counts) unless that costs more than
DENSE_BUDGET multiply-adds (about a second of matrix products on two cores, e.g. up to 232,000
rows of 74 features at C = 200); beyond, a uniform sample of rows within that budget, at least
DENSE_SAMPLE per cluster, with weights scaled up (candidate weights then estimated)."""


def dense_rows(n_clusters: int, n_features: int, oversampling_factor: float, init_rounds: int) -> int:
    """Rows the k-means|| rounds see at most where pruning fails (see DENSE_BUDGET)."""
    per_row = max(1.0, oversampling_factor * n_clusters * init_rounds * n_features)
    return max(DENSE_SAMPLE * n_clusters, int(DENSE_BUDGET / per_row))


def _draw_first(engine, seed: int) -> np.ndarray:
    rows = engine.map_reduce(DrawOp(seed, 0, 1, engine.data.n_features))
    return rows["X"][0]


def assign(engine, centres: np.ndarray, seed: int, n_dist: int = 0):
    """Last pass of a seeding: every row's exact nearest centre; returns (centres, qe, W, n_dist)."""
    dense, n_test = pruning_test(centres, seed)
    index = NearestIndex(centres, dense=dense, seed=seed)
    out = engine.map_reduce(AssignOp(index))
    return centres, out["qe"][0], out["W"][0], n_dist + n_test + index.n_build + int(out["n_dist"][0])


def random_rows(engine, n_clusters: int, *, seed: int, **_):
    """C distinct rows drawn without replacement in proportion to their weights (repeated
    when fewer than C rows have positive weight)."""
    rows = engine.map_reduce(DrawOp(seed, 0, n_clusters, engine.data.n_features))
    centres = rows["X"][np.argsort(rows["key"], kind="stable")]
    return assign(engine, _fill(centres, n_clusters) if len(centres) < n_clusters else centres, seed)


def kmeanspp(engine, n_clusters: int, *, seed: int, **_):
    """Greedy k-means++: per centre one pass to draw 2 + log C candidates in proportion
    to w d^2 and one pass to evaluate the potential each would give."""
    D = engine.data.n_features
    centres = np.empty((n_clusters, D))
    centres[0] = _draw_first(engine, seed)
    index = NearestIndex(centres[:1])
    n_dist = int(engine.map_reduce(NearestUpdateOp(index, 0, reset=True))["n_dist"][0]) + index.n_build
    trials = _n_trials(n_clusters)
    for k in range(1, n_clusters):
        cands = engine.map_reduce(DrawOp(seed, k, trials, D, by_distance=True))["X"]
        if len(cands) == 0:  # every row already coincides with a centre
            cands = centres[k - 1 : k]
        pots = engine.map_reduce(PotentialsOp(cands))
        centres[k] = cands[int(np.argmin(pots["pot"]))]
        index = NearestIndex(centres[k : k + 1], k)
        upd = engine.map_reduce(NearestUpdateOp(index, 0))
        n_dist += int(pots["n_dist"][0] + upd["n_dist"][0]) + index.n_build
    return assign(engine, centres, seed, n_dist)


def kmeans_parallel(engine, n_clusters: int, *, seed: int, probe: dict, oversampling_factor: float = 2.0,
                    init_rounds: int = 5, **_):
    """k-means|| (Bahmani et al. 2012), weighted.

    Round r keeps each row with probability min(1, l w d^2 / phi), l =
    oversampling_factor * C, phi = sum w d^2, then lowers d^2 with the new
    candidates exactly; the rows of round r + 1 are drawn in the pass that lowers
    d^2 for round r (see ``NearestUpdateOp``). The first pass's probe of
    PROBE_ROWS rows decides how: ball indexes where the triangle inequality
    prunes; otherwise matrix products, each candidate then costing a distance for
    every row the rounds see, so the rounds see all rows unless that exceeds a
    budget, and then a uniform sample (weights scaled up; ``dense_rows``). The
    last pass gives each candidate the mass of the rows nearest to it (exact
    counts when the rounds saw every row, else their unbiased estimate); the
    weighted candidates are reduced to C centres by k-means on the driver
    (:func:`~daskclust.seeding.reduction.reduce_candidates`: weighted greedy
    k-means++, then weighted Lloyd, best of a few runs where C is small). Each
    row's seed centre is its nearest candidate's nearest centre (with ball
    indexes) or found by an exact pass (matrix products). Every distance is
    counted, the driver's (index builds, the reduction) included.
    """
    D = engine.data.n_features
    dense, n_dist = pruning_test(probe["X"], seed)
    n_rows = dense_rows(n_clusters, D, oversampling_factor, init_rounds)
    rate = min(1.0, n_rows / engine.data.n_samples) if dense else 1.0
    cands = probe["X"][np.argmin(probe["key"])][None, :]  # the first draw: a row drawn in proportion to w
    ell = oversampling_factor * n_clusters
    common = {"n_features": D, "rate": rate, "seed": seed}  # each update pass also draws the next round's rows
    index = NearestIndex(cands, seed=seed)
    out = engine.map_reduce(NearestUpdateOp(index, 1, reset=True, oversample=ell, step=1, **common))
    n_dist += int(out["n_dist"][0]) + index.n_build
    for r in range(1, init_rounds + 1):
        phi = out["phi"][0]
        if phi <= 0:
            break
        drawn = out.pop("draw", None)
        if drawn is not None:
            new = keep_drawn(drawn, ell / phi)["X"]
        else:  # the previous round drew nothing: draw again from the same distances
            new = engine.map_reduce(BernoulliOp(seed, r, ell / phi, D, rate))["X"]
        if len(new) == 0:
            continue
        index = NearestIndex(new, len(cands), dense=dense, seed=seed)
        ell_next = 0.0 if r == init_rounds else ell
        out = engine.map_reduce(NearestUpdateOp(index, len(cands) + len(new), oversample=ell_next, step=r + 1,
                                                **common))
        cands = np.concatenate([cands, new])
        n_dist += int(out["n_dist"][0]) + index.n_build
    mass = out["mass"]
    if len(mass) < len(cands):  # no round added rows after the first pass
        mass = np.pad(mass, (0, len(cands) - len(mass)))
    reduced = reduce_candidates(cands, mass, n_clusters, seed, bool(dense))
    if reduced is None:  # fewer distinct candidates than clusters: exact assignment instead
        centres, n = _complete(engine, cands, n_clusters, seed)
        return assign(engine, centres, seed, n_dist + n)
    n_dist += reduced.n_dist
    if dense:  # in many dimensions the nearest candidate's centre is often not the row's
        return assign(engine, reduced.centres, seed, n_dist)
    mapped = engine.map_reduce(MapLabelsOp(reduced.centre_of, reduced.centres))
    return reduced.centres, mapped["qe"][0], mapped["W"][0], n_dist + int(mapped["n_dist"][0])


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The distinct values among ``rows``, in the order of their first occurrence."""
    _, first = np.unique(rows, axis=0, return_index=True)
    return rows[np.sort(first)]


def _fill(rows: np.ndarray, n_clusters: int) -> np.ndarray:
    """``n_clusters`` centres: the distinct values among ``rows``, repeated cyclically when
    there are fewer (the data have fewer distinct points than clusters)."""
    distinct = _distinct(rows)
    return distinct[np.arange(n_clusters) % len(distinct)]


def _complete(engine, cands: np.ndarray, n_clusters: int, seed: int) -> tuple[np.ndarray, int]:
    """``n_clusters`` centres from ``cands``, distinct as far as the data allow, and the distances
    evaluated finding them.

    Too few distinct candidates (nearly all rows identical, N close to C) are topped
    up with rows drawn in proportion to w d^2 to them, so rows equal to a candidate
    are never drawn; draws may repeat a value, so this goes on (two passes a round,
    made only then) until C are distinct or every row equals a candidate, when
    :func:`_fill` repeats them.
    """
    D = engine.data.n_features
    cands = _distinct(cands)
    step = 99
    n_dist = 0
    while len(cands) < n_clusters:
        dense, n_test = pruning_test(cands, seed)
        index = NearestIndex(cands, dense=dense, seed=seed)
        out = engine.map_reduce(NearestUpdateOp(index, 0, reset=True))
        n_dist += n_test + index.n_build + int(out["n_dist"][0])
        extra = engine.map_reduce(DrawOp(seed, step, n_clusters - len(cands), D, by_distance=True))["X"]
        if len(extra) == 0:
            break
        cands = _distinct(np.concatenate([cands, extra]))
        step += 1
    return _fill(cands, n_clusters), n_dist


def afkmc2(engine, n_clusters: int, *, seed: int, chain_length: int = 5, **_):
    """AFK-MC2 (Bachem et al. 2016), weighted, in two passes plus chains on the driver.

    Pass 1 computes d(y, c_1)^2 and the per-chunk masses of the proposal
    q(y) = w d(y, c_1)^2 / (2 sum w d^2) + w / (2 sum w); the driver splits the
    m (C - 1) draws among chunks (multinomial); pass 2 draws them in each chunk;
    the chains (``afkmc2_chains``) then run on the driver over the draws.
    """
    D = engine.data.n_features
    first = _draw_first(engine, seed)
    mass = engine.map_reduce(ProposalMassOp(first, engine.data.n_chunks))
    A, B = mass["A"].sum(), mass["B"].sum()
    p = 0.5 * (mass["A"] / A if A > 0 else 0.0) + 0.5 * mass["B"] / B
    n_draws = max(1, (n_clusters - 1) * chain_length)
    rng = np.random.default_rng([seed, STREAM_AFKMC2_SPLIT])
    counts = rng.multinomial(n_draws, p / p.sum())
    draws = engine.map_reduce(ProposalDrawOp(seed, counts, max(A, 1e-300), B, D))
    order = rng.permutation(len(draws["row"]))
    key = stream_key(seed, STREAM_AFKMC2_CHAINS)
    centres = afkmc2_chains(first, np.ascontiguousarray(draws["X"][order]), draws["w"][order],
                            draws["key"][order], n_clusters, chain_length, key)
    n_dist = engine.data.n_samples + n_draws * n_clusters // 2
    # a chain whose draws all coincide with earlier centres repeats one (few distinct rows, N close to C)
    centres, n = _complete(engine, centres, n_clusters, seed)
    return assign(engine, centres, seed, n_dist + n)

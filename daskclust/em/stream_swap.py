"""Swaps for a k-means stream: a centre moved from where it is least needed to a row of the chunk where
the data lack one (the swap move of Kanungo et al. 2004's local search, judged per unit weight).

A stream's start is k-means of its first chunk, and no stepwise step moves a centre out of the optimum
that start leads to: two centres sharing one group of rows stay there, as does one centre between two
groups. After a chunk's E-step, a swap compares

- the gain of a new centre at a row y_p of the chunk, with every centre kept (the chunk's rows per unit
  weight): G_p = sum_n w_n max(0, d_n - ||y_n - y_p||^2) / W, d_n the row's squared distance to its
  centre (row p itself not counted), for :data:`CANDIDATES` rows drawn with probability w_n d_n (D^2
  sampling), and
- the loss of removing centre j, its rows merged into a near centre i, from the running statistics
  (Ward's merge cost): L_j = S0_i S0_j / (S0_i + S0_j) ||mu_i - mu_j||^2,

and moves the centre of least L_j to the best y_p when G_p, less :data:`GAIN_ERRORS` of its standard
error sqrt(n) std_n(g_n) / W (g_n the row's term), exceeds L_j. Both are per unit weight, as the
running statistics are. L_j overstates the loss (j's rows could go to any centre, or to y_p) and G_p
ignores that removing j frees rows for y_p, so a swap is made only when the chunk shows it pays.

Measured over two epochs of 50 chunks, ten seeds (held-out inertia against the batch fit's): on
sipu_birch1 (C = 100) every seed's stream reaches the same optimum, 2.0 % better than the batch fit's
mean, where without swaps it was 3.0 % worse; on uci_letter (C = 26, 320-row chunks) -0.54 % against
-0.75 %. Judged on the chunk alone (the loss of removing j from its rows' second-nearest distances, the
Kanungo et al. swap as such: -0.74 to -2.2 %, up to 34 swaps per stream) or with the candidates drawn
from one half of the chunk and judged on the other (-0.63 %), uci_letter ended no closer: its chunks
give each centre a dozen rows, too few to judge a removal by.

The running statistics follow the move, keeping their total weight: centre j's merge into centre i's
(second moments moved about mu_i), and to the new centre each centre d gives the share of its weight
f_d = W_d->p / W_d that its chunk rows give to y_p (those with ||y_n - y_p||^2 < d_n), with the mean
and spread of those rows. The step's M-step then places the new centre at the mean of the rows it took.
"""

from __future__ import annotations

import numpy as np

from ..models import Params, SuffStats
from ..search.neighbours import exact_neighbours

CANDIDATES = 8
"""Rows of a chunk tried as the new centre of a swap (D^2 sampling)."""

JUDGED_ROWS_PER_CENTRE = 16
JUDGED_ROWS = 4096
"""A chunk of more than max(JUDGED_ROWS, JUDGED_ROWS_PER_CENTRE C) rows is judged on a uniform sample of
that many (the gain's standard error covers the sampling): the swap then costs O(C D) per step, not
O(n D) (on a 20,000 x 784 chunk, C = 100, it took 0.7-1.2 s of a 2.5-2.9 s step over every row)."""

PARTNERS = 8
"""Nearest centres each centre's merge is priced with (Ward's cost is least with one of them but for
centres of very unequal weights)."""

GAIN_ERRORS = 0.5
"""Standard errors of the gain taken off it before it is compared with the loss. Ten seeds on uci_letter:
-0.54 % from the batch fit with 0.5, -0.59 % with 1, -0.75 % with 2 (no swap made); -1.3 % with 0 (five
seeds)."""


def swap(stats: SuffStats, params: Params, X: np.ndarray, w: np.ndarray, labels: np.ndarray,
         rng: np.random.Generator) -> tuple[SuffStats, Params] | None:
    """The running statistics (per unit weight, second moments as traces about ``params.means``) and
    parameters after the chunk's best swap, or None when no swap pays (see the module docstring).

    ``X`` (n, D) the chunk's rows, ``w`` their weights ((n,), or (0,) for ones), ``labels`` (n,) each
    row's nearest centre under ``params``."""
    means = params.means
    C = means.shape[0]
    if C < 2:
        return None
    mass = w if len(w) else np.ones(X.shape[0])
    judged = max(JUDGED_ROWS, JUDGED_ROWS_PER_CENTRE * C)
    if X.shape[0] > judged:  # a uniform sample of the chunk judges the swap
        rows = np.sort(rng.choice(X.shape[0], judged, replace=False))
        X, mass, labels = X[rows], mass[rows], labels[rows]
    d = squared_norms(X - means[labels])
    W = float(mass.sum())
    cost = mass * d
    if not cost.sum() > 0:
        return None
    rows = rng.choice(X.shape[0], size=min(CANDIDATES, X.shape[0]), p=cost / cost.sum())
    best, best_gain, best_taken = -1, -np.inf, None
    for p in np.unique(rows):
        e = squared_norms(X - X[p])
        e[p] = np.inf  # the candidate's own row does not vouch for it
        taken = e < d
        terms = np.where(taken, mass * (d - e), 0.0)
        gain = (float(terms.sum()) - GAIN_ERRORS * np.sqrt(len(terms)) * float(terms.std())) / W
        if gain > best_gain:
            best, best_gain, best_taken = p, gain, taken
    if best_gain <= 0:  # no removal costs less than nothing: no neighbour search
        return None
    j, i, loss = cheapest_removal(stats, means)
    if best_gain <= loss:
        return None
    new_means = means.copy()
    new_means[j] = X[best]
    best_taken[best] = True
    donors = np.where(labels == j, i, labels)  # j's rows are i's now
    moved = give_to_new(merge_into(stats, means, j, i), new_means, j, X, mass, donors, best_taken)
    return moved, params.replace(means=new_means)


def cheapest_removal(stats: SuffStats, means: np.ndarray) -> tuple[int, int, float]:
    """(j, i, L_j): the centre whose merge into one of its :data:`PARTNERS` nearest centres i costs least
    per unit weight, L_j = S0_i S0_j / (S0_i + S0_j) ||mu_i - mu_j||^2 (Ward's criterion); the neighbours
    through a ball tree where it prunes, so no C x C matrix is formed."""
    idx, dist, _ = exact_neighbours(means, PARTNERS + 1)
    S0 = stats.S0
    others, gaps = idx[:, 1:], dist[:, 1:] ** 2  # the first neighbour is the centre itself
    both = np.maximum(S0[:, None] + S0[others], np.finfo(float).tiny)
    cost = S0[:, None] * S0[others] / both * gaps
    best = np.argmin(cost, axis=1)
    j = int(np.argmin(cost[np.arange(len(S0)), best]))
    return j, int(others[j, best[j]]), float(cost[j, best[j]])


def merge_into(stats: SuffStats, means: np.ndarray, j: int, i: int) -> SuffStats:
    """Centre j's statistics added to centre i's, the second moment moved from mu_j to mu_i:
    sum w ||y - mu_i||^2 = S2_j + 2 (mu_j - mu_i) . (S1_j - S0_j mu_j) + S0_j ||mu_j - mu_i||^2."""
    S0, S1, S2 = stats.S0.copy(), stats.S1.copy(), stats.S2.copy()
    delta = means[j] - means[i]
    S2[i] += S2[j] + 2 * float(delta @ (S1[j] - S0[j] * means[j])) + S0[j] * float(delta @ delta)
    S0[i] += S0[j]
    S1[i] += S1[j]
    S0[j], S1[j], S2[j] = 0.0, 0.0, 0.0
    return SuffStats(S0, S1, S2, stats.scal.copy())


def give_to_new(stats: SuffStats, means: np.ndarray, j: int, X: np.ndarray, w: np.ndarray, donors: np.ndarray,
                taken: np.ndarray) -> SuffStats:
    """The new centre j (at ``means[j]``) given by each donor d the share f_d = W_d->j / W_d of its running
    weight S0_d that its chunk rows (``X``, weights ``w``, centres ``donors``) give it where ``taken``, with
    their mean m_d and spread: S1 moves S0_d f_d m_d, S2 the same share of their mean squared distance
    to mu_d (from d, floored at 0) and to mu_j (to j)."""
    C = means.shape[0]
    chunk_weight = np.bincount(donors, weights=w, minlength=C)
    X, w, donors = X[taken], w[taken], donors[taken]
    given = np.bincount(donors, weights=w, minlength=C)
    gives = given > 0
    per = np.where(gives, given, 1.0)
    share = np.where(gives, stats.S0 * given / np.where(gives, chunk_weight, 1.0), 0.0)
    mean_moved = np.zeros_like(stats.S1)
    np.add.at(mean_moved, donors, w[:, None] * X)
    mean_moved /= per[:, None]
    to_new = np.bincount(donors, weights=w * squared_norms(X - means[j]), minlength=C) / per
    to_old = np.bincount(donors, weights=w * squared_norms(X - means[donors]), minlength=C) / per
    S0 = stats.S0 - share
    S1 = stats.S1 - share[:, None] * mean_moved
    S2 = np.maximum(stats.S2 - share * to_old, 0.0)
    S0[j] += share.sum()
    S1[j] += share @ mean_moved
    S2[j] += share @ to_new
    return SuffStats(S0, S1, S2, stats.scal.copy())


def squared_norms(diff: np.ndarray) -> np.ndarray:
    """||diff_n||^2 of each row, the difference formed once."""
    return np.einsum("nd,nd->n", diff, diff)

"""What predict, predict_proba and score_samples run on each block of rows: a nearest-mean index and,
per mean, the components a row near it evaluates (the fit's neighbourhoods, seed 000 Alg. 1)."""

from __future__ import annotations

import numpy as np

from ..kernels.infer import top_components
from ..models import Family, Params
from ..search.neighbours import exact_neighbours
from ..seeding.ops import NearestIndex


class MixtureIndex:
    """Nearest-mean index (exact: a ball index where it prunes, else blocked products) and the
    neighbourhood table G_c of each mean (its ``n_candidates`` nearest means, itself first).

    A row evaluates the components of the neighbourhood of its nearest mean: O(G D) per row
    instead of O(C D). For k-means and the isotropic mixture the nearest mean is the most
    responsible component, so ``predict`` is exact; for the weighted families it is the
    best of the G candidates (the truncated E-step's search, seed 000). ``exact=True``
    evaluates every component.
    """

    def __init__(self, family: Family, params: Params, n_candidates: int, exact: bool = False):
        C, D = params.means.shape
        self.kernel = family.kernel_params(params)
        self.log_norm = family.log_norm(self.kernel, D)
        self.exact = exact or n_candidates >= C
        if self.exact:
            self.table = np.zeros((C, 0), dtype=np.int32)
        else:
            self.table = exact_neighbours(params.means, n_candidates)[0]
            self.index = NearestIndex.probed(params.means)

    def top(self, X: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices (n, k) int32, responsibilities (n, k), log-likelihood bound (n,)) of a block;
        the bound is log sum over the evaluated components of pi_c N(y; mu_c, Sigma_c), the
        log-likelihood when exact."""
        n = X.shape[0]
        first = np.zeros(n, dtype=np.int32) if self.exact else self.index.nearest(X)[0]
        idx = np.empty((n, k), dtype=np.int32)
        q = np.empty((n, k))
        lse = np.empty(n)
        top_components(X, self.kernel, first, self.table, k, idx, q, lse)
        return idx, q, lse + self.log_norm

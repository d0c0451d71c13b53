"""What a fit computes, frozen before any work: :class:`FitSpec`.

An estimator validates its parameters and turns them into a spec; :func:`daskclust.fit.fit` runs
it. The spec says which model (family, C, C'), how the clusters are searched, how the fit is
seeded and when it stops; ``steps`` (:class:`~daskclust.fit.steps.FitSteps`) how a variant
seeds, starts and iterates (the mixtures' k-means start, sketches, cells, greedy learning).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..em.loop import EMSettings
from ..models import Family
from ..search import Search, SearchConfig, make_search


@dataclass(frozen=True, eq=False)
class FitSpec:
    """A fit's model, search, seeding and stopping rule.

    ``n_truncated`` is C', the clusters each row keeps (C: exact EM); ``search`` one of
    :data:`daskclust.search.SEARCHES` with ``n_neighbors`` (G), ``n_explore`` and ``n_samples``
    (R); ``init`` a seeding name or (C, D) centres with the seeding's options; ``tol`` bounds
    the change of the free energy per point (absolutely when ``absolute_tol``, as scikit-learn's
    GaussianMixture, else relatively); ``coreset`` m rows for a coreset fit refined by at most
    ``refine_iter`` iterations on the full data.
    """

    kind: str
    family: Family
    n_clusters: int
    n_truncated: int
    search: str = "estimated"
    n_neighbors: int = 10
    n_explore: int = 1
    n_samples: int = 5
    init: str | np.ndarray = "k-means||"
    oversampling_factor: float = 2.0
    init_rounds: int = 5
    chain_length: int = 5
    max_iter: int = 100
    tol: float = 1e-4
    reg: float = 0.0
    n_init_esteps: int = 0
    absolute_tol: bool = False
    n_init: int = 1
    coreset: int | None = None
    refine_iter: int = 2
    memory_budget: int | None = None
    verbose: int = 0
    steps: object = field(default=None)
    """The :class:`~daskclust.fit.steps.FitSteps` of the fit (None: the plain ones)."""

    def settings(self, seed: int, data: str = "full") -> EMSettings:
        """The EM loop's settings for the run seeded with ``seed``."""
        return EMSettings(self.n_clusters, self.n_truncated, self.family, self.max_iter, self.tol, self.reg,
                          self.n_init_esteps, seed, data=data, absolute_tol=self.absolute_tol)

    def make_search(self, n_rows: int = 0) -> Search:
        """A fresh search strategy: the spec's, or ``"full"`` when every cluster is kept; ``n_rows``: the rows
        its E-steps see (0: not known)."""
        C = self.n_clusters
        return make_search(self.search if self.n_truncated < C else "full",
                           SearchConfig(C, self.n_truncated, min(self.n_neighbors, C), self.n_explore, self.n_samples,
                                        metric=self.family.metric, n_rows=n_rows))

    def with_clusters(self, n_clusters: int, n_truncated: int) -> FitSpec:
        """The same fit with another C and C' (greedy learning grows C)."""
        return replace(self, n_clusters=n_clusters, n_truncated=n_truncated)

"""CellGaussianMixture: EM on cached cell statistics (Verbeek et al. 2006), diagonal or full covariances."""

from __future__ import annotations

import numpy as np

from ..em.cell_loop import RefineSettings
from ..errors import InvalidDataError, InvalidParameterError
from ..fit.cell_steps import CellSteps, GreedySteps
from ..io import Location, refuse_overlap
from ..models import FAMILIES
from ..models.cell_families import CELL_FAMILIES
from ..models.inference import MixtureIndex
from .apply import check_block
from .gaussian_mixture import GaussianMixture
from .params import Interval, Options, PathOrNone


class CellGaussianMixture(GaussianMixture):
    """Gaussian mixture fitted by EM on kd-tree cells (Verbeek et al. 2006, Verbeek, Nunnink & Vlassis), truncated.

    Every chunk is partitioned, on its worker, by a kd-tree whose nodes split at the bisector of their
    first principal component and cache their statistics (n_A, mean, within-cell covariance or its
    diagonal), built in the seeding's first pass over the rows (given ``means_init``, that pass is the
    only one: each cell starts from the centre nearest to its mean). EM then runs on cells, reading only
    those statistics (a streamed store is not read again): each cell shares its responsibilities (Eq. 9),
    truncated to its C' best components among the estimated neighbourhoods, and the M-step uses the
    cells' statistics (Eqs. 11-13). When EM has converged on a partition, each chunk replaces every cell
    whose split would raise the bound F by at least its share of the tolerance, ``refine_tol`` |F| W /
    cells, by its children, and those children in turn, best first; EM continues until what splitting
    every cell could still gain is below ``refine_tol`` |F| W. Cost per iteration: O(cells C' G D)
    ("diag") or O(cells C' G D^2) ("full"), against O(N ...) on rows. F over cells bounds the
    log-likelihood from below; with every cell a single row it is exact EM.

    A separate estimator rather than a ``cells=True`` option: its parameters (leaf size, depth,
    refinement) and its history (rounds of refinement, ``refinement_``) are its own; predict, score,
    bic and the attributes are :class:`GaussianMixture`'s, on rows.

    Parameters
    ----------
    covariance_type : {"diag", "full"}, default="diag"
    leaf_size : int, default=16
        Nodes of at most this many rows are leaves (1: the finest partition is the rows), or of at most
        n / 8192 of a chunk's n rows when that is more (a large chunk's tree keeps about 8192 leaves:
        refinement uses far fewer, and the build's time and the trees' memory grow with them).
    initial_depth : int, default=4
        The first partition: every node at this depth of each chunk's tree (16 cells a chunk), deeper
        where needed for 100 cells per component. Verbeek et al. 2006 starts at depth 2 of one tree; on 200,000
        rows of a 10-component 2-D mixture (16 chunks, one ad-hoc run) depth 2 stopped at a worse local
        optimum (held-in log-likelihood -5.096 against -4.957 for EM on the rows), depth 4 reached
        -4.958; at k = 50 on 10^5 rows depth 4 starved 18 components, depth 8 none (the bench's run).
    refine_tol : float, default=1e-4
        Stop refining when splitting every cell would raise F by less than this share of |F| (summed over
        the data); a round splits the cells that would raise it by their share of that, or more.
    tol : float, default=1e-4
        EM on a partition stops when F per point changes by at most ``tol`` relatively (Verbeek et al. 2006's
        rule; refinement then decides whether to go on).
    refine_fraction : float, default=1.0
        Most cells expanded per round, as a share of each chunk's current cells (the largest gains first).
    max_refine : int, default=30
        Most refinement rounds.
    tree_store : str or None, default=None
        A location (path or URL every worker reaches) keeping the trees between fits: written by the
        first fit, read by later fits on the same data with the same ``leaf_size`` and covariance
        layout (no tree build: the trees otherwise ride along the seeding's first pass, so this saves
        the build's time, not a read of the rows); trees of other data there are refused.

    Notes
    -----
    The other parameters are :class:`GaussianMixture`'s.

    Attributes
    ----------
    refinement_ : list of dict
        Per round: cells, leaves, free energy, EM iterations, cells expanded after it, the gain of
        splitting every cell relative to |F| (summed over the data), and the (cell, component)
        evaluations of the refinement (also counted in the history's ``n_distances``, on the iteration
        before it).
    Others as in :class:`GaussianMixture`; ``history_`` holds every round's iterations in turn.
    """

    streams = False  # fitted on cells of the whole data: no partial_fit

    _constraints = {
        **GaussianMixture._constraints,
        "covariance_type": Options(tuple(CELL_FAMILIES)),
        "leaf_size": Interval(1, None, integer=True),
        "initial_depth": Interval(0, None, integer=True),
        "refine_tol": Interval(0, None),
        "refine_fraction": Interval(0, 1, open_low=True),
        "max_refine": Interval(0, None, integer=True),
        "tree_store": PathOrNone(),
    }

    def __init__(self, n_components=1, *, covariance_type="diag", leaf_size=16, initial_depth=4, refine_tol=1e-4,
                 refine_fraction=1.0, max_refine=30, tree_store=None, n_truncated=5, search="estimated", n_neighbors=5,
                 n_explore=None, n_init_esteps=0, n_samples=5, reg_covar=1e-6, learn_weights=None,
                 weights_init=None, means_init=None, precisions_init=None, init="k-means||", n_init=1, max_iter=100,
                 tol=1e-4, random_state=None, oversampling_factor=2.0, init_rounds=5, chain_length=5, coreset=None,
                 refine_iter=0, chunk_rows=None, memory_budget=None, state="memory", state_store=None,
                 scheduler_address=None, security=None, verbose=0, callback=None):
        self._store_params(locals())

    def _absolute_tol(self) -> bool:
        return False

    def _start_from(self) -> str:
        return "seeds"  # the seeds start EM on the cells (Verbeek et al. 2006)

    def _family(self):
        family = CELL_FAMILIES[self.covariance_type]
        return family if self.learn_weights is None else family.with_weights(bool(self.learn_weights))

    def _index(self, exact: bool = False) -> MixtureIndex:
        self._check_fitted()
        return MixtureIndex(FAMILIES[self.covariance_type], self._model(), exact)

    def fit(self, X, y=None, sample_weight=None, *, client=None, **kwargs):
        """As :meth:`GaussianMixture.fit`. A checkpoint holds the trees, the partition and each cell's K
        with the loop state, so a resumed fit continues in the same partition and equals the
        uninterrupted one; its ``refinement_`` lists the rounds since the resume."""
        if self.coreset is not None:
            raise InvalidParameterError("coreset= does not combine with cells: the cells already summarise the rows")
        self.refinement_ = []
        return super().fit(X, y, sample_weight, client=client, **kwargs)

    def _check_stores_apart(self, inputs):
        if self.tree_store is not None:
            refuse_overlap(Location.parse(self.tree_store), "trees", inputs)

    def _refine_settings(self) -> RefineSettings:
        return RefineSettings(self.leaf_size, self.initial_depth, self.refine_tol, self.max_refine,
                              self.refine_fraction)

    def _steps(self, n_features: int, transformed=None) -> CellSteps:
        C = self._n_clusters()
        return CellSteps(weights=self._given_weights(C), covariances=self._given_covariances(C, n_features),
                         refine=self._refine_settings(), full=self._family().full_cells,
                         tree_store=self.tree_store)

    def _set_fitted(self, result, n_features, transformed=None) -> None:
        super()._set_fitted(result, n_features, transformed)
        self.refinement_ = result.extras.get("refinement", [])


class GreedyGaussianMixture(CellGaussianMixture):
    """Accelerated greedy mixture learning (Verbeek et al. 2006 Sec. 5) on kd-tree cells: it also answers "how many components?".

    Starts from one component and adds one at a time (:mod:`daskclust.em.greedy`): candidates from
    random halves of the cells each component is most responsible for (Eq. 15), partial EM of each
    against the fixed mixture on those cells (Eqs. 18-21), the best by the gain of the bound joins;
    then EM with refinement on all cells (:class:`CellGaussianMixture`). It stops at ``n_components``
    (the most it tries) or when the criterion stops improving for ``patience`` additions: the
    held-out mean log-likelihood when ``fit`` is given ``X_val`` (exact, on rows), else BIC from the
    cells' bound (-2 F W + p log W). The model kept is the best by that criterion.

    Parameters
    ----------
    n_components : int, default=10
        The most components tried.
    n_candidates : int, default=5
        Candidates per existing component and addition.
    partial_iter : int, default=30
        Partial EM iterations per candidate (10 left a 5-component fit stuck at 4 good components, ad hoc).
    patience : int, default=1
        Additions without improvement before stopping.
    min_improvement : float, default=1e-4
        An addition improves the criterion only by more than this fraction of its best value so far
        (held-out log-likelihoods of nested mixtures creep up by noise).
    tol : float, default=1e-5
        EM's relative tolerance on F (Verbeek et al. 2006's); 1e-4 stopped EM before a new component grew.

    Notes
    -----
    The other parameters are :class:`CellGaussianMixture`'s (``init`` is not used: the first
    component is the data's mean).

    Attributes
    ----------
    n_components_ : int
        Components of the kept model.
    components_ : list of dict
        Per k: free energy per row (cells), BIC (cells), held-out log-likelihood (when ``X_val``), the gain
        of the added component's bound, candidate evaluations, EM iterations, cells.
    """

    _constraints = {
        **CellGaussianMixture._constraints,
        "n_candidates": Interval(1, None, integer=True),
        "partial_iter": Interval(0, None, integer=True),
        "patience": Interval(1, None, integer=True),
        "min_improvement": Interval(0, None),
    }

    def __init__(self, n_components=10, *, covariance_type="full", n_candidates=5, partial_iter=30, patience=1,
                 min_improvement=1e-4,
                 leaf_size=16, initial_depth=4, refine_tol=1e-4, refine_fraction=1.0, max_refine=30, tree_store=None,
                 n_truncated=5,
                 search="estimated", n_neighbors=5, n_explore=None, n_init_esteps=0, n_samples=5, reg_covar=1e-6,
                 learn_weights=None, weights_init=None, means_init=None, precisions_init=None, init="k-means||",
                 n_init=1, max_iter=100, tol=1e-5, random_state=None, oversampling_factor=2.0, init_rounds=5,
                 chain_length=5, coreset=None, refine_iter=0, chunk_rows=None, memory_budget=None, state="memory",
                 state_store=None, scheduler_address=None, security=None, verbose=0, callback=None):
        self._store_params(locals())

    variable_components = True

    def _n_clusters(self) -> int:
        """1 while fitting (greedy learning starts from one component), then the kept model's."""
        return 1 if getattr(self, "_fitting", False) else getattr(self, "n_components_", 1)

    def _n_truncated(self) -> int:
        k = self._n_clusters()
        return k if self.n_truncated is None else min(self.n_truncated, k)

    def _set_model(self, params) -> None:
        self.n_components_ = len(params.means)
        super()._set_model(params)

    def fit(self, X, y=None, sample_weight=None, *, X_val=None, client=None, **kwargs):
        """As :meth:`CellGaussianMixture.fit`, with ``X_val`` (rows) for the held-out criterion. No
        checkpoints: the number of components changes within the fit."""
        self._validate_params()
        if kwargs.get("checkpoint") is not None or kwargs.get("resume") is not None:
            raise InvalidParameterError("GreedyGaussianMixture does not checkpoint: its number of components changes "
                                        "within the fit; fit CellGaussianMixture(n_components_) to checkpoint")
        self._X_val = None if X_val is None else validation_rows(X_val)
        self._fitting = True
        try:
            return super().fit(X, y, sample_weight, client=client, **kwargs)
        finally:
            self._fitting = False
            self._X_val = None

    def _check_initial_params(self, n_clusters, n_features):
        super()._check_initial_params(n_clusters, n_features)
        X_val = getattr(self, "_X_val", None)
        if X_val is not None and X_val.shape[1] != n_features:
            raise InvalidDataError(f"X_val has {X_val.shape[1]} features, X has {n_features}: the held-out rows "
                                   "must be rows of the same features")

    def _steps(self, n_features: int, transformed=None) -> GreedySteps:
        C = self._n_clusters()
        return GreedySteps(weights=self._given_weights(C), covariances=self._given_covariances(C, n_features),
                           refine=self._refine_settings(), full=self._family().full_cells,
                           tree_store=self.tree_store, n_components=self.n_components, n_truncated=self.n_truncated,
                           n_candidates=self.n_candidates, partial_iter=self.partial_iter, patience=self.patience,
                           min_improvement=self.min_improvement, X_val=self._X_val,
                           dense_family=FAMILIES[self.covariance_type])

    def _set_fitted(self, result, n_features, transformed=None) -> None:
        self._fitting = False
        super()._set_fitted(result, n_features, transformed)
        self.components_ = result.extras.get("components", [])


def validation_rows(X_val) -> np.ndarray:
    """Held-out rows as a C-contiguous float64 (n, D) array with n >= 1, every value finite (checked before
    a kernel reads them: they are scored against every component)."""
    try:
        rows = np.ascontiguousarray(X_val, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"X_val must be numeric rows ({type(exc).__name__}: {exc})") from exc
    if rows.ndim != 2 or rows.shape[0] == 0 or rows.shape[1] == 0:
        raise InvalidDataError(f"X_val must be a non-empty 2-D array of rows, got shape {rows.shape}")
    try:
        return check_block(rows)
    except InvalidDataError as exc:
        raise InvalidDataError(f"X_val: {exc}") from exc

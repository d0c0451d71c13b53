"""CellGaussianMixture: EM on cached cell statistics (seed 001), diagonal or full covariances."""

from __future__ import annotations

from ..em.cells import RefineSettings, run_cells
from ..errors import InvalidParameterError
from ..models import FAMILIES
from ..models.cells import CELL_FAMILIES
from .gaussian_mixture import GaussianMixture
from .inference import MixtureIndex
from .params import Interval, Options


class CellGaussianMixture(GaussianMixture):
    """Gaussian mixture fitted by EM on kd-tree cells (seed 001, Verbeek, Nunnink & Vlassis), truncated.

    Every chunk is partitioned, on its worker, by a kd-tree whose nodes split at the bisector of their
    first principal component and cache their statistics (n_A, mean, within-cell covariance or its
    diagonal): one pass over the rows after the seeding. EM then runs on cells, reading only those
    statistics (a streamed store is not read again): each cell shares its responsibilities (Eq. 9),
    truncated to its C' best components among the estimated neighbourhoods, and the M-step uses the
    cells' statistics (Eqs. 11-13). When EM has converged on a partition, each chunk proposes the
    cells whose split raises the bound F most, the driver expands the best ``refine_fraction`` of
    them cluster-wide, and EM continues, until the relative gain falls below ``refine_tol``. Cost per
    iteration: O(cells C' G D) ("diag") or O(cells C' G D^2) ("full"), against O(N ...) on rows.
    F over cells bounds the log-likelihood from below; with every cell a single row it is exact EM.

    A separate estimator rather than a ``cells=True`` option: its parameters (leaf size, depth,
    refinement) and its history (rounds of refinement, ``refinement_``) are its own; predict, score,
    bic and the attributes are :class:`GaussianMixture`'s, on rows.

    Parameters
    ----------
    covariance_type : {"diag", "full"}, default="diag"
    leaf_size : int, default=16
        Nodes of at most this many rows are leaves (1: the finest partition is the rows).
    initial_depth : int, default=4
        The first partition: every node at this depth of each chunk's tree (16 cells a chunk). Seed 001
        starts at depth 2 of one tree; on 200,000 rows of a 10-component 2-D mixture (16 chunks, one
        ad-hoc run) depth 2 with refine_fraction=0.25 stopped at a worse local optimum (held-in
        log-likelihood -5.096 against -4.957 for EM on the rows), depth 4 with 0.5 reached -4.958.
    refine_tol : float, default=1e-4
        Stop refining when the gain in F proposed by a round is below this fraction of |F|.
    refine_fraction : float, default=0.5
        Share of the current cells expanded per round (the best by proposed gain).
    max_refine : int, default=30
        Most refinement rounds.
    Other parameters
        As in :class:`GaussianMixture`.

    Attributes
    ----------
    refinement_ : list of dict
        Per round: cells, leaves, free energy, EM iterations, cells expanded, relative gain.
    Others as in :class:`GaussianMixture`; ``history_`` holds every round's iterations in turn.
    """

    _constraints = {
        **GaussianMixture._constraints,
        "covariance_type": Options(("diag", "full")),
        "leaf_size": Interval(1, None, integer=True),
        "initial_depth": Interval(0, None, integer=True),
        "refine_tol": Interval(0, None),
        "refine_fraction": Interval(0, 1, open_low=True),
        "max_refine": Interval(0, None, integer=True),
    }

    def __init__(self, n_components=1, *, covariance_type="diag", leaf_size=16, initial_depth=4, refine_tol=1e-4,
                 refine_fraction=0.5, max_refine=30, n_truncated=5, search="estimated", n_neighbors=5,
                 n_explore=None, n_init_esteps=0, n_samples=5, reg_covar=1e-6, learn_weights=None,
                 weights_init=None, means_init=None, precisions_init=None, init="k-means||", n_init=1, max_iter=100,
                 tol=1e-4, random_state=None, oversampling_factor=2.0, init_rounds=5, chain_length=5, coreset=None,
                 refine_iter=0, chunk_rows=None, memory_budget=None, state="memory", state_store=None,
                 scheduler_address=None, security=None, verbose=0, callback=None):
        self._store_params(locals())

    def _family(self):
        family = CELL_FAMILIES[self.covariance_type]
        return family if self.learn_weights is None else family.with_weights(bool(self.learn_weights))

    def _index(self, exact: bool = False) -> MixtureIndex:
        self._check_fitted()
        return MixtureIndex(FAMILIES[self.covariance_type], self._model(), 2 * max(self.n_neighbors, self._n_keep()),
                            exact)

    def fit(self, X, y=None, sample_weight=None, *, client=None, checkpoint=None, resume=None, **kwargs):
        if checkpoint is not None or resume is not None:
            raise InvalidParameterError("CellGaussianMixture does not checkpoint yet: its fits read the rows twice "
                                        "and then only the cells' statistics")
        if self.coreset is not None:
            raise InvalidParameterError("coreset= does not combine with cells: the cells already summarise the rows")
        self.refinement_ = []
        return super().fit(X, y, sample_weight, client=client, **kwargs)

    def _iterate(self, engine, start, plan, search, progress):
        refine = RefineSettings(self.leaf_size, self.initial_depth, self.refine_tol, self.max_refine,
                                self.refine_fraction)
        result, rounds = run_cells(engine, start, plan.settings, search, refine, progress.row,
                                   full=self.covariance_type == "full")
        self.refinement_ = rounds
        for row in rounds:
            progress.say(f"cells: round {row['round']}, {row['cells']} cells of {row['leaves']} leaves, free energy "
                         f"{row['free_energy']:.6g}, {row['expanded']} expanded")
        return result

"""KMeans: k-means as truncated variational EM with C' = 1 (Lücke & Forster 2019, Prop. 2)."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin

from ..kernels.estep import all_distances
from ..models import FAMILIES, Family, Params
from ..seeding.passes import NearestIndex
from .apply import apply_rows, scoring_weights
from .base import COMMON_CONSTRAINTS, TruncatedEMEstimator
from .params import Interval, Options
from .stream import StreamMixin

AUTO_RUNS_OF_RANDOM = 10
"""Runs of ``n_init="auto"`` with ``init="random"`` (scikit-learn's; one run for every other init)."""


class KMeans(ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin, StreamMixin, TruncatedEMEstimator):
    """k-means clustering on Dask, for data larger than memory and many clusters.

    k-means as truncated variational EM with one cluster per point (C' = 1,
    Lücke & Forster 2019 Prop. 2). By default each point only evaluates the clusters near
    its current one (``search="estimated"``: var-k-means-S of Forster & Lücke 2018, cost
    O(N G D) per iteration instead of O(N C D)); ``search="full"`` is Lloyd's
    algorithm. The reported free energy is Lücke & Forster 2019's k-means free energy
    (Eq. 15), -log C - (D/2) log(2 pi e sigma^2), which never decreases.

    A scikit-learn estimator (clusterer and transformer): ``clone``,
    ``get_params`` / ``set_params``, pipelines and ``GridSearchCV`` work on
    numpy input, with ``score`` the negative inertia as in scikit-learn.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters C.
    search : {"estimated", "exhaustive", "sampled", "full"}, default="estimated"
        Which clusters a point evaluates (see :mod:`daskclust.search` and docs/algorithms/search.md).
    n_neighbors : int, default=10
        G, size of the cluster neighbourhoods G_c (c included). On the real sets of the
        ``realdata`` bench 5 stopped short of Lloyd's optimum on uci_letter at C = 260 (a fixed
        point of the estimated neighbourhoods above scikit-learn's quantization error); 10 reaches
        it there at a similar whole-fit time, iterations costing more on the BIRCH grid.
    n_explore : int, default=1
        Clusters drawn uniformly per point and iteration besides the neighbourhoods ("+1").
    n_init_esteps : int, default=0
        E-steps before the first M-step, letting K(n) and G_c settle (Forster & Lücke 2018's
        neighbourhood initialisation). K(n) starts at each point's seed centre and
        its nearest centres, so they bring nothing measurable here (BIRCH C = 1024
        and 4096, 3 seeds each: same quantization error with 0, 1 or 2); useful when
        starting from a poor K(n).
    n_samples : int, default=5
        R, candidates drawn per point by ``search="sampled"``.
    init : {"k-means||", "afkmc2", "k-means++", "random", "auto"}, callable or array of shape (C, D), default="k-means||"
        Seeding (see :mod:`daskclust.seeding`); "auto" is "k-means||": Lloyd from its seeds ends at
        the lowest quantization error of the four (the ``seeding`` bench, BIRCH C = 1024), so it is
        daskclust's default where scikit-learn's is "k-means++" (offered). A callable is
        scikit-learn's: ``init(X, n_clusters, random_state)`` returns the centres.
    n_init : "auto" or int, default="auto"
        Runs with different seeds; the one with the highest final free energy
        (here: the lowest inertia) is kept. Each run is a whole fit. "auto" is scikit-learn's:
        10 runs for ``init="random"``, one for every other ``init``. With an array ``init``
        one run, and a RuntimeWarning when ``n_init`` asks for more (as scikit-learn's).
        Needs one run to checkpoint or resume.
    max_iter : int, default=300
        Most M-steps (after the ``n_init_esteps`` E-steps).
    tol : float, default=1e-4
        scikit-learn's rule: stop when an M-step moves the centres by
        sum_c ||mu_c^new - mu_c||^2 <= tol sum_j Var(x_j) / D (the data's variance per feature,
        averaged), or when no assignment changes.
    random_state : int, numpy RandomState or Generator, or None, default=None
        Seed of every random stream (keyed by seed, iteration and chunk): an int
        makes the fit deterministic; a RandomState / Generator gives each fit a
        seed drawn from it (so repeated fits differ); None fresh entropy.
    coreset : int or None, default=None
        m: fit on a lightweight coreset of m weighted rows instead of the data (Exarchakis et al. 2022,
        :class:`daskclust.transforms.LightweightCoreset`, drawn with the fit's seed), then
        evaluate (and with ``refine_iter`` refine) that model on the full data. m must be at
        least ``n_clusters``; m larger than n_samples is allowed (rows are drawn with
        replacement: the coreset then repeats rows, and costs more than the data would).
        Every run of ``n_init`` is on the coreset; the full-data phase runs once, from the best.
        Cost: the construction reads the data in 3 passes (N distances to the mean, and N
        again where pass 3 draws, counted in ``coreset_``), the fit on it O(m C' G D) per
        iteration (C' = 1 here), each refining iteration O(N C' G D), as one of a plain fit.
        ``history_`` holds the coreset's iterations (``"data": "coreset"``), then the full
        data's (``"full"``); ``inertia_``, ``n_iter_``, ``converged_`` and the final free energy
        are the full data's. Not with ``checkpoint`` / ``resume`` (a coreset fit is short).
    refine_iter : int, default=0
        With ``coreset``: most truncated EM iterations (M-steps) on the full data, starting
        from the coreset's model with K(n) rebuilt from each row's nearest centre; fewer when
        converged (``tol``). 0 runs a single E-step on the full data, the evaluation of the
        coreset model (``n_iter_ = 0``, ``converged_ = False``). Ignored without ``coreset``;
        ``max_iter`` and ``n_init_esteps`` apply to the fit on the coreset.
    oversampling_factor, init_rounds : float, int, default=2.0, 5
        k-means|| oversampling l = oversampling_factor * C and number of rounds.
    chain_length : int, default=5
        AFK-MC2 Markov chain length m.
    chunk_rows : int or None, default=None
        Rows per chunk; default from the data's shape (about 64 MiB, at least 16 chunks).
    memory_budget : int or None, default=None
        Bytes of cluster memory the data may use when persisted (default half
        the cluster's memory); larger data is streamed from its source each pass.
    state : {"memory", "zarr"}, default="memory"
        Where the per-row state K(n) (N x C' ids, 2 bytes each up to C = 32,767,
        else 4) stays between passes: in the workers' memory beside its chunk,
        or, when that is too large for the cluster, in a zarr store read and
        written with each chunk.
    state_store : str or None, default=None
        Location of that store (path or URL every worker reaches); default
        ``<checkpoint>/live-state``, else a temporary directory removed after the fit.
    scheduler_address : str or None, default=None
        Dask scheduler to connect to when ``fit`` gets no client.
    security : distributed.security.Security or None, default=None
        TLS settings for ``scheduler_address`` (``tls://...``); default dask's
        configuration (``distributed.comm.tls``). Like the scheduler address,
        the state store, ``verbose`` and ``callback``, a runtime setting: never
        saved with a model or checkpoint.
    verbose : int or bool, default=0
        1 or True: show progress, a bar per long pass (seeding, coreset, every pass over
        streamed data; stderr) and a line per iteration (stdout), and print the fit's
        messages when logging does not show them (they are logged to the ``daskclust``
        logger at INFO in any case); ``predict`` / ``transform`` writing to zarr show a bar.
        0: nothing is printed.
    callback : callable or None, default=None
        Called with each history row (a dict) after every iteration.
    algorithm : {"lloyd", "elkan"}, default="lloyd"
        scikit-learn's choice between two exact Lloyd implementations; accepted, for scripts
        written for scikit-learn, and without effect: the search (``search``) decides which
        distances each iteration evaluates. "elkan" with one cluster warns as scikit-learn's.
    copy_x : bool, default=True
        Accepted without effect: daskclust never modifies ``X`` (scikit-learn centres it in place
        with ``copy_x=False``).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (C, D)
    labels_ : ndarray, dask array or xarray.DataArray of shape (n_samples,)
        Nearest centre of each training row (``predict(X)``): for numpy input a
        numpy array, computed after the fit by one exact pass over ``X`` on the
        driver's threads (O(N C D), not in ``fit_time_``); for lazy input (dask,
        zarr, path) a lazy dask array; for a DataArray a DataArray named "labels"
        (see :meth:`predict`). Not saved with the model.
    sigma2_ : float
        Variance of the rows around their centres, sum ||y - mu||^2 / (D N).
    inertia_ : float
        Sum of squared distances of the rows to their nearest final centre, exact (one pass after
        the last iteration), weighted by ``sample_weight``.
    n_iter_ : int
        Iterations run: M-steps, plus the last E-step when it found a fixed point (every
        assignment unchanged), as scikit-learn counts them; at most ``max_iter``.
    converged_ : bool
    history_ : list of dict
        One row per iteration, see :data:`daskclust.em.loop.HISTORY_FIELDS`.
    cluster_sizes_ : ndarray of shape (C,) or None
        Rows (weighted) assigned to each cluster by the last E-step (with ``coreset``, on
        the full data); saved with the model (None for a model saved before it was).
    seeding_time_, fit_time_ : float
        Seconds spent seeding and in the whole fit (with ``coreset``: the seeding on the
        coreset plus the pass assigning the full data to its centres, and the fit includes
        the construction).
    seeding_distances_ : int
        Distances the seeding evaluated (with ``coreset``: the same two parts).
    seed_ : int
        Seed of the kept run (with ``coreset``, the coreset is drawn with the fit's seed,
        the first of the runs').
    coreset_ : dict or None
        With ``coreset``: ``size`` (m), ``seconds`` and ``n_distances`` of the construction,
        ``total_weight`` (the coreset's weight sum, an unbiased estimate of the data's),
        ``assignment_distances`` (phase 2's first pass); None otherwise.
    bytes_read_ : int
        Bytes the workers read from the data's sources during the fit (rows times their stored
        width; 0 for numpy input, pushed from memory): a streamed fit reads its store once per
        pass, a persisted one once.
    training_data_ : dict or None
        What the fit saw: ``source`` and ``weights``, where the rows and weights were stored
        (``{"url", "array"}``, None in memory), and ``fingerprint``, their shape, dtype, chunk
        bounds and whether weighted (:meth:`daskclust.data.ChunkedData.fingerprint`). Saved with
        the model; None for a model saved before it was recorded.
    """

    _constraints = {**COMMON_CONSTRAINTS, "n_clusters": Interval(1, None, integer=True),
                    "algorithm": Options(("lloyd", "elkan")), "copy_x": Options((True, False)),
                    "n_init": Interval(1, None, integer=True, words=("auto",))}

    def __init__(self, n_clusters=8, *, search="estimated", n_neighbors=10, n_explore=1, n_init_esteps=0,
                 n_samples=5, init="k-means||", n_init="auto", max_iter=300, tol=1e-4, random_state=None,
                 coreset=None, refine_iter=0, oversampling_factor=2.0, init_rounds=5, chain_length=5,
                 chunk_rows=None, memory_budget=None, state="memory", state_store=None, scheduler_address=None,
                 security=None, verbose=0, callback=None, algorithm="lloyd", copy_x=True):
        self._store_params(locals())

    def _n_clusters(self) -> int:
        return self.n_clusters

    def _n_truncated(self) -> int:
        return 1

    def _family(self) -> Family:
        return FAMILIES["kmeans"]

    def _n_runs(self) -> int:
        if _is_array(self.init):
            return 1
        if self.n_init == "auto":
            return AUTO_RUNS_OF_RANDOM if isinstance(self.init, str) and self.init == "random" else 1
        return self.n_init

    def _check_initial_params(self, n_clusters: int, n_features: int) -> None:
        if _is_array(self.init) and self.n_init not in ("auto", 1):
            warnings.warn(f"Explicit initial center position passed: performing only one init in {type(self).__name__} "
                          f"instead of n_init={self.n_init}.", RuntimeWarning, stacklevel=3)
        if self.algorithm == "elkan" and n_clusters == 1:
            warnings.warn("algorithm='elkan' doesn't make sense for a single cluster. Using 'lloyd' instead.",
                          RuntimeWarning, stacklevel=3)

    @property
    def _n_features_out(self) -> int:
        """Columns of :meth:`transform` (scikit-learn's ``get_feature_names_out``: kmeans0, kmeans1, ...)."""
        return self.n_clusters

    def _model(self) -> Params:
        C = len(self.centres_)
        return Params(self.centres_, np.full(C, 1.0 / C), np.asarray(float(self.sigma2_)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64"]  # distances are float64 whatever the input
        return tags

    @property
    def cluster_centers_(self) -> np.ndarray:
        """The cluster centres, shape (C, D) (scikit-learn's name for ``centres_``); assignable, as
        scikit-learn's attribute."""
        self._check_fitted()
        return self._public(self.centres_)

    @cluster_centers_.setter
    def cluster_centers_(self, centres) -> None:
        self.centres_ = np.asarray(centres, dtype=np.float64)

    def transform(self, X, *, output=None, storage_options=None, overwrite=False):
        """Euclidean distance of each row to every centre, shape (n_samples, C)."""
        self._check_fitted()
        centres = self.centres_

        def distances(block):
            out = np.empty((block.shape[0], centres.shape[0]))
            all_distances(block, centres, out)
            return out

        return apply_rows(X, self.n_features_in_, distances, owner=type(self).__name__, width=len(centres),
                          dtype=np.float64, output=output, storage_options=storage_options, kind="distances",
                          overwrite=overwrite, verbose=self.verbose)

    def fit_transform(self, X, y=None, sample_weight=None, *, client=None):
        """Fit on ``X`` and return its distances to the centres (``fit(X).transform(X)``)."""
        return self.fit(X, sample_weight=sample_weight, client=client).transform(X)

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the (weighted) sum of squared distances to the nearest centre (the
        negative inertia of ``X``, as scikit-learn's ``KMeans.score``; placed data are weighted by
        their own weights)."""
        self._check_fitted()
        index = NearestIndex.probed(self.centres_)
        weights = scoring_weights(X, sample_weight)
        d2 = apply_rows(X, self.n_features_in_, lambda block: index.nearest(block)[1], owner=type(self).__name__, width=None, dtype=np.float64)
        if weights is not None:
            d2 = d2 * weights
        return -float(d2.sum())


def _is_array(init) -> bool:
    """Whether ``init`` is given centres (not a seeding's name, not a callable)."""
    return not isinstance(init, str) and not callable(init)

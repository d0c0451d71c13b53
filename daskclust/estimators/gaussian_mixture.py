"""GaussianMixture: mixtures of Gaussians fitted by truncated EM, every registered covariance type on one seam."""

from __future__ import annotations

import dask.array as da
import numpy as np
import scipy.sparse
from sklearn.base import ClusterMixin, DensityMixin

from ..errors import InvalidParameterError
from ..fit import MixtureSteps
from ..io import Location
from ..models import FAMILIES, Family, Params
from ..models.inference import MixtureIndex
from .apply import apply_rows, scoring_weights
from .base import COMMON_CONSTRAINTS, TruncatedEMEstimator
from .params import AnyValue, Interval, Options
from .stream import StreamMixin

COVARIANCE_TYPES = tuple(name for name, family in FAMILIES.items() if not family.hard)
"""The registered mixture families (every family but the hard assignments of k-means)."""
INIT_PARAMS = ("kmeans", "k-means++", "random", "random_from_data", "seeding")
ONE_ROW_STARTS = {"k-means++": "k-means++", "random_from_data": "random"}
"""scikit-learn's starts from one row per component, and the seeding that draws those rows."""


class GaussianMixture(ClusterMixin, DensityMixin, StreamMixin, TruncatedEMEstimator):
    """Gaussian mixture fitted by truncated variational EM, for many components and data larger than memory.

    p(y) = sum_c pi_c N(y; mu_c, Sigma_c). Each row keeps the C' components of largest
    log-joint log pi_c + log N(y; mu_c, Sigma_c) among those it evaluates (Lücke & Forster 2019
    Prop. 1 in its general form), K(n), found among the neighbourhoods of its current
    ones (``search="estimated"``, var-GMM-S of Forster & Lücke 2018, O(N C' G) costs per iteration);
    ``search="full"`` evaluates all components, and with ``n_truncated=None`` (C' = C)
    this is exact EM, scikit-learn's GaussianMixture. The free energy (Lücke & Forster 2019 Eq. 7)
    never decreases; with C' = C it is the log-likelihood.

    A scikit-learn estimator (clusterer and density estimator): ``clone``,
    ``get_params`` / ``set_params``, pipelines and ``GridSearchCV`` work on
    numpy input, with ``score`` the mean log-likelihood as in scikit-learn.

    Parameters
    ----------
    n_components : int, default=1
        Number of components C.
    covariance_type : {"full", "diag", "spherical", "tied", "isotropic"}, default="full"
        "full" (scikit-learn's default): a full covariance per component (Cholesky factors;
        D (D + 1) flops per row and component); "diag": a diagonal one (3 D flops); "spherical":
        one variance per component; "tied": one full covariance shared by all components
        (D (D + 1) flops, one Cholesky factor); "isotropic": Forster & Lücke 2018's model, one
        variance shared by all components and equal weights. All but "isotropic" learn the weights.
        At large C and D prefer "diag": its cost per (row, component) pair stays O(D) and its
        parameters take O(C D) memory, where "full" needs C D^2 floats per copy (the ``mixtures``
        bench measures the time per pair of each, docs/benchmarks.md).
    n_truncated : int or None, default=5
        C', components kept per point; None = all (exact EM, whatever ``search``).
    search, n_neighbors, n_init_esteps, n_samples
        As in :class:`daskclust.KMeans` (defaults "estimated", 10, 0, 5). With G = 5 neighbours the
        estimated search stopped at worse optima than exact EM on the real sets of the
        ``realdata-mixtures`` bench (sipu_birch3, C = 100, spherical); with 10 it reached exact
        EM's held-out likelihood there.
    n_explore : int or None, default=None
        Components drawn uniformly per row and iteration besides the search's candidates;
        None: 1 for "isotropic" (Forster & Lücke 2018's "+1"), 5 for the types with learned weights
        and covariances, whose neighbourhoods (estimated from the log-joint) miss more of a
        row's best components: on uci_letter, C = 500, diag, 5 raised the final free energy
        from -6.78 to -6.23 per point at the same cost (BIRCH fits were unchanged).
    reg_covar : float, default=1e-6
        Added to the diagonal of every covariance after every M-step (scikit-learn's ``reg_covar``).
    learn_weights : bool or None, default=None
        Learn the mixing weights (pi_c = S0_c / W); None: learned for "spherical", "diag",
        "full" and "tied", equal for "isotropic" (Forster & Lücke 2018's model). False keeps the initial weights.
    init_params : {"kmeans", "k-means++", "random", "random_from_data", "seeding"}, default="kmeans"
        How the parameters start. "kmeans" (scikit-learn's default): k-means from the seeding
        (``init``) to convergence, then each component is its cluster: its share of the rows,
        its mean and its covariance + ``reg_covar`` (:mod:`daskclust.em.kmeans_start`).
        "k-means++" and "random_from_data" (scikit-learn's): C rows drawn by k-means++ or
        uniformly (``init`` is not used) as means, equal weights, covariances ``reg_covar`` I
        (scikit-learn's M-step on one row per component). "seeding" (daskclust's): the seeds of
        ``init`` as means, equal weights and the seeding's variance sigma^2 I (no k-means run).
        "random" (scikit-learn's): the M-step from random responsibilities of every row
        (:mod:`daskclust.em.random_start`): every component starts near the data's mean with
        about its covariance; one pass of N C draws, which scikit-learn's semantics need and large
        C does not want. Given ``means_init`` replaces them all.
    weights_init, means_init, precisions_init : array-like or None, default=None
        Initial parameters in scikit-learn's layouts (weights (C,), means (C, D),
        precisions as ``precisions_`` for the covariance type); ``means_init`` replaces
        the seeding and the k-means start. Missing ones come from the start (``init_params``;
        with ``means_init``: equal weights, sigma^2 I).
    tol : float, default=1e-3
        Stop when the free energy per point (the mean lower bound; the mean log-likelihood
        when C' = C) changes by at most ``tol`` from one iteration to the next: scikit-learn's
        GaussianMixture rule and default. On small data sets held-out likelihood is higher
        with it than with a tighter rule (the ``realdata-mixtures`` bench): the later iterations
        fit the training rows' noise.
    init : {"auto", "k-means++", "k-means||", "afkmc2", "random"} or array of shape (C, D), default="auto"
        The seeding the k-means start begins from (:mod:`daskclust.seeding`). "auto" is the
        measured best, "k-means||" (Bahmani et al. 2012), for every family: started from k-means
        from its seeds, the mixtures reach scikit-learn's held-out likelihood (within 0.5 %) on 140
        of the 180 rows of the ``realdata-mixtures`` bench (5 seeds each), from scikit-learn's
        greedy k-means++ (offered) on 116; the isotropic mixture's quantization error is lower
        from it too (the ``wallclock`` bench's BIRCH C=1024 gate).
    n_init, max_iter, random_state, oversampling_factor, init_rounds, chain_length,
    chunk_rows, memory_budget, state, state_store, scheduler_address, security, verbose, callback
        As in :class:`daskclust.KMeans` (default ``max_iter=100``); ``n_init`` keeps
        the run with the highest final free energy.
    verbose_interval : int, default=10
        A verbose fit prints the line of every ``verbose_interval``-th iteration (scikit-learn's).
    warm_start : bool, default=False
        As scikit-learn's: a fit of a fitted estimator starts from its model (weights, means,
        covariances; no seeding, no k-means start, one run whatever ``n_init``), so that fits
        with a small ``max_iter`` continue one another; the first fit starts as usual.
    coreset : int or None, default=None
        m: fit on a lightweight coreset of m weighted rows, then evaluate (and with
        ``refine_iter`` refine) the model on the full data, as in :class:`daskclust.KMeans`:
        m >= ``n_components``, m > n_samples allowed (draws with replacement); no checkpoint.
        Cost: construction 3 passes over the data (O(N D)), then O(m C' G D) per iteration on
        the coreset and O(N C' G D) per refining iteration (C' = ``n_truncated``). The
        history's last rows, ``lower_bound_``, ``inertia_``, ``n_iter_`` and ``converged_``
        are the full data's.
    refine_iter : int, default=0
        With ``coreset``: most truncated EM iterations on the full data from the coreset's
        model (0: one E-step, the evaluation of the coreset model). Ignored without ``coreset``.

    Attributes
    ----------
    weights_ : ndarray of shape (C,)
        Mixing weights; 0 for a component that lost all its mass (it is dropped, its
        mean and covariance kept, and no row is assigned to it again).
    means_ : ndarray of shape (C, D)
    covariances_ : ndarray
        (C,) for "spherical" and "isotropic" (C copies of sigma^2), (C, D) for "diag",
        (C, D, D) for "full", (D, D) for "tied" (scikit-learn's layouts).
    precisions_, precisions_cholesky_ : ndarray
        Inverse covariances and their Cholesky factors, in the layout of ``covariances_``
        (for "full": precisions_cholesky_[c] is upper triangular, P P^T = Sigma_c^-1; for "tied"
        one such (D, D) factor).
    sigma2_ : float
        sum_c pi_c tr(Sigma_c) / D (for "isotropic", the shared variance).
    lower_bound_ : float
        Free energy per point of the last E-step (the log-likelihood per point when C' = C;
        with ``coreset``, on the full data).
    lower_bounds_ : list of float
        The free energy per point of every E-step of the kept run, the last one ``lower_bound_``.
    inertia_ : float
        Sum of squared distances of the rows to the mean of their most responsible component.
    labels_, n_iter_, converged_, history_, seeding_time_, seeding_distances_, fit_time_, seed_, coreset_,
    bytes_read_, training_data_
        As in :class:`daskclust.KMeans` (``labels_``: the most responsible component of each training row).
    cluster_sizes_ : ndarray of shape (C,) or None
        Responsibility mass of each component in the last E-step, sum_n w_n q_n(c) (the weighted
        rows it explains); None for a model saved before it was stored.
    """

    warns_unconverged = True
    accepts_sparse = False

    _constraints = {
        **COMMON_CONSTRAINTS,
        "n_components": Interval(1, None, integer=True),
        "covariance_type": Options(COVARIANCE_TYPES),
        "n_truncated": Interval(1, None, integer=True, allow_none=True),
        "reg_covar": Interval(0, None),
        "learn_weights": Options((None, True, False)),
        "init_params": Options(INIT_PARAMS),
        "weights_init": AnyValue(),
        "means_init": AnyValue(),
        "precisions_init": AnyValue(),
        "warm_start": Options((False, True)),
        "verbose_interval": Interval(1, None, integer=True),
    }

    def __init__(self, n_components=1, *, covariance_type="full", n_truncated=5, search="estimated",
                 n_neighbors=10, n_explore=None, n_init_esteps=0, n_samples=5, reg_covar=1e-6, learn_weights=None,
                 init_params="kmeans", weights_init=None, means_init=None, precisions_init=None, init="auto",
                 n_init=1, max_iter=100, warm_start=False,
                 tol=1e-3, random_state=None, coreset=None, refine_iter=0, oversampling_factor=2.0, init_rounds=5,
                 chain_length=5, chunk_rows=None, memory_budget=None, state="memory", state_store=None,
                 scheduler_address=None, security=None, verbose=0, callback=None, verbose_interval=10):
        self._store_params(locals())

    # the model -------------------------------------------------------------
    def _n_clusters(self) -> int:
        return self.n_components

    def _n_truncated(self) -> int:
        return self.n_components if self.n_truncated is None else min(self.n_truncated, self.n_components)

    def _reg(self) -> float:
        return float(self.reg_covar)

    def _absolute_tol(self) -> bool:
        return True

    def _n_explore(self) -> int:
        if self.n_explore is not None:
            return self.n_explore
        return self._family().default_n_explore

    def _family(self) -> Family:
        family = FAMILIES[self.covariance_type]
        return family if self.learn_weights is None else family.with_weights(bool(self.learn_weights))

    def _warm(self) -> bool:
        """Whether this fit starts from the fitted model (``warm_start`` and fitted before)."""
        return bool(getattr(self, "warm_start", False)) and hasattr(self, "centres_")

    def _n_runs(self) -> int:
        return 1 if self._warm() else self.n_init

    def _init_centres(self):
        if self._warm():
            return np.array(self.means_, dtype=np.float64)
        if self.means_init is not None:
            return np.asarray(self.means_init, dtype=np.float64)
        if getattr(self, "init_params", None) in ONE_ROW_STARTS:  # the subclasses have no init_params
            return ONE_ROW_STARTS[self.init_params]
        if getattr(self, "init_params", None) == "random":
            return "random"  # the seeds only label the rows; the random responsibilities replace them
        return super()._init_centres()

    def _checked_centres(self, centres, n_clusters, n_features):
        if self.means_init is not None and not self._warm() and np.shape(centres) != (n_clusters, n_features):
            raise InvalidParameterError(f"The parameter 'means' should have the shape of ({n_clusters}, "
                                        f"{n_features}), but got {np.shape(centres)}")
        return super()._checked_centres(centres, n_clusters, n_features)

    def _check_initial_params(self, n_clusters, n_features):
        self._given_weights(n_clusters)
        self._given_covariances(n_clusters, n_features)

    def _given_weights(self, n_clusters: int) -> np.ndarray | None:
        if self._warm():
            return np.array(self.weights_, dtype=np.float64)
        if self.weights_init is None:
            return None
        return checked_weights(self.weights_init, n_clusters)

    def _given_covariances(self, n_clusters: int, n_features: int) -> np.ndarray | None:
        if self._warm():
            return self._family().covariances_from_precisions(self.precisions_, n_clusters, n_features)
        if self.precisions_init is None:
            return None
        return self._family().covariances_from_precisions(self.precisions_init, n_clusters, n_features)

    def _given_start(self, params: Params) -> Params:
        C, D = params.means.shape
        weights, covariances = self._given_weights(C), self._given_covariances(C, D)
        return params.replace(weights=params.weights if weights is None else weights,
                              covariances=params.covariances if covariances is None else covariances)

    def _start_from(self) -> str:
        """Where the first E-step's parameters come from (:class:`~daskclust.fit.MixtureSteps`): "kmeans" or
        "random" for those ``init_params`` without ``means_init`` or a warm start, else "seeds"."""
        if self.means_init is not None or self._warm() or self.init_params not in ("kmeans", "random"):
            return "seeds"
        return self.init_params

    def _steps(self, n_features: int, transformed=None) -> MixtureSteps:
        C = self._n_clusters()
        return MixtureSteps(self._given_weights(C), self._given_covariances(C, n_features), self._start_from(),
                            seed_variance=getattr(self, "init_params", None) not in ONE_ROW_STARTS
                            or self.means_init is not None)

    def _set_model(self, params: Params) -> None:
        super()._set_model(params)
        family = self._family()
        covariances = family.covariances_attribute(params)
        precisions, cholesky = family.precisions(covariances)
        self.weights_, self.covariances_ = self._public(params.weights), self._public(covariances)
        self.precisions_, self.precisions_cholesky_ = self._public(precisions), self._public(cholesky)

    def _model(self) -> Params:
        covariances = np.asarray(self.covariances_, dtype=np.float64)
        return Params(self.centres_, np.asarray(self.weights_, dtype=np.float64),
                      self._family().model_covariances(covariances, self.sigma2_))

    @property
    def lower_bound_(self) -> float:
        """Free energy per point of the last E-step (a fitted or loaded model's history)."""
        self._check_fitted()
        return float(self.history_[-1]["free_energy"])

    @property
    def lower_bounds_(self) -> list[float]:
        """Free energy per point of each E-step of the kept run, in order (scikit-learn's ``lower_bounds_``;
        with ``coreset``, of the E-steps on the full data)."""
        self._check_fitted()
        last = self.history_[-1]["data"]
        return [float(row["free_energy"]) for row in self.history_ if row["data"] == last]

    @property
    def means_(self) -> np.ndarray:
        """The component means, shape (C, D) (scikit-learn's name for ``centres_``)."""
        self._check_fitted()
        return self._public(self.centres_)

    # applying ----------------------------------------------------------------
    def _index(self, exact: bool = False) -> MixtureIndex:
        self._check_fitted()
        return MixtureIndex(self._family(), self._model(), exact)

    def predict(self, X, *, output=None, storage_options=None, overwrite=False, inputs=()):
        """Index of the most responsible component of each row, argmax_c pi_c N(y; mu_c, Sigma_c), exactly
        (a search under the family's own cost that rules components out by a lower bound, see
        :class:`~daskclust.models.inference.MixtureIndex`). Outputs as
        :meth:`KMeans.predict <daskclust.KMeans.predict>`."""
        index = self._index()
        return self._apply(X, index.labels, None, np.int32, output, storage_options, "labels", overwrite, inputs)

    def predict_proba(self, X, *, top_k=None):
        """Posterior responsibilities p(c | y) = pi_c N(y; mu_c, Sigma_c) / p(y), exactly.

        By default every component's, as scikit-learn's: an ndarray (n_samples, C) for numpy input
        (and a numpy-backed DataArray), a lazy dask array (n_samples, C) for lazy input (dask, zarr,
        path, a dask-backed DataArray), computed chunk by chunk: N C 8 bytes in all, which at large C
        is more than the data. ``top_k=k``: each row's k most responsible components only (the exact k
        best, their exact values normalised over all C): a ``scipy.sparse.csr_matrix`` (n_samples, C)
        with k entries per row for numpy input, for lazy input a pair of lazy dask arrays (indices
        (n_samples, k) int32, responsibilities (n_samples, k)); N k 12 bytes, what the large-C guide
        recommends.
        """
        C = self.n_components
        if top_k is None:
            every = self._index(exact=True)

            def dense(block):
                idx, q, _ = every.top(block, C)
                return np.take_along_axis(q, np.argsort(idx, axis=1), axis=1)  # column c: component c

            return self._apply(X, dense, C, self._output_dtype, None, None, "responsibilities", False)
        index = self._index()
        k = int(top_k)
        if not 1 <= k <= C:
            raise InvalidParameterError(f"top_k must be in [1, n_components={C}], got {top_k}")

        def packed(block):
            idx, q, _ = index.top(block, k)
            return np.hstack([idx.astype(np.float64), q])

        out = self._apply(X, packed, 2 * k, np.float64, None, None, "responsibilities", False)
        indices, values = out[:, :k].astype(np.int32), out[:, k:]
        if not isinstance(out, np.ndarray):
            return indices, values
        rows = np.repeat(np.arange(len(out)), k)
        keep = indices.ravel() >= 0
        return scipy.sparse.csr_matrix((values.ravel()[keep], (rows[keep], indices.ravel()[keep])), shape=(len(out), C))

    def score_samples(self, X, *, exact=False, output=None, storage_options=None, overwrite=False):
        """log p(y) = log sum_c pi_c N(y; mu_c, Sigma_c) of each row (scikit-learn's ``score_samples``).

        By default the components whose cost bound shows they hold less than
        :data:`~daskclust.models.inference.SCORE_TOLERANCE` of the row's mass together are
        left out, so the value is below the exact one by at most that (1e-9 nats); ``exact=True``
        evaluates all C components of every row. Outputs as :meth:`predict`'s (a DataArray input
        gives a DataArray named "scores"), in the fitted attributes' float dtype (float32 for a model
        fitted on float32 data, as scikit-learn's)."""
        index = self._index(exact)
        return self._apply(X, lambda block: index.top(block, 1)[2], None, self._output_dtype, output,
                           storage_options, "scores", overwrite)

    def score(self, X, y=None, sample_weight=None, *, exact=False):
        """Mean (weighted) log-likelihood per row (see :meth:`score_samples`; placed data are weighted
        by their own weights)."""
        weights = scoring_weights(X, sample_weight)
        ll = self.score_samples(X, exact=exact)
        if weights is None:
            return float(ll.mean())
        w = weights if isinstance(weights, da.Array) else np.asarray(weights, dtype=np.float64)
        return float((ll * w).sum() / w.sum())

    def n_parameters(self) -> int:
        """Free parameters of the model (means, weights, covariances)."""
        self._check_fitted()
        C, D = self.centres_.shape
        return self._family().n_parameters(C, D)

    def _log_likelihood(self, X, exact: bool) -> tuple[float, int]:
        ll = self.score_samples(X, exact=exact)
        return float(ll.sum()), len(ll)

    def _n_parameters(self) -> int:
        """scikit-learn's private name of :meth:`n_parameters`, which code written for its class calls."""
        return self.n_parameters()

    def bic(self, X, *, exact=True) -> float:
        """Bayesian information criterion: -2 log L + p log N (lower is better)."""
        total, n = self._log_likelihood(X, exact)
        return -2.0 * total + self.n_parameters() * np.log(n)

    def aic(self, X, *, exact=True) -> float:
        """Akaike information criterion: -2 log L + 2 p (lower is better)."""
        total, _ = self._log_likelihood(X, exact)
        return -2.0 * total + 2 * self.n_parameters()

    def sample(self, n_samples=1, random_state=None):
        """Draw ``n_samples`` rows from the fitted mixture; returns (X, component labels)."""
        self._check_fitted()
        if n_samples < 1:
            raise InvalidParameterError(f"Invalid value for 'n_samples': {n_samples!r}. The sampling requires at "
                                        "least one sample.")
        rng = np.random.default_rng(random_state)
        C, D = self.centres_.shape
        weights = np.asarray(self.weights_, dtype=np.float64)
        labels = np.repeat(np.arange(C), rng.multinomial(n_samples, weights / weights.sum()))
        covariances = np.asarray(self.covariances_, dtype=np.float64)
        z = self._family().sample_deviations(rng.standard_normal((n_samples, D)), covariances, labels)
        return self.centres_[labels] + z, labels

    def _apply(self, X, fn, width, dtype, output, storage_options, kind, overwrite, inputs=()):
        return apply_rows(X, self.n_features_in_, fn, owner=type(self).__name__, width=width, dtype=dtype,
                          output=output, storage_options=storage_options, kind=kind, overwrite=overwrite,
                          inputs=[Location.parse(p) for p in inputs], verbose=self.verbose)



def checked_weights(weights, n_clusters: int) -> np.ndarray:
    """``weights_init`` as float64, refused in scikit-learn's words unless C finite weights in [0, 1]
    whose sum is 1 (to 1e-8, 1e-6 for float32), then divided by their sum."""
    given = np.asarray(weights)
    values = given.astype(np.float64)
    if values.shape != (n_clusters,):
        raise InvalidParameterError(f"The parameter 'weights' should have the shape of ({n_clusters},), but got "
                                    f"{values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0) or np.any(values > 1):
        raise InvalidParameterError(f"The parameter 'weights' should be in the range [0, 1], but got max value "
                                    f"{np.max(values):.5f}, min value {np.min(values):.5f}")
    if abs(1.0 - values.sum()) > (1e-6 if given.dtype == np.float32 else 1e-8):
        raise InvalidParameterError(f"The parameter 'weights' should be normalized, but got sum(weights) = "
                                    f"{values.sum():.5f}")
    return values / values.sum()

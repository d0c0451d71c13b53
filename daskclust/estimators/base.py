"""What the estimators share: parameter declaration and validation, the fit specification they
hand to the fit function (:func:`daskclust.fit.fit`), fitted attributes from its result,
scikit-learn's estimator protocol, saving."""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import scipy.sparse
from sklearn.base import BaseEstimator

from ..data import as_chunked_data, check_enough_rows
from ..errors import ConvergenceWarning, InvalidDataError, InvalidParameterError, NotFittedError
from ..fit import FitResult, FitSpec, FitSteps, PlacedData, Progress, check_coreset_fit, fit, plan_fit
from ..io import Location, describe_source
from ..models import Family, Params
from ..persistence import RUNTIME_PARAMS
from ..seeding import check_init
from ..seeding.passes import NearestIndex
from ..transforms.interface import Transformed
from .apply import apply_rows
from .params import AnyValue, Interval, Options, ParamsMixin, PathOrNone, RandomStateLike

log = logging.getLogger("daskclust")

UNCONVERGED = ("Best performing initialization did not converge. Try different init parameters, or increase "
               "max_iter, tol, or check for degenerate data.")
"""scikit-learn's GaussianMixture's warning, word for word (users' filters match its message)."""

COMMON_CONSTRAINTS = {
    "max_iter": Interval(0, None, integer=True),
    "tol": Interval(0, None),
    "random_state": RandomStateLike(),
    "n_init": Interval(1, None, integer=True),
    "oversampling_factor": Interval(0, None, open_low=True),
    "init_rounds": Interval(1, None, integer=True),
    "chain_length": Interval(1, None, integer=True),
    "chunk_rows": Interval(1, None, integer=True, allow_none=True),
    "memory_budget": Interval(1, None, integer=True, allow_none=True),
    "verbose": Interval(0, None, integer=True, allow_bool=True),
    "init": AnyValue(),
    "search": Options(("full", "exhaustive", "estimated", "sampled")),
    "n_neighbors": Interval(1, None, integer=True),
    "n_explore": Interval(0, None, integer=True, allow_none=True),
    "n_init_esteps": Interval(0, None, integer=True),
    "n_samples": Interval(1, None, integer=True),
    "state": Options(("memory", "zarr")),
    "state_store": PathOrNone(),
    "coreset": Interval(1, None, integer=True, allow_none=True),
    "refine_iter": Interval(0, None, integer=True),
}


def resolve_seed(random_state) -> int:
    """The integer seed of a fit: ``random_state`` itself when an int; drawn from it when a numpy
    ``RandomState`` or ``Generator`` (which advances, so two fits with one generator differ, as in
    scikit-learn); fresh entropy when None."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**63 - 1, dtype=np.int64))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63 - 1))
    if random_state is not None:
        return int(random_state)
    return int(np.random.SeedSequence().entropy % (2**63))


class TruncatedEMEstimator(ParamsMixin, BaseEstimator):
    """Base of the estimators: the EM loop runs on the Dask engine; subclasses
    say how many clusters each point keeps (C') and which free energy to report.

    A scikit-learn estimator (``BaseEstimator``: ``get_params``, ``set_params``,
    ``clone``, ``repr``); the subclasses add scikit-learn's mixins.
    """

    variable_components = False
    """Whether the fit chooses the number of components itself (greedy learning)."""
    accepts_sparse = True
    """Whether ``fit`` takes scipy.sparse input (densified chunk by chunk; scikit-learn's mixtures refuse it)."""
    warns_unconverged = False
    """Whether a fit stopped by ``max_iter`` before it converged warns (scikit-learn's mixtures do, its KMeans not)."""

    # subclass hooks -------------------------------------------------------
    def _family(self) -> Family:
        """The model family (:data:`daskclust.models.FAMILIES`)."""
        raise NotImplementedError

    def _n_clusters(self) -> int:
        raise NotImplementedError

    def _n_truncated(self) -> int:
        raise NotImplementedError

    def _reg(self) -> float:
        return 0.0

    def _n_explore(self) -> int:
        """Clusters drawn uniformly per row and iteration besides the search's candidates."""
        return self.n_explore

    def _absolute_tol(self) -> bool:
        """Whether ``tol`` bounds the change of the free energy per point itself (else relatively)."""
        return False

    def _init_centres(self):
        """The seeding method ("auto": the family's ``default_init``), or the initial centres."""
        if isinstance(self.init, str) and self.init == "auto":
            return self._family().default_init
        return self.init

    def _checked_centres(self, centres, n_clusters: int, n_features: int) -> np.ndarray:
        """Given initial centres as float64, refused unless finite and of shape (C, D)."""
        return check_init(centres, n_clusters, n_features)

    def _n_runs(self) -> int:
        """How many runs the fit makes (``n_init``; a warm start makes one)."""
        return self.n_init

    def _check_initial_params(self, n_clusters: int, n_features: int) -> None:
        """Refuse given initial parameters that do not fit the data, before any work."""

    def _steps(self, n_features: int, transformed: Transformed | None = None) -> FitSteps:
        """How this estimator's fit seeds, starts and iterates (:class:`~daskclust.fit.FitSteps`) on data of
        ``n_features`` features, or on the rows of a transform."""
        return FitSteps()

    # scikit-learn protocol ------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = True  # (n_samples, n_features) numpy, dask, zarr or xarray
        tags.input_tags.sparse = self.accepts_sparse  # in memory, densified chunk by chunk (data.sources.SparseRows)
        tags.input_tags.allow_nan = False  # a NaN / inf row is refused, with its index
        tags.non_deterministic = False  # an int random_state fixes every random draw of a fit
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "centres_")

    # fitting --------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None, *, client=None, checkpoint=None, checkpoint_every: int = 10,
            resume=None, overwrite: bool = False):
        """Fit on ``X`` (numpy, dask, zarr, path/URL or xarray), optionally weighted.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), dask array, zarr.Array,
            xarray.DataArray, or str (zarr store path or fsspec URL)
            A DataArray must be 2-D, with any dimension names: the first is the
            samples, the second the features (a (time, y, x, band) cube becomes
            ``cube.stack(sample=("time", "y", "x")).transpose("sample", "band")``).
            Or a :class:`~daskclust.PlacedData` (:func:`daskclust.persist`): data
            placed once for many fits, on its own cluster; the fit gives the model
            a fit on its input gives with the same cluster and chunking.
        y : ignored
        sample_weight : array-like of shape (n_samples,), optional
            Not with placed data, which carry their weights.
        client : distributed.Client, optional
            Cluster to run on; default ``scheduler_address``, else the active
            client, else an embedded LocalCluster closed after the fit. With placed
            data, their cluster (a client of another one is refused).
        checkpoint : str or PathLike, optional
            Directory (local or URL every worker reaches) where the fit saves a
            checkpoint every ``checkpoint_every`` iterations (see
            :mod:`daskclust.persistence.checkpoint`); a lost worker then costs at most
            that many iterations. Needs ``n_init=1``: a checkpoint holds one run;
            and ``coreset=None``: checkpoints are for fits on the full data.
        resume : str or PathLike, optional
            A checkpoint (or directory of checkpoints) to continue from, on the
            same data with the same parameters; the result equals that of an
            uninterrupted fit. Needs ``n_init=1`` and ``coreset=None``.
        overwrite : bool, default False
            Replace an existing checkpoint directory (or ``state_store``) that
            an earlier fit left; without it such a directory is refused, unless
            the fit resumes from it. Nothing daskclust did not write is ever
            replaced.

        Returns
        -------
        self

        Notes
        -----
        With ``n_init > 1`` the fit runs ``n_init`` times, seeded with
        :func:`derive_seeds` of the fit's seed, and keeps the run with the
        highest final free energy (``seed_`` is its seed; a fit with
        ``random_state=seed_`` and ``n_init=1`` gives the same model); the runs
        share the data's placement, and ``callback`` sees the rows of every run.

        With ``coreset=m`` the fit draws m weighted rows, fits on them as above
        (every ``n_init`` run on the coreset) and then runs once on the full
        data from the best run's model: one pass assigning every row to its
        nearest mean, then at most ``refine_iter`` iterations (see
        :mod:`daskclust.fit.coreset`); the coreset is drawn with the
        fit's seed, so ``random_state=seed_`` repeats the fit when the first run
        was kept.

        If a worker holding chunks dies, the fit starts again on the remaining
        workers from the last checkpoint, or from the seeding without one; every
        step being a deterministic function of the data, the seed and the
        iteration, the model is the one the undisturbed fit would give.
        """
        self._validate_params()
        self._stream = None  # a fit starts over: a later partial_fit starts a stream from its model
        placed = X if isinstance(X, PlacedData) else None
        if placed is not None:  # data placed once for many fits: what this fit asks must agree
            placed.check_fit(sample_weight=sample_weight, client=client, scheduler_address=self.scheduler_address,
                             chunk_rows=self.chunk_rows, memory_budget=self.memory_budget, state=self.state)
        self._check_not_sparse(placed.input if placed is not None else X)
        if self._n_runs() > 1 and (checkpoint is not None or resume is not None):
            raise InvalidParameterError(f"checkpoint and resume need one run (got n_init={self.n_init}): "
                                        "a checkpoint holds a single run")
        C = self._n_clusters()
        check_coreset_fit(self.coreset, C, checkpoint, resume)
        seed_value = resolve_seed(self.random_state)
        init = self._init_centres()
        if callable(init):  # scikit-learn's callable init: init(X, n_clusters, random_state) -> centres
            rows = placed.input if placed is not None else X
            init = np.asarray(init(rows, C, random_state=np.random.RandomState(seed_value % 2**32)), dtype=np.float64)
        if isinstance(init, str):
            check_init(init, C)
        transformed = X if isinstance(X, Transformed) else None
        if transformed is not None:  # a transform's rows (a coreset, a sketch): the model is fitted on them
            if sample_weight is not None:
                raise InvalidParameterError(f"a {type(X).__name__} carries its rows' weights: pass sample_weight "
                                            "to the transform")
            data, n_features, sources = X.chunked(self.chunk_rows, min_samples=C), X.n_features, X.sources
        elif placed is not None:
            data, n_features, sources = placed.data, placed.n_features, placed.sources
            check_enough_rows(data.n_samples, C, data.X.shape, dims=placed.input.dims if data.input_kind == "xarray" else None)
        else:
            data = as_chunked_data(X, sample_weight, chunk_rows=self.chunk_rows, min_samples=C)
            n_features, sources = data.n_features, (describe_source(X), describe_source(sample_weight))
        if not isinstance(init, str):
            init = self._checked_centres(init, C, n_features)
        self._check_initial_params(C, n_features)
        self._output_dtype = np.dtype(np.float32 if data.dtype == np.float32 else np.float64)
        spec = self.fit_spec(n_features, init, transformed)
        given, given_weights = (placed.input, placed.sample_weight) if placed is not None else (X, sample_weight)
        plan = plan_fit(spec, data, given, given_weights, params=self.model_params(), seed=seed_value,
                        n_features=n_features, sources=sources, checkpoint=checkpoint,
                        checkpoint_every=checkpoint_every, resume=resume, overwrite=overwrite, state=self.state,
                        state_store=self.state_store, check_apart=self._check_stores_apart)
        progress = Progress(self.verbose, self.callback, data.nbytes, self.max_iter + self.n_init_esteps + 1,
                            interval=getattr(self, "verbose_interval", 1))
        result = fit(data, spec, plan, progress, client=client, scheduler_address=self.scheduler_address,
                     security=self.security, placed=placed)
        self._set_fitted(result, n_features, transformed)
        if self.warns_unconverged and not self.converged_ and self.max_iter > 0:
            warnings.warn(UNCONVERGED, ConvergenceWarning, stacklevel=2)
        self.labels_ = self.predict(X)
        progress.say(
            f"done: {self.n_iter_} iterations{'' if result.coreset is None else ' on the full data'}, free energy "
            f"{result.history[-1]['free_energy']:.6g}, converged={self.converged_}, {self.fit_time_:.2f} s"
        )
        return self

    def _check_not_sparse(self, X) -> None:
        """Refuse scipy.sparse input where the estimator does not take it (``accepts_sparse``)."""
        if not self.accepts_sparse and scipy.sparse.issparse(X):
            raise InvalidDataError(f"{type(self).__name__} does not take sparse input (scikit-learn's neither): its "
                                   "covariances make every row dense; pass X.toarray() if it fits in memory")

    def fit_spec(self, n_features: int, init=None, transformed: Transformed | None = None) -> FitSpec:
        """The frozen specification of this estimator's fit on data of ``n_features`` features, or on the
        rows of a transform (whose family reads them), the parameters validated; ``init`` the checked
        seeding or centres."""
        family = self._family() if transformed is None else transformed.family(self._family())
        return FitSpec(type(self).__name__, family, self._n_clusters(), self._n_truncated(), search=self.search,
                       n_neighbors=self.n_neighbors, n_explore=self._n_explore(), n_samples=self.n_samples,
                       init=self._init_centres() if init is None else init,
                       oversampling_factor=self.oversampling_factor, init_rounds=self.init_rounds,
                       chain_length=self.chain_length, max_iter=self.max_iter, tol=self.tol, reg=self._reg(),
                       n_init_esteps=self.n_init_esteps, absolute_tol=self._absolute_tol(), n_init=self._n_runs(),
                       coreset=self.coreset, refine_iter=self.refine_iter, memory_budget=self.memory_budget,
                       verbose=int(self.verbose), steps=self._steps(n_features, transformed))

    def _check_stores_apart(self, inputs: list[Location | None]) -> None:
        """Refuse, before any work, a store of the estimator's own (``tree_store``) that overlaps the
        fit's inputs (a hook: none here)."""

    def model_params(self) -> dict:
        """The parameters saved with a model or checkpoint: JSON values, runtime settings left out."""
        return {k: _jsonable(v) for k, v in self.get_params().items() if k not in RUNTIME_PARAMS}

    def _set_fitted(self, result: FitResult, n_features: int, transformed: Transformed | None = None) -> None:
        """The fitted attributes from the fit function's result (of a fit on ``transformed``'s rows, or on data)."""
        self._set_model(result.params)
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.inertia_ = result.inertia
        self.history_ = result.history
        self.cluster_sizes_ = result.sizes
        self.n_features_in_ = n_features
        self.seed_ = result.seed
        self.seeding_time_ = result.seeding.seconds
        self.seeding_distances_ = result.seeding.n_distances
        self.fit_time_ = result.seconds
        self.bytes_read_ = result.bytes_read
        self.coreset_ = result.coreset.as_dict() if result.coreset is not None else None
        self.training_data_ = result.data

    _output_dtype = np.dtype(np.float64)
    """The float dtype of the fitted attributes and of scores: the training data's (float32 or float64)."""

    def _public(self, array) -> np.ndarray:
        """A fitted attribute of scikit-learn's in the data's float dtype (float32 data: float32, as
        scikit-learn's); the model itself stays float64."""
        return np.asarray(array, dtype=self._output_dtype)

    def _set_model(self, params: Params) -> None:
        """The fitted attributes from the model's parameters (subclasses add their own names)."""
        self.centres_ = params.means
        self.sigma2_ = self._family().mean_variance(params)

    def _model(self) -> Params:
        """The fitted model's parameters."""
        raise NotImplementedError

    def _stored_arrays(self) -> dict:
        """Arrays a subclass saves with the model besides its parameters."""
        return {}

    def _stored_scalars(self) -> dict:
        """Scalars a subclass saves with the model besides :data:`_SCALARS`."""
        return {}

    def _restore_stored(self, arrays: dict, scalars: dict, where: str) -> None:
        """Take back what :meth:`_stored_arrays` and :meth:`_stored_scalars` saved (after the model is set)."""

    # applying -------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "centres_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                                 "appropriate arguments before using this estimator.")

    def predict(self, X, *, output: str | os.PathLike | None = None, storage_options: dict | None = None,
                overwrite: bool = False, inputs=()):
        """Index of the nearest centre of each row (exact: a ball tree over the centres prunes where
        it can, :class:`~daskclust.seeding.passes.NearestIndex`).

        numpy input gives a numpy array, lazy input (dask, zarr, path) a dask
        array; placed data (:func:`daskclust.persist`) what their input gives,
        in their chunks. A 2-D DataArray gives a DataArray named "labels" along its first
        (sample) dimension with its coordinates, a stacked MultiIndex included
        (``labels.unstack("sample")`` gives back the grid the samples were stacked
        from), backed by numpy or by a lazy dask array as the input is. With
        ``output`` the labels are written to that zarr store
        chunk by chunk and the stored array is returned. ``output`` must not
        overlap ``X``; an existing labels store there is replaced only with
        ``overwrite`` (nothing else ever is); ``inputs`` lists other stores of
        the same job it must not overlap either (e.g. the model's).
        """
        self._check_fitted()
        index = NearestIndex.probed(self.centres_)
        return apply_rows(X, self.n_features_in_, lambda block: index.nearest(block)[0], owner=type(self).__name__, width=None, dtype=np.int32,
                          output=output, storage_options=storage_options, kind="labels", overwrite=overwrite,
                          inputs=[Location.parse(p) for p in inputs], verbose=self.verbose)

    def fit_predict(self, X, y=None, sample_weight=None, *, client=None):
        """Fit on ``X`` and return ``labels_``, the nearest centre of each row of ``X``
        (``fit(X).predict(X)``)."""
        return self.fit(X, sample_weight=sample_weight, client=client).labels_

    def save(self, path, *, overwrite: bool = False, storage_options: dict | None = None) -> None:
        """Store parameters, configuration and history as an xarray Dataset in zarr.

        ``path`` becomes a daskclust model store (see :mod:`daskclust.persistence.model`);
        an existing model there is replaced only with ``overwrite``, anything
        else never. Runtime settings (scheduler, state store, callback,
        verbosity) are not saved.
        """
        from ..persistence.model import save_model
        from .stored import to_stored

        self._check_fitted()
        save_model(path, to_stored(self), overwrite=overwrite, storage_options=storage_options)


def _jsonable(value):
    """Parameters as stored: arrays become nested lists; callables and numpy random generators
    are not stored (the seed a fit drew from a generator is, as ``seed``)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if callable(value) or isinstance(value, (np.random.RandomState, np.random.Generator)):
        return None
    return value

"""``partial_fit``: the estimators learning from a stream of chunks, one stepwise-EM step per chunk
(:mod:`daskclust.em.stepwise`), in this process and without Dask."""

from __future__ import annotations

import numpy as np
from sklearn.utils._available_if import available_if

from ..data import rows_in_memory
from ..em.stepwise import StepwiseEM, first_params
from ..errors import InvalidDataError
from ..models import Params
from ..seeding.passes import NearestIndex
from .apply import check_n_features
from .base import resolve_seed


def _streams(estimator) -> bool:
    return estimator.streams


class StreamMixin:
    """``partial_fit`` for the estimators whose model is fitted on rows (not on cells, sketches or a
    varying number of components: those set ``streams = False``)."""

    streams = True
    """Whether the estimator learns from a stream of chunks (``partial_fit``)."""

    @available_if(_streams)
    def partial_fit(self, X, y=None, sample_weight=None):
        """Update the model with one chunk of a stream: one step of stepwise (or incremental) EM.

        The chunk's rows (anything ``fit`` takes, read into memory) are E-stepped under the current
        model, each row over its ``C'`` most responsible components found exactly (the search of
        ``predict``); their statistics per unit weight are blended into the running statistics with
        the step eta_t = (W(X_t) / W_seen)^0.55 ((t + 1)^-0.55 for chunks of equal weight), and the
        M-step of the blend is the new model, once 2 (D + 1) C rows have been seen (Cappé & Moulines
        2009; Liang & Klein 2009; see the user guide, "Streams: partial_fit"). A ``KMeans`` stream also
        moves a centre from where it is least needed to a row of the chunk where one is lacking, when
        the chunk shows that this lowers the cost (a swap, Kanungo et al. 2004). A chunk that comes
        back (rows and weights equal byte for byte to a chunk seen before: a second epoch) makes the
        steps incremental EM's (Neal & Hinton 1998): the statistics of the chunks visited since the
        epoch began, plus the running ones for the weight still to come, so that after an epoch the
        model is estimated from every row.

        The first call starts from the fitted model if there is one (``fit`` or a loaded model),
        else from given initial centres (``init`` / ``means_init``, with ``weights_init`` and
        ``precisions_init``), else from k-means of its own rows (which must be at least
        ``n_clusters``). ``fit`` starts over. Each call appends a row to ``history_`` (``data`` =
        ``"stream"``; its free energy is the chunk's under the model before the step, a held-out
        figure; distances are not counted there: -1), which ``callback`` gets, and sets ``n_steps_``
        (= ``n_iter_``);
        ``inertia_`` is the chunk's sum of weighted squared distances to the nearest mean of its
        rows' components, before the step; ``cluster_sizes_`` the running weights times the weight
        seen.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), dask array, zarr.Array, xarray.DataArray
        y : ignored
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        self
        """
        self._validate_params()
        self._check_not_sparse(X)
        rows, weights = rows_in_memory(X, sample_weight)
        if len(weights) and not weights.sum() > 0:
            raise InvalidDataError("the chunk's rows have no weight: every sample_weight is 0")
        fitted = hasattr(self, "centres_")
        if fitted:
            check_n_features(rows.shape[1], self.n_features_in_, type(self).__name__)
        stream = getattr(self, "_stream", None)
        if stream is None:
            if not fitted:
                self.seed_ = resolve_seed(self.random_state)
                self.history_, self.fit_time_ = [], 0.0
                self.seeding_time_, self.seeding_distances_, self.bytes_read_ = 0.0, 0, 0
                self.coreset_ = self.training_data_ = None
                self._output_dtype = np.dtype(np.float32 if rows.dtype == np.float32 else np.float64)
            params = self._model() if fitted else self._stream_start(rows, weights, self.seed_)
            stream = self._stream = StepwiseEM(self._family(), self._n_truncated(), self._reg(), params,
                                                 seed=getattr(self, "seed_", 0))
            self._stream_weight = 0.0
        step = stream.step(rows, weights)
        self._stream_weight += step["weight"]
        self._set_stream_fitted(stream, step, rows.shape[1])
        return self

    def _stream_start(self, rows: np.ndarray, weights: np.ndarray, seed: int) -> Params:
        """The model before a stream's first step when none is fitted: k-means of the chunk, or given
        centres; then given weights and covariances (:meth:`_given_start`)."""
        C, D = self._n_clusters(), rows.shape[1]
        init = self._init_centres()
        if callable(init):
            init = init(rows, C, random_state=np.random.RandomState(seed % 2**32))
        if isinstance(init, str):  # a seeding's name: k-means of the first chunk
            if rows.shape[0] < C:
                raise InvalidDataError(f"n_samples={rows.shape[0]} should be >= n_clusters={C}: the first "
                                       "partial_fit chunk starts the model with k-means of its rows")
            params = first_params(self._family(), rows, weights, C, seed, self._reg())
        else:
            centres = self._checked_centres(np.asarray(init, dtype=np.float64), C, D)
            params = centres_start(self._family(), rows, weights, centres, self._reg())
        self._check_initial_params(C, D)
        return self._given_start(params)

    def _given_start(self, params: Params) -> Params:
        """Given initial parameters besides the centres replace the start's (a hook: none here)."""
        return params

    def _set_stream_fitted(self, stream: StepwiseEM, step: dict, n_features: int) -> None:
        """The fitted attributes after a stream's step (see :meth:`partial_fit`)."""
        self._set_model(stream.params)
        row = {"iteration": stream.n_steps - 1, "data": "stream", "free_energy": step["free_energy"],
               "quantization_error": step["quantization_error"], "sigma2": step["sigma2"], "n_distances": -1,
               "n_distances_points": -1, "n_distances_centres": -1, "distance_speedup": -1.0, "n_changed": -1,
               "seconds": step["seconds"]}
        self.history_ = [*self.history_, row]
        if self.callback is not None:
            self.callback(dict(row))
        self.n_steps_ = self.n_iter_ = stream.n_steps
        self.converged_ = False
        self.inertia_ = step["quantization_error"]
        self.cluster_sizes_ = stream.stats.S0 * self._stream_weight  # the running statistics have W = 1
        self.n_features_in_ = n_features
        self.fit_time_ = float(self.fit_time_) + step["seconds"]


def centres_start(family, rows: np.ndarray, weights: np.ndarray, centres: np.ndarray, reg: float) -> Params:
    """The family's start from given centres: sigma^2 the chunk's mean squared distance to the nearest
    centre per feature (as a seeding's), equal weights."""
    d2 = NearestIndex.probed(centres).nearest(np.asarray(rows, dtype=np.float64))[1]
    mass = weights if len(weights) else np.ones(len(rows))
    sigma2 = float(mass @ d2) / (float(mass.sum()) * rows.shape[1])
    return family.initial_params(centres, sigma2, reg)

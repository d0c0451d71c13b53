"""SketchedGaussianMixture: SGMM (Kightley & Becker 2019), a diagonal or spherical mixture fitted on sketches by truncated EM."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..data import as_chunked_data
from ..engine.cluster import connect
from ..errors import InvalidDataError, InvalidParameterError, WorkerLost
from ..fit import PlacedData, check_coreset_fit
from ..fit.sketch import SketchSteps
from ..io import Location, refuse_overlap
from ..kernels.infer import top_components
from ..models.sketched import SKETCHED_COVARIANCE_TYPES
from ..transforms.sketch import PRECONDITIONS, Sketch, SketchedData
from .apply import ROW_BLOCK
from .gaussian_mixture import GaussianMixture
from .params import AnyValue, Interval, Options


class SketchedGaussianMixture(GaussianMixture):
    """Sparsified Gaussian mixture (SGMM, Kightley & Becker 2019): EM on sketches of Q of the P preconditioned features.

    ``fit(X)`` sketches the raw rows in one pass (:class:`daskclust.transforms.Sketch`: random sign
    flips, orthonormal DCT, Q entries kept per row, Q_S of them shared) and fits a diagonal or
    spherical mixture in the full P-dimensional preconditioned space from the sketches alone
    (Kightley & Becker 2019 Eqs. 17, 19, 27, 28; :mod:`daskclust.models.sketched`). ``fit`` also takes a
    :class:`~daskclust.transforms.SketchedData` made earlier, in memory or in a zarr sketch store:
    the raw data are then never read. The E-step is truncated like :class:`GaussianMixture`'s: cost
    O(N C' G Q) per iteration with the estimated neighbourhoods, O(N C Q) with ``n_truncated=None``
    and ``search="full"`` (Kightley & Becker 2019's SGMM exactly).

    A separate estimator, not a ``sketch=`` option of :class:`GaussianMixture`: its covariances live
    in the preconditioned space (a diagonal there is not diagonal in the raw space), its training
    data are sketches, and its parameters (Q, Q_S, preconditioning) mean nothing to the other
    families. Everything else is inherited: truncation, searches, ``n_init``, ``coreset`` (a
    coreset of the sketched rows), predict / score on raw rows.

    Parameters
    ----------
    n_components : int, default=1
    covariance_type : {"diag", "spherical"}, default="diag"
        Kightley & Becker 2019's two tractable cases (a full covariance would need a Q x Q inverse per row
        and component).
    n_kept : int or float, default=0.1
        Q, entries kept per row: an int, or a fraction of P in (0, 1] (rounded up).
    n_shared : int, default=0
        Q_S, entries every row keeps (Kightley & Becker 2019 Sec. IV-C).
    precondition : {"dct", "none"}, default="dct"
    tol : float, default=1e-4
        Stop when the sketches' free energy per point changes by at most ``tol`` relatively (its
        magnitude grows with Q: a relative rule stops fits of every Q at the same point).

    Notes
    -----
    The other parameters are :class:`GaussianMixture`'s. ``means_init`` is given in the raw space;
    ``precisions_init`` in the preconditioned space. Without ``means_init`` the seeding is k-means++
    on a sample of sketches followed by the hard bootstrap (``daskclust.seeding.sketch``); ``init``
    is ignored.

    Attributes
    ----------
    means_ : ndarray of shape (C, P)
        The means in the raw space (D H^T mu~, the preconditioning inverted).
    centres_ : ndarray of shape (C, P)
        The means in the preconditioned space, where the model is fitted.
    covariances_, precisions_ : ndarray
        In the preconditioned space: (C, P) for "diag", (C,) for "spherical" (a spherical
        covariance is the same in both spaces).
    sketch_transform_ : SketchTransform
        The preconditioning and sampling of the fit (signs, shared features, Q).
    Others as in :class:`GaussianMixture`; ``inertia_`` and ``history_`` are measured on the
    sketches (squared distances over the kept entries, likelihood of the kept entries).
    """

    streams = False  # fitted on sketches: no partial_fit

    _constraints = {
        **GaussianMixture._constraints,
        "covariance_type": Options(SKETCHED_COVARIANCE_TYPES),
        "n_kept": AnyValue(),
        "n_shared": Interval(0, None, integer=True),
        "precondition": Options(PRECONDITIONS),
    }

    def __init__(self, n_components=1, *, covariance_type="diag", n_kept=0.1, n_shared=0, precondition="dct",
                 n_truncated=5, search="estimated", n_neighbors=5, n_explore=None, n_init_esteps=0, n_samples=5,
                 reg_covar=1e-6, learn_weights=None, weights_init=None, means_init=None, precisions_init=None,
                 init="k-means||", n_init=1, max_iter=100, tol=1e-4, random_state=None, oversampling_factor=2.0,
                 init_rounds=5, chain_length=5, coreset=None, refine_iter=0, chunk_rows=None, memory_budget=None,
                 state="memory", state_store=None, scheduler_address=None, security=None, verbose=0, callback=None):
        self._store_params(locals())

    # the sketch ---------------------------------------------------------------
    def sketcher(self, n_features: int) -> Sketch:
        """The :class:`Sketch` this estimator applies to raw rows of ``n_features`` features."""
        q = self.n_kept
        if isinstance(q, bool) or not isinstance(q, (int, np.integer, float, np.floating)):
            raise InvalidParameterError(f"n_kept must be an int or a fraction in (0, 1], got {q!r}")
        if isinstance(q, (float, np.floating)):
            if not 0 < q <= 1:
                raise InvalidParameterError(f"n_kept as a fraction of the features must be in (0, 1], got {q}")
            q = max(1, math.ceil(q * n_features))
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) else 0
        sketch = Sketch(int(q), n_shared=int(self.n_shared), precondition=self.precondition, random_state=int(seed),
                        verbose=self.verbose)
        sketch.check(n_features)
        return sketch

    def fit(self, X, y=None, sample_weight=None, *, client=None, sketch_output=None, **kwargs):
        """Fit on raw rows ``X`` (sketched here in one pass: in memory, or into the zarr sketch store
        ``sketch_output``) or on a :class:`~daskclust.transforms.SketchedData`, which is fitted as
        :class:`GaussianMixture` fits any transform's rows (the sketched family reads them). Other
        keywords as in :meth:`GaussianMixture.fit`. Parameters are checked against the data before any work."""
        self._validate_params()
        if isinstance(X, SketchedData):
            return super().fit(X, sample_weight=sample_weight, client=client, **kwargs)
        if isinstance(X, PlacedData):  # the sketch pass on the placed data; chunk_rows and state are the sketches'
            X.check_fit(sample_weight=sample_weight, client=client, scheduler_address=self.scheduler_address)
            return self._fit_placed(X, sketch_output, kwargs)
        n_features = as_chunked_data(X, sample_weight).n_features
        sketcher = self.sketcher(n_features)
        self._check_initial_params(self._n_clusters(), n_features)
        check_coreset_fit(self.coreset, self._n_clusters(), kwargs.get("checkpoint"), kwargs.get("resume"))
        if sketch_output is not None:  # the fit's other outputs are checked after the sketch pass: these first
            self._check_sketch_output(sketch_output, kwargs)
        with connect(client, self.scheduler_address, security=self.security) as cl:
            sketched = sketcher.fit_transform(X, sample_weight, client=cl, output=sketch_output,
                                              chunk_rows=self.chunk_rows, overwrite=kwargs.get("overwrite", False))
            return super().fit(sketched, client=cl, **kwargs)

    def _fit_placed(self, placed: PlacedData, sketch_output, kwargs: dict):
        """Sketch the placed rows on their engine (the sketch kept in memory) and fit the sketches; with
        ``sketch_output`` the sketch store is written from the placed data's input on their cluster
        (a sketch store is written in whole chunks of its own: one pass, rows read from their source)."""
        sketcher = self.sketcher(placed.n_features)
        self._check_initial_params(self._n_clusters(), placed.n_features)
        check_coreset_fit(self.coreset, self._n_clusters(), kwargs.get("checkpoint"), kwargs.get("resume"))
        if sketch_output is not None:
            self._check_sketch_output(sketch_output, kwargs)
            sketched = sketcher.fit_transform(placed.input, placed.sample_weight, client=placed.client,
                                              output=sketch_output, chunk_rows=self.chunk_rows,
                                              overwrite=kwargs.get("overwrite", False))
        else:
            with placed.in_use(progress=bool(self.verbose)) as engines:
                try:
                    sketched = sketcher.transform_engine(engines.get())
                except WorkerLost:
                    engines.discard()  # placed again by the next use
                    raise
            sketched = replace(sketched, taken_from=placed.sources)
        return super().fit(sketched, client=placed.client, **kwargs)

    def _check_sketch_output(self, sketch_output, kwargs: dict) -> None:
        """Refuse, before the sketch pass, a sketch store that overlaps the fit's other outputs and inputs."""
        others = [kwargs.get("checkpoint"), kwargs.get("resume"), self.state_store]
        refuse_overlap(Location.parse(sketch_output), "sketch", [Location.parse(o) for o in others if o is not None],
                       what="another output or input of the fit,")

    # hooks of the fit ---------------------------------------------------------
    def _absolute_tol(self) -> bool:
        return False

    def _steps(self, n_features: int, transformed=None) -> SketchSteps:
        """Seeded on the sketches (or from ``means_init``), with the given weights and precisions."""
        C = self._n_clusters()
        return SketchSteps(weights=self._given_weights(C), covariances=self._given_covariances(C, n_features),
                           transform=transformed.transform, means=self.means_init)

    def _check_initial_params(self, n_clusters, n_features):
        super()._check_initial_params(n_clusters, n_features)
        if self.means_init is not None:
            means = np.asarray(self.means_init, dtype=np.float64)
            if means.shape != (n_clusters, n_features) or not np.all(np.isfinite(means)):
                raise InvalidParameterError(f"means_init must be a finite array of shape ({n_clusters}, "
                                            f"{n_features}), got {means.shape}")

    def _init_centres(self):
        return "random"  # the seeding is seed_sketches'; check_init needs a valid name

    def _set_fitted(self, result, n_features, transformed=None) -> None:
        super()._set_fitted(result, n_features, transformed)
        self.sketch_transform_ = transformed.transform

    def _stored_arrays(self) -> dict:
        t = self.sketch_transform_
        return {"sketch_signs": t.signs.astype(np.float64), "sketch_shared": t.shared.astype(np.float64)}

    def _stored_scalars(self) -> dict:
        t = self.sketch_transform_
        return {"sketch_n_kept": t.n_kept, "sketch_seed": t.seed}

    def _restore_stored(self, arrays: dict, scalars: dict, where: str) -> None:
        from ..errors import ModelStoreError
        from ..transforms import SketchTransform

        try:
            signs = np.asarray(arrays["sketch_signs"])
            shared = np.asarray(arrays["sketch_shared"])
            P = self.centres_.shape[1]
            if signs.shape != (P,) or not np.all(np.abs(signs) == 1) or shared.ndim != 1 \
                    or np.any((shared < 0) | (shared >= P)):
                raise ValueError("sign flips or shared features inconsistent with the means")
            self.sketch_transform_ = SketchTransform(P, int(scalars["sketch_n_kept"]), signs.astype(np.int8),
                                                     shared.astype(np.int64), self.precondition,
                                                     int(scalars["sketch_seed"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelStoreError(f"{where} is a damaged model: its sketch transform is missing or invalid "
                                  f"({exc})") from exc

    # applying -------------------------------------------------------------
    @property
    def means_(self) -> np.ndarray:
        """The component means in the raw space, shape (C, P): D H^T mu~, the preconditioning inverted."""
        self._check_fitted()
        return self.sketch_transform_.invert(self.centres_)

    def _apply(self, X, fn, width, dtype, output, storage_options, kind, overwrite, inputs=()):
        if isinstance(X, SketchedData):
            raise InvalidDataError(f"{kind} of sketches is not available: pass raw rows (they are preconditioned "
                                   "and scored on all P features); predict takes sketches")
        transform = self.sketch_transform_
        return super()._apply(X, lambda block: fn(transform.precondition_rows(block)), width, dtype, output,
                              storage_options, kind, overwrite, inputs)

    def predict(self, X, *, output=None, storage_options=None, overwrite=False, inputs=()):
        """Most responsible component of each row: raw rows are preconditioned and scored on all P
        features; rows of a :class:`~daskclust.transforms.SketchedData` on their Q kept entries
        (Eq. 17). numpy rows or an in-memory sketch give numpy, lazy inputs a dask array, a DataArray
        of raw rows a DataArray (as :meth:`KMeans.predict <daskclust.KMeans.predict>`)."""
        if not isinstance(X, SketchedData):
            return super().predict(X, output=output, storage_options=storage_options, overwrite=overwrite,
                                   inputs=inputs)
        self._check_fitted()
        differing = self.sketch_transform_.differences(X.transform)
        if differing:
            raise InvalidDataError(f"the sketch was not taken with this model's sketch transform (model against "
                                   f"sketch: {', '.join(differing)}): its entries mean other features; sketch the "
                                   "rows with model.sketch_transform_ or predict on the raw rows")
        kernel = X.family(self._family()).kernel_params(self._model())
        rows = X.chunked()
        if X.in_memory:
            packed = rows.source.array
            return np.concatenate([sketch_labels(packed[s:s + ROW_BLOCK], kernel)
                                   for s in range(0, len(packed), ROW_BLOCK)])
        return rows.X.map_blocks(sketch_labels, kernel, drop_axis=1, dtype=np.int32)

    def sample(self, n_samples=1, random_state=None):
        """Rows drawn from the mixture (in the preconditioned space) mapped back to the raw space."""
        Y, labels = super().sample(n_samples, random_state)
        return self.sketch_transform_.invert(Y), labels


def sketch_labels(packed: np.ndarray, kernel) -> np.ndarray:
    """Each packed sketch row's component of smallest cost (:func:`~daskclust.kernels.infer.top_components`
    over every component)."""
    packed = np.ascontiguousarray(packed, dtype=np.float64)
    n = len(packed)
    idx = np.empty((n, 1), dtype=np.int32)
    top_components(packed, kernel, np.zeros(n, dtype=np.int64), np.zeros((1, 0), dtype=np.int32), 1, idx,
                   np.empty((n, 1)), np.empty(n))
    return idx[:, 0]

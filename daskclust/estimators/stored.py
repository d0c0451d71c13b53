"""A fitted estimator to and from its model store (:mod:`daskclust.persistence.model`): what is saved of
it, and the checks that a stored model makes a usable estimator before it is set."""

from __future__ import annotations

import numpy as np

from ..errors import ModelStoreError
from ..models import Params
from ..persistence import RUNTIME_PARAMS
from ..persistence.model import StoredModel


def to_stored(estimator) -> StoredModel:
    """The :class:`~daskclust.persistence.model.StoredModel` of a fitted estimator: its model's parameters,
    cluster sizes, the scalars of :data:`_SCALARS` (and a coreset fit's figures), what the subclass adds
    (``_stored_arrays`` / ``_stored_scalars``), its parameters (runtime settings left out), history and
    the record of its training data."""
    params = estimator._model()
    arrays = {"centres": params.means, "weights": params.weights, "covariances": params.covariances}
    sizes = getattr(estimator, "cluster_sizes_", None)  # None: loaded from a model saved before they were stored
    if sizes is not None:
        arrays["cluster_sizes"] = sizes
    scalars = {name: _number(getattr(estimator, name + "_")) for name in _SCALARS}
    arrays.update(estimator._stored_arrays())
    scalars.update(estimator._stored_scalars())
    coreset = getattr(estimator, "coreset_", None) or {}
    scalars.update({f"coreset_{key}": coreset[key] for key in _CORESET_SCALARS if key in coreset})
    return StoredModel(type(estimator).__name__, estimator.model_params(), arrays, scalars, list(estimator.history_),
                       data=getattr(estimator, "training_data_", None))


_SCALARS = ("sigma2", "n_iter", "converged", "inertia", "n_features_in", "seed", "seeding_time",
            "seeding_distances", "fit_time")
_CORESET_SCALARS = ("size", "seconds", "n_distances", "total_weight", "assignment_distances")
"""``coreset_``'s figures, saved as the scalars ``coreset_<name>`` by a coreset fit (optional: a model
stored without them loads with ``coreset_ = None``)."""


def _number(value):
    """Scalars as stored: bools as 0/1 (the store keeps numbers only)."""
    return int(value) if isinstance(value, (bool, np.bool_)) else value


def restore(cls: type, stored: StoredModel, where: str):
    """A fitted ``cls`` from a :class:`~daskclust.persistence.model.StoredModel`, after checking it makes a usable model.

    Runtime parameters found in the store are ignored; ``training_data_`` is the
    store's record of the training data (None when not recorded). Raises
    :class:`ModelStoreError` (naming ``where``) for unknown parameters, centres
    that are not a finite (C, D) array matching the parameters, or missing or
    non-finite scalars.
    """
    params, arrays, scalars = stored.params, stored.arrays, stored.scalars
    kept = {k: v for k, v in params.items() if k not in RUNTIME_PARAMS}
    unknown = sorted(set(kept) - set(cls._param_names()))
    if unknown:
        raise ModelStoreError(f"{where} is a damaged model: unknown parameters {unknown}")
    estimator = cls(**kept)
    try:
        estimator._validate_params()
    except Exception as exc:  # noqa: BLE001 - a stored parameter out of range: damage, not user error
        raise ModelStoreError(f"{where} is a damaged model: {exc}") from exc
    centres = np.asarray(arrays.get("centres"))
    if centres.ndim != 2 or centres.dtype.kind != "f" or not np.all(np.isfinite(centres)):
        raise ModelStoreError(f"{where} is a damaged model: its centres are not a finite 2-D float array")
    C, D = centres.shape
    if C != estimator._n_clusters() and not estimator.variable_components:
        raise ModelStoreError(f"{where} is a damaged model: {C} centres for {estimator._n_clusters()} clusters")
    family = estimator._family()
    missing = [name for name in ("weights", "covariances") if name not in arrays]
    if missing:
        raise ModelStoreError(f"{where} is a damaged model: arrays missing {missing}")
    fitted = Params(np.asarray(centres, dtype=np.float64), np.asarray(arrays["weights"]),
                    np.asarray(arrays["covariances"]))
    problem = family.params_problem(fitted, C, D)
    if problem:
        raise ModelStoreError(f"{where} is a damaged model: {problem} (a model of {C} {family.name} components "
                              f"in {D} dimensions)")
    missing = [name for name in _SCALARS if name not in scalars]
    bad = [name for name in _SCALARS if name in scalars and not np.isfinite(scalars[name])]
    if missing or bad:
        raise ModelStoreError(f"{where} is a damaged model: scalars missing {missing} or not finite {bad}")
    if scalars["n_features_in"] != D or scalars["sigma2"] < 0:
        raise ModelStoreError(f"{where} is a damaged model: n_features_in or sigma2 inconsistent with the centres")
    estimator._output_dtype = _output_dtype(stored.data)
    estimator._set_model(Params(*(np.asarray(a, dtype=np.float64) for a in fitted.arrays().values())))
    for name in _SCALARS:
        setattr(estimator, name + "_", scalars[name])
    estimator.converged_ = bool(estimator.converged_)
    coreset = {key: scalars.get(f"coreset_{key}") for key in _CORESET_SCALARS}
    complete = all(isinstance(v, (int, float)) and np.isfinite(v) for v in coreset.values())
    estimator.coreset_ = coreset if complete else None  # informative only: incomplete figures are dropped
    estimator.history_ = list(stored.history)
    estimator.training_data_ = stored.data
    estimator.cluster_sizes_ = _cluster_sizes(arrays, C, where)
    estimator._restore_stored(arrays, scalars, where)
    return estimator


def _output_dtype(data: dict | None) -> np.dtype:
    """The fitted attributes' dtype: float32 for a model fitted on float32 data (as when it was fitted),
    float64 otherwise and for a model saved before its data were recorded."""
    dtype = ((data or {}).get("fingerprint") or {}).get("dtype")
    return np.dtype(np.float32 if dtype == "float32" else np.float64)


def _cluster_sizes(arrays: dict, n_clusters: int, where: str) -> np.ndarray | None:
    """The stored ``cluster_sizes`` (C finite non-negative numbers), or None for a model saved before
    they were stored; :class:`ModelStoreError` when present but not such an array."""
    if "cluster_sizes" not in arrays:
        return None
    sizes = np.asarray(arrays["cluster_sizes"])
    if sizes.shape != (n_clusters,) or sizes.dtype.kind != "f" or not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ModelStoreError(f"{where} is a damaged model: its cluster_sizes are not {n_clusters} finite "
                              "non-negative numbers")
    return sizes

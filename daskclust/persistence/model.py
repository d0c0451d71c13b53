"""Save fitted models as xarray Datasets in zarr (v3) stores, atomically.

Dataset layout (``daskclust_format`` 1)
---------------------------------------
Data variables
    One variable per fitted array, named as in :attr:`StoredModel.arrays`.
    Axis ``i`` of the array ``name`` gets the dimension

    * ``"cluster"`` if ``i == 0`` and its length is the number of clusters C
      (the length of the first axis of ``centres``);
    * ``"feature"`` if the array is 2-D, ``i == 1`` and its length is the
      number of features D (the length of the second axis of ``centres``);
    * ``f"{name}_dim{i}"`` otherwise.

    So ``centres`` (C, D) is ``("cluster", "feature")``, weights (C,) are
    ``("cluster",)`` and full covariances (C, D, D) are ``("cluster",
    "covariances_dim1", "covariances_dim2")``. The names are labels only:
    loading does not depend on them.

    One 1-D variable ``history_<key>`` along ``"iteration"`` per history
    column: int64 if every value of the column is an int, float64 if every
    value is a float, a variable-length UTF-8 string array if every value is
    a str (e.g. ``data``: ``"coreset"`` or ``"full"``); a column mixing kinds
    is refused.
Attributes
    ``daskclust_kind`` (str), ``daskclust_params`` and ``daskclust_scalars``
    (JSON strings; floats round-trip exactly, NaN and infinities included),
    ``daskclust_arrays`` and ``daskclust_history_keys`` (JSON lists giving
    the order of the arrays and history columns), ``daskclust_version``,
    ``daskclust_format`` and, in a store only, ``daskclust_complete``.
    ``daskclust_versions`` (JSON: Python's and the packages' versions of the
    writer, :func:`daskclust.versions.environment_versions`) and, when known,
    ``daskclust_data`` (JSON: where the training data was and its fingerprint,
    :attr:`StoredModel.data`); stores written before these existed load
    without them.

Safety
------
Saving follows the rules of :mod:`daskclust.io`: the store is marked as a
``"model"`` store, only a model store is ever replaced (with ``overwrite``), a
local save is written beside the target and renamed in when complete, and
``daskclust_complete = True`` is written last; :func:`load_model` refuses a
store without it, and verifies that every chunk of every variable is present
(zarr would otherwise read a deleted chunk as its fill value).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
import zarr

from ..errors import InvalidParameterError, ModelStoreError
from ..io import COMPLETE_ATTR, Location, check_target, missing_chunks, writing
from ..versions import __version__, environment_versions

FORMAT = 1
"""Version of the dataset layout written by this module."""

_REQUIRED_ATTRS = (
    "daskclust_kind",
    "daskclust_params",
    "daskclust_scalars",
    "daskclust_arrays",
    "daskclust_history_keys",
    "daskclust_version",
)
_RESERVED_ARRAY_NAME = re.compile(r"^(cluster|feature|iteration)$|^history_|_dim\d+$")


@dataclass(frozen=True)
class StoredModel:
    """Everything needed to rebuild a fitted estimator.

    Attributes
    ----------
    kind : str
        Estimator class name, e.g. ``"KMeans"`` or ``"GaussianMixture"``.
    params : dict
        Constructor parameters; JSON-serialisable values (str, int, float,
        bool, None, list, dict). Tuples come back as lists.
    arrays : dict of str to numpy.ndarray
        Fitted arrays; must contain ``"centres"`` of shape (C, D).
    scalars : dict of str to int or float
        Fitted scalars, e.g. ``{"sigma2": 1.0, "n_iter": 12}``.
    history : list of dict of str to int, float or str
        One row per iteration, with the same keys in every row.
    data : dict or None, default=None
        The training data: ``source`` and ``weights`` (``{"url", "array"}`` or None when
        in memory) and ``fingerprint``
        (:meth:`daskclust.data.ChunkedData.fingerprint`); None when not recorded.
    versions : dict of str to str or None, default=None
        Python's and the packages' versions of the process that wrote the store (None
        when saving: this process's). A store written before they were recorded gives
        only ``{"daskclust": ...}``.
    """

    kind: str
    params: dict
    arrays: dict[str, np.ndarray]
    scalars: dict[str, float | int]
    history: list[dict[str, float | int | str]]
    data: dict | None = None
    versions: dict[str, str] | None = None


def save_model(
    path: str | os.PathLike,
    model: StoredModel,
    *,
    overwrite: bool = False,
    storage_options: dict | None = None,
    inputs: Iterable[Location | None] = (),
) -> None:
    """Save ``model`` as a zarr (v3) store, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the store.
    model : StoredModel
        The model to save.
    overwrite : bool, default False
        Replace an existing daskclust model store at ``path`` (nothing else
        is ever replaced).
    storage_options : dict, optional
        fsspec options, for URLs only.
    inputs : iterable of Location
        Inputs of the same call (e.g. the data): ``path`` must not overlap them.

    Raises
    ------
    OutputRefusedError
        If ``path`` overlaps an input, holds something that is not a daskclust
        model, or holds a model and ``overwrite`` is false.
    InvalidParameterError
        If ``model`` cannot be stored (see :func:`model_to_dataset`).
    """
    ds = model_to_dataset(model)
    location = Location.parse(path, storage_options)
    with writing(location, "model", overwrite=overwrite, inputs=inputs) as target:
        ds.to_zarr(target.url, mode="w", zarr_format=3, consolidated=False, write_empty_chunks=True,
                  **target.zarr_kwargs)


def check_model_target(path, *, overwrite: bool = False, storage_options: dict | None = None,
                       inputs: Iterable[Location | None] = (), option: str = "overwrite=True") -> Location:
    """Check before a fit that its model can be saved at ``path`` (see :func:`save_model`)."""
    location = Location.parse(path, storage_options)
    check_target(location, "model", overwrite=overwrite, inputs=inputs, option=option)
    return location


def load_model(path: str | os.PathLike, *, storage_options: dict | None = None) -> StoredModel:
    """Load a model saved by :func:`save_model`.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the store.
    storage_options : dict, optional
        fsspec options, for URLs only.

    Returns
    -------
    StoredModel
        The model, with arrays in memory.

    Raises
    ------
    ModelStoreError
        If ``path`` does not exist, is not a zarr v3 store, is not a daskclust
        model, was written by a newer daskclust (format), is incomplete (a save
        was interrupted) or is damaged (unreadable metadata, missing chunks).
    InvalidParameterError
        If ``storage_options`` are given with a local path.
    """
    location = Location.parse(path, storage_options)
    where = repr(location.url)
    if not location.exists():
        raise ModelStoreError(f"no model at {where}: the path does not exist")
    try:
        group = zarr.open_group(location.url, mode="r", zarr_format=3, **location.zarr_kwargs)
        attrs = dict(group.attrs)
    except Exception as exc:  # noqa: BLE001 - any failure to open means "not a readable store"
        raise ModelStoreError(f"{where} is not a zarr v3 store ({type(exc).__name__}: {exc})") from exc
    _check_header(attrs, where)
    if attrs.get(COMPLETE_ATTR) is not True:
        raise ModelStoreError(f"the model at {where} is incomplete: a save was interrupted")
    try:
        missing = {name: missing_chunks(array) for name, array in group.arrays()}
        options = {"zarr_format": 3, "consolidated": False, "chunks": None, "decode_cf": False}
        with xr.open_zarr(location.url, **options, **location.zarr_kwargs) as ds:
            loaded = ds.load()
        damaged = {name: n for name, n in missing.items() if n}
        if damaged:
            raise ModelStoreError(f"{where} is a damaged daskclust model: chunks are missing from {damaged}")
        return _dataset_to_model(loaded, where)
    except ModelStoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - damaged metadata or chunks: one clear error, not a traceback
        raise ModelStoreError(f"{where} is a damaged daskclust model ({type(exc).__name__}: {exc})") from exc


def model_to_dataset(model: StoredModel) -> xr.Dataset:
    """Convert ``model`` to a Dataset (layout in the module docstring).

    Parameters
    ----------
    model : StoredModel
        The model; ``arrays["centres"]`` must be 2-D.

    Returns
    -------
    xarray.Dataset
        The arrays and history as variables, the rest as attributes. It has
        no completion mark (``daskclust_complete``); only stores do.

    Raises
    ------
    InvalidParameterError
        If ``centres`` is missing or not 2-D, an array name is reserved, a
        scalar is not an int or float, a history value not an int, float or
        str, the history rows have different keys, a history column mixes
        kinds of values, or the params
        are not JSON-serialisable.
    """
    arrays = _checked_arrays(model.arrays)
    n_clusters, n_features = arrays["centres"].shape
    data_vars = {
        name: (_array_dims(name, arr, n_clusters, n_features), arr) for name, arr in arrays.items()
    }
    keys = _history_keys(model.history)
    for key in keys:
        data_vars[f"history_{key}"] = (("iteration",), _history_column(model.history, key))
    scalars = {name: _number(value, f"scalar {name!r}") for name, value in model.scalars.items()}
    attrs = {
        "daskclust_kind": str(model.kind),
        "daskclust_params": _to_json(model.params, "params"),
        "daskclust_scalars": json.dumps(scalars),
        "daskclust_arrays": json.dumps(list(arrays)),
        "daskclust_history_keys": json.dumps(keys),
        "daskclust_version": __version__,
        "daskclust_format": FORMAT,
        "daskclust_versions": _to_json(model.versions or environment_versions(), "versions"),
    }
    if model.data is not None:
        attrs["daskclust_data"] = _to_json(model.data, "data")
    return xr.Dataset(data_vars, attrs=attrs)


def dataset_to_model(ds: xr.Dataset) -> StoredModel:
    """Convert a Dataset made by :func:`model_to_dataset` back to a model.

    Parameters
    ----------
    ds : xarray.Dataset
        The Dataset; it need not carry a completion mark.

    Returns
    -------
    StoredModel
        The model; its arrays are numpy copies.

    Raises
    ------
    ModelStoreError
        If ``ds`` is not a daskclust model, is of a newer format, or lacks a
        variable its attributes list.
    """
    _check_header(ds.attrs, "the dataset")
    return _dataset_to_model(ds, "the dataset")


def _dataset_to_model(ds: xr.Dataset, where: str) -> StoredModel:
    """:func:`dataset_to_model` for a Dataset whose header was checked; ``where`` names it in errors."""
    attrs = ds.attrs
    keys = _json_attr(attrs, "daskclust_history_keys", list, where)
    names = _json_attr(attrs, "daskclust_arrays", list, where)
    params = _json_attr(attrs, "daskclust_params", dict, where)
    scalars = _json_attr(attrs, "daskclust_scalars", dict, where)
    if not isinstance(attrs["daskclust_kind"], str) or not all(isinstance(k, str) for k in keys + names):
        raise ModelStoreError(f"{where} is a damaged daskclust model: its kind or variable names are not strings")
    needed = names + [f"history_{key}" for key in keys]
    missing = [var for var in needed if var not in ds.data_vars]
    if missing:
        raise ModelStoreError(f"{where} is a damaged daskclust model: variables {missing} are missing")
    columns = [ds[f"history_{key}"].values.tolist() for key in keys]
    if len({len(column) for column in columns}) > 1:
        raise ModelStoreError(f"{where} is a damaged daskclust model: its history columns differ in length")
    data = _json_attr(attrs, "daskclust_data", dict, where) if "daskclust_data" in attrs else None
    versions = (_json_attr(attrs, "daskclust_versions", dict, where) if "daskclust_versions" in attrs
                else {"daskclust": str(attrs["daskclust_version"])})
    return StoredModel(
        kind=attrs["daskclust_kind"],
        params=params,
        arrays={name: np.array(ds[name].values) for name in names},
        scalars=scalars,
        history=[dict(zip(keys, row)) for row in zip(*columns)],
        data=data,
        versions=versions,
    )


def _json_attr(attrs: dict, name: str, kind: type, where: str):
    """The JSON attribute ``name`` decoded, which must be a ``kind``; else :class:`ModelStoreError`."""
    try:
        value = json.loads(attrs[name])
    except (TypeError, ValueError) as exc:
        raise ModelStoreError(f"{where} is a damaged daskclust model: attribute {name!r} is not valid JSON") from exc
    if not isinstance(value, kind):
        raise ModelStoreError(f"{where} is a damaged daskclust model: attribute {name!r} is not a {kind.__name__}")
    return value


def _check_header(attrs: dict, where: str) -> None:
    """Raise :class:`ModelStoreError` unless ``attrs`` are those of a supported daskclust model."""
    if "daskclust_format" not in attrs:
        raise ModelStoreError(f"{where} is not a daskclust model (no 'daskclust_format' attribute)")
    found = attrs["daskclust_format"]
    if not isinstance(found, int):
        raise ModelStoreError(f"{where} is not a daskclust model (daskclust_format is {found!r})")
    if found > FORMAT:
        raise ModelStoreError(
            f"{where} has daskclust_format {found}, newer than the supported {FORMAT}: upgrade daskclust"
        )
    missing = [name for name in _REQUIRED_ATTRS if name not in attrs]
    if missing:
        raise ModelStoreError(f"{where} is not a daskclust model (missing attributes {missing})")


def _checked_arrays(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """``arrays`` as numpy arrays, after checking ``centres`` and the names."""
    if "centres" not in arrays or np.ndim(arrays["centres"]) != 2:
        raise InvalidParameterError("arrays must contain 'centres' of shape (n_clusters, n_features)")
    for name in arrays:
        if not isinstance(name, str) or _RESERVED_ARRAY_NAME.search(name):
            raise InvalidParameterError(
                f"array name {name!r} is reserved (cluster, feature, iteration, history_*, *_dim<i>)"
            )
    return {name: np.asarray(arr) for name, arr in arrays.items()}


def _array_dims(name: str, arr: np.ndarray, n_clusters: int, n_features: int) -> tuple[str, ...]:
    """Dimension names of the array ``name`` (rule in the module docstring)."""
    dims = [f"{name}_dim{axis}" for axis in range(arr.ndim)]
    if arr.ndim >= 1 and arr.shape[0] == n_clusters:
        dims[0] = "cluster"
    if arr.ndim == 2 and arr.shape[1] == n_features:
        dims[1] = "feature"
    return tuple(dims)


def _history_keys(history: list[dict[str, Any]]) -> list[str]:
    """The column names, in the first row's order; every row must have the same ones."""
    keys = list(history[0]) if history else []
    for i, row in enumerate(history):
        if set(row) != set(keys):
            raise InvalidParameterError(f"history row {i} has keys {sorted(row)}, row 0 has {sorted(keys)}")
    for key in keys:
        if not isinstance(key, str):
            raise InvalidParameterError(f"history key {key!r} is not a string")
    return keys


def _history_column(history: list[dict[str, Any]], key: str) -> np.ndarray:
    """Column ``key`` as int64 (all values int), float64 (all values float) or strings (all values
    str; an object array, which xarray writes as zarr's variable-length UTF-8 strings)."""
    values = [row[key] if isinstance(row[key], str) else _number(row[key], f"history[{i}][{key!r}]")
              for i, row in enumerate(history)]
    kinds = {type(value) for value in values}
    if len(kinds) > 1:
        names = " and ".join(kind.__name__ for kind in (int, float, str) if kind in kinds)
        raise InvalidParameterError(f"history column {key!r} mixes {names} values")
    dtypes = {int: np.int64, float: np.float64, str: object}
    return np.array(values, dtype=dtypes[kinds.pop()])


def _number(value: Any, what: str) -> int | float:
    """``value`` as a Python int or float (numpy scalars accepted, bools refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(f"{what} is a bool; store it as an int")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise InvalidParameterError(f"{what} must be an int or a float, not {type(value).__name__}")


def _to_json(value: Any, what: str) -> str:
    """``json.dumps(value)``, raising :class:`InvalidParameterError` if it is not serialisable."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"{what} are not JSON-serialisable: {exc}") from exc

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
    value is a float (a column mixing both is refused).
Attributes
    ``daskclust_kind`` (str), ``daskclust_params`` and ``daskclust_scalars``
    (JSON strings; floats round-trip exactly, NaN and infinities included),
    ``daskclust_arrays`` and ``daskclust_history_keys`` (JSON lists giving
    the order of the arrays and history columns), ``daskclust_version``,
    ``daskclust_format`` and, in a store only, ``daskclust_complete``.

Atomicity
---------
``daskclust_complete = True`` is written after everything else, and
:func:`load_model` refuses a store without it. A local save writes to the
sibling ``<path>.tmp-<uuid>`` and then swaps it in with renames, so the old
model stays loadable until the new one is complete. An fsspec URL is written
in place: the old store's completion mark is removed first, and the new one
added last.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
import zarr
from fsspec.core import url_to_fs

from . import __version__
from .errors import InvalidParameterError, ModelStoreError

FORMAT = 1
"""Version of the dataset layout written by this module."""

_COMPLETE = "daskclust_complete"
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
    history : list of dict of str to int or float
        One row per iteration, with the same keys in every row.
    """

    kind: str
    params: dict
    arrays: dict[str, np.ndarray]
    scalars: dict[str, float | int]
    history: list[dict[str, float | int]]


@dataclass(frozen=True)
class _Location:
    """A store location: a normalised local path, or an fsspec URL and its options."""

    path: str
    storage_options: dict | None

    @classmethod
    def parse(cls, path: str | os.PathLike, storage_options: dict | None) -> _Location:
        """Normalise ``path``; ``storage_options`` are only valid with a URL."""
        path = os.fspath(path)
        if "://" in path:
            return cls(path.rstrip("/"), dict(storage_options or {}))
        if storage_options:
            raise InvalidParameterError(f"storage_options only apply to fsspec URLs, not to {path!r}")
        return cls(os.path.normpath(path), None)

    @property
    def is_url(self) -> bool:
        """Whether this is an fsspec URL (written in place) rather than a local path."""
        return self.storage_options is not None

    @property
    def zarr_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for zarr / xarray (they reject storage_options for local paths)."""
        return {"storage_options": self.storage_options} if self.is_url else {}

    def exists(self, key: str = "") -> bool:
        """Whether the store (or the file ``key`` inside it) exists."""
        fs, root = url_to_fs(self.path, **(self.storage_options or {}))
        return fs.exists(f"{root}/{key}" if key else root)


def save_model(
    path: str | os.PathLike,
    model: StoredModel,
    *,
    overwrite: bool = True,
    storage_options: dict | None = None,
) -> None:
    """Save ``model`` as a zarr (v3) store, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Local path or fsspec URL of the store.
    model : StoredModel
        The model to save.
    overwrite : bool, default True
        Replace an existing store at ``path``.
    storage_options : dict, optional
        fsspec options, for URLs only.

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``overwrite`` is false, or if it exists and is
        not a zarr v3 store (never overwritten).
    InvalidParameterError
        If ``model`` cannot be stored (see :func:`model_to_dataset`), or if
        ``storage_options`` are given with a local path.
    """
    ds = model_to_dataset(model)
    location = _Location.parse(path, storage_options)
    _check_target(location, overwrite)
    if location.is_url:
        _save_in_place(location, ds)
    else:
        _save_local(location.path, ds)


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
        model, was written by a newer daskclust (format) or is incomplete
        (a save was interrupted).
    InvalidParameterError
        If ``storage_options`` are given with a local path.
    """
    location = _Location.parse(path, storage_options)
    where = repr(location.path)
    if not location.exists():
        raise ModelStoreError(f"no model at {where}: the path does not exist")
    try:
        group = zarr.open_group(location.path, mode="r", zarr_format=3, **location.zarr_kwargs)
        attrs = dict(group.attrs)
    except (OSError, ValueError) as exc:
        raise ModelStoreError(f"{where} is not a zarr v3 store ({exc})") from exc
    _check_header(attrs, where)
    if attrs.get(_COMPLETE) is not True:
        raise ModelStoreError(f"the model at {where} is incomplete: a save was interrupted")
    options = {"zarr_format": 3, "consolidated": False, "chunks": None, "decode_cf": False}
    with xr.open_zarr(location.path, **options, **location.zarr_kwargs) as ds:
        return _dataset_to_model(ds.load(), where)


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
        scalar or history value is not an int or float, the history rows have
        different keys, a history column mixes ints and floats, or the params
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
    }
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
    keys = json.loads(attrs["daskclust_history_keys"])
    names = json.loads(attrs["daskclust_arrays"])
    needed = names + [f"history_{key}" for key in keys]
    missing = [var for var in needed if var not in ds.data_vars]
    if missing:
        raise ModelStoreError(f"{where} is a damaged daskclust model: variables {missing} are missing")
    columns = [ds[f"history_{key}"].values.tolist() for key in keys]
    return StoredModel(
        kind=attrs["daskclust_kind"],
        params=json.loads(attrs["daskclust_params"]),
        arrays={name: np.array(ds[name].values) for name in names},
        scalars=json.loads(attrs["daskclust_scalars"]),
        history=[dict(zip(keys, row)) for row in zip(*columns)],
    )


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
    """Column ``key`` as int64 (all values int) or float64 (all values float)."""
    values = [_number(row[key], f"history[{i}][{key!r}]") for i, row in enumerate(history)]
    if len({type(value) for value in values}) > 1:
        raise InvalidParameterError(f"history column {key!r} mixes int and float values")
    return np.array(values, dtype=np.int64 if isinstance(values[0], int) else np.float64)


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


def _check_target(location: _Location, overwrite: bool) -> None:
    """Refuse an existing target unless ``overwrite``, and never replace a non-zarr path."""
    if not location.exists():
        return
    if not overwrite:
        raise FileExistsError(errno.EEXIST, "a model store exists (pass overwrite=True)", location.path)
    if not location.exists("zarr.json"):
        reason = "path exists and is not a zarr v3 store; not replacing it"
        raise FileExistsError(errno.EEXIST, reason, location.path)


def _write_store(location: _Location, ds: xr.Dataset) -> None:
    """Write ``ds`` to ``location``, then mark it complete (the last write)."""
    ds.to_zarr(location.path, mode="w", zarr_format=3, consolidated=False, **location.zarr_kwargs)
    _mark_complete(location)


def _mark_complete(location: _Location) -> None:
    """Set the completion attribute of the store at ``location``."""
    group = zarr.open_group(location.path, mode="r+", zarr_format=3, **location.zarr_kwargs)
    group.attrs[_COMPLETE] = True


def _save_in_place(location: _Location, ds: xr.Dataset) -> None:
    """Overwrite a store at a URL: unmark the old store first, mark the new one last."""
    if location.exists("zarr.json"):
        group = zarr.open_group(location.path, mode="r+", zarr_format=3, **location.zarr_kwargs)
        group.attrs.pop(_COMPLETE, None)
    _write_store(location, ds)


def _save_local(path: str, ds: xr.Dataset) -> None:
    """Write ``ds`` to a sibling temporary store, then rename it to ``path``."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        _write_store(_Location(tmp, None), ds)
        _swap_in(tmp, path)
    finally:
        _discard(tmp)


def _swap_in(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst``; an existing ``dst`` is moved away first, restored on failure."""
    old = f"{dst}.old-{uuid.uuid4().hex}" if os.path.lexists(dst) else None
    if old is not None:
        os.rename(dst, old)
    try:
        os.rename(src, dst)
    except BaseException:
        if old is not None:
            os.rename(old, dst)
        raise
    if old is not None:
        _discard(old)


def _discard(path: str) -> None:
    """Delete the directory or file ``path`` if it exists, ignoring errors (best effort)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)

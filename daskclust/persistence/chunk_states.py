"""Chunk states in a store: each chunk's per-row arrays, written by the worker holding the chunk.

Layout: under a store's root, ``chunks/NNNNNN/`` (the chunk's index, six digits) is a zarr group
holding one array per state entry (K(n), seed labels, kd-trees and their partitions, and in
checkpoints and tree stores the row order ``__perm__``) and, written after them, the attribute
``arrays``: the sorted names of the entries. A state without it was interrupted while written.
Checkpoints, tree stores and the state store of a fit keeping its per-row state on disk
(``state="zarr"``) all hold their chunk states this way; nothing of size N passes the driver.
"""

from __future__ import annotations

import numpy as np
import zarr

from ..io import ARRAY_CONFIG, Location, mark, missing_chunks, remove_store

PERM = "__perm__"
"""The state entry holding a chunk's row order on its worker (row i held is source row perm[i])."""


def reset_state_store(location: Location) -> None:
    """An empty state store at ``location`` (a fit's per-row state on disk, ``state="zarr"``), marked
    incomplete: a run starting from its seeding must not read the state an earlier run left there."""
    remove_store(location)
    zarr.open_group(location.url, mode="w", **location.zarr_kwargs)
    mark(location, "state", complete=False)


def chunk_url(url: str, index: int) -> str:
    """Where chunk ``index``'s state lives in the store at ``url``."""
    return f"{url.rstrip('/')}/chunks/{index:06d}"


def write_state(url: str, index: int, arrays: dict[str, np.ndarray]) -> None:
    """Replace chunk ``index``'s state in the store at ``url`` by ``arrays``; the list of names last."""
    group = zarr.open_group(chunk_url(url, index), mode="w")
    for name, value in arrays.items():
        group.create_array(name, data=np.ascontiguousarray(value), config=ARRAY_CONFIG)
    group.attrs["arrays"] = sorted(arrays)


def read_state(url: str, index: int, *, check: bool = True) -> dict[str, np.ndarray] | None:
    """Chunk ``index``'s state in the store at ``url``, None when none was written.

    With ``check`` (a state written by another process: a checkpoint's, a tree store's), a state
    without its list of names, or with an array or a chunk of one missing, is a ValueError; without
    (the state this fit itself keeps on disk between passes) its arrays are read as they are.
    """
    try:
        group = zarr.open_group(chunk_url(url, index), mode="r")
    except FileNotFoundError:
        return None
    if not check:
        return {name: array[...] for name, array in group.arrays()}
    return {name: array[...] for name, array in _listed_arrays(group, index).items()}


def verify_states(url: str, n_chunks: int, required: tuple[str, ...] = (PERM,)) -> None:
    """Raise ValueError unless each of the ``n_chunks`` chunk states in the store at ``url`` is whole
    (written to its end, every array and chunk of array present) and holds ``required``."""
    for index in range(n_chunks):
        try:
            group = zarr.open_group(chunk_url(url, index), mode="r")
        except FileNotFoundError as exc:
            raise ValueError(f"the state of chunk {index} is missing") from exc
        listed = _listed_arrays(group, index)
        absent = [name for name in required if name not in listed]
        if absent:
            raise ValueError(f"the state of chunk {index} is incomplete: {', '.join(absent)} missing")


def _listed_arrays(group: zarr.Group, index: int) -> dict[str, zarr.Array]:
    """The arrays a chunk state lists, each checked whole (ValueError naming what is not)."""
    listed = group.attrs.get("arrays")
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        raise ValueError(f"the state of chunk {index} is incomplete")
    arrays = {}
    for name in listed:
        try:
            array = group[name]
        except KeyError as exc:
            raise ValueError(f"array {name!r} of the state of chunk {index} is missing") from exc
        if not isinstance(array, zarr.Array):
            raise ValueError(f"{name!r} of the state of chunk {index} is not an array")
        missing = missing_chunks(array)
        if missing:
            raise ValueError(f"array {name!r} of the state of chunk {index} has {missing} missing chunk(s)")
        arrays[name] = array
    return arrays
